"""Features that are off cost nothing (issue 40): with no proxy configured no command of the
claim and settle scripts names an exit's key, and with ``revisit = off`` none names a
revisit's state (its ``rv:`` hashes, its fields of the domain's hash).

Counted, not timed: every command Redis runs, those of scripts included, is read from
``MONITOR`` while a queue claims and settles a batch (done, retried, released and dead jobs,
with latencies and bytes). Each test has its control: with the feature on, the same workload
names those keys, so the monitor sees what it should.

And features that are on cost what they must: an exit's and a domain's revisit state are read
once per script call, not once per job (includes/exits.lua, includes/revisit.lua).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from scrapeq import Queue
from support.monitor import Monitor, named

pytestmark = pytest.mark.backends("single")  # one server's MONITOR

PROXY = ("http://127.0.0.2:9001", "http://127.0.0.2:9002 tier=residential")
#: the revisit fields of a domain's hash (includes/revisit.lua, RV.DOM and rvskip)
RV_FIELDS = frozenset({"rvmu", "rvl", "rvn", "rvfw", "rvw", "rvl0", "rvh", "rvskip"})


@pytest.fixture
def watch(redis_url: str) -> Iterator[Callable[[], Monitor]]:
    started: list[Monitor] = []

    def start() -> Monitor:
        m = Monitor(redis_url)
        started.append(m)
        return m

    yield start
    for m in started:
        if m.thread.is_alive():
            m.stop()


def workload(q: Queue, settle_extra: dict[str, Any]) -> None:
    """Claim and settle a batch of every outcome, with latencies and bytes."""
    q.enqueue_many([f"http://d{i % 3}.test/p/{i}" for i in range(12)])
    jobs = q.claim(12).jobs
    assert len(jobs) >= 8
    items = []
    for i, job in enumerate(jobs):
        if i % 4 == 1:
            s = q.retrying(job, kind="http_503", delay=0, domain_failed=True)
        elif i % 4 == 2:
            s = q.releasing(job, delay=0, kind="released:proxy_error")
        elif i % 4 == 3 and i > 4:
            s = q.failing(job, reason="http_404", message="gone")
        else:
            s = dataclasses.replace(q.done(job), latency_ms=20)
        extra = dict(settle_extra)
        if job.exit is not None:
            extra.update(exit_result="ok", bytes_in=600)
        items.append(dataclasses.replace(s, **extra))
    q.settle_many(items)
    q.claim(12)  # the retried and released ones again


def exit_keys(q: Queue) -> tuple[str, ...]:
    return (q.keys.exits_down, q.keys.exit(""), q.keys.domain_exits(""))


@pytest.mark.parametrize("proxy", [(), PROXY])
def test_with_no_proxy_no_exit_key_is_touched(
    make_queue: Callable[..., Queue], watch: Callable[[], Monitor], proxy: tuple[str, ...]
) -> None:
    q = make_queue(queue="off", proxy=proxy, domain_concurrency=8)
    m = watch()
    workload(q, {})
    touched = named(m.stop(), *exit_keys(q))
    if proxy:  # the control: the monitor sees the exits' commands
        assert touched, "with a pool, the claims and settles use the exits' keys"
    else:
        assert touched == [], touched[:5]


@pytest.mark.parametrize("revisit", ["off", "on"])
def test_with_revisit_off_no_revisit_state_is_touched(
    make_queue: Callable[..., Queue], watch: Callable[[], Monitor], revisit: str
) -> None:
    q = make_queue(queue="off", revisit=revisit, domain_concurrency=8)
    m = watch()
    workload(q, {"signature": "0123456789abcdef"} if revisit == "on" else {})
    commands = m.stop()
    state = named(commands, q.keys.prefix + "rv:")
    fields = [c for c in commands if RV_FIELDS & {w.strip('"') for w in c}]
    if revisit == "on":  # the control
        assert state and fields
    else:
        assert state == [] and fields == [], (state[:3], fields[:3])


def test_an_exits_state_is_read_and_stamped_once_per_call(
    make_queue: Callable[..., Queue], watch: Callable[[], Monitor]
) -> None:
    """Through one exit, a claim of eight jobs of one domain stamps the exit's and the pair's
    last use once, and their settle reads the exit's breaker and the pair's bench once; a
    window already full of answers is not written again."""
    q = make_queue(queue="off", proxy=PROXY[:1], domain_concurrency=8)
    q.enqueue_many([f"http://d.test/p/{i}" for i in range(24)])
    for _ in range(2):  # the window fills with answers (ten outcomes)
        jobs = q.claim(8).jobs
        q.settle_many([dataclasses.replace(q.done(j), exit_result="ok") for j in jobs])
    (exit_id,) = {j.exit for j in jobs}
    ek, dk = q.keys.exit(exit_id), q.keys.domain_exits("d.test")
    m = watch()
    jobs = q.claim(8).jobs
    assert len(jobs) == 8 and {j.exit for j in jobs} == {exit_id}
    q.settle_many([dataclasses.replace(q.done(j), exit_result="ok") for j in jobs])
    commands = m.stop()

    def calls(name: str, key: str) -> int:
        return sum(1 for c in commands if c[:2] == [name, key])

    assert (calls("HSET", ek), calls("HSET", dk)) == (1, 1), "one stamp each (lu, u:<id>)"
    assert calls("HMGET", ek) == 1 and calls("HEXISTS", dk) == 1
    assert int(q.client.hget(ek, "req") or 0) == 24, "every attempt counted"


def test_a_domains_revisit_state_is_read_once_per_settle_and_lands_the_same(
    make_queue: Callable[..., Queue], watch: Callable[[], Monitor], redis_client: redis.Redis
) -> None:
    """Revisit = on: a settle of six pages of one domain reads the domain's revisit fields
    once (revisit.lua keeps what it wrote); they land as six settles of one page each make
    them."""
    fields: dict[str, dict[str, str]] = {}
    for name, batch in (("one", 1), ("six", 6)):
        q = make_queue(queue=name, revisit="on", domain_concurrency=8)
        q.enqueue_many([f"http://d.test/p/{i}" for i in range(6)])
        jobs = q.claim(6).jobs
        assert len(jobs) == 6
        items = [dataclasses.replace(q.done(j), signature=f"{i:016x}") for i, j in enumerate(jobs)]
        m = watch()
        for start in range(0, 6, batch):
            q.settle_many(items[start : start + batch])
        commands = m.stop()
        dk = q.keys.domain("d.test")
        reads = [c for c in commands if c[:2] == ["HMGET", dk] and "rvmu" in c]
        assert len(reads) == 6 // batch
        got = redis_client.hgetall(dk)
        fields[name] = {k: v for k, v in got.items() if k in RV_FIELDS}
    assert fields["one"] == fields["six"] and fields["six"]["rvn"] == "6"
