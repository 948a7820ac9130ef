"""When a worker's claims and settles wait for company (runtime/gather.py): the rule alone, and
a real worker on pages that take their time, counted in script calls per job."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from typing import Any

import pytest
from aiohttp import web

from scrapeq import AsyncQueue
from scrapeq.runtime.gather import (
    CLAIM_HELD_SHARE,
    CLAIM_WAIT,
    SETTLE_HELD_SHARE,
    SETTLE_MIN,
    SETTLE_WAIT,
    Gather,
)
from scrapeq.runtime.worker import BATCH, Worker
from support.sites import sites

# --- the rule ------------------------------------------------------------------------------


def test_a_claim_waits_for_an_eighth_of_the_slots_only_while_claims_come_back_full() -> None:
    g = Gather(200, BATCH)
    for _ in range(200):  # jobs hold their slots for a second: the wait is CLAIM_WAIT's
        g.ended(1.0)
    assert g.claim_min == 25
    assert g.claim_wait(1, 10.0) == 0.0, "no claim came back yet: claim at once"
    g.claimed(asked=10, got=10, sent=g.moves, now=10.0, idle=1.0)
    assert g.claim_wait(24, 10.0) == pytest.approx(CLAIM_WAIT)
    assert g.claim_wait(24, 10.0 + CLAIM_WAIT / 2) == pytest.approx(CLAIM_WAIT / 2)
    assert g.claim_wait(24, 10.0 + CLAIM_WAIT) == 0.0, "waited its most: claim"
    assert g.claim_wait(25, 10.0) == 0.0, "an eighth of the slots free: claim"
    g.claimed(asked=30, got=30, sent=g.moves, now=20.0, idle=1.0)
    assert g.claim_wait(3, 20.0) == pytest.approx(CLAIM_WAIT), "a claim starts a new wait"
    g.urgent = True
    assert g.claim_wait(3, 20.0) == 0.0, "urgent work: claim at once"


def test_after_a_short_claim_the_next_waits_for_one_of_our_settles_to_land() -> None:
    g = Gather(200, BATCH)
    for _ in range(200):  # jobs hold their slots for 8 s: the wait is the claim's idle one
        g.ended(8.0)
    sent = g.moves
    g.claimed(asked=30, got=29, sent=sent, now=5.0, idle=0.4)
    assert not g.urgent
    assert g.claim_wait(3, 5.0) == pytest.approx(0.4), "the queue has not moved: wait"
    assert g.claim_wait(150, 5.3) == pytest.approx(0.1), "jobs of ours ending move nothing"
    assert g.claim_wait(3, 5.4) == 0.0, "the claim's own idle wait is over"
    assert g.claim_wait(200, 5.0) == 0.0, "nothing in flight: none of ours can move it"
    g.moved()
    assert g.claim_wait(3, 5.0) == 0.0, "a settle landed: claim"
    g.claimed(asked=8, got=0, sent=sent, now=6.0, idle=1.0)
    assert g.claim_wait(3, 6.0) == 0.0, "a settle landed while the claim was on its way"
    g.claimed(asked=8, got=0, sent=g.moves, now=7.0, idle=1.0)
    assert g.claim_wait(3, 7.0) == pytest.approx(1.0, rel=1e-3)
    for _ in range(200):
        g.ended(0.080)  # 80 ms a job: a tenth of it at most
    g.claimed(asked=8, got=0, sent=g.moves, now=8.0, idle=1.0)
    assert g.claim_wait(3, 8.0) == pytest.approx(0.080 / SETTLE_HELD_SHARE, rel=0.01)
    g.urgent = True
    assert g.claim_wait(3, 7.0) == 0.0, "urgent work: claim at once"


def test_a_settlement_waits_for_at_most_an_eighth_of_the_time_a_job_holds_its_slot() -> None:
    g = Gather(200, BATCH)
    g.claimed(asked=10, got=10, sent=g.moves, now=0.0, idle=1.0)
    plain = [("settlement", "job", None)]
    for _ in range(200):
        g.ended(0.040)  # instant pages: 40 ms a slot
    assert not g.settle_due(plain, 0.0)
    assert not g.settle_due(plain, 0.004)
    assert g.settle_due(plain, 0.040 / SETTLE_HELD_SHARE * 1.01), "its domain waits too"


def test_a_claim_waits_for_at_most_a_small_share_of_the_time_a_job_holds_its_slot() -> None:
    g = Gather(200, BATCH)
    g.claimed(asked=10, got=10, sent=g.moves, now=0.0, idle=1.0)
    assert g.claim_wait(3, 0.0) == 0.0, "no job ended yet"
    for _ in range(200):
        g.ended(0.064)  # instant pages: 64 ms a slot, claim, fetch and all
    assert g.claim_wait(3, 0.0) == pytest.approx(0.064 / CLAIM_HELD_SHARE, rel=0.01)
    for _ in range(200):
        g.ended(5.0)
    assert g.claim_wait(3, 0.0) == CLAIM_WAIT


@pytest.mark.parametrize(("concurrency", "least"), [(1, 1), (5, 1), (16, 2), (10_000, 32)])
def test_a_small_worker_never_waits_and_a_large_one_waits_for_at_most_an_eighth_of_a_batch(
    concurrency: int, least: int
) -> None:
    assert Gather(concurrency, BATCH).claim_min == least


def test_a_settlement_nobody_awaits_waits_for_company_only_while_claims_come_back_full() -> None:
    g = Gather(200, BATCH)
    for _ in range(200):  # jobs hold their slots for a second: the wait is SETTLE_WAIT's
        g.ended(1.0)
    plain = [("settlement", "job", None)]
    assert not g.settle_due([], 0.0)
    assert g.settle_due(plain, 0.0), "claims not full: at once"
    g.claimed(asked=5, got=5, sent=g.moves, now=0.0, idle=1.0)
    assert not g.settle_due(plain, 1.0)
    assert not g.settle_due(plain * 2, 1.0 + SETTLE_WAIT / 2)
    assert g.settle_due(plain * 2, 1.0 + SETTLE_WAIT), "the oldest waited its most"
    g.settled()
    assert not g.settle_due(plain, 2.0), "a new wait from the first one after the call"
    assert g.settle_due(plain * SETTLE_MIN, 2.0), "enough to go together"
    assert g.settle_due([*plain, ("settlement", "job", "a future")], 2.0), "one is awaited"


# --- a worker on slow pages ----------------------------------------------------------------

JOBS, SITES, CONCURRENCY = 240, 12, 48


def _counting(q: AsyncQueue, calls: dict[str, list[int]]) -> None:
    """Count ``q``'s claim and settle calls (each one script call) and their sizes."""
    claim, settle_many = q.claim, q.settle_many

    async def counted_claim(n: int, *args: Any, **kwargs: Any) -> Any:
        claimed = await claim(n, *args, **kwargs)
        calls["claim"].append(len(claimed.jobs))
        return claimed

    async def counted_settle(items: Any, *args: Any, **kwargs: Any) -> Any:
        calls["settle"].append(len(items))
        return await settle_many(items, *args, **kwargs)

    q.claim = counted_claim  # type: ignore[method-assign]
    q.settle_many = counted_settle  # type: ignore[method-assign]


