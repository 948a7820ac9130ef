"""What the worker tells: transitions once across processes, progress, summaries, JSON lines.

Workers run as ``scrapeq worker`` subprocesses (their stderr read back from a file) against
the session's redis-server, fetching loopback sites served by a background thread of the test.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import signal
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import redis
from aiohttp import web

from scrapeq import AsyncQueue, Job, Queue, Settings
from scrapeq.errors import RedisUnavailable
from scrapeq.runtime.logs import JsonFormatter, formatter
from scrapeq.runtime.reporter import RedisHealth, Reporter
from scrapeq.runtime.worker import Worker
from support.processes import wait_until
from support.redis_proc import RedisProc
from support.sites import SiteThread, ok, slow, status
from support.workers import SCRAPEQ, WorkerProc, clean_env, counts

#: Quick retries; one site may take many jobs at once unless a test says otherwise.
QUICK = {"backoff_base": 0.1, "backoff_cap": 0.3}


@pytest.fixture(autouse=True)
def plain_logging() -> Iterator[None]:
    """The ``scrapeq`` logger as a library user has it: no handler of an earlier in-process
    CLI run (bound to a stream that test closed), records propagating to caplog."""
    logger = logging.getLogger("scrapeq")
    saved = logger.handlers[:], logger.propagate, logger.level
    logger.handlers[:], logger.propagate = [], True
    logger.setLevel(logging.NOTSET)
    yield
    logger.handlers[:], logger.propagate = saved[0], saved[1]
    logger.setLevel(saved[2])


@pytest.fixture
def spawn(redis_url: str, tmp_path: Path) -> Iterator[Callable[..., WorkerProc]]:
    """Start ``scrapeq [GLOBAL...] worker --allow-private ARGS``; its output in a file.

    ``glob`` are global options (``-v``), keywords are settings (``SCRAPEQ_*``).
    """
    started: list[WorkerProc] = []

    def start(*args: str, glob: tuple[str, ...] = (), **settings: Any) -> WorkerProc:
        log = tmp_path / f"worker-{len(started)}.log"
        argv = [SCRAPEQ, "--redis", redis_url, *glob, "worker", "--allow-private", *args]
        proc = WorkerProc.start(argv, log, env=clean_env(**{**QUICK, **settings}), cwd=tmp_path)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.kill_all()


def fields(line: str) -> dict[str, str]:
    """The ``name=value`` pairs of a text log line."""
    return dict(re.findall(r"([\w/]+)=(\S+)", line))


# --- the final summary ---------------------------------------------------------------------------


@pytest.mark.parametrize("processes", [1, 2])
def test_final_summary_counts_agree_with_status_after_a_retirement(
    q: Queue, site_thread: SiteThread, spawn: Callable[..., WorkerProc], processes: int
) -> None:
    bad = site_thread.start(status(500))
    good = site_thread.start(ok)
    q.enqueue_many([bad.url(f"/b/{i}") for i in range(30)])
    q.enqueue_many([good.url(f"/g/{i}") for i in range(10)])
    # The second failure in a row retires the domain (one trip is the limit): its two failed
    # jobs and its 28 queued ones end dead, drained by the claims.
    w = spawn(
        "--burst",
        "--processes",
        str(processes),
        domain_concurrency=1,
        breaker_failures=2,
        breaker_max_trips=1,
    )
    assert w.wait(30) == 0, w.text()

    counts = q.status()["counts"]
    assert (counts["done"], counts["dead"]) == (10, 30)
    summaries = [line for line in w.text().splitlines() if " done=" in line]
    assert summaries, w.text()
    final = fields(summaries[-1])
    assert (int(final["done"]), int(final["dead"])) == (10, 30), summaries[-1]


# --- JSON lines and -v ---------------------------------------------------------------------------


def test_json_log_lines_parse_and_carry_their_fields(
    q: Queue, site_thread: SiteThread, spawn: Callable[..., WorkerProc]
) -> None:
    gone = site_thread.start(status(404))
    flaky = site_thread.start(status(500))
    q.enqueue_many([gone.url("/a"), gone.url("/b")])
    q.enqueue_many([flaky.url("/c"), flaky.url("/d")], max_attempts=2)
    # Two processes: the supervised children log JSON at -v too (they start with bare logging).
    w = spawn("--burst", "--processes", "2", "--log-format", "json", glob=("-v",))
    assert w.wait(30) == 0, w.text()

    docs = [json.loads(line) for line in w.text().splitlines()]  # every line is one object
    for doc in docs:
        assert {"time", "level", "logger", "message"} <= set(doc), doc
        assert datetime.fromisoformat(doc["time"]).utcoffset() is not None, doc
    dead = [d for d in docs if d["message"].startswith("dead letter")]
    assert {(d["domain"], d["kind"]) for d in dead} == {
        (gone.domain, "http_404"),
        (flaky.domain, "http_500"),
    }
    assert {d["reason"] for d in dead if d["domain"] == flaky.domain} == {"max_attempts"}
    assert all(d["job_id"] and d["level"] == "INFO" for d in dead)
    retries = [d for d in docs if d["message"].startswith("retried ")]
    assert len(retries) == 2, docs  # each flaky job once, then dead
    for d in retries:
        assert (d["level"], d["domain"], d["kind"]) == ("DEBUG", flaky.domain, "http_500")
        assert 0 <= d["delay"] <= QUICK["backoff_base"]
        assert f"kind=http_500 delay={d['delay']:.2f}s attempt=1/2" in d["message"]
    (summary,) = [d for d in docs if d["message"].startswith("summary")]
    assert (summary["done"], summary["dead"]) == (0, 4)


def test_text_lines_by_default_and_json_from_the_setting(
    q: Queue, site_thread: SiteThread, spawn: Callable[..., WorkerProc]
) -> None:
    gone = site_thread.start(status(404))
    q.enqueue(gone.url("/a"))
    text = spawn("--burst")
    assert text.wait(30) == 0, text.text()
    assert "INFO scrapeq.worker dead letter job=" in text.text()
    with pytest.raises(json.JSONDecodeError):
        json.loads(text.text().splitlines()[0])

    q.enqueue(gone.url("/b"))
    as_json = spawn("--burst", log_format="json")  # SCRAPEQ_LOG_FORMAT
    assert as_json.wait(30) == 0, as_json.text()
    assert all(json.loads(line)["logger"] for line in as_json.text().splitlines())


def test_json_formatter_writes_tracebacks_and_any_field() -> None:
    logger = logging.getLogger("scrapeq.test-json")
    record = logger.makeRecord(
        logger.name, logging.ERROR, __file__, 1, "failed %s", ("x",), None,
        extra={"domain": "bücher.example", "path": Path("/tmp/r"), "n": 3},
    )  # fmt: skip
    try:
        raise ValueError("boom")
    except ValueError:
        record.exc_info = sys.exc_info()
    doc = json.loads(JsonFormatter().format(record))
    assert (doc["level"], doc["logger"], doc["message"]) == ("ERROR", logger.name, "failed x")
    assert (doc["domain"], doc["path"], doc["n"]) == ("bücher.example", "/tmp/r", 3)
    assert "ValueError: boom" in doc["exc"]
    assert "msg" not in doc and "args" not in doc
    with pytest.raises(ValueError, match="unknown log format"):
        formatter("yaml")


# --- the events behind the lines ------------------------------------------------------------------


def dom(i: int) -> str:
    return f"shop-{i}.example.com"


def enqueue(q: Queue, d: str, n: int, start: int = 0, **options: Any) -> None:
    results = q.enqueue_many([f"https://{d}/p/{i}" for i in range(start, start + n)], **options)
    assert all(r.status == "added" for r in results)


def fail(q: Queue, job: Job) -> None:
    q.retry(job, kind="timeout", delay=0, domain_failed=True)


def test_retired_event_carries_the_queued_jobs_it_drains(make_queue: Callable[..., Queue]) -> None:
    q = make_queue(breaker_max_trips=1, breaker_failures=2, domain_concurrency=2)
    d = dom(1)
    enqueue(q, d, 10)
    enqueue(q, d, 2, start=100, delay=3600)
    first, second = q.claim(2).jobs
    fail(q, first)  # delayed (due now): queued
    fail(q, second)  # the second failure in a row trips, and one trip retires
    (event,) = [e for e in q.events_after() if e["kind"] == "retired"]
    assert event["domain"] == d
    assert int(event["jobs"]) == 8 + 2 + 1  # ready, delayed by hand, delayed retry
    assert {"id", "kind", "domain", "message", "at", "jobs"} == set(event)
    assert q.events(1)[0]["kind"] == "retired"  # the old readers' shape is kept
    assert set(q.events(1)[0]) == {"id", "kind", "domain", "message", "at"}


GUARD = {
    "global_trip_min": 5,
    "global_trip_share": 0.5,
    "breaker_failures": 5,
    "domain_concurrency": 10,
}


def _pause(q: Queue) -> None:
    """Five of eight active domains trip together: the global guard pauses dispatch."""
    domains = [dom(i) for i in range(8)]
    for d in domains:
        enqueue(q, d, 6)
    jobs: dict[str, list[Job]] = {d: [] for d in domains}
    for job in q.claim(100).jobs:
        jobs[job.domain].append(job)
    for d in domains:
        q.ack(jobs[d].pop())
    for d in domains[:5]:
        for job in jobs[d]:
            fail(q, job)
    assert q.status()["paused_until"] is not None


def test_the_end_of_a_global_pause_is_an_event_once(make_queue: Callable[..., Queue]) -> None:
    q = make_queue(**GUARD)
    _pause(q)
    assert q.claim(10).jobs == []  # paused: nothing announced yet
    assert [e["kind"] for e in q.events_after()].count("global_resume") == 0
    q.testing_clock_offset_ms += 150_000  # the pause is at most 144 s
    assert q.claim(100).jobs
    q.claim(100)
    q.reap()
    resumes = [e for e in q.events_after() if e["kind"] == "global_resume"]
    assert len(resumes) == 1, "announced by the first claim after the pause, once"
    assert resumes[0]["message"].startswith("dispatch resumed: the global pause ended")


async def test_the_leader_logs_each_transition_once_and_hands_over(
    make_queue: Callable[..., Queue],
    make_async_queue: Callable[..., AsyncQueue],
    caplog: pytest.LogCaptureFixture,
) -> None:
    q = make_queue(**GUARD)
    a = Reporter(make_async_queue(**GUARD), log_every=0)
    b = Reporter(make_async_queue(**GUARD), log_every=0)
    caplog.set_level(logging.INFO, logger="scrapeq.worker.events")
    await a.turn()
    await b.turn()
    assert (a.leading, b.leading) == (True, False)

    _pause(q)
    await a.turn()
    await b.turn()
    trips = [f"breaker tripped domain={dom(i)}" for i in range(5)]
    assert _lines(caplog) == [*trips, "global pause"]
    q.testing_clock_offset_ms += 150_000
    q.claim(100)  # the pause is over
    await a.close()  # a stopping leader logs what is left and hands the lease on
    assert not a.leading
    assert _lines(caplog) == [*trips, "global pause", "global pause over"]
    await b.turn()
    assert b.leading
    q.breaker_trip(dom(7))
    await b.turn()
    await b.turn()
    by_hand = f"breaker tripped domain={dom(7)}"
    assert _lines(caplog) == [*trips, "global pause", "global pause over", by_hand]
    pause = next(r for r in caplog.records if r.getMessage().startswith("global pause:"))
    assert pause.kind == "global_pause"  # type: ignore[attr-defined]
    assert pause.event_id and pause.leader == a.id  # type: ignore[attr-defined]


def _lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The leader's lines so far, up to their first colon."""
    return [r.getMessage().split(":")[0] for r in caplog.records if r.name.endswith(".events")]


