"""Crawls (issue 21, items 7 and 9): a redirect's target is fetched once; what became of a
page's links is counted by the script that enqueues them (queued, already seen, over
``max_pages``); a failing seed says why at INFO; ``crawl`` takes ``--log-every``; a first
command that fails stops the embedded Redis it started; the private-address error names the
flag as well as the setting.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiohttp import web

from scrapeq.engine.queue import AsyncQueue
from scrapeq.engine.settings import Settings
from scrapeq.runtime.worker import Worker
from sites import sites


def _page(*links: str) -> web.Response:
    body = "".join(f'<a href="{href}">x</a>' for href in links)
    return web.Response(text=f"<html><body>{body}</body></html>", content_type="text/html")


async def redirecting(request: web.Request) -> web.StreamResponse:
    """``/sec`` redirects to ``/sec/``, which links itself; ``/late`` links ``/sec/`` once the
    redirect has been settled."""
    path = request.path
    if path == "/":
        return _page("/sec", "/late")
    if path == "/sec":
        raise web.HTTPMovedPermanently("/sec/")
    if path == "/sec/":
        return _page("/sec/", "/sec/a", "/")
    if path == "/late":
        await asyncio.sleep(0.5)
        return _page("/sec/", "/sec")
    return _page("/")


@pytest.mark.parametrize("partitions", [1, 3])
async def test_a_redirect_target_is_fetched_once(redis_url: str, partitions: int) -> None:
    async with sites(redirecting) as (site,):
        settings = Settings(allow_private=True, domain_concurrency=10, partitions=partitions)
        q = AsyncQueue.from_url(redis_url, settings=settings)
        try:
            await q.enqueue_many([site.url("/")], unique="seen")
            await Worker(q, burst=True, follow_links=True, concurrency=10).run_async()
            counts = (await q.status())["counts"]
        finally:
            await q.close()
    assert dict(site.hits) == {"/": 1, "/sec": 1, "/sec/": 1, "/sec/a": 1, "/late": 1}
    assert counts["enqueued"] == 4  # /, /sec, /late, /sec/a: /sec/ joined as /sec's target


async def test_a_queue_without_a_seen_set_gets_none_from_a_redirect(
    redis_url: str, redis_client: Any
) -> None:
    async with sites(redirecting) as (site,):
        q = AsyncQueue.from_url(redis_url, settings=Settings(allow_private=True))
        try:
            await q.enqueue_many([site.url("/sec")])
            await Worker(q, burst=True).run_async()
            assert (await q.status())["counts"]["done"] == 1
        finally:
            await q.close()
    assert site.hits["/sec/"] == 1
    assert redis_client.keys("sq:{default}:seen*") == []
    assert redis_client.hget("sq:{default}:meta", "seen") is None