async def test_a_worker_on_slow_pages_claims_and_settles_many_jobs_a_call(
    make_async_queue: Callable[..., AsyncQueue],
) -> None:
    """Pages of 100-300 ms over 12 sites, 48 slots: slots free one at a time. Before the rule
    a claim carried 1.6 jobs and the worker made 1.7 script calls a job, 122-124 of them
    empty claims (a call costs Redis ~1 M instructions before its first job). Now claims wait
    for 6 free slots and settles for company while claims come back full (each within a share
    of a job's time), and after a short claim the next waits for a settle to land: 2.8-3.1
    jobs a claim, 0.92-0.96 calls a job. Every job still ends done."""

    async def slow_page(request: web.Request) -> web.Response:
        await asyncio.sleep(random.uniform(0.1, 0.3))
        return web.Response(text="<html><body>ok</body></html>", content_type="text/html")

    async with sites(*([slow_page] * SITES)) as fleet:
        q = make_async_queue(allow_private=True, domain_concurrency=8)
        await q.enqueue_many([fleet[i % SITES].url(f"/p/{i}") for i in range(JOBS)])
        calls: dict[str, list[int]] = {"claim": [], "settle": []}
        _counting(q, calls)
        worker = Worker(q, concurrency=CONCURRENCY, burst=True, report=False)
        await asyncio.wait_for(worker.run_async(), 60)
    assert worker.stats.done == JOBS
    assert sum(f.total for f in fleet) == JOBS
    claims = [n for n in calls["claim"] if n]
    per_claim = JOBS / len(claims)
    per_job = (len(calls["claim"]) + len(calls["settle"])) / JOBS  # empty claims too
    assert per_claim >= 2.2, (per_claim, calls["claim"])
    assert per_job <= 1.25, (per_job, calls)