async def test_a_new_leader_without_a_cursor_starts_from_now(
    make_queue: Callable[..., Queue],
    make_async_queue: Callable[..., AsyncQueue],
    caplog: pytest.LogCaptureFixture,
    redis_client: redis.Redis,
) -> None:
    q = make_queue(**GUARD)
    _pause(q)  # history: nobody was leading
    caplog.set_level(logging.INFO, logger="scrapeq.worker.events")
    a = Reporter(make_async_queue(**GUARD), log_every=0)
    await a.turn()
    assert a.leading and _lines(caplog) == []
    q.breaker_trip(dom(7))
    await a.turn()
    assert _lines(caplog) == ["breaker tripped domain=shop-7.example.com"]
    # A leader that vanished (its lease lapsed) left its cursor: the next one goes on from it.
    await a.turn()
    redis_client.delete(q.keys.log_leader)
    q.breaker_reset(dom(7))
    b = Reporter(make_async_queue(**GUARD), log_every=0)
    await b.turn()
    assert _lines(caplog)[-1] == "breaker reset domain=shop-7.example.com"
    assert len(_lines(caplog)) == 2


# --- two worker processes: each transition once ---------------------------------------------------


class Flaky:
    """A site that answers 500 until it is told to recover."""

    def __init__(self) -> None:
        self.failing = True

    async def __call__(self, request: web.Request) -> web.StreamResponse:
        if self.failing:
            return web.Response(status=500, text="down")
        return web.Response(text="<title>back</title>", content_type="text/html")


