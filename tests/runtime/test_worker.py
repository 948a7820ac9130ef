"""The worker against real loopback sites and a real redis-server: every fault settles right."""

from __future__ import annotations

import asyncio
import gc
import json
import math
import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from scrapeq import AsyncQueue, Permanent, Queue, Request, Retry, Settings
from scrapeq.engine.lua.scripts import Settled, Settlement
from scrapeq.engine.model.job import Job
from scrapeq.engine.server.launcher import free_port
from scrapeq.runtime import attempt as attempt_module
from scrapeq.runtime import shutdown as shutdown_module
from scrapeq.runtime import worker as worker_module
from scrapeq.runtime.fetch import Fetcher, StaticResolver
from scrapeq.runtime.sinks import CallableSink, JsonlSink
from scrapeq.runtime.worker import GC_THRESHOLD, IDLE_MAX, Worker, tuned_gc
from support.sites import drip, hang, ok, proxy, sites, slow, status
from support.waiting import until

pytestmark = pytest.mark.backends

FAST = dict(
    allow_private=True,
    backoff_base=0.05,
    backoff_cap=0.2,
    request_timeout=2.0,
    breaker_failures=3,
    domain_concurrency=1,
)


@pytest.fixture
def make_queue(make_async_queue: Callable[..., AsyncQueue]) -> Callable[..., AsyncQueue]:
    """conftest's async queues, with the FAST settings unless a test overrides them."""
    return lambda **overrides: make_async_queue(**{**FAST, **overrides})


async def run_until(worker: Worker, done: Callable[[], Any], timeout: float = 15.0) -> None:
    """Run the worker until ``await done()`` is true, then stop it and wait for it."""
    task = asyncio.create_task(worker.run_async())
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if task.done():
                break
            if await done():
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("condition not reached in time")
    finally:
        worker.stop()
        await asyncio.wait_for(task, 30)


def counts_of(q: AsyncQueue) -> Callable[[], Any]:
    async def counts() -> dict[str, int]:
        return (await q.status())["counts"]

    return counts


async def settled(q: AsyncQueue, total: int) -> bool:
    c = (await q.status())["counts"]
    return c["done"] + c["dead"] == total


async def run_for(worker: Worker, done: Callable[[], Any], timeout: float) -> float | None:
    """Run the worker until ``await done()`` is true or ``timeout`` seconds pass, then stop
    it; answers the seconds it took to reach the condition (not counting the stop), or None."""
    task = asyncio.create_task(worker.run_async())
    started = time.monotonic()
    try:
        while not task.done() and time.monotonic() < started + timeout:
            if await done():
                return time.monotonic() - started
            await asyncio.sleep(0.02)
        return None
    finally:
        worker.stop()
        await asyncio.wait_for(task, 30)


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


async def test_healthy_site_every_job_done_and_results_written(
    make_queue: Callable[..., AsyncQueue], tmp_path: Path
) -> None:
    q = make_queue(domain_concurrency=4)
    results = tmp_path / "out" / "results.jsonl"
    async with sites(ok) as (site,):
        await q.enqueue_many([site.url(f"/p/{i}") for i in range(30)])
        worker = Worker(q, concurrency=20, sink=JsonlSink(results), burst=True)
        await asyncio.wait_for(worker.run_async(), 30)
    assert site.total == 30
    rows = lines(results)
    assert len(rows) == 30
    assert {r["outcome"] for r in rows} == {"done"}
    assert set(rows[0]) == {
        "id",
        "url",
        "domain",
        "lane",
        "outcome",
        "status",
        "attempts",
        "elapsed_ms",
        "bytes",
        "finished_at",
        "error",
        "result",
        "depth",  # links followed from a seed (0: a seed), added for crawls
        "parent",
        "meta",  # the request's meta (issue 23), null for a plain GET
        "final_url",  # issue 24: the URL fetched in the end (after redirects)
        "parent_url",  # issue 24: the linking job's URL (None for a seed)
        "crawl_id",  # issue 38: the crawl the line belongs to (crawl --new starts another)
    }
    assert rows[0]["crawl_id"] and len({r["crawl_id"] for r in rows}) == 1
    assert rows[0]["status"] == 200 and rows[0]["attempts"] == 1 and rows[0]["bytes"] > 0
    assert (await q.status())["counts"]["done"] == 30


@pytest.mark.parametrize("code", [404, 410, 451])
async def test_permanent_status_dead_letters_at_once_without_tripping(
    make_queue: Callable[..., AsyncQueue], code: int
) -> None:
    q = make_queue()
    async with sites(status(code)) as (site,):
        await q.enqueue_many([site.url(f"/gone/{i}") for i in range(6)])
        await asyncio.wait_for(Worker(q, burst=True).run_async(), 30)
        info = (await q.domains_info([site.domain]))[0]
    assert site.total == 6, "each page fetched once, never retried"
    assert info["state"] == "closed" and info["dead"] == 6
    dead = await q.dead_letters()
    assert {d.dead_reason for d in dead} == {f"http_{code}"}


