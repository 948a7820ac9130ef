"""Adaptive politeness: fixed per-domain limits against ``domain_concurrency = auto``.

Three loopback sites with a capacity model (``scrapeq.demo.fleet``, mode ``capacity``, in a
process of their own): each serves K requests at once at its base latency (lognormal around
``--latency`` ms, sigma 0.5); beyond K a request queues for a free slot, so its latency grows
with the queue; beyond 2K requests in the site it answers 503 at once, without Retry-After.
K = 2, 8 and 32, one site each. Nothing leaves 127.0.0.1.

For each site and setting (fixed 2, fixed 32, auto), one after the other, a flushed private
redis-server gets ``--pages`` jobs of that site, and one ``Worker(concurrency=200)`` (default
settings but the limit) works them until every job is done or dead, its breaker leaves closed
(it would wait out a cooldown), or ``--max-runtime`` passes. Reported per site and setting:
the seconds until its last job was done or dead, how many were done, its requests and the
share of them answered 503 (counted by the site), and its breaker's state at the end.
Then, per site, auto's time against the best fixed setting's (target: within 15%) and auto's
refused share (target: at most 1%).

Run: ``.venv/bin/python bench/adaptive.py [--quick] [--pages N] [--latency MS]
[--max-runtime S] [--limiter RUNS] [--issue21 RUNS] [--redis-server PATH]``.
``--quick``: 400 pages a site, 30 s at most a run (default 60 s). A site whose breaker trips
(fixed 32 on K = 2 and 8) does not finish within a run: its row says how many of its pages
were done when it stopped.

``--limiter RUNS``: instead, the rate limiter of ``tests/runtime/test_adaptive.py`` RUNS times (a
``limit`` site: a token bucket of 20 requests/s and a burst of 20, 503 without Retry-After,
latency 3 ms; 200 pages, ``Worker(q)`` and settings at their defaults): each run's seconds
and refused share against the issue's target, 200 pages within 1.5 x 200 / 20 = 15 s with at
most 5% of requests refused.

``--issue21 RUNS``: instead, issue 21's site RUNS times: K = 8 (503 beyond 16 requests in the
site), base latency 50 ms, 600 pages, ``domain_concurrency = auto`` and one
``Worker(concurrency=200)`` as above. Per run: seconds, requests, refused share (target: at
most 1%), and the learned limit and baseline at the end (the site's capacity is 8, its
refusals start past 16; a baseline near 2 x 50 ms means our own queue was taken for the
site's latency); then the median refused share and how many runs met the target.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from dataclasses import dataclass

from _redis import add_server_args, format_table, load_note, private_redis
from scrapeq import AsyncQueue, Settings
from scrapeq.demo.fleet import Fleet, Mode, SiteCounts, SiteSpec
from scrapeq.runtime.worker import Worker

CAPACITIES = (2, 8, 32)
SETTINGS: tuple[int | str, ...] = (2, 32, "auto")
LIMIT_RATE, LIMIT_PAGES = 20, 200
ISSUE21_K, ISSUE21_LATENCY, ISSUE21_PAGES = 8, 50.0, 600


@dataclass
class Figure:
    """One site under one setting."""

    seconds: float | None  # until its last job was done or dead; None: not within the run
    done: int
    requests: int
    refused: int
    state: str
    limit: float | None = None  # the learned limit at the end (auto)
    baseline_ms: float | None = None  # the learned baseline at the end (auto)

    @property
    def refused_share(self) -> float:
        return self.refused / self.requests if self.requests else 0.0


def _site(k: int, latency: float) -> SiteSpec:
    return SiteSpec(f"k{k}.example.com", Mode.CAPACITY, latency_ms=latency, capacity=k)


async def _fetch_all(
    url: str,
    fleet: Fleet,
    name: str,
    pages: int,
    settings: Settings,
    *,
    concurrency: int | None,
    max_runtime: float,
    stop_when_tripped: bool,
) -> Figure:
    """Fetch ``pages`` pages of site ``name`` alone with ``settings`` on a flushed Redis; stop
    when they are all done or dead, at ``max_runtime``, or (``stop_when_tripped``) when its
    breaker leaves closed (it would wait out a cooldown)."""
    q = AsyncQueue.from_url(url, settings=settings)
    await q.client.flushall()
    domain = f"127.0.0.1:{fleet.ports[name]}"
    await q.enqueue_many([f"http://{domain}/p/{i}" for i in range(pages)])
    before = fleet.stats()[name]
    sizing = {} if concurrency is None else {"concurrency": concurrency}
    worker = Worker(q, burst=True, max_runtime=max_runtime, report=False, **sizing)
    started = time.monotonic()
    task = asyncio.create_task(worker.run_async())
    seconds = None
    while True:
        (info,) = await q.domains_info([domain])
        if info["done"] + info["dead"] >= pages:
            seconds = time.monotonic() - started
            break
        if task.done() or (stop_when_tripped and info["state"] != "closed"):
            break
        await asyncio.sleep(0.02)
    worker.stop()
    await task
    seen: SiteCounts = fleet.stats()[name] - before
    (info,) = await q.domains_info([domain])
    await q.close()
    refused = seen.statuses.get("503", 0)
    return Figure(
        seconds, info["done"], seen.requests, refused, info["state"],
        info.get("limit"), info.get("baseline_ms"),
    )  # fmt: skip


async def _run(
    url: str, fleet: Fleet, conc: int | str, k: int, pages: int, max_runtime: float
) -> Figure:
    """Site K=k with one setting, by one ``Worker(concurrency=200)``."""
    settings = Settings(allow_private=True, domain_concurrency=conc, log_every=0)
    return await _fetch_all(
        url, fleet, _site(k, 0).name, pages, settings,
        concurrency=200, max_runtime=max_runtime, stop_when_tripped=True,
    )  # fmt: skip


async def _run_limiter(url: str, fleet: Fleet, spec: SiteSpec) -> Figure:
    """The rate-limiter test's run: LIMIT_PAGES pages, default settings and worker."""
    settings = Settings(allow_private=True, log_every=0)
    return await _fetch_all(
        url, fleet, spec.name, LIMIT_PAGES, settings,
        concurrency=None, max_runtime=3 * LIMIT_PAGES / LIMIT_RATE, stop_when_tripped=False,
    )  # fmt: skip