def leader_pid(r: redis.Redis, q: Queue) -> int | None:
    holder = r.get(q.keys.log_leader)
    return int(str(holder).split(":")[-2]) if holder else None


def transitions(r: redis.Redis, q: Queue) -> Counter[tuple[str, str]]:
    kinds = {"trip", "half_open", "recovered", "retired", "reset", "global_pause"}
    return Counter((e["kind"], e["domain"]) for e in q.events_after() if e["kind"] in kinds)


LINE = re.compile(
    r" INFO scrapeq\.worker\.events (breaker tripped|breaker half-open|breaker recovered"
    r"|domain retired) domain=(\S+?):? "
)
KIND = {
    "breaker tripped": "trip",
    "breaker half-open": "half_open",
    "breaker recovered": "recovered",
    "domain retired": "retired",
}


@pytest.mark.slow
def test_each_transition_is_logged_once_across_two_worker_processes(
    q: Queue,
    redis_client: redis.Redis,
    site_thread: SiteThread,
    spawn: Callable[..., WorkerProc],
) -> None:
    flaky_handler = Flaky()
    flaky = site_thread.start(flaky_handler)
    gone = site_thread.start(status(503))
    good = site_thread.start(ok)
    q.enqueue_many([flaky.url(f"/f/{i}") for i in range(12)])
    q.enqueue_many([gone.url(f"/g/{i}") for i in range(12)])
    q.enqueue_many([good.url(f"/ok/{i}") for i in range(5)])
    # Three failures in a row trip; the second trip in a row retires; 2 s open.
    settings = dict(breaker_failures=3, breaker_max_trips=2, breaker_cooldown=2,
                    domain_concurrency=1, max_attempts=10)  # fmt: skip
    a = spawn(**settings)
    b = spawn(**settings)
    wait_until(lambda: ("trip", flaky.domain) in transitions(redis_client, q), 20, "a trip")
    # The leader stops: the other worker takes over where it left off.
    pid = wait_until(lambda: leader_pid(redis_client, q), 10, "a log leader")
    first, second = (a, b) if pid == a.pid else (b, a)
    assert pid == first.pid
    first.signal(signal.SIGTERM)
    assert first.wait(15) == 0, first.text()
    flaky_handler.failing = False  # before the cooldown ends: its probe will succeed
    wait_until(lambda: leader_pid(redis_client, q) == second.pid, 10, "the handover")

    def settled() -> bool:
        seen = transitions(redis_client, q)
        return ("recovered", flaky.domain) in seen and ("retired", gone.domain) in seen

    wait_until(settled, 30, "the recovery and the retirement")
    wait_until(lambda: counts(q)["ready"] + counts(q)["inflight"] == 0, 20, "an empty queue")
    time.sleep(1.5)  # the leader's next turn
    second.signal(signal.SIGTERM)
    assert second.wait(15) == 0, second.text()

    expected = transitions(redis_client, q)
    assert expected == Counter(
        {
            ("trip", flaky.domain): 1,
            ("half_open", flaky.domain): 1,
            ("recovered", flaky.domain): 1,
            ("trip", gone.domain): 1,
            ("half_open", gone.domain): 1,
            ("retired", gone.domain): 1,
        }
    ), expected
    logged: Counter[tuple[str, str]] = Counter()
    for proc in (a, b):
        for match in LINE.finditer(proc.text()):
            logged[(KIND[match.group(1)], match.group(2))] += 1
    assert logged == expected, (a.text(), b.text())
    # Each worker logged some of them: the leader changed hands mid-run.
    assert LINE.search(first.text()) and LINE.search(second.text())
    (retired,) = [line for line in second.text().splitlines() if "domain retired" in line]
    (event,) = [e for e in q.events_after() if e["kind"] == "retired"]
    assert f"jobs_drained={event['jobs']}" in retired
    assert int(event["jobs"]) > 0