@pytest.mark.parametrize(
    "handler,timeout",
    [(status(503), 2.0), (status(500), 2.0), (hang, 0.3), (drip, 0.5)],
    ids=["503", "500", "hang", "slow-drip"],
)
async def test_failing_site_trips_within_breaker_failures_fetches(
    make_queue: Callable[..., AsyncQueue], handler: Any, timeout: float
) -> None:
    q = make_queue(request_timeout=timeout)
    async with sites(handler, ok) as (bad, good):
        await q.enqueue_many([bad.url(f"/p/{i}") for i in range(20)])
        await q.enqueue_many([good.url(f"/p/{i}") for i in range(10)])
        worker = Worker(q, concurrency=10)

        async def tripped_and_good_done() -> bool:
            info = await q.domains_info([bad.domain, good.domain])
            return info[0]["state"] == "open" and info[1]["done"] == 10

        started = time.monotonic()
        await run_until(worker, tripped_and_good_done)
        elapsed = time.monotonic() - started
    assert bad.total == 3, "the breaker opens after breaker_failures fetches"
    assert good.total == 10
    assert elapsed < 3 * timeout + 5
    left = (await q.domains_info([bad.domain]))[0]
    assert left["ready"] + left["delayed"] == 20, "the bad domain's jobs wait, none lost"


async def test_429_with_retry_after_seconds_parks_the_domain_and_spends_no_attempt(
    make_queue: Callable[..., AsyncQueue],
) -> None:
    q = make_queue()
    calls = 0

    async def limited(request: web.Request) -> web.StreamResponse:
        nonlocal calls
        calls += 1
        if calls == 1:
            return web.Response(status=429, headers={"Retry-After": "1"})
        return web.Response(text="fine")

    async with sites(limited) as (site,):
        (_res,) = await q.enqueue_many([site.url("/x")])
        started = time.monotonic()
        await asyncio.wait_for(Worker(q, burst=True).run_async(), 30)
        elapsed = time.monotonic() - started
    assert calls == 2
    assert elapsed >= 0.9, "the retry waited for Retry-After"
    assert (await q.status())["counts"]["done"] == 1


async def test_503_with_http_date_retry_after_is_a_throttle(
    make_queue: Callable[..., AsyncQueue], tmp_path: Path
) -> None:
    q = make_queue()
    calls = 0

    async def unavailable(request: web.Request) -> web.StreamResponse:
        nonlocal calls
        calls += 1
        if calls == 1:
            when = datetime.now(tz=UTC) + timedelta(seconds=2)
            return web.Response(status=503, headers={"Retry-After": format_datetime(when, True)})
        return web.Response(text="back")

    results = tmp_path / "r.jsonl"
    async with sites(unavailable) as (site,):
        await q.enqueue(site.url("/x"))
        started = time.monotonic()
        await asyncio.wait_for(Worker(q, burst=True, sink=JsonlSink(results)).run_async(), 30)
        elapsed = time.monotonic() - started
    assert calls == 2 and elapsed >= 0.9
    (row,) = lines(results)
    assert row["outcome"] == "done" and row["attempts"] == 1, "a throttle spends no attempt"


async def test_redirect_loop_and_oversized_body_fail_permanently(
    make_queue: Callable[..., AsyncQueue],
) -> None:
    q = make_queue(max_body=1000, max_redirects=3)

    async def loop(request: web.Request) -> web.StreamResponse:
        raise web.HTTPFound("/again")

    async def big(request: web.Request) -> web.StreamResponse:
        return web.Response(body=b"x" * 5000)

    async with sites(loop, big) as (looping, huge):
        await q.enqueue(looping.url("/start"))
        await q.enqueue(huge.url("/big"))
        await asyncio.wait_for(Worker(q, burst=True).run_async(), 30)
    reasons = {d.domain: d.dead_reason for d in await q.dead_letters()}
    assert reasons == {looping.domain: "redirect_loop", huge.domain: "body_too_large"}
    assert looping.total == 4, "first request plus max_redirects hops"


async def test_a_304_to_a_plain_get_is_the_sites_failure_and_no_page(
    make_queue: Callable[..., AsyncQueue], tmp_path: Path
) -> None:
    """A 304 answers only a conditional request (issue 38, item 13): to a plain GET it is no
    page, so the handler never runs on its empty body; the job fails as ``http_304`` (one
    fetch, not retried, like the other statuses a page cannot answer). A request the job
    itself makes conditional (its own If-None-Match) is answered by a 304 as it asked: the
    handler sees that answer."""
    q = make_queue()
    handled: list[tuple[str, int]] = []

    def handler(job: Job, response: Any) -> Any:
        handled.append((job.url, response.status))
        return len(response.body)

    results = tmp_path / "results.jsonl"
    async with sites(status(304, ETag='"v1"')) as (site,):
        await q.enqueue_many([site.url(f"/p/{i}") for i in range(3)])
        asked = Request(site.url("/asked"), headers={"If-None-Match": '"v1"'})
        await q.enqueue(asked)
        worker = Worker(q, handler=handler, sink=JsonlSink(results), burst=True)
        await asyncio.wait_for(worker.run_async(), 30)
        info = (await q.domains_info([site.domain]))[0]
    assert handled == [(site.url("/asked"), 304)], "no handler on an unasked 304"
    assert site.total == 4, "each page fetched once: not retried"
    dead = await q.dead_letters()
    assert sorted(d.url for d in dead) == [site.url(f"/p/{i}") for i in range(3)]
    assert {d.dead_reason for d in dead} == {"http_304"}
    assert info["state"] == "closed" and info["dead"] == 3
    rows = {r["url"]: r for r in lines(results)}
    assert rows[site.url("/asked")]["outcome"] == "done"
    for i in range(3):
        row = rows[site.url(f"/p/{i}")]
        assert row["outcome"] == "dead" and row["status"] == 304 and row["result"] is None
        assert row["error"].startswith("http_304: ") and "not conditional" in row["error"]


