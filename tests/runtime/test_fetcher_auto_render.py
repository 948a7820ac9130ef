"""Fetcher ``auto`` on a shop that mixes pages written by JavaScript and static ones
(support/js_shop.py, issue 42): a page needs rendering when its handler raises
``NeedsBrowser`` or when an ``--extract`` rule that found nothing raw finds something rendered
(the worker renders that page once to compare; the rendered page is its result). The move is
its path pattern's (lua/includes/auto.lua), so the static pages are never rendered. Every test
launches real chromium processes (``need_browser``)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any
from urllib.parse import urlsplit

import pytest
from aiohttp import web

from scrapeq import AsyncQueue, NeedsBrowser
from scrapeq.engine.model.job import Job
from scrapeq.runtime.extract import extractor
from scrapeq.runtime.fetch import Response
from scrapeq.runtime.sinks import CallableSink
from scrapeq.runtime.worker import Worker
from support.browser import ONE_CHROMIUM_AT_A_TIME, need_browser
from support.js_shop import price, shop
from support.sites import Site, sites
from support.waiting import until

pytestmark = [pytest.mark.timeout(240), ONE_CHROMIUM_AT_A_TIME]

FIELDS = ["name=.name::text", "price=.price::text"]


@pytest.fixture(autouse=True)
def _browser() -> None:
    need_browser()


async def _shop_or_down(request: web.Request) -> web.StreamResponse:
    if request.path.startswith("/down/"):  # a failed cheap fetch: never evidence
        return web.Response(status=503, text="try later")
    return await shop(request)


@pytest.fixture
async def site() -> AsyncIterator[Site]:
    async with sites(_shop_or_down) as (s,):
        yield s


async def _run(q: AsyncQueue, handler: Any) -> dict[str, dict[str, Any]]:
    records: list[dict[str, Any]] = []
    worker = Worker(q, burst=True, sink=CallableSink(records.append), handler=handler)
    await asyncio.wait_for(worker.run_async(), 200)
    return {urlsplit(r["url"]).path: r for r in records}


def _rendered(site: Site) -> int:
    """Product pages rendered: each rendering of /p/<n> calls /api/p/<n> once."""
    return sum(n for path, n in site.hits.items() if path.startswith("/api/p/"))


async def _fields(q: AsyncQueue, domain: str) -> dict[str, str]:
    got: dict[str, str] = await q.client.hgetall(q.keys.domain(domain))
    return {k: v for k, v in got.items() if k.startswith(("ap:", "afl"))}


async def test_an_extract_rule_that_finds_more_rendered_moves_only_that_pattern(
    site: Site, make_async_queue: Callable[..., AsyncQueue]
) -> None:
    q = make_async_queue(allow_private=True, fetcher="auto", request_timeout=15.0)
    js = [f"/p/{n}" for n in range(1, 21)]
    static = [f"/static/{n}" for n in range(1, 21)]
    await q.enqueue_many([site.url(p) for p in js + static])
    got = await _run(q, extractor(FIELDS))
    assert {p: r["outcome"] for p, r in got.items()} == dict.fromkeys(js + static, "done")
    for path, r in got.items():  # every page's content extracted
        n = int(path.rsplit("/", 1)[1])
        assert r["result"] == {"name": f"Product {n}", "price": price(n)}, (path, r)
    assert _rendered(site) <= 1.1 * len(js), site.hits
    assert _rendered(site) >= len(js)
    assert await _fields(q, site.domain) == {"ap:/p/": "browser"}


async def test_a_handler_raising_needs_browser_has_its_page_rendered_and_a_5xx_is_no_evidence(
    site: Site, make_async_queue: Callable[..., AsyncQueue]
) -> None:
    def handler(job: Job, response: Response) -> dict[str, Any]:
        name = response.css(".name::text").get()
        if name is None:
            raise NeedsBrowser("the product's name is written by a script")
        return {"name": name}

    q = make_async_queue(allow_private=True, fetcher="auto", request_timeout=15.0, max_attempts=1)
    await q.enqueue_many([site.url(p) for p in ("/down/1", "/static/2")])
    got = await _run(q, handler)
    assert got["/down/1"]["outcome"] == "dead" and got["/static/2"]["outcome"] == "done"
    assert await _fields(q, site.domain) == {}, "a failed cheap fetch is never evidence"
    await q.enqueue_many([site.url(f"/p/{n}") for n in (3, 4)])
    got = await _run(q, handler)
    assert {p: r["result"] for p, r in got.items()} == {
        "/p/3": {"name": "Product 3"}, "/p/4": {"name": "Product 4"}
    }  # fmt: skip
    assert all(r["attempts"] == 1 for r in got.values()), got
    assert await _fields(q, site.domain) == {"ap:/p/": "browser"}


async def test_a_recheck_as_good_brings_the_pattern_back_down(
    site: Site, make_async_queue: Callable[..., AsyncQueue]
) -> None:
    q = make_async_queue(allow_private=True, fetcher="auto", auto_recheck=0.5)
    # the static pages' pattern taken for one that needs rendering (a site that changed)
    await q.client.hset(q.keys.domain(site.domain), "ap:/static/", "browser")
    await q.enqueue_many([site.url(f"/static/{n}") for n in (1, 2)])
    got = await _run(q, extractor(FIELDS))
    assert {p: r["outcome"] for p, r in got.items()} == dict.fromkeys(got, "done")
    assert len(got) == 2
    assert await _fields(q, site.domain) == {}, "the re-check was as good: back to http"


async def test_a_render_that_fails_is_the_fetchs_failure_not_the_handlers(
    site: Site, make_async_queue: Callable[..., AsyncQueue]
) -> None:
    """A chromium that exits at once (``/bin/false``) while rendering a page the handler said
    needs a browser: ours, as for a browser job (given back with nothing spent, no domain
    charged, the worker's browsers benched: runtime/browser_pool.py), never a handler error
    spending the job's attempts."""

    def handler(job: Job, response: Response) -> dict[str, Any]:
        raise NeedsBrowser

    q = make_async_queue(
        allow_private=True, fetcher="auto", browser_path="/bin/false", max_releases=1,
        max_attempts=1, backoff_base=0.1, backoff_cap=0.2, browser_bench_after=2,
        browser_bench=30.0,
    )  # fmt: skip
    job_id = (await q.enqueue(site.url("/p/1"))).id
    records: list[dict[str, Any]] = []
    worker = Worker(q, sink=CallableSink(records.append), handler=handler)
    running = asyncio.create_task(worker.run_async())
    try:
        await until(lambda: _benched(q), 60, "the worker's browsers benched")
    finally:
        worker.stop()
        await asyncio.wait_for(running, 60)
    assert records == []  # no line: the job is not over
    info = await q.job_info(job_id)
    assert info is not None and info.state in ("ready", "delayed"), info
    job = info.job
    assert job.attempts == 0 and job.releases == 0, job  # nothing spent: the fault is ours
    assert (await q.domains_info())[0]["state"] == "closed"


async def _benched(q: AsyncQueue) -> bool:
    return bool((await q.figures()).get("browsers_down"))