# --- progress -------------------------------------------------------------------------------------


def test_progress_lines_every_log_every_seconds_from_one_process(
    q: Queue, site_thread: SiteThread, spawn: Callable[..., WorkerProc]
) -> None:
    site = site_thread.start(slow(0.5))
    q.enqueue_many([site.url(f"/p/{i}") for i in range(30)])
    started = time.monotonic()
    # 4 at a time for 30 jobs of 0.5 s: about 4 s, during which one leader logs progress.
    w = spawn("--burst", "--processes", "2", "--concurrency", "2", "--log-every", "1")
    assert w.wait(30) == 0, w.text()
    elapsed = time.monotonic() - started

    lines = [line for line in w.text().splitlines() if "scrapeq.worker.progress" in line]
    assert 2 <= len(lines) <= elapsed + 1, (elapsed, w.text())
    seen = [fields(line) for line in lines]
    assert all(float(f["done/s"]) >= 0 for f in seen)
    done = [int(f["done"]) for f in seen]
    assert done == sorted(done) and 0 < done[-1] <= 30
    assert {f.keys() >= {"retried", "dead", "inflight", "open_breakers"} for f in seen} == {True}
    assert any(float(f["done/s"]) > 0 for f in seen)


def test_log_every_0_logs_no_progress(
    q: Queue, site_thread: SiteThread, spawn: Callable[..., WorkerProc]
) -> None:
    site = site_thread.start(slow(0.3))
    q.enqueue_many([site.url(f"/p/{i}") for i in range(8)])
    w = spawn("--burst", "--concurrency", "2", log_every=0)  # SCRAPEQ_LOG_EVERY
    assert w.wait(30) == 0, w.text()
    assert "progress" not in w.text()


