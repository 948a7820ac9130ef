"""Adaptive politeness against real loopback sites (demo/fleet.py's ``limit`` and
``capacity`` modes, in their own process) and a real redis-server."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from scrapeq import AsyncQueue, Queue, Settings
from scrapeq.demo.fleet import Fleet, Mode, SiteSpec
from scrapeq.engine.lua.scripts import Settlement
from scrapeq.engine.model.job import Job
from scrapeq.engine.model.urls import politeness_key
from scrapeq.runtime.fetch import Fetcher, StaticResolver
from scrapeq.runtime.sinks import JsonlSink
from scrapeq.runtime.worker import Worker
from support.sites import sites, status

_BIN = Path(sys.executable).parent / "scrapeq"
SCRAPEQ = str(_BIN) if _BIN.exists() else (shutil.which("scrapeq") or "scrapeq")
SITE = "http://shop.example.com"
DOMAIN = "shop.example.com"


@pytest.fixture
async def make_async(redis_url: str) -> AsyncIterator[Callable[..., AsyncQueue]]:
    made: list[AsyncQueue] = []

    def make(**overrides: Any) -> AsyncQueue:
        q = AsyncQueue.from_url(redis_url, settings=Settings(allow_private=True, **overrides))
        made.append(q)
        return q

    yield make
    for q in made:
        await q.close()


async def run_until_settled(
    worker: Worker, q: AsyncQueue, total: int, timeout: float
) -> float | None:
    """Run ``worker`` until ``total`` jobs are done or dead (answers the seconds it took) or
    ``timeout`` passes (answers None); the worker is stopped either way."""
    task = asyncio.create_task(worker.run_async())
    started = time.monotonic()
    try:
        while not task.done() and time.monotonic() < started + timeout:
            counts = (await q.status())["counts"]
            if counts["done"] + counts["dead"] >= total:
                return time.monotonic() - started
            await asyncio.sleep(0.05)
        return None
    finally:
        worker.stop()
        await asyncio.wait_for(task, 30)


RATE, PAGES = 20, 200


async def test_a_rate_limited_site_is_slowed_down_not_condemned(
    make_async: Callable[..., AsyncQueue],
) -> None:
    """Default settings against a server allowing RATE requests/s and answering 503 without
    Retry-After beyond: PAGES pages within 1.5 x PAGES/RATE seconds, at most 5% refused."""
    spec = SiteSpec("limited.example.com", Mode.LIMIT, latency_ms=3, rate=RATE)
    q = make_async()
    with Fleet([spec], seed=3) as fleet:
        base = f"http://127.0.0.1:{fleet.ports[spec.name]}"
        await q.enqueue_many([f"{base}/p/{i}" for i in range(PAGES)])
        took = await run_until_settled(Worker(q), q, PAGES, timeout=3 * PAGES / RATE)
        seen = fleet.stats()[spec.name]
    info = (await q.domains_info([f"127.0.0.1:{fleet.ports[spec.name]}"]))[0]
    refused = seen.statuses.get("503", 0)
    assert info["state"] == "closed", f"the breaker must not trip: {info}"
    assert info["done"] == PAGES, (info, seen)
    assert took is not None and took <= 1.5 * PAGES / RATE, (took, seen)
    assert refused <= 0.05 * seen.requests, seen


# --- the limit, settled by hand (engine) ------------------------------------------------------


def timed(s: Settlement, ms: int, overload: bool = False) -> Settlement:
    return dataclasses.replace(s, latency_ms=ms, overload=overload)


def info(q: Queue) -> dict[str, Any]:
    return q.domains_info([DOMAIN])[0]  # type: ignore[no-any-return]


def answer_all(q: Queue, ms: int, rounds: int) -> list[int]:
    """Claim what the domain allows and answer every job in ``ms``, ``rounds`` times;
    answers how many jobs each claim took."""
    taken = []
    for _ in range(rounds):
        jobs = q.claim(100).jobs
        taken.append(len(jobs))
        q.settle_many([timed(q.done(j), ms) for j in jobs])
    return taken


def refuse(q: Queue, jobs: list[Job], ms: int = 5) -> list[str]:
    """Answer ``jobs`` with a fast 503 without Retry-After (an overload signal)."""
    return q.settle_many(
        [timed(q.retrying(j, kind="http_503", message="HTTP 503"), ms, True) for j in jobs]
    )


def test_the_limit_rises_on_a_fast_site_up_to_its_bound(make_queue: Callable[..., Queue]) -> None:
    q = make_queue(domain_concurrency_max=12)
    q.enqueue_many([f"{SITE}/p/{i}" for i in range(400)])
    assert info(q)["adaptive"] and info(q)["concurrency"] == 2
    taken = answer_all(q, 300, 12)
    assert taken[0] == 2 and taken[1] > 2, taken
    assert max(taken) == 12 and info(q)["concurrency"] == 12, "at most domain_concurrency_max"
    got = info(q)
    assert got["limit"] == 12 and got["baseline_ms"] == 300 and got["latency_ms"] == 300


def test_slow_start_doubles_the_limit_each_round_trip(make_queue: Callable[..., Queue]) -> None:
    """A site answering in 50 ms (past the ramp scale, 40 ms): +1 an answer while half the limit
    is in use (a settle batch answers a whole round against one in-flight count), so each
    round of claims doubles it, up to domain_concurrency_max."""
    q = make_queue()
    q.enqueue_many([f"{SITE}/p/{i}" for i in range(400)])
    assert answer_all(q, 50, 6) == [2, 4, 8, 16, 32, 32]


def test_after_a_refusal_the_limit_stays_under_it_until_a_probe(
    make_queue: Callable[..., Queue],
) -> None:
    """An overload signal at limit L leaves a ceiling of L - 1: the limit grows back to it and
    stays there (no refusal every few round trips) until 1,000 answers passed without a
    decrease; then it probes past it."""
    q = make_queue()
    q.enqueue_many([f"{SITE}/p/{i}" for i in range(4000)])
    while info(q)["concurrency"] < 16:
        answer_all(q, 50, 1)
    jobs = q.claim(100).jobs
    ceiling = len(jobs) - 1
    slow_503 = timed(q.retrying(jobs[0], kind="http_503", message="HTTP 503"), 400, True)
    q.settle_many([slow_503] + [timed(q.done(j), 50) for j in jobs[1:]])
    assert info(q)["concurrency"] < ceiling, "halved (and grown by the answers settled with it)"
    answers = 0
    while answers < 900:  # back up to the ceiling, then held there
        taken = answer_all(q, 50, 1)[0]
        answers += taken
        assert taken <= ceiling, (answers, taken)
    assert info(q)["concurrency"] == ceiling
    while answers < 1300 and info(q)["concurrency"] == ceiling:
        answers += answer_all(q, 50, 1)[0]
    assert info(q)["concurrency"] > ceiling, "past 1,000 answers the ceiling is probed"


def test_the_interval_follows_the_rate_let_through_since_answering_began(
    make_queue: Callable[..., Queue],
) -> None:
    """At the minimum limit, a refusal spaces the starts by 1.5 x the ms per request the site
    let through since the streak of answers began (a token bucket empty at both ends lets
    exactly its rate through): here 10 answers in about 1 s, so about 150 ms, even though
    the streak began in the middle of a second (the answers of that partial second are not
    the site's rate)."""
    q = make_queue()
    q.enqueue_many([f"{SITE}/p/{i}" for i in range(100)])
    answer_all(q, 3, 1)
    refuse(q, q.claim(100).jobs, ms=3)  # a rate limiter at the door: the minimum, an interval
    assert info(q)["concurrency"] == 1 and info(q)["interval_ms"] > 0
    q.testing_clock_offset_ms += 10_000  # a silence: the next answer begins a new streak
    seconds, micros = q.client.time()
    now = int(seconds) * 1000 + int(micros) // 1000 + q.testing_clock_offset_ms
    q.testing_clock_offset_ms += (500 - now % 1000) % 1000  # the streak begins at x.500
    for _ in range(10):
        (job,) = q.claim(1).jobs
        q.settle_many([timed(q.done(job), 3)])
        q.testing_clock_offset_ms += 101
    refuse(q, q.claim(1).jobs, ms=3)
    got = info(q)
    assert got["concurrency"] == 1
    assert 135 <= got["interval_ms"] <= 170, got


def test_latency_past_the_baseline_lowers_the_limit(make_queue: Callable[..., Queue]) -> None:
    q = make_queue()
    q.enqueue_many([f"{SITE}/p/{i}" for i in range(400)])
    answer_all(q, 300, 4)
    high = info(q)["limit"]
    answer_all(q, 3000, 4)  # ten times the no-load latency: the site is queueing us
    assert info(q)["limit"] < high
    assert info(q)["state"] == "closed"


def test_a_503_burst_cuts_the_limit_then_spaces_the_starts_without_tripping(
    make_queue: Callable[..., Queue],
) -> None:
    q = make_queue(breaker_failures=3)
    q.enqueue_many([f"{SITE}/p/{i}" for i in range(400)])
    answer_all(q, 300, 5)
    assert info(q)["concurrency"] > 4
    for _ in range(4):  # every request refused at once, each claim after the last cut
        jobs = q.claim(100).jobs
        assert jobs and all(s == "throttled" for s in refuse(q, jobs)), "no attempt spent"
        q.testing_clock_offset_ms += 2_000
    got = info(q)
    assert got["concurrency"] == 1 and got["interval_ms"] > 0, got
    assert got["state"] == "closed", "refusals of a site that answered are not failures"
    assert q.status()["counts"]["dead"] == 0


def test_a_limit_stays_within_its_bounds(make_queue: Callable[..., Queue]) -> None:
    q = make_queue(domain_concurrency_min=3, domain_concurrency_max=4)
    q.enqueue_many([f"{SITE}/p/{i}" for i in range(400)])
    answer_all(q, 300, 6)
    assert info(q)["concurrency"] == 4
    for _ in range(4):
        refuse(q, q.claim(100).jobs)
        q.testing_clock_offset_ms += 1_000
    assert info(q)["concurrency"] == 3
    assert len(q.claim(100).jobs) <= 3


def test_refusals_count_against_the_breaker_only_at_the_floor(
    make_queue: Callable[..., Queue],
) -> None:
    """A site that answers one request in two and refuses the other: the refusals are
    excused while the rate comes down; near the floor (one start every few seconds at the
    minimum limit) they count, and its breaker trips on the failure rate."""
    q = make_queue()
    q.enqueue_many([f"{SITE}/p/{i}" for i in range(400)])
    answer_all(q, 300, 2)
    for _ in range(200):
        if info(q)["state"] != "closed":
            break
        before = info(q)
        (job,) = q.claim(1).jobs or [None]
        if job is not None:
            q.settle_many([timed(q.done(job), 300)])
        q.testing_clock_offset_ms += 4_100
        jobs = q.claim(1).jobs
        refuse(q, jobs)
        counted = "1" in info(q)["window"]
        assert not counted or before["interval_ms"] * 1.5 >= 4000, (before, info(q))
        q.testing_clock_offset_ms += 4_100
    assert info(q)["state"] == "open", info(q)


def test_a_dead_site_trips_after_as_many_attempts_as_with_a_fixed_limit(
    make_queue: Callable[..., Queue],
) -> None:
    """A site that never answered gets no excuse: breaker_failures refusals trip it."""
    for conc in ("auto", 2):
        q = make_queue(breaker_failures=3, domain_concurrency=conc, queue=f"dead{conc}")
        q.enqueue_many([f"{SITE}/p/{i}" for i in range(20)])
        attempts = 0
        while info(q)["state"] == "closed":
            jobs = q.claim(1).jobs
            assert jobs, "claimable until it trips"
            attempts += 1
            refuse(q, jobs, ms=30_000)  # a timeout: an overload signal
        assert attempts == 3, (conc, attempts)


def test_domain_set_switches_a_domain_between_auto_and_a_number(
    make_queue: Callable[..., Queue],
) -> None:
    q = make_queue(domain_concurrency=5)
    q.enqueue_many([f"{SITE}/p/{i}" for i in range(40)])
    assert info(q)["adaptive"] is False and info(q)["limit"] is None
    got = q.domain_set(DOMAIN, concurrency="auto")
    assert got["adaptive"] is True and got["concurrency"] == 5
    answer_all(q, 300, 2)
    assert info(q)["adaptive"] and info(q)["limit"] > 5
    assert q.domain_set(DOMAIN, concurrency=3)["adaptive"] is False
    assert len(q.claim(100).jobs) == 3


# --- workers ----------------------------------------------------------------------------------


async def test_a_dead_site_trips_as_fast_with_auto_as_with_a_fixed_limit(
    make_async: Callable[..., AsyncQueue],
) -> None:
    fetches = {}
    for conc in ("auto", 2):
        q = make_async(
            domain_concurrency=conc, breaker_failures=3, backoff_base=0.05, backoff_cap=0.2,
            queue=f"dead{conc}",
        )  # fmt: skip
        async with sites(status(503)) as (dead,):
            await q.enqueue_many([dead.url(f"/p/{i}") for i in range(20)])
            worker = Worker(q, report=False)
            task = asyncio.create_task(worker.run_async())
            deadline = time.monotonic() + 15
            while (await q.domains_info([dead.domain]))[0]["state"] == "closed":
                assert time.monotonic() < deadline, "the dead site never tripped"
                await asyncio.sleep(0.02)
            worker.stop()
            await asyncio.wait_for(task, 30)
            fetches[conc] = dead.total
    assert fetches["auto"] <= fetches[2] <= 4, fetches


def test_two_worker_processes_share_one_learned_limit(redis_url: str, tmp_path: Path) -> None:
    """Two processes against one rate limiter: the limit lives in Redis, so the pair is as
    polite as one worker (a limit per process would be refused about twice as often)."""
    spec = SiteSpec("limited.example.com", Mode.LIMIT, latency_ms=3, rate=RATE)
    q = Queue.from_url(redis_url, settings=Settings(allow_private=True))
    env = {k: os.environ[k] for k in ("PATH", "HOME") if k in os.environ}
    try:
        with Fleet([spec], seed=5) as fleet:
            base = f"http://127.0.0.1:{fleet.ports[spec.name]}"
            q.enqueue_many([f"{base}/p/{i}" for i in range(PAGES)])
            proc = subprocess.run(
                [SCRAPEQ, "--redis", redis_url, "worker", "--allow-private", "--processes",
                 "2", "--burst", "--max-runtime", str(3 * PAGES / RATE)],
                env=env, cwd=tmp_path, stdin=subprocess.DEVNULL, capture_output=True,
                timeout=60,
            )  # fmt: skip
            seen = fleet.stats()[spec.name]
        assert proc.returncode == 0, proc.stderr.decode()[-2000:]
        got = q.domains_info([f"127.0.0.1:{fleet.ports[spec.name]}"])[0]
        assert got["done"] == PAGES and got["state"] == "closed", got
        assert seen.statuses.get("503", 0) <= 0.08 * seen.requests, seen
    finally:
        q.close()


# --- the politeness key -----------------------------------------------------------------------


async def test_politeness_ip_files_a_host_under_its_address_after_its_first_fetch(
    make_async: Callable[..., AsyncQueue],
) -> None:
    q = make_async(politeness="ip")
    resolver = StaticResolver({"www.a.test": "127.0.0.1", "www.b.test": "127.0.0.1"})
    async with sites(status(200)) as (site,):

        def urls(host: str, n: int) -> list[str]:
            return [f"http://{host}:{site.port}/p/{i}" for i in range(n)]

        await q.enqueue_many(urls("www.a.test", 1) + urls("www.b.test", 1))
        before = sorted(i["domain"] for i in await q.domains_info())
        assert before == [f"www.a.test:{site.port}", f"www.b.test:{site.port}"]
        fetcher = Fetcher(q.settings, resolver=resolver)
        worker = Worker(q, fetcher=fetcher, burst=True, report=False)
        await asyncio.wait_for(worker.run_async(), 30)
        await fetcher.close()
        assert site.total == 2
        await q.enqueue_many(urls("www.a.test", 3) + urls("www.b.test", 3))
        jobs = (await q.claim(100)).jobs
    assert {j.domain for j in jobs} == {"ip:127.0.0.1"}, "both hosts joined one group"
    assert len(jobs) == 2, "one limit for the group (it starts at 2)"
    assert await q.host_group(f"www.a.test:{site.port}", "10.0.0.1") == "ip:127.0.0.1"


def test_politeness_domain_groups_hosts_by_registrable_domain() -> None:
    assert politeness_key("www.shop.co.uk", "domain") == "shop.co.uk"
    assert politeness_key("img.shop.co.uk", "domain") == "shop.co.uk"
    assert politeness_key("a.blogspot.com", "domain") == "a.blogspot.com"
    assert politeness_key("b.blogspot.com", "domain") == "b.blogspot.com"
    assert politeness_key("www.shop.co.uk:8080", "domain") == "shop.co.uk:8080"
    assert politeness_key("[::1]:8080", "domain") == "[::1]:8080"
    assert politeness_key("www.shop.co.uk", "host") == "www.shop.co.uk"


def test_with_politeness_domain_two_hosts_share_one_limit_and_one_breaker(
    make_queue: Callable[..., Queue],
) -> None:
    q = make_queue(politeness="domain", domain_concurrency=2, breaker_failures=2)
    q.enqueue_many(
        [f"http://{h}.shop.co.uk/p/{i}" for i in range(4) for h in ("www", "img")]
        + [f"http://{h}.blogspot.com/p/{i}" for i in range(4) for h in ("a", "b")]
    )
    jobs = q.claim(100).jobs
    by_key: dict[str, list[Job]] = {}
    for j in jobs:
        by_key.setdefault(j.domain, []).append(j)
    assert {k: len(v) for k, v in by_key.items()} == {
        "shop.co.uk": 2, "a.blogspot.com": 2, "b.blogspot.com": 2,
    }  # fmt: skip
    assert all(j.url.startswith(("http://www.", "http://img.")) for j in by_key["shop.co.uk"])
    q.settle_many([q.retrying(j, kind="http_500") for j in by_key["shop.co.uk"]])
    infos = {i["domain"]: i for i in q.domains_info()}
    assert infos["shop.co.uk"]["state"] == "open", "one breaker for the whole group"
    assert infos["a.blogspot.com"]["state"] == "closed"


async def test_a_results_line_names_the_host_not_the_group(
    make_async: Callable[..., AsyncQueue], tmp_path: Path
) -> None:
    q = make_async(politeness="domain")
    resolver = StaticResolver({"www.shop.test": "127.0.0.1", "img.shop.test": "127.0.0.1"})
    out = tmp_path / "results.jsonl"
    async with sites(status(200)) as (site,):
        await q.enqueue_many([f"http://{h}.shop.test:{site.port}/p" for h in ("www", "img")])
        fetcher = Fetcher(q.settings, resolver=resolver)
        worker = Worker(q, fetcher=fetcher, sink=JsonlSink(out), burst=True, report=False)
        await asyncio.wait_for(worker.run_async(), 30)
        await fetcher.close()
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(r["domain"] for r in lines) == [
        f"img.shop.test:{site.port}", f"www.shop.test:{site.port}",
    ]  # fmt: skip
    assert [i["domain"] for i in await q.domains_info()] == [f"shop.test:{site.port}"]


async def test_an_excused_refusal_on_a_last_attempt_writes_no_dead_line(
    make_async: Callable[..., AsyncQueue], tmp_path: Path
) -> None:
    """max_attempts = 1: every refusal is a last attempt. The settle script excuses those of a
    site slowing us down (the job is queued again), so the results hold one line per job, and
    a line says dead only for a job the queue holds as dead."""
    spec = SiteSpec("limited.example.com", Mode.LIMIT, latency_ms=3, rate=10)
    q = make_async(max_attempts=1)
    out = tmp_path / "results.jsonl"
    pages = 40
    with Fleet([spec], seed=5) as fleet:
        base = f"http://127.0.0.1:{fleet.ports[spec.name]}"
        await q.enqueue_many([f"{base}/p/{i}" for i in range(pages)])
        worker = Worker(q, sink=JsonlSink(out))
        took = await run_until_settled(worker, q, pages, timeout=30)
        refused = fleet.stats()[spec.name].statuses.get("503", 0)
    assert took is not None
    assert refused > 0, "the site must have refused some requests for this test to mean much"
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    ids = [line["id"] for line in lines]
    assert len(ids) == len(set(ids)) == pages, "one line per job"
    dead_lines = {line["id"] for line in lines if line["outcome"] == "dead"}
    assert dead_lines == {job.id for job in await q.dead_letters(limit=pages)}


def test_a_site_of_varied_latency_is_not_held_at_one_request(
    make_queue: Callable[..., Queue],
) -> None:
    """A shop answering in ~400 ms whose first answers came in 100 ms: its average runs past
    twice the baseline, which cuts the limit to one request; the answers of a request alone
    in flight then tell the no-load latency, and the limit grows again (it stayed at one for
    as long as the baseline's 1% an answer drift took: 30 s in the incident's fleet)."""
    q = make_queue()
    q.enqueue_many([f"{SITE}/p/{i}" for i in range(400)])

    def rounds(ms: int, n: int) -> list[int]:
        taken = []
        for _ in range(n):
            jobs = q.claim(100).jobs
            taken.append(len(jobs))
            q.testing_clock_offset_ms += ms  # the answers come ms after the claim
            q.settle_many([timed(q.done(j), ms) for j in jobs])
        return taken

    rounds(100, 2)
    rounds(400, 6)
    assert info(q)["concurrency"] == 1, info(q)
    taken = rounds(400, 8)
    assert max(taken) > 1 and info(q)["concurrency"] > 1, (taken, info(q))
    assert info(q)["baseline_ms"] >= 400 / 1.5 - 1