async def test_connection_refused_is_retried_and_counts_against_the_domain(
    make_queue: Callable[..., AsyncQueue],
) -> None:
    q = make_queue(max_attempts=2, breaker_failures=10)
    async with sites(ok) as (site,):
        url = site.url("/x")
    await q.enqueue(url)  # the site is gone: nothing listens on its port
    await asyncio.wait_for(Worker(q, burst=True).run_async(), 30)
    (dead,) = await q.dead_letters()
    assert dead.dead_reason == "max_attempts" and dead.attempts == 2
    assert {e.kind for e in dead.errors} == {"connection_error"}


async def test_proxy_down_is_ours_no_attempt_spent_no_breaker_charge(
    make_queue: Callable[..., AsyncQueue],
) -> None:
    async with sites(ok) as (dead_proxy,):
        proxy = dead_proxy.base
    q = make_queue(proxy=(proxy,))
    async with sites(ok) as (site,):
        (res,) = await q.enqueue_many([site.url("/x")])
        worker = Worker(q)

        async def released_once() -> bool:
            job = await q.get_job(res.id)
            return job is not None and job.token >= 2

        await run_until(worker, released_once, timeout=20)
    job = await q.get_job(res.id)
    assert job is not None
    assert site.total == 0
    info = (await q.domains_info([site.domain]))[0]
    assert info["consecutive_failures"] == 0 and info["state"] == "closed"
    assert job.attempts <= 1, "releases spend no attempt"


