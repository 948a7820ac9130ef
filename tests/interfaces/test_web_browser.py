"""The dashboard in a real browser: Debian's chromium driven by Playwright for Python.

The browser is ``/usr/bin/chromium`` (``executable_path``), never one Playwright downloads.
Without it the test is skipped on a workstation, and fails under CI (``CI=true``), where
``.ci/run`` installs it with apt-get.

``SCRAPEQ_SCREENSHOTS=docs .venv/bin/python -m pytest tests/interfaces/test_web_browser.py``
also writes the overview and domains screenshots of the README into ``docs/``.
"""

from __future__ import annotations

import math
import os
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import redis
from aiohttp.test_utils import TestClient, TestServer

from scrapeq import AsyncQueue, Settings
from scrapeq.interfaces.web import create_app
from support.browser import CHROMIUM, ONE_CHROMIUM_AT_A_TIME, need_browser

pytestmark = ONE_CHROMIUM_AT_A_TIME

MINUTE = 60_000
LANES = ("critical", "normal", "bulk")


async def _settle_minute(q: AsyncQueue, minute: int, n: int) -> None:
    """Enqueue n jobs `minute` minutes ago and settle them then: mostly done."""
    q.testing_clock_offset_ms = -minute * MINUTE
    urls = [
        f"https://shop-{(minute * 7 + i) % 40 + 1:02d}.example.com/h/{minute}/{i}" for i in range(n)
    ]
    for lane in LANES:
        await q.enqueue_many(urls[LANES.index(lane) :: 3], lane=lane)
    claimed = []
    for _ in range(20):
        claimed += (await q.claim(n - len(claimed))).jobs
        if len(claimed) >= n:
            break
    items = []
    for i, job in enumerate(claimed):
        if i % 17 == 5:
            items.append(
                q.retrying(job, kind="http_503", message="Service Unavailable", domain_failed=None)
            )
        elif i % 23 == 7:
            items.append(q.throttling(job, 30))
        elif i % 41 == 3:
            items.append(q.failing(job, "http_404", "Not Found"))
        else:
            items.append(q.done(job))
    await q.settle_many(items)


async def seed(q: AsyncQueue) -> dict[str, str]:
    """A queue worth looking at: an hour of history, tripped, retired and healthy domains,
    dead letters with reasons, one with HTML in its error and one with credentials. The
    domains the test looks for (gone, html, vault, throttled) take no part in the history,
    so its trips never park them."""
    # shop-21 is retired hours ago: three failed probes, one per cooldown.
    q.testing_clock_offset_ms = -6 * 3_600_000
    await q.enqueue("https://shop-21.example.com/broken")
    for _ in range(3):
        (job,) = (await q.claim(1)).jobs
        await q.retry(job, kind="timeout", message="read timed out", delay=0, domain_failed=True)
        q.testing_clock_offset_ms += 7_200_000
    for minute in range(60, 0, -1):
        await _settle_minute(q, minute, 30 + int(25 * (1 + math.sin(minute / 6))))
    q.testing_clock_offset_ms = 0
    for shop in range(1, 41):
        await q.enqueue_many(
            [f"https://shop-{shop:02d}.example.com/p/{i}" for i in range((shop * 13) % 9 + 1)],
            lane=LANES[shop % 3],
        )
    # shop-07 trips on a failure (then by hand, for a known cooldown), shop-13 by hand.
    await q.enqueue("https://shop-07.example.com/broken")
    await q.enqueue("https://user:hunter2@vault.example.com/export", payload={"api_key": "sk-1"})
    await q.enqueue("https://html.example.com/<b>x</b>")
    await q.enqueue("https://gone.example.com/old-page")
    await q.enqueue("https://throttled.example.com/p/1")
    held = {}
    while True:
        jobs = (await q.claim(100)).jobs
        if not jobs:
            break
        held.update((job.url, job) for job in jobs)
    for url, job in held.items():
        if url.endswith("/broken"):
            await q.retry(
                job, kind="timeout", message="read timed out", delay=0, domain_failed=True
            )
        elif "vault" in url:
            await q.fail(job, "http_401", f"refused by {url}")
        elif url.startswith("https://html.example.com/"):
            await q.fail(job, "http_500", "<img src=x onerror=alert(1)> Internal Server Error")
        elif url.startswith("https://gone.example.com/"):
            await q.fail(job, "http_404", "Not Found")
        elif url.startswith("https://throttled.example.com/"):
            await q.throttle(job, 60, message="429 Too Many Requests")  # trips it
        else:
            await q.release(job, delay=0, shutdown=True)
    await q.breaker_trip("shop-13.example.com", 600)
    await q.breaker_trip("shop-07.example.com", 66)
    return {
        "tripped": "shop-07.example.com",
        "retired": "shop-21.example.com",
        "throttled": "throttled.example.com",
    }