# --- Redis lost and back: per process -------------------------------------------------------------


@pytest.mark.slow
async def test_redis_lost_and_back_is_one_line_each(
    own_redis: RedisProc, caplog: pytest.LogCaptureFixture
) -> None:
    q = AsyncQueue.from_url(own_redis.url, settings=Settings(allow_private=True, lease=5))
    caplog.set_level(logging.DEBUG, logger="scrapeq.worker")
    worker = Worker(q, concurrency=2)
    task = asyncio.create_task(worker.run_async())
    try:
        await asyncio.sleep(1.2)  # claims and reporter turns go through
        own_redis.kill()
        await asyncio.sleep(3.5)  # every loop fails, several times
        await asyncio.to_thread(own_redis.start)
        deadline = time.monotonic() + 20
        while not any("reachable again" in r.getMessage() for r in caplog.records):
            assert time.monotonic() < deadline and not task.done()
            await asyncio.sleep(0.1)
        await asyncio.sleep(1.5)
    finally:
        worker.stop()
        await asyncio.wait_for(task, 15)
        await q.close()
    mine = [r for r in caplog.records if r.name == "scrapeq.worker" and r.levelno >= logging.INFO]
    lost = [r for r in mine if r.getMessage().startswith("redis unavailable")]
    back = [r for r in mine if "reachable again" in r.getMessage()]
    assert len(lost) == 1 and lost[0].levelno == logging.WARNING, [r.getMessage() for r in mine]
    assert len(back) == 1 and back[0].levelno == logging.INFO, [r.getMessage() for r in mine]
    assert (lost[0].kind, back[0].kind) == ("redis_lost", "redis_back")  # type: ignore[attr-defined]
    assert back[0].outage >= 3 and back[0].failures >= 3  # type: ignore[attr-defined]
    retries = [
        r for r in caplog.records if r.levelno == logging.DEBUG and "retrying" in r.getMessage()
    ]
    assert retries, "the other failures are -v lines"


