"""Revisits end to end (issue 25): a real loopback site whose pages change or not, one of them
answering conditional requests with 304; the worker revisits, a 304 settles done with
``not_modified``, the results lines say ``changed``."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis
from aiohttp import web

from scrapeq import AsyncQueue, Job, Response
from scrapeq.runtime.sinks import JsonlSink
from scrapeq.runtime.worker import Worker
from support.sites import sites

pytestmark = pytest.mark.backends

DAY_MS = 86_400_000


class Pages:
    """/etag answers conditional requests (ETag, 304); /plain always sends its body."""

    def __init__(self) -> None:
        self.version = 1
        self.conditional: list[str | None] = []

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = f"<p>version {self.version}</p>"
        if request.path == "/etag":
            tag = f'"v{self.version}"'
            self.conditional.append(request.headers.get("If-None-Match"))
            if request.headers.get("If-None-Match") == tag:
                return web.Response(status=304, headers={"ETag": tag})
            return web.Response(text=body, content_type="text/html", headers={"ETag": tag})
        return web.Response(text=body, content_type="text/html")


async def burst(q: AsyncQueue, results: Path, want: int) -> None:
    """Run a worker until the results hold ``want`` lines (revisits stay delayed: a burst
    worker would wait for them), then stop it."""

    def handler(job: Job, response: Response) -> Any:
        return len(response.body)

    worker = Worker(q, handler=handler, sink=JsonlSink(results))
    task = asyncio.create_task(worker.run_async())
    for _ in range(300):
        if results.exists() and len(results.read_text().splitlines()) >= want:
            break
        await asyncio.sleep(0.05)
    worker.stop()
    await asyncio.wait_for(task, 30)


def lines(results: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in results.read_text().splitlines()]


async def test_revisits_send_validators_and_say_what_changed(
    make_async_queue: Callable[..., AsyncQueue], tmp_path: Path, redis_url: str, backend: str
) -> None:
    q = make_async_queue(allow_private=True, request_timeout=5.0, revisit="on",
                         revisit_budget=3600, revisit_min_interval=1)  # fmt: skip
    results = tmp_path / "results.jsonl"
    pages = Pages()
    async with sites(pages.handle) as (site,):
        await q.enqueue(site.url("/etag"))
        await q.enqueue(site.url("/plain"))
        await burst(q, results, 2)  # first visits
        q.testing_clock_offset_ms += 40 * DAY_MS  # past the longest interval: both due
        await burst(q, results, 4)  # unchanged: a 304 and the same body
        pages.version = 2
        q.testing_clock_offset_ms += 40 * DAY_MS
        await burst(q, results, 6)  # changed
    rows = lines(results)
    by = {(r["url"].rsplit("/", 1)[1], i // 2): r for i, r in enumerate(rows)}
    assert len(rows) == 6 and all(r["outcome"] == "done" for r in rows)
    first, same, new = ({p: by[(p, k)] for p in ("etag", "plain")} for k in range(3))
    assert first["etag"]["changed"] is True and first["plain"]["changed"] is True
    assert same["etag"]["not_modified"] is True and same["etag"]["changed"] is False
    assert same["etag"]["status"] == 304 and same["etag"]["bytes"] == 0
    assert same["plain"]["changed"] is False and "not_modified" not in same["plain"]
    assert new["etag"]["changed"] is True and new["plain"]["changed"] is True
    assert "not_modified" not in new["etag"]
    # the revisits sent the stored ETag (the first visit none)
    assert pages.conditional == [None, '"v1"', '"v1"']
    # the state: one packed 28-byte value per URL
    client: Any = (redis.RedisCluster if backend == "cluster" else redis.Redis).from_url(redis_url)
    values = [v for k in client.scan_iter("sq:{default}:rv:*") for v in client.hvals(k)]
    client.close()
    assert sorted(len(v) for v in values) == [28, 28]