@pytest.fixture
async def seeded(redis_url: str) -> AsyncIterator[tuple[AsyncQueue, dict[str, str]]]:
    settings = Settings(
        allow_private=False,
        breaker_failures=1,
        breaker_max_trips=3,
        domain_concurrency=50,
        global_trip_min=1000,  # no global pause: the seed trips many domains in a minute
    )
    q = AsyncQueue.from_url(redis_url, settings=settings)
    try:
        yield q, await seed(q)
    finally:
        await q.close()


async def test_overview_domains_dead_letters_and_replay_in_chromium(
    seeded: tuple[AsyncQueue, dict[str, str]], redis_url: str, tmp_path: Path
) -> None:
    api = need_browser()
    queue, names = seeded
    await queue.enqueue("https://adaptive.example.com/")
    await queue.domain_set("adaptive.example.com", concurrency="auto")
    shots = tmp_path / "shots"
    shots.mkdir()
    async with TestClient(TestServer(create_app(queue))) as client, api.async_playwright() as p:
        base = f"http://{client.host}:{client.port}/"
        browser = await p.chromium.launch(
            executable_path=str(CHROMIUM), args=["--no-sandbox", "--disable-gpu"]
        )
        try:
            page = await browser.new_page(viewport={"width": 1360, "height": 900})
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.on("dialog", lambda dialog: dialog.accept())

            await page.goto(base + "#/overview")
            await page.wait_for_selector("#stat-ready")
            await page.wait_for_selector(".chart polyline")
            assert await page.locator("#alarms li").count() >= 1
            assert "domain_retired" in await page.locator("#alarms").inner_text()
            await page.screenshot(path=str(shots / "overview.png"), full_page=True)

            await page.click("nav a[data-view=domains]")
            row = page.locator(f"tr[data-domain='{names['tripped']}']")
            await row.wait_for()
            assert await row.get_attribute("data-state") == "open"
            assert "in 1 min" in await row.inner_text() or " s" in await row.inner_text()
            # a 429 site tripped by its failures: the breaker window's failure rate (kept
            # while open), not 0.0 % for want of dead letters
            throttled = page.locator(f"tr[data-domain='{names['throttled']}']")
            assert await throttled.get_attribute("data-state") == "open"
            rate = throttled.locator("td[title='1 of the last 1 calls failed']")
            assert await rate.inner_text() == "100.0 %"
            retired = page.locator(f"tr[data-domain='{names['retired']}']")
            assert await retired.get_attribute("data-state") == "retired"
            await page.screenshot(path=str(shots / "domains.png"))

            await row.locator("a").click()  # the domain's page
            await page.wait_for_selector("text=Breaker history")
            assert "trip" in await page.locator("main").inner_text()
            await page.goto(base + f"#/domain/{names['throttled']}")
            await page.wait_for_selector("text=429 Too Many Requests")  # no dead letter
            polite = await page.locator("section", has_text="Politeness").inner_text()
            assert "50" in polite and "fixed" in polite, polite
            await page.goto(base + "#/domain/adaptive.example.com")
            await page.wait_for_selector("text=not learned yet")
            polite = await page.locator("section", has_text="Politeness").inner_text()
            assert "adaptive" in polite and "2.0" in polite, polite
            await page.screenshot(path=str(shots / "domain.png"), full_page=True)

            await page.click("nav a[data-view=dead]")
            await page.wait_for_selector("tr[data-id]")
            text = await page.locator("main").inner_text()
            assert "***:***@vault.example.com" in text and "hunter2" not in text  # user too
            assert "<img src=x onerror=alert(1)>" in text, "HTML shown as text"
            assert await page.locator("main img").count() == 0
            dead_row = page.locator("tr[data-id]", has_text="gone.example.com").first
            job_id = await dead_row.get_attribute("data-id")
            assert job_id
            await page.screenshot(path=str(shots / "dead.png"), full_page=True)
            await dead_row.locator("button", has_text="replay").click()
            await page.locator(f"tr[data-id='{job_id}']").wait_for(state="detached")

            await page.click("nav a[data-view=events]")
            # the newest events: the breakers tripped by hand last (the retirement, hours
            # ago, is past the 200 the view shows; "text=retired" used to match the dead
            # letters' view while it was still on the page)
            await page.wait_for_selector("h1:has-text('Events')")
            await page.wait_for_selector("td:has-text('tripped by hand')")
            await page.screenshot(path=str(shots / "events.png"), full_page=True)
            assert errors == [], errors
        finally:
            await browser.close()

    info = await queue.job_info(job_id)
    assert info is not None and info.state == "ready"
    r = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        # back in its domain's ready line, counted in its lane
        assert r.zscore(f"sq:{{default}}:dq:{info.job.domain}", job_id) is not None
        assert int(r.hget("sq:{default}:stats", f"ready:{info.job.lane}") or 0) >= 1
    finally:
        r.close()
    for name in ("overview", "domains", "domain", "dead", "events"):
        assert (shots / f"{name}.png").stat().st_size > 10_000
    target = os.environ.get("SCRAPEQ_SCREENSHOTS")
    if target:
        for name in ("overview", "domains"):
            shutil.copy(shots / f"{name}.png", Path(target) / f"dashboard-{name}.png")