async def test_a_reporter_refused_its_reads_says_so_once(
    redis_url: str, redis_client: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    # An ACL user from before XREAD was needed (README's line grants it now).
    redis_client.execute_command("ACL", "SETUSER", "sqold", "on", "nopass", "~*", "+@all", "-xread")
    url = redis_url.replace("redis://", "redis://sqold@")
    q = AsyncQueue.from_url(url, settings=Settings())
    try:
        caplog.set_level(logging.INFO, logger="scrapeq.worker")
        reporter = Reporter(q, log_every=0)
        for _ in range(3):
            await reporter.turn()
    finally:
        await q.close()
        redis_client.execute_command("ACL", "DELUSER", "sqold")
    said = [r for r in caplog.records if "events cannot be logged" in r.getMessage()]
    assert len(said) == 1 and said[0].levelno == logging.WARNING
    assert "xread" in said[0].getMessage() and not said[0].exc_info  # no traceback


def test_an_answer_to_a_call_sent_before_the_loss_is_no_reconnection(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="scrapeq.worker")
    health = RedisHealth()
    before = time.monotonic()
    health.failed(RedisUnavailable("Connection reset"), "reporting")
    health.ok(before)  # a claim sent before the failure, answered just after: no news
    assert health.down
    health.failed(RedisUnavailable("Connection refused"), "claiming")  # the second in a row
    health.failed(RedisUnavailable("Connection refused"), "settling")
    health.ok(time.monotonic())
    assert not health.down
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines
    assert lines[0].startswith("redis unavailable while claiming: Connection refused")
    assert lines[1].startswith("redis reachable again after") and "(3 calls failed" in lines[1]


def test_one_failed_call_alone_is_no_outage(caplog: pytest.LogCaptureFixture) -> None:
    """A connection the pool kept across a Redis restart fails once; the next call works."""
    caplog.set_level(logging.DEBUG, logger="scrapeq.worker")
    health = RedisHealth()
    health.failed(RedisUnavailable("Connection closed by server."), "reporting")
    assert health.down
    health.ok(time.monotonic())
    assert not health.down
    assert [r.levelno for r in caplog.records] == [logging.DEBUG, logging.DEBUG]