async def test_our_faults_spend_the_release_budget_and_end_dead(
    make_queue: Callable[..., AsyncQueue], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(attempt_module, "OURS_PAUSE", 0.05)  # the worker's pause, not the point
    q = make_queue(proxy=(f"http://127.0.0.1:{free_port()}",), max_releases=2)
    records: list[dict[str, Any]] = []
    async with sites(ok) as (site,):
        await q.enqueue(site.url("/x"))

        async def dead() -> bool:
            return (await q.status())["counts"]["dead"] == 1

        assert await run_for(Worker(q, sink=CallableSink(records.append)), dead, timeout=15)
    (job,) = await q.dead_letters()
    assert (job.dead_reason, job.releases, job.attempts) == ("max_releases", 3, 0)
    assert [e.kind for e in job.errors] == ["released:proxy_error"] * 3
    assert "ClientProxyConnectionError" in job.errors[-1].message
    assert site.total == 0
    info = (await q.domains_info([site.domain]))[0]
    assert info["consecutive_failures"] == 0, "our proxy failing is not the site's fault"
    assert [r["outcome"] for r in records] == ["dead"]


async def test_a_handler_signal_that_cannot_be_settled_retries_to_a_bounded_end(
    make_queue: Callable[..., AsyncQueue],
) -> None:
    """Issue 10: a Retry whose delay could not be scheduled (``Retry(delay=inf)``, refused
    since) made building the settlement fail; the job was released with no backoff and no
    budget and went round and round (1,283 claim-fetch-release cycles in 8 s)."""
    q = make_queue(max_attempts=3)

    async def handler(job: Any, response: Any) -> Any:
        signal = Retry(reason="not yet rendered")
        signal.delay = math.inf  # what Retry(delay=inf) carried before it was refused
        raise signal

    async def dead() -> bool:
        return (await q.status())["counts"]["dead"] == 1

    async with sites(ok) as (site,):
        await q.enqueue(site.url("/x"))
        reached = await run_for(Worker(q, handler=handler), dead, timeout=8)
    assert reached is not None, f"not dead after {site.total} claim-fetch cycles in 8 s"
    assert site.total == 3, f"{site.total} claim-fetch cycles: one per attempt expected"
    (job,) = await q.dead_letters()
    assert (job.dead_reason, job.attempts) == ("max_attempts", 3)
    assert [e.kind for e in job.errors] == ["internal_error"] * 3
    assert "delay" in job.errors[-1].message


async def test_a_proxy_refusing_one_target_charges_that_domain_and_never_pauses_the_worker(
    make_queue: Callable[..., AsyncQueue],
) -> None:
    """Issue 10: a proxy answering CONNECT with 502 for one dead target paused the whole
    worker for 2 s per job: 400 healthy jobs took 8 s instead of under 1 s."""
    unreachable = f"127.0.0.1:{free_port()}"
    # the same 400 healthy jobs through a proxy with no dead target: what they take on this
    # machine now (loaded or not), the bar's base
    async with sites(ok, ok, ok, ok) as alone, proxy({}) as p0:
        q0 = make_queue(queue="base", proxy=(p0.url,), domain_concurrency=10)
        await q0.enqueue_many([s.url(f"/p/{i}") for s in alone for i in range(100)])

        async def alone_done() -> bool:
            infos = await q0.domains_info([s.domain for s in alone])
            return sum(i["done"] for i in infos) == 400

        base = await run_for(Worker(q0, concurrency=100), alone_done, timeout=30)
    assert base is not None
    async with sites(ok, ok, ok, ok) as healthy, proxy({unreachable: 502}) as p:
        q = make_queue(proxy=(p.url,), domain_concurrency=10, breaker_failures=3)
        refused = await q.enqueue_many([f"https://{unreachable}/p/{i}" for i in range(20)])
        await q.enqueue_many([s.url(f"/p/{i}") for s in healthy for i in range(100)])
        worker = Worker(q, concurrency=100)

        async def healthy_done() -> bool:
            infos = await q.domains_info([s.domain for s in healthy])
            return sum(i["done"] for i in infos) == 400

        elapsed = await run_for(worker, healthy_done, timeout=30)
        (info,) = await q.domains_info([unreachable])
    # About 0.25 s on a quiet machine, as long as the same jobs alone (1 s was the issue's
    # bar). The fault paused the worker 2 s per refused fetch, and the breaker lets at least
    # 3 through (asserted below): >= 6 s more than alone. Measured against the base, the bar
    # holds under load (make test: two test workers on two cores; a fixed 2 s failed there).
    assert elapsed is not None and elapsed < base + 3.0, f"400 jobs: {elapsed} s, alone {base} s"
    assert sum(s.total for s in healthy) == 400 and sum(p.forwards.values()) == 400
    assert worker.stats.released == 0, "the proxy is up: nothing is ours"
    assert info["state"] == "open", "the refused target's own breaker tripped"
    assert 3 <= p.connects[unreachable] <= 10, "the breaker stopped the fetches"
    jobs = [await q.get_job(r.id) for r in refused]
    errors = [e for j in jobs if j is not None for e in j.errors]
    assert errors and {e.kind for e in errors} == {"proxy_http_502"}
    assert all(j is not None and j.releases == 0 and j.dead_reason is None for j in jobs)


async def test_sink_failure_releases_the_job_instead_of_losing_it(
    make_queue: Callable[..., AsyncQueue],
) -> None:
    q = make_queue()
    written: list[dict[str, Any]] = []
    failures = 0

    def flaky(record: dict[str, Any]) -> None:
        nonlocal failures
        if failures < 1:
            failures += 1
            raise OSError("disk full")
        written.append(record)

    async with sites(ok) as (site,):
        await q.enqueue(site.url("/x"))
        await asyncio.wait_for(Worker(q, burst=True, sink=CallableSink(flaky)).run_async(), 30)
    assert len(written) == 1 and written[0]["attempts"] == 1, "a sink failure spends no attempt"
    assert (await q.status())["counts"]["done"] == 1
    info = (await q.domains_info([site.domain]))[0]
    assert info["consecutive_failures"] == 0, "our sink failing is not the site's fault"


async def test_handler_signals_and_errors(make_queue: Callable[..., AsyncQueue]) -> None:
    q = make_queue(max_attempts=2)

    def handler(job: Any, response: Any) -> Any:
        if job.url.endswith("/permanent"):
            raise Permanent("no_price")
        if job.url.endswith("/retry") and job.attempts == 1:
            raise Retry(delay=0.1, reason="not yet rendered")
        if job.url.endswith("/bug"):
            raise KeyError("title")
        return {"ok": True}

    async with sites(ok) as (site,):
        for path in ("/permanent", "/retry", "/bug", "/fine"):
            await q.enqueue(site.url(path))
        await asyncio.wait_for(Worker(q, handler=handler, burst=True).run_async(), 30)
        info = (await q.domains_info([site.domain]))[0]
    dead = {d.url.rsplit("/", 1)[1]: d for d in await q.dead_letters()}
    assert set(dead) == {"permanent", "bug"}
    assert dead["permanent"].dead_reason == "no_price"
    assert dead["bug"].dead_reason == "max_attempts"
    assert "KeyError" in dead["bug"].errors[-1].message
    assert (await q.status())["counts"]["done"] == 2
    assert info["state"] == "closed" and info["consecutive_failures"] == 0


async def test_ssrf_public_looking_name_resolving_to_loopback_is_refused(
    make_queue: Callable[..., AsyncQueue],
) -> None:
    q = make_queue(allow_private=False)
    async with sites(ok) as (site,):
        fetcher = Fetcher(q.settings, resolver=StaticResolver({"shop-1.example.com": "127.0.0.1"}))
        await q.enqueue(f"http://shop-1.example.com:{site.port}/p/1")
        await asyncio.wait_for(Worker(q, fetcher=fetcher, burst=True).run_async(), 30)
        await fetcher.close()
    assert site.total == 0
    (dead,) = await q.dead_letters()
    assert dead.dead_reason == "blocked_address"


async def test_slow_call_is_done_but_charged_to_the_domain(
    make_queue: Callable[..., AsyncQueue],
) -> None:
    q = make_queue(slow_call=0.2, request_timeout=5)
    async with sites(slow(0.3)) as (site,):
        await q.enqueue_many([site.url(f"/p/{i}") for i in range(3)])
        worker = Worker(q)

        async def tripped() -> bool:
            return (await q.domains_info([site.domain]))[0]["state"] == "open"

        await run_until(worker, tripped)
    assert (await q.status())["counts"]["done"] == 3


async def test_graceful_stop_lets_in_flight_jobs_finish(
    make_queue: Callable[..., AsyncQueue],
) -> None:
    q = make_queue(domain_concurrency=10, shutdown_grace=5)
    async with sites(slow(0.5)) as (site,):
        await q.enqueue_many([site.url(f"/p/{i}") for i in range(5)])
        worker = Worker(q, concurrency=5)
        task = asyncio.create_task(worker.run_async())
        await until(lambda: site.total == 5, 10, "the five requests in flight")
        worker.stop()
        await asyncio.wait_for(task, 10)
    counts = (await q.status())["counts"]
    assert counts["done"] == 5 and counts["inflight"] == 0


async def test_stop_past_grace_releases_without_spending_attempts(
    make_queue: Callable[..., AsyncQueue],
) -> None:
    q = make_queue(domain_concurrency=10, shutdown_grace=0.2)
    async with sites(slow(5)) as (site,):
        ids = [r.id for r in await q.enqueue_many([site.url(f"/p/{i}") for i in range(4)])]
        worker = Worker(q, concurrency=4)
        task = asyncio.create_task(worker.run_async())
        await until(lambda: site.total == 4, 10, "the four requests in flight")
        worker.stop()
        await asyncio.wait_for(task, 10)
    counts = (await q.status())["counts"]
    assert counts["inflight"] == 0 and counts["ready"] == 4
    for job_id in ids:
        job = await q.get_job(job_id)
        assert job is not None and job.attempts == 0
        assert (job.releases, job.errors) == (0, ()), "stopping is nobody's fault"
    assert worker.stats.released == 4


async def test_second_stop_releases_at_once(make_queue: Callable[..., AsyncQueue]) -> None:
    q = make_queue(domain_concurrency=10, shutdown_grace=30)
    async with sites(slow(30)) as (site,):
        await q.enqueue_many([site.url(f"/p/{i}") for i in range(3)])
        worker = Worker(q, concurrency=3)
        task = asyncio.create_task(worker.run_async())
        await until(lambda: site.total == 3, 10, "the three requests in flight")
        worker.stop()
        await asyncio.sleep(0.2)  # time passes inside the 30 s grace (not a wait for a state)
        started = time.monotonic()
        worker.stop()
        await asyncio.wait_for(task, 10)
        assert time.monotonic() - started < 3
    assert (await q.status())["counts"]["ready"] == 3


async def test_the_waits_for_redis_end_a_teardown_margin_before_the_exit_bound(
    make_queue: Callable[..., AsyncQueue],
) -> None:
    """The exit keeps to grace + EXIT_MARGIN whatever Redis does: the last waits for Redis end
    TEARDOWN_MARGIN before it, leaving the teardown (loops cancelled, connections and files
    closed, the process's exit) its share. A CI run under load saw a supervised child alive
    1.05 s past its last wait, when the waits ran to the bound itself."""
    q = make_queue(shutdown_grace=2)
    worker = Worker(q, concurrency=1)
    worker.stop()
    assert worker._stop_at is not None
    assert worker._exit_deadline() - worker._stop_at == pytest.approx(
        2 + worker_module.EXIT_MARGIN - shutdown_module.TEARDOWN_MARGIN
    )
    assert 0.25 <= shutdown_module.TEARDOWN_MARGIN < worker_module.EXIT_MARGIN
    worker.stop()  # a second signal: the releases get HURRY_MARGIN from it, within the bound
    assert worker._hurry_at is not None
    assert worker._exit_deadline() == pytest.approx(worker._hurry_at + worker_module.HURRY_MARGIN)


async def test_burst_exits_when_everything_is_done_or_dead(
    make_queue: Callable[..., AsyncQueue],
) -> None:
    q = make_queue(domain_concurrency=4)
    async with sites(ok, status(404)) as (good, gone):
        await q.enqueue_many([good.url(f"/p/{i}") for i in range(10)])
        await q.enqueue_many([gone.url(f"/p/{i}") for i in range(5)])
        await asyncio.wait_for(Worker(q, concurrency=10, burst=True).run_async(), 30)
    counts = (await q.status())["counts"]
    assert (counts["done"], counts["dead"]) == (10, 5)


async def test_hundreds_of_concurrent_fetches(make_queue: Callable[..., AsyncQueue]) -> None:
    q = make_queue(domain_concurrency=300)
    async with sites(slow(0.5)) as (site,):
        await q.enqueue_many([site.url(f"/p/{i}") for i in range(300)])
        started = time.monotonic()
        await asyncio.wait_for(Worker(q, concurrency=300, burst=True).run_async(), 60)
        elapsed = time.monotonic() - started
    assert (await q.status())["counts"]["done"] == 300
    assert elapsed < 6, f"300 half-second fetches at concurrency 300 took {elapsed:.1f} s"


async def test_robots_disallow_and_crawl_delay(make_queue: Callable[..., AsyncQueue]) -> None:
    q = make_queue(respect_robots=True, domain_concurrency=4)

    async def site_with_robots(request: web.Request) -> web.StreamResponse:
        if request.path == "/robots.txt":
            return web.Response(text="User-agent: *\nDisallow: /private/\nCrawl-delay: 0.3\n")
        return web.Response(text="<title>ok</title>")

    async with sites(site_with_robots) as (site,):
        await q.enqueue(site.url("/private/secret"))
        await q.enqueue_many([site.url(f"/p/{i}") for i in range(3)])
        started = time.monotonic()
        await asyncio.wait_for(Worker(q, burst=True).run_async(), 30)
        elapsed = time.monotonic() - started
        info = (await q.domains_info([site.domain]))[0]
    (dead,) = await q.dead_letters()
    assert dead.dead_reason == "robots_disallowed" and site.hits["/private/secret"] == 0
    assert site.hits["/robots.txt"] == 1, "fetched once per domain"
    assert info["delay_ms"] == 300, "Crawl-delay raised the domain's politeness delay"
    assert info["done"] == 3 and elapsed >= 0.5


async def test_redis_stream_sink_receives_records(
    make_queue: Callable[..., AsyncQueue],
) -> None:
    from scrapeq.runtime.sinks import RedisStreamSink

    q = make_queue()
    sink = RedisStreamSink(q.client, "results:test", maxlen=1000)
    async with sites(ok) as (site,):
        await q.enqueue_many([site.url(f"/p/{i}") for i in range(4)])
        await asyncio.wait_for(Worker(q, burst=True, sink=sink).run_async(), 30)
    entries = await q.client.xrange("results:test")
    records = [json.loads(fields["record"]) for _, fields in entries]
    assert sorted(r["url"] for r in records) == sorted(site.url(f"/p/{i}") for i in range(4))
    assert {r["outcome"] for r in records} == {"done"}


async def test_the_collector_is_tuned_while_a_worker_runs_and_put_back_after(
    make_queue: Callable[..., AsyncQueue],
) -> None:
    seen: list[tuple[tuple[int, ...], int]] = []

    async def handler(job: Any, response: Any) -> Any:
        seen.append((gc.get_threshold(), gc.get_freeze_count()))

    before = gc.get_threshold()
    assert gc.get_freeze_count() == 0
    q = make_queue()
    async with sites(ok) as (site,):
        await q.enqueue(site.url("/tuned"))
        await asyncio.wait_for(Worker(q, handler=handler, burst=True).run_async(), 30)
        await q.enqueue(site.url("/untouched"))
        plain = Worker(q, handler=handler, burst=True, tune_gc=False)
        await asyncio.wait_for(plain.run_async(), 30)
    (tuned, frozen), (untuned, not_frozen) = seen
    assert tuned == (max(before[0], GC_THRESHOLD), *before[1:]) and frozen > 0
    assert untuned == before and not_frozen == 0
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0


def test_tuned_gc_nests_and_leaves_a_disabled_collector_alone() -> None:
    before = gc.get_threshold()
    with tuned_gc():
        with tuned_gc():  # a second worker of the same process
            assert gc.get_threshold()[0] == max(before[0], GC_THRESHOLD)
        assert gc.get_threshold()[0] == max(before[0], GC_THRESHOLD)  # the first still runs
        assert gc.get_freeze_count() > 0
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0
    gc.disable()
    try:
        with tuned_gc():
            assert gc.get_threshold() == before and gc.get_freeze_count() == 0
    finally:
        gc.enable()


class _SlowSettles(AsyncQueue):
    """A real queue whose settle answers come back late, after Redis ran the call (a slow
    link): the idle claimer's next claim (at most IDLE_MAX later) already sees them settled."""

    async def settle_many(self, items: Any) -> list[str]:
        answers = await super().settle_many(items)
        await asyncio.sleep(IDLE_MAX + 0.5)
        return answers


async def test_exit_waits_for_a_settle_call_in_flight_and_counts_its_answers(
    redis_url: str,
) -> None:
    q = _SlowSettles.from_url(redis_url, settings=Settings(**{**FAST, "domain_concurrency": 5}))
    try:
        async with sites(ok) as (site,):
            await q.enqueue_many([site.url(f"/p/{i}") for i in range(5)])
            worker = Worker(q, concurrency=5, burst=True)
            stats = await asyncio.wait_for(worker.run_async(), 30)
        assert stats.done == 5  # the answers of the call in flight at exit are counted
        assert (await q.status())["counts"]["done"] == 5
    finally:
        await q.close()


# --- handlers that never return, jobs held too long ---------------------------------------------


async def test_async_handler_is_cancelled_at_handler_timeout(
    make_queue: Callable[..., AsyncQueue],
) -> None:
    q = make_queue(max_attempts=2, handler_timeout=0.3)
    cancelled = 0

    async def handler(job: Any, response: Any) -> Any:
        nonlocal cancelled
        if job.url.endswith("/hang"):
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                cancelled += 1
                raise
        return {"ok": True}

    async with sites(ok) as (site,):
        await q.enqueue_many([site.url("/hang"), site.url("/fine")])
        await asyncio.wait_for(Worker(q, handler=handler, burst=True).run_async(), 15)
    (dead,) = await q.dead_letters()
    assert dead.url.endswith("/hang") and dead.dead_reason == "max_attempts"
    assert [e.kind for e in dead.errors] == ["handler_timeout", "handler_timeout"]
    assert "handler_timeout" in dead.errors[-1].message
    assert cancelled == 2, "the handler's coroutine was cancelled, not left running"
    assert (await q.status())["counts"]["done"] == 1


async def test_stuck_sync_handlers_time_out_and_never_wedge_the_worker(
    make_queue: Callable[..., AsyncQueue], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Six parses stuck for good, more than the worker has threads: every call times out."""
    monkeypatch.setattr(worker_module, "HANDLER_THREADS", 2)
    q = make_queue(max_attempts=2, handler_timeout=0.3, domain_concurrency=6)
    stuck = threading.Event()  # never set while the worker runs
    calls: list[str] = []

    def handler(job: Any, response: Any) -> Any:
        calls.append(job.id)
        stuck.wait(30)
        return {"ok": True}

    try:
        async with sites(ok) as (site,):
            await q.enqueue_many([site.url(f"/p/{i}") for i in range(6)])
            worker = Worker(q, handler=handler, concurrency=6, burst=True)
            await asyncio.wait_for(worker.run_async(), 20)
    finally:
        stuck.set()
    dead = await q.dead_letters()
    assert len(dead) == 6 and {d.dead_reason for d in dead} == {"max_attempts"}
    messages = [e.message for d in dead for e in d.errors if e.kind == "handler_timeout"]
    assert len(messages) == 12
    assert sum("its thread is abandoned" in m for m in messages) == 2
    assert sum("no handler thread free" in m for m in messages) == 10
    # Only the calls that got a thread ran; those that timed out waiting for one never did.
    assert len(calls) == 2, calls


async def test_max_job_time_stops_renewing_the_lease_and_abandons_the_attempt(
    make_queue: Callable[..., AsyncQueue],
) -> None:
    q = make_queue(max_attempts=1, lease=0.5, max_job_time=0.6, handler_timeout=60)
    cancelled = asyncio.Event()

    async def handler(job: Any, response: Any) -> Any:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    async with sites(ok) as (site,):
        job_id = (await q.enqueue(site.url("/slow-parse"))).id
        started = time.monotonic()
        stats = await asyncio.wait_for(Worker(q, handler=handler, burst=True).run_async(), 15)
    assert cancelled.is_set(), "the attempt was abandoned"
    assert time.monotonic() - started < 5
    (dead,) = await q.dead_letters()
    assert dead.id == job_id
    assert [e.kind for e in dead.errors] == ["lease_expired"], "reaped: its lease ran out"
    assert stats.done == 0


async def test_results_lines_redact_a_password_in_the_url(
    make_queue: Callable[..., AsyncQueue], tmp_path: Path
) -> None:
    q = make_queue()
    results = tmp_path / "results.jsonl"
    async with sites(ok) as (site,):
        url = site.url("/p/1").replace("http://", "http://user:s3cret@")
        await q.enqueue(url)
        worker = Worker(q, concurrency=1, sink=JsonlSink(results), burst=True)
        await asyncio.wait_for(worker.run_async(), 30)
    (row,) = lines(results)
    assert row["outcome"] == "done"
    assert row["url"] == url.replace("user:s3cret", "***:***")  # the user too (issue 36)
    assert "s3cret" not in results.read_text()


# --- the results line of a last attempt comes from the settle's answer (issue 22) ------------


async def test_a_job_throttled_past_max_throttles_gets_its_dead_line(
    make_queue: Callable[..., AsyncQueue],
) -> None:
    """Whether a settle ends a job dead is the settle script's alone: the worker predicted it
    from max_attempts, so a job the script dead-lettered as max_throttles had no line."""
    q = make_queue(max_throttles=2)
    records: list[dict[str, Any]] = []
    async with sites(status(429, **{"Retry-After": "0"})) as (site,):
        await q.enqueue(site.url("/x"))
        worker = Worker(q, burst=True, sink=CallableSink(records.append))
        await asyncio.wait_for(worker.run_async(), 30)
    (job,) = await q.dead_letters()
    assert (job.dead_reason, site.total) == ("max_throttles", 3)
    assert [(r["id"], r["outcome"], r["status"]) for r in records] == [(job.id, "dead", 429)]
    assert records[0]["error"].startswith("max_throttles: ")
    assert worker.stats.dead == 1


async def test_a_last_retry_whose_lease_another_client_settled_writes_no_dead_line(
    make_queue: Callable[..., AsyncQueue],
) -> None:
    """A retry on the job's last attempt (max_attempts = 1) whose lease another client took
    meanwhile (here by releasing the job): the settle answers stale and the job lives on, so
    no line may say it is dead. The worker wrote its predicted dead line before settling."""
    q, other = make_queue(max_attempts=1), make_queue(max_attempts=1)
    records: list[dict[str, Any]] = []

    async def handler(job: Any, response: Any) -> Any:
        assert await other.release(job, delay=3600) == "released"
        raise Retry(reason="not rendered yet")

    async with sites(ok) as (site,):
        (enqueued,) = await q.enqueue_many([site.url("/x")])
        worker = Worker(q, handler=handler, sink=CallableSink(records.append))

        async def stale() -> bool:
            return worker.stats.stale == 1

        assert await run_for(worker, stale, timeout=15) is not None
    assert records == []
    job = await q.get_job(enqueued.id)
    assert job is not None and job.dead_reason is None and job.releases == 1
    assert (await q.status())["counts"]["delayed"] == 1


async def test_done_lines_precede_the_ack_and_budget_dead_lines_follow_the_dead_letter(
    make_queue: Callable[..., AsyncQueue], redis_url: str
) -> None:
    """docs/DESIGN.md, "Results lines": a line the worker's own verdict decides (done, a 404's
    dead) is written while the job is still in flight, before its settle (at least once); a
    line the settle script decides (max_attempts here) once the job is a dead letter."""
    q = make_queue(max_attempts=1)
    look = Queue.from_url(redis_url, settings=Settings(**FAST))
    found: dict[str, tuple[str, str | None]] = {}

    def sink(record: dict[str, Any]) -> None:  # on a thread: the sync queue looks
        job = look.get_job(record["id"])
        assert job is not None
        found[record["url"].rsplit("/", 1)[-1]] = (record["outcome"], job.dead_reason)

    try:
        async with sites(ok, status(404), status(500)) as (good, gone, bad):
            await q.enqueue_many([good.url("/done"), gone.url("/gone"), bad.url("/bad")])
            await asyncio.wait_for(Worker(q, burst=True, sink=CallableSink(sink)).run_async(), 30)
    finally:
        look.close()
    assert found == {
        "done": ("done", None),  # its key is deleted by the ack: it was still there
        "gone": ("dead", None),  # not dead yet: its line came first
        "bad": ("dead", "max_attempts"),  # dead already: its line came from the answer
    }


async def test_a_404_whose_line_fails_is_released_and_written_later(
    make_queue: Callable[..., AsyncQueue],
) -> None:
    """A dead line of the worker's own verdict keeps the at-least-once of a done line: the
    sink failing releases the job (no attempt spent), and its line is written next time."""
    q = make_queue()
    written: list[dict[str, Any]] = []
    failures = 0

    def flaky(record: dict[str, Any]) -> None:
        nonlocal failures
        if failures < 1:
            failures += 1
            raise OSError("disk full")
        written.append(record)

    async with sites(status(404)) as (site,):
        await q.enqueue(site.url("/x"))
        await asyncio.wait_for(Worker(q, burst=True, sink=CallableSink(flaky)).run_async(), 30)
    assert [(r["outcome"], r["error"]) for r in written] == [("dead", "http_404: HTTP 404")]
    assert site.total == 2
    (job,) = await q.dead_letters()
    assert (job.dead_reason, job.attempts, job.releases) == ("http_404", 1, 1)


async def test_a_budget_dead_line_that_fails_is_logged_and_the_dead_letter_kept(
    make_queue: Callable[..., AsyncQueue], caplog: pytest.LogCaptureFixture
) -> None:
    """At most once: a line written after the settle answered dead cannot give the job back;
    the dead letter holds it (``scrapeq dead list``) and the failure is a warning."""
    q = make_queue(max_attempts=1)

    def broken(record: dict[str, Any]) -> None:
        raise OSError("disk full")

    async with sites(status(500)) as (site,):
        await q.enqueue(site.url("/x"))
        worker = Worker(q, burst=True, sink=CallableSink(broken))
        await asyncio.wait_for(worker.run_async(), 30)
    (job,) = await q.dead_letters()
    assert (job.dead_reason, site.total, worker.stats.dead) == ("max_attempts", 1, 1)
    assert "dead letter kept, but its results line failed: disk full" in caplog.text


# --- hooks -----------------------------------------------------------------------------------


async def test_hooks_observe_claims_and_the_settle_answers(
    make_queue: Callable[..., AsyncQueue],
) -> None:
    q = make_queue(max_attempts=1)
    claimed: list[str] = []
    answers: dict[str, tuple[str, str, str | None]] = {}

    def on_claimed(jobs: Sequence[Job]) -> None:
        claimed.extend(job.id for job in jobs)

    async def on_settled(job: Job, settlement: Settlement, answer: Settled) -> None:
        await asyncio.sleep(0.01)  # an async hook runs as a task the run awaits
        answers[job.url.rsplit("/", 1)[-1]] = (settlement.outcome, answer, answer.reason)

    async with sites(ok, status(404), status(500)) as (good, gone, bad):
        enqueued = await q.enqueue_many([good.url("/done"), gone.url("/gone"), bad.url("/bad")])
        worker = Worker(q, burst=True, on_claimed=on_claimed, on_settled=on_settled)
        await asyncio.wait_for(worker.run_async(), 30)
    assert sorted(claimed) == sorted(r.id for r in enqueued)
    assert answers == {
        "done": ("done", "done", None),
        "gone": ("fail", "dead", "http_404"),
        "bad": ("retry", "dead", "max_attempts"),
    }


async def test_a_failing_hook_is_logged_and_the_worker_goes_on(
    make_queue: Callable[..., AsyncQueue], caplog: pytest.LogCaptureFixture
) -> None:
    q = make_queue()

    def on_claimed(jobs: Sequence[Job]) -> None:
        raise RuntimeError("observer bug")

    async def on_settled(job: Job, settlement: Settlement, answer: Settled) -> None:
        raise RuntimeError("async observer bug")

    async with sites(ok) as (site,):
        await q.enqueue_many([site.url(f"/p/{i}") for i in range(3)])
        worker = Worker(q, burst=True, on_claimed=on_claimed, on_settled=on_settled)
        await asyncio.wait_for(worker.run_async(), 30)
    assert worker.stats.done == 3
    assert "observer bug" in caplog.text and "async observer bug" in caplog.text