def limiter_runs(server_url: str, runs: int) -> int:
    """``--limiter``: the rate-limiter scenario ``runs`` times; 0 when every run met the target."""
    spec = SiteSpec("limited.example.com", Mode.LIMIT, latency_ms=3, rate=LIMIT_RATE)
    bar = 1.5 * LIMIT_PAGES / LIMIT_RATE
    rows: list[list[object]] = []
    ok = True
    with Fleet([spec], seed=3) as fleet:
        for i in range(runs):
            f = asyncio.run(_run_limiter(server_url, fleet, spec))
            good = f.seconds is not None and f.seconds <= bar and f.refused_share <= 0.05
            ok = ok and good and f.state == "closed"
            rows.append([f"{i + 1}", *_fmt(f, LIMIT_PAGES), "yes" if good else "NO"])
    print(format_table(["run", "seconds", "requests", "refused", "breaker", "target"], rows))
    print(f"target: {LIMIT_PAGES} pages within {bar:g} s, <= 5% refused; "
          f"{'PASS' if ok else 'FAIL'}")  # fmt: skip
    return 0 if ok else 1


def issue21_runs(server_url: str, runs: int, pages: int = ISSUE21_PAGES) -> int:
    """``--issue21``: issue 21's site ``runs`` times (``pages`` jobs each, 600 unless
    ``--pages``); 0 when every run refused at most 1%."""
    spec = _site(ISSUE21_K, ISSUE21_LATENCY)
    rows: list[list[object]] = []
    shares: list[float] = []
    with Fleet([spec], seed=11) as fleet:
        for i in range(runs):
            run = _run(server_url, fleet, "auto", ISSUE21_K, pages, 60.0 * pages / ISSUE21_PAGES)
            f = asyncio.run(run)
            shares.append(f.refused_share)
            good = f.seconds is not None and f.refused_share <= 0.01 and f.state == "closed"
            learned = [f"{f.limit:.1f}" if f.limit else "-",
                       f"{f.baseline_ms:.0f}" if f.baseline_ms else "-"]  # fmt: skip
            rows.append([f"{i + 1}", *_fmt(f, pages), *learned, "yes" if good else "NO"])
    print(format_table(
        ["run", "seconds", "requests", "refused", "breaker", "limit", "baseline ms", "target"],
        rows,
    ))  # fmt: skip
    met = sum(1 for r in rows if r[-1] == "yes")
    median = statistics.median(shares)
    print(f"target: <= 1% refused; median {100 * median:.2f}%, {met} of {runs} runs met it; "
          f"{'PASS' if met == runs else 'FAIL'}")  # fmt: skip
    return 0 if met == runs else 1


