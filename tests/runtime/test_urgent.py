"""Urgent work (the most urgent lane) against a real redis-server and a loopback site: a new
domain's critical burst starts at ``domain_concurrency_urgent``, and an idle worker claims
urgent work as soon as it is enqueued (the wake stream), not at its next poll."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import replace

import pytest
import redis
from aiohttp import web

from scrapeq import AsyncQueue, Queue
from scrapeq.engine.model.keys import Keys
from scrapeq.runtime.worker import IDLE_MAX, Worker
from support.sites import sites

pytestmark = pytest.mark.backends

SITE = "http://shop.example.com"
OTHER = "http://other.example.com"


def test_a_new_domains_critical_burst_starts_at_the_urgent_limit(
    make_queue: Callable[..., Queue],
) -> None:
    q = make_queue()
    q.enqueue_many([f"{SITE}/c/{i}" for i in range(40)], lane="critical")
    q.enqueue_many([f"{OTHER}/n/{i}" for i in range(40)])
    jobs = q.claim(100).jobs
    by_domain = {d: sum(1 for j in jobs if j.domain == d) for d in {j.domain for j in jobs}}
    assert by_domain == {"shop.example.com": 16, "other.example.com": 2}, by_domain
    info = q.domains_info(["shop.example.com"])[0]
    assert info["limit"] == 16, "kept as the domain's limit: adaptive goes on from it"


def test_the_urgent_start_is_bounded_and_only_for_a_domain_with_no_learned_limit(
    make_queue: Callable[..., Queue],
) -> None:
    q = make_queue(domain_concurrency_urgent=50, domain_concurrency_max=10)
    q.enqueue_many([f"{SITE}/c/{i}" for i in range(40)], lane="critical")
    assert len(q.claim(100).jobs) == 10, "within domain_concurrency_max"
    q.enqueue_many([f"{OTHER}/n/{i}" for i in range(2)])
    answered = [replace(q.done(j), latency_ms=5) for j in q.claim(100).jobs]
    assert len(answered) == 2
    q.settle_many(answered)  # other.example.com answered twice: its limit is learned
    learned = int(q.domains_info(["other.example.com"])[0]["limit"])
    q.enqueue_many([f"{OTHER}/c/{i}" for i in range(40)], lane="critical")
    got = len(q.claim(100).jobs)
    assert got == learned < 10, "a learned limit is the domain's, whatever the lane"


@pytest.mark.parametrize(
    "settings", [{"domain_concurrency": 3}, {"lanes": {"normal": 0}}], ids=["fixed", "one-lane"]
)
def test_no_urgent_start_with_a_fixed_limit_or_a_single_lane(
    make_queue: Callable[..., Queue], settings: dict[str, object]
) -> None:
    q = make_queue(**settings)
    lane = "critical" if "lanes" not in settings else "normal"
    q.enqueue_many([f"{SITE}/c/{i}" for i in range(40)], lane=lane)
    assert len(q.claim(100).jobs) == settings.get("domain_concurrency", 2)


def test_only_an_urgent_enqueue_writes_the_wake_stream_once_a_call(
    make_queue: Callable[..., Queue], redis_client: redis.Redis
) -> None:
    q = make_queue()
    wake = Keys(q.name).wake
    q.enqueue_many([f"{SITE}/n/{i}" for i in range(10)])
    q.enqueue_many([f"{SITE}/b/{i}" for i in range(10)], lane="bulk")
    q.enqueue_many([f"{SITE}/d/{i}" for i in range(10)], lane="critical", delay=60)
    assert redis_client.xlen(wake) == 0, "no urgent job ready: nothing written"
    q.enqueue_many([f"{SITE}/c/{i}" for i in range(10)], lane="critical")
    q.enqueue_many([f"{SITE}/c2/{i}" for i in range(10)], lane="critical")
    assert redis_client.xlen(wake) == 1, "capped at one entry"
    assert len(redis_client.xrange(wake)) == 1


async def test_an_idle_worker_claims_critical_work_as_soon_as_it_is_enqueued(
    make_async_queue: Callable[..., AsyncQueue],
) -> None:
    """The claim loop of an idle worker sleeps IDLE_MAX (1 s) between polls: a critical job
    enqueued just after a poll waited for the next one (0.7-1 s here); woken by the enqueue,
    its fetch starts within milliseconds."""
    first: dict[str, float] = {}

    async def page(request: web.Request) -> web.StreamResponse:
        first.setdefault(request.path, time.monotonic())
        return web.Response(text="<title>x</title>", content_type="text/html")

    q = make_async_queue(allow_private=True)
    async with sites(page) as (site,):
        worker = Worker(q, concurrency=8, report=False)
        task = asyncio.create_task(worker.run_async())
        try:
            waits = []
            for r in range(3):
                await asyncio.sleep(0.25)  # the worker polled, found nothing and sleeps
                at = time.monotonic()
                paths = [f"/{r}/{i}" for i in range(4)]
                await q.enqueue_many([site.url(p) for p in paths], lane="critical")
                deadline = at + 3 * IDLE_MAX
                while len(first) < 4 * (r + 1) and time.monotonic() < deadline:
                    await asyncio.sleep(0.005)
                waits.append(max(first.get(p, float("inf")) for p in paths) - at)
            assert max(waits) < 0.2, waits
        finally:
            worker.stop()
            await asyncio.wait_for(task, 30)
