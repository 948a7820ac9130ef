"""Scrapy on scrapeq (scrapeq.contrib.scrapy): real ``scrapy crawl`` runs of the example project
against loopback sites, and the request store's refusals."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

scrapy = pytest.importorskip("scrapy")

from aiohttp import web  # noqa: E402

from scrapeq.contrib.scrapy import Scheduler, UnstorableRequest  # noqa: E402
from scrapeq.contrib.scrapy._classify import classify_failure  # noqa: E402
from scrapeq.contrib.scrapy._store import decode_request, encode_request  # noqa: E402
from scrapeq.engine.queue import AsyncQueue, Queue  # noqa: E402
from scrapeq.engine.settings import Settings  # noqa: E402
from scrapeq.runtime.classify import Outcome  # noqa: E402
from sites import Site, sites  # noqa: E402

PROJECT = Path(__file__).resolve().parent.parent / "examples" / "scrapy_project"
PAGES = 30


class _Spider(scrapy.Spider):
    name = "t"

    def parse_page(self, response: Any) -> None:
        pass

    def on_error(self, failure: Any) -> None:
        pass


def test_a_request_round_trips_as_json_with_its_callbacks_by_name() -> None:
    spider = _Spider()
    request = scrapy.Request(
        "http://127.0.0.1:1/p?q=1",
        method="POST",
        body=b"\x00\xffbody",
        headers={"X-A": ["1", "2"]},
        callback=spider.parse_page,
        errback=spider.on_error,
        meta={"k": [1, "v"], "_scrapeq_job": object()},
        cb_kwargs={"n": 3},
        priority=5,
        dont_filter=True,
    )
    stored = encode_request(request, spider)
    back = decode_request(json.loads(json.dumps(stored)), spider)
    assert (back.url, back.method, back.body) == (request.url, "POST", b"\x00\xffbody")
    assert back.headers.getlist("X-A") == [b"1", b"2"]
    assert back.callback == spider.parse_page and back.errback == spider.on_error
    assert back.meta == {"k": [1, "v"]} and back.cb_kwargs == {"n": 3}
    assert (back.priority, back.dont_filter) == (5, True)


@pytest.mark.parametrize(
    ("build", "why"),
    [
        (lambda s: scrapy.Request("http://a.example/", callback=lambda r: None), "lambda"),
        (lambda s: scrapy.Request("http://a.example/", meta={"when": object()}), "meta"),
        (lambda s: scrapy.Request("http://a.example/", cb_kwargs={"s": {1, 2}}), "cb_kwargs"),
    ],
)
def test_a_request_that_cannot_be_stored_is_refused_by_name(
    build: Callable[[Any], Any], why: str
) -> None:
    spider = _Spider()
    with pytest.raises(UnstorableRequest, match=why):
        encode_request(build(spider), spider)


def test_scrapy_download_errors_are_classified_like_the_workers() -> None:
    from scrapy.exceptions import DownloadTimeoutError, IgnoreRequest
    from twisted.internet.error import ConnectionRefusedError

    timeout = classify_failure(DownloadTimeoutError("took too long"))
    assert (timeout.outcome, timeout.reason, timeout.counts_against_domain) == (
        Outcome.RETRY, "timeout", True
    )  # fmt: skip
    refused = classify_failure(ConnectionRefusedError())
    assert (refused.reason, refused.counts_against_domain) == ("connection_error", True)
    assert classify_failure(IgnoreRequest()).outcome is Outcome.FAIL


def test_scheduler_is_a_scrapy_scheduler() -> None:
    from scrapy.core.scheduler import BaseScheduler

    assert issubclass(Scheduler, BaseScheduler)


# --- real crawls ---------------------------------------------------------------------------


def _shop(delay: float = 0.0) -> Callable[[web.Request], Any]:
    """Pages /p/0 .. /p/{PAGES-1}, each linking to the next three (every page reachable)."""

    async def page(request: web.Request) -> web.StreamResponse:
        if delay:
            await asyncio.sleep(delay)
        n = int(request.path.rsplit("/", 1)[1])
        links = "".join(f'<a href="/p/{(n + i) % PAGES}">x</a>' for i in (1, 2, 3))
        return web.Response(text=f"<title>p{n}</title>{links}", content_type="text/html")

    return page


async def _hang(request: web.Request) -> web.StreamResponse:
    await asyncio.sleep(3600)
    raise AssertionError("unreachable")


def _env(redis_url: str, queue: str) -> dict[str, str]:
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parent.parent / "src")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    env.update(SCRAPEQ_REDIS_URL=redis_url, SCRAPEQ_QUEUE=queue, SCRAPEQ_ALLOW_PRIVATE="1")
    return env


async def _crawl(
    redis_url: str, queue: str, start: list[str], out: Path, *settings: str
) -> asyncio.subprocess.Process:
    args = [sys.executable, "-m", "scrapy", "crawl", "shop", "-a", "start=" + ",".join(start)]
    args += ["-O", str(out), "-s", "LOG_LEVEL=INFO"]
    for s in settings:
        args += ["-s", s]
    return await asyncio.create_subprocess_exec(
        *args,
        cwd=PROJECT,
        env=_env(redis_url, queue),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )


def _scrapeq(**settings: Any) -> str:
    return "SCRAPEQ_SETTINGS=" + json.dumps({"allow_private": True, **settings})


def _items(path: Path) -> list[dict[str, Any]]:
    return json.loads(path.read_text()) if path.exists() and path.stat().st_size else []


async def test_a_hanging_site_parks_while_the_healthy_pages_finish(
    redis_url: str, tmp_path: Path
) -> None:
    async with sites(_shop(), _hang) as (shop, hang):
        start = [shop.url("/p/0")] + [hang.url(f"/h/{i}") for i in range(20)]
        settings = _scrapeq(
            request_timeout=1.5, breaker_failures=3, breaker_cooldown=60, domain_concurrency=4
        )
        proc = await _crawl(
            redis_url, "hang", start, tmp_path / "items.json", settings, "CLOSESPIDER_TIMEOUT=7"
        )
        output, _ = await asyncio.wait_for(proc.communicate(), 40)
    log = output.decode(errors="replace")
    assert proc.returncode == 0, log[-3000:]
    urls = {item["url"] for item in _items(tmp_path / "items.json")}
    assert urls == {shop.url(f"/p/{n}") for n in range(PAGES)}, log[-3000:]
    # 4 at once time out; the slots the first two failures free may be refilled before the
    # 3rd failure opens the breaker: then nothing more goes there (20 were waiting).
    assert hang.total <= 6, hang.hits
    q = Queue.from_url(redis_url, "hang")
    try:
        (info,) = q.domains_info([hang.domain])
        assert info["state"] == "open", info
        counts = q.counts()
    finally:
        q.close()
    assert counts["done"] == PAGES and counts["dead"] == 0
    assert counts["ready"] + counts["delayed"] == 20  # parked, none lost
    assert "'scrapeq/start_requests_skipped'" not in log  # this process was the starter


async def _wait_for_hits(site: Site, n: int, timeout: float) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while site.total < n:
        assert asyncio.get_running_loop().time() < deadline, "the crawl never fetched"
        await asyncio.sleep(0.05)


async def _wait_for_enqueued(redis_url: str, queue: str, n: int, timeout: float) -> None:
    """Until the crawl has scheduled n requests (Scrapy schedules start requests lazily, so
    on a loaded machine some may still be unscheduled when the first fetches arrive)."""
    deadline = asyncio.get_running_loop().time() + timeout
    q = AsyncQueue.from_url(redis_url, queue)
    try:
        while (await q.counts())["enqueued"] < n:
            assert asyncio.get_running_loop().time() < deadline, "the crawl never scheduled"
            await asyncio.sleep(0.05)
    finally:
        await q.close()


async def test_a_killed_crawls_requests_come_back_to_another_process(
    redis_url: str, tmp_path: Path
) -> None:
    async with sites(_shop(delay=0.4)) as (shop,):
        settings = (_scrapeq(lease=2, domain_concurrency=4), "CLOSESPIDER_TIMEOUT=40")
        first = await _crawl(redis_url, "kill", [shop.url("/p/0")], tmp_path / "a.json", *settings)
        await _wait_for_hits(shop, 5, 20)  # it holds leases on requests in flight
        first.send_signal(signal.SIGKILL)
        await first.communicate()
        held = shop.total
        # A second process of the same crawl: the start requests were the first one's.
        second = await _crawl(redis_url, "kill", [shop.url("/p/0")], tmp_path / "b.json", *settings)
        output, _ = await asyncio.wait_for(second.communicate(), 40)
    log = output.decode(errors="replace")
    assert second.returncode == 0, log[-3000:]
    assert "'finish_reason': 'finished'" in log, log[-3000:]
    assert "'scrapeq/start_requests_skipped': 1" in log, log[-3000:]
    q = Queue.from_url(redis_url, "kill")
    try:
        counts = q.counts()
    finally:
        q.close()
    assert (counts["done"], counts["dead"], counts["ready"] + counts["delayed"]) == (PAGES, 0, 0)
    # Every page was fetched; the ones the killed process held, twice.
    assert set(shop.hits) == {f"/p/{n}" for n in range(PAGES)}
    assert held >= 5 and sum(shop.hits.values()) >= PAGES + 1


async def test_a_graceful_stop_gives_the_requests_back_without_spending_attempts(
    redis_url: str, tmp_path: Path
) -> None:
    async with sites(_hang) as (hang,):
        start = [hang.url(f"/h/{i}") for i in range(10)]
        settings = _scrapeq(request_timeout=3, domain_concurrency=4)
        proc = await _crawl(redis_url, "stop", start, tmp_path / "items.json", settings)
        await _wait_for_hits(hang, 4, 20)
        await _wait_for_enqueued(redis_url, "stop", 10, 20)
        proc.send_signal(signal.SIGINT)  # once: Scrapy's graceful stop
        output, _ = await asyncio.wait_for(proc.communicate(), 30)
    log = output.decode(errors="replace")
    assert proc.returncode == 0, log[-3000:]
    assert "'finish_reason': 'shutdown'" in log, log[-3000:]
    q = Queue.from_url(redis_url, settings=Settings(queue="stop", domain_concurrency=20))
    try:
        counts = q.counts()
        jobs = q.claim(20).jobs
    finally:
        q.close()
    # All 10 are ready again at once (a retry would wait its backoff), none charged.
    assert (counts["ready"], counts["delayed"], counts["inflight"]) == (10, 0, 0), counts
    assert [(j.attempts, j.errors) for j in jobs] == [(1, ())] * 10  # 1: this claim


async def test_two_crawl_processes_share_one_frontier(redis_url: str, tmp_path: Path) -> None:
    async with sites(_shop(delay=0.3)) as (shop,):
        settings = (_scrapeq(domain_concurrency=4), "CONCURRENT_REQUESTS=2")
        start = [shop.url("/p/0")]
        procs = [
            await _crawl(redis_url, "shared", start, tmp_path / f"{name}.json", *settings)
            for name in ("a", "b")
        ]
        outputs = await asyncio.wait_for(asyncio.gather(*(p.communicate() for p in procs)), 50)
    logs = [out.decode(errors="replace") for out, _ in outputs]
    assert [p.returncode for p in procs] == [0, 0], logs[0][-2000:] + logs[1][-2000:]
    items = [{i["url"] for i in _items(tmp_path / f"{name}.json")} for name in ("a", "b")]
    assert items[0] | items[1] == {shop.url(f"/p/{n}") for n in range(PAGES)}
    assert items[0] and items[1] and not items[0] & items[1]  # both worked, no page twice
    assert sorted(shop.hits.values()) == [1] * PAGES
    assert sum("'scrapeq/start_requests_skipped': 1" in log for log in logs) == 1