def _fmt(f: Figure, pages: int) -> list[str]:
    took = f"{f.seconds:.1f}" if f.seconds is not None else f"stopped ({f.done}/{pages} done)"
    return [took, f"{f.requests}", f"{100 * f.refused_share:.1f}%", f.state]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="400 pages a site, 30 s a run")
    parser.add_argument("--pages", type=int, default=None, help="jobs per site (2000)")
    parser.add_argument("--latency", type=float, default=20.0, help="base latency, ms (20)")
    parser.add_argument("--max-runtime", type=float, default=None, help="seconds a run (60)")
    parser.add_argument(
        "--limiter", type=int, default=0, metavar="RUNS",
        help="run the rate limiter of tests/runtime/test_adaptive.py RUNS times instead",
    )  # fmt: skip
    parser.add_argument(
        "--issue21", type=int, default=0, metavar="RUNS",
        help="run issue 21's site (K = 8, 50 ms, 600 pages, auto) RUNS times instead",
    )  # fmt: skip
    add_server_args(parser)
    args = parser.parse_args(argv)
    if args.limiter > 0:
        print(f"bench/adaptive.py --limiter: {LIMIT_PAGES} pages from a {LIMIT_RATE} "
              f"requests/s token bucket (burst {LIMIT_RATE}, 503 beyond), defaults; "
              f"{load_note()}")  # fmt: skip
        with private_redis(args.redis_server) as server:
            return limiter_runs(server.url, args.limiter)
    if args.issue21 > 0:
        print(f"bench/adaptive.py --issue21: {args.pages or ISSUE21_PAGES} pages from a site "
              f"serving {ISSUE21_K} at once (503 beyond {2 * ISSUE21_K}), base latency "
              f"{ISSUE21_LATENCY:g} ms, auto; {load_note()}")  # fmt: skip
        with private_redis(args.redis_server) as server:
            return issue21_runs(server.url, args.issue21, args.pages or ISSUE21_PAGES)
    pages = args.pages or (400 if args.quick else 2000)
    max_runtime = args.max_runtime or (30.0 if args.quick else 60.0)
    specs = [_site(k, args.latency) for k in CAPACITIES]
    print(f"bench/adaptive.py: {pages} pages a site, base latency {args.latency:g} ms, "
          f"sites K = {', '.join(map(str, CAPACITIES))}; {load_note()}")  # fmt: skip
    results: dict[int | str, dict[int, Figure]] = {conc: {} for conc in SETTINGS}
    with private_redis(args.redis_server) as server, Fleet(specs, seed=11) as fleet:
        for k in CAPACITIES:
            for conc in SETTINGS:
                run = _run(server.url, fleet, conc, k, pages, max_runtime)
                results[conc][k] = asyncio.run(run)
    headers = ["site", "setting", "seconds", "requests", "refused", "breaker"]
    rows: list[list[str]] = []
    for k in CAPACITIES:
        for conc in SETTINGS:
            rows.append([f"K={k}", f"{conc}", *_fmt(results[conc][k], pages)])
    print(format_table(headers, rows))
    verdict: list[list[str]] = []
    ok = True
    for k in CAPACITIES:
        fixed = [results[c][k].seconds for c in SETTINGS if c != "auto"]
        best = min((s for s in fixed if s is not None), default=None)
        auto = results["auto"][k]
        ratio = auto.seconds / best if auto.seconds is not None and best else None
        good = ratio is not None and ratio <= 1.15 and auto.refused_share <= 0.01
        ok = ok and good
        verdict.append([
            f"K={k}", f"{best:.1f}" if best else "-",
            f"{auto.seconds:.1f}" if auto.seconds else "-",
            f"{ratio:.2f}" if ratio else "-", f"{100 * auto.refused_share:.1f}%",
            "yes" if good else "NO",
        ])  # fmt: skip
    print()
    print(format_table(["site", "best fixed s", "auto s", "auto/best", "auto refused", "target"],
                       verdict))  # fmt: skip
    print("targets: auto within 15% of the best fixed setting's time, <= 1% refused")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
