"""Whether a done page's results line waits for the settle's answer is the settle script's
rule (issue 39: lua/includes/lines.lua), not a prediction of the worker's: through a real
worker, a loopback site and a JSONL sink.

The suspected defect of issue 39 (a domain's own ``max_pages`` with no queue budget: the
settle cuts follow-ups the line never says) does not happen: a domain's own ``max_pages``
(``domain_set``, stored ``maxp``) caps only specs enqueued ``capped`` (the URLFrontier
service's discovered URLs, includes/enqueue.lua ``over_max_pages``), never a crawl's
follow-ups, so the settle cuts nothing and the lines say nothing. The test keeps it so: should
the domain's budget ever cut follow-ups, the lines must say so."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from aiohttp import web

from scrapeq import AsyncQueue, Settings
from scrapeq.runtime.sinks import JsonlSink
from scrapeq.runtime.worker import Worker
from support.sites import sites


async def calendar(request: web.Request) -> web.StreamResponse:
    """A spider trap: every day links the next one, for ever."""
    day = int(request.query.get("d", "0"))
    body = f"<h1>day {day}</h1><a href='/cal?d={day + 1}'>next</a>"
    return web.Response(text=body, content_type="text/html")


def lines(results: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in results.read_text().splitlines()] if results.exists() else []


async def test_a_domains_own_max_pages_under_no_queue_budget(
    redis_url: str, tmp_path: Path
) -> None:
    """A domain with its own ``max_pages`` (``domain_set``, stored ``maxp``) and no queue
    budget: its crawl's follow-ups are not cut (the cap is for ``capped`` specs), and no done
    line says they were."""
    results = tmp_path / "r.jsonl"
    async with sites(calendar) as (site,):
        settings = Settings(allow_private=True, request_timeout=5.0, max_depth=6)
        q = AsyncQueue.from_url(redis_url, settings=settings)
        try:
            await q.domain_set(site.domain, max_pages=3)
            await q.enqueue_many([site.url("/cal?d=0")], unique="seen")
            worker = Worker(q, burst=True, follow_links=True, sink=JsonlSink(results))
            await asyncio.wait_for(worker.run_async(), 60)
            info = await q.domains_info()
        finally:
            await q.close()
    rows = sorted(lines(results), key=lambda r: r["depth"])
    assert [r["depth"] for r in rows] == list(range(7)), (
        "max_depth 6: the domain's own cap \
is not a follow-up's"
    )
    assert all(r["outcome"] == "done" and "skipped" not in r for r in rows)
    assert [r["links"]["queued"] for r in rows] == [1] * 6 + [0]
    (row,) = info
    assert not row.get("max_pages_skipped"), "nothing was cut"
