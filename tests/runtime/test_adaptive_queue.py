"""Adaptive concurrency on a site that queues past its capacity (issue 21, item 13): it serves
K requests at once, queues the next K (their latency grows with the queue) and refuses beyond
2K. Latency rises between K and 2K, so the latency bound must hold the limit under the
refusals; the baseline (the no-load latency) must not take our own queue for the site's.

One test drives the engine by hand against a model of that site (a seeded event simulation
on the queue's test clock: deterministic and fast); one runs a real worker against the
fleet's ``capacity`` site on loopback."""

from __future__ import annotations

import asyncio
import dataclasses
import heapq
import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from scrapeq import AsyncQueue, Queue
from scrapeq.demo.fleet import Fleet, Mode, SiteSpec
from scrapeq.engine.lua.scripts import Settlement
from scrapeq.engine.model.job import Job
from scrapeq.runtime.worker import Worker

SITE = "http://shop.example.com"
DOMAIN = "shop.example.com"
K, LATENCY_MS = 8, 50.0  # the site: 8 at once, 503 beyond 16, 50 ms


def timed(s: Settlement, ms: float, overload: bool = False) -> Settlement:
    return dataclasses.replace(s, latency_ms=round(ms), overload=overload)


@dataclass
class CapacitySite:
    """K servers answering in ``latency_ms`` (lognormal, sigma 0.5, seeded) each, first come
    first served; a request that finds 2K in the site is refused (503) in 2 ms."""

    k: int
    latency_ms: float
    rng: random.Random
    slots: list[float] = field(default_factory=list)  # when each server is free
    ends: list[float] = field(default_factory=list)  # when accepted requests leave
    requests: int = 0
    refused: int = 0

    def send(self, now: float) -> tuple[float, bool]:
        """A request sent at ``now``: when it is answered, and whether it was refused."""
        self.requests += 1
        self.slots = self.slots or [0.0] * self.k
        self.ends = [t for t in self.ends if t > now]
        if len(self.ends) >= 2 * self.k:
            self.refused += 1
            return now + 2, True
        i = min(range(self.k), key=self.slots.__getitem__)
        done = max(now, self.slots[i]) + self.latency_ms * self.rng.lognormvariate(0, 0.5)
        self.slots[i] = done
        self.ends.append(done)
        return done, False


def drive(q: Queue, site: CapacitySite, pages: int) -> list[tuple[float, dict[str, Any]]]:
    """Work ``pages`` jobs of DOMAIN against ``site``: claim what the domain allows, settle
    each answer when the model says it comes (the queue's clock moved to it), claim again.
    Answers the domain's info after each answer, with the model's time (ms)."""
    now = 0.0
    events: list[tuple[float, int, Job, float, bool]] = []

    def claim() -> None:
        for job in q.claim(100).jobs:
            at, refused = site.send(now)
            heapq.heappush(events, (at, len(events) + site.requests, job, at - now, refused))

    claim()
    trajectory: list[tuple[float, dict[str, Any]]] = []
    done = 0
    while done < pages:
        if not events:  # waiting out an interval between request starts
            now += 10
            q.testing_clock_offset_ms += 10
            claim()
            continue
        at, _, job, ms, refused = heapq.heappop(events)
        q.testing_clock_offset_ms += int(at) - int(now)
        now = at
        if refused:
            q.settle_many([timed(q.retrying(job, kind="http_503", message="HTTP 503"), ms, True)])
        else:
            q.settle_many([timed(q.done(job), ms)])
            done += 1
        trajectory.append((now, q.domains_info([DOMAIN])[0]))
        claim()
    return trajectory


def test_the_latency_bound_holds_the_limit_under_a_queueing_sites_refusals(
    make_queue: Callable[..., Queue],
) -> None:
    """Past its first refusal (slow start's overshoot, which no latency can show in time: the
    first queued answers come back when twice the capacity is in flight already) the limit
    stays under the refusals with room to spare, and the baseline near the site's latency.
    Before, the baseline (rising 1% an answer) followed our own queue to twice the site's
    latency, so the limit sat at 16, the edge of the refusals, for the rest of the run."""
    for seed in range(3):
        q = make_queue()
        q.client.flushall()
        q.enqueue_many([f"{SITE}/p/{i}" for i in range(400)])
        site = CapacitySite(K, LATENCY_MS, random.Random(seed))
        trajectory = drive(q, site, 400)
        late = [float(info["limit"]) for _, info in trajectory[len(trajectory) // 2 :]]
        baseline = float(trajectory[-1][1]["baseline_ms"])
        assert site.refused <= 0.01 * site.requests, (seed, site.refused, site.requests)
        assert statistics.median(late) <= 1.75 * K, (seed, statistics.median(late), baseline)
        assert max(late) <= 2 * K, (seed, max(late))
        assert baseline <= 1.5 * LATENCY_MS, (seed, baseline)


async def test_a_worker_on_a_queueing_site_keeps_the_baseline_at_the_sites_latency(
    make_async_queue: Callable[..., AsyncQueue],
) -> None:
    """The issue's site on loopback (fleet mode ``capacity``: 8 at once, 503 beyond 16, 50 ms)
    with a real worker: every page done, the breaker closed, few refusals (slow start's
    overshoot only; at most 5% here, the figure is bench/adaptive.py --issue21's), and the
    learned baseline at the end under 1.5 x the site's latency (before: 90-136 ms in 14 of
    15 runs, our own queue taken for the site's latency).

    The site's latency is the larger of its nominal 50 ms and what a probe saw of a twin site
    with room for every request, one request at a time, in the same run: on a machine loaded
    by the whole suite the fleet's process and this event loop answer later, and the learned
    baseline rightly follows (87 ms seen in one such run, 46-62 ms alone or beside 4-8 CPU
    hogs)."""
    pages = 400
    spec = SiteSpec("k8.example.com", Mode.CAPACITY, latency_ms=LATENCY_MS, capacity=K)
    twin = SiteSpec("twin.example.com", Mode.CAPACITY, latency_ms=LATENCY_MS, capacity=10_000)
    q = make_async_queue(allow_private=True, log_every=0)
    with Fleet([spec, twin], seed=11) as fleet:
        domain = f"127.0.0.1:{fleet.ports[spec.name]}"
        await q.enqueue_many([f"http://{domain}/p/{i}" for i in range(pages)])
        worker = Worker(q, burst=True, max_runtime=60, report=False, concurrency=200)
        run = asyncio.create_task(worker.run_async())
        probed = await _probe_while(run, f"http://127.0.0.1:{fleet.ports[twin.name]}/p/")
        await run
        seen = fleet.stats()[spec.name]
    (info,) = await q.domains_info([domain])
    refused = seen.statuses.get("503", 0)
    assert info["done"] == pages and info["state"] == "closed", info
    assert refused <= 0.05 * seen.requests, seen
    latency = max(LATENCY_MS, statistics.median(probed))
    assert info["baseline_ms"] <= 1.5 * latency, (info, statistics.median(probed))


async def _probe_while(run: asyncio.Task[Any], base: str) -> list[float]:
    """Milliseconds each request to ``base`` + n took, one at a time, while ``run`` runs."""
    took: list[float] = []
    async with aiohttp.ClientSession() as session:
        n = 0
        while not run.done() or len(took) < 5:
            started = time.monotonic()
            async with session.get(f"{base}{n}") as resp:
                await resp.read()
            took.append((time.monotonic() - started) * 1000)
            n += 1
    return took
