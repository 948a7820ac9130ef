"""Continuous crawling, live (issue 37): a real worker revisits a loopback site in real time.

Half the pages change every 2 s (much faster than the domain's revisit budget can follow),
half never change. From the second visit on, the fast pages must be revisited more often
than the still ones, and the domain's scheduled revisit load must come to its budget (the
price solved for, not stepped by visits that never come), not sit at the floor
(``revisit_max_interval``, 30 days) as it did: each page visited twice, then nothing.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from aiohttp import web

from scrapeq import AsyncQueue, Job, Response
from scrapeq.runtime.worker import Worker
from support.sites import sites

pytestmark = pytest.mark.backends("single")

PAGES = 10  # of each kind
PERIOD = 2.0  # s: a fast page's content changes this often
BUDGET = 7200.0  # revisits per domain-hour: two a second, a fast page every ~10 s at best
RUN = 50.0  # s of crawling


class Shop:
    """/fast/<i> changes every PERIOD s (phases spread), /still/<i> never."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self.visits: dict[str, list[float]] = {}

    async def handle(self, request: web.Request) -> web.StreamResponse:
        now = time.monotonic() - self.t0
        self.visits.setdefault(request.path, []).append(now)
        kind, i = request.path.strip("/").split("/")
        version = int(now / PERIOD + int(i) / PAGES) if kind == "fast" else 0
        return web.Response(text=f"<p>{request.path} v{version}</p>", content_type="text/html")


async def test_fast_pages_get_the_budget_and_still_pages_do_not(
    make_async_queue: Callable[..., AsyncQueue],
) -> None:
    q = make_async_queue(allow_private=True, request_timeout=5.0, revisit="on",
                         revisit_budget=BUDGET, revisit_min_interval=1)  # fmt: skip
    shop = Shop()

    def handler(job: Job, response: Response) -> Any:
        return None

    async with sites(shop.handle) as (site,):
        for kind in ("fast", "still"):
            for i in range(PAGES):
                await q.enqueue(site.url(f"/{kind}/{i}"))
        worker = Worker(q, handler=handler)
        task = asyncio.create_task(worker.run_async())
        try:
            await asyncio.sleep(RUN)
            info = (await q.domains_info([site.domain]))[0]
        finally:
            worker.stop()
            await asyncio.wait_for(task, 30)
    # after the first visits (each page's first two: the second one is a fair share)
    later: Counter[str] = Counter()
    for path, times in shop.visits.items():
        later[path.split("/")[1]] += len(times) - 2
    assert all(len(shop.visits.get(f"/{k}/{i}", [])) >= 2 for k in ("fast", "still")
               for i in range(PAGES)), shop.visits  # fmt: skip
    assert later["fast"] > 2 * max(later["still"], 1), (later, shop.visits)
    # the fast pages change faster than the budget follows: it is spent, not left idle
    load = info["revisit_load"]
    assert abs(load - BUDGET) <= 0.2 * BUDGET, info
    # and fetched at that pace after the first visits: at least half the budget's 2 a second
    assert later["fast"] + later["still"] >= 0.5 * BUDGET / 3600 * (RUN - 15), (later, info)
