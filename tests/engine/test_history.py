"""Per-minute history kept by the scripts that settle (lua/includes/history.lua)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import redis

from scrapeq import Queue
from scrapeq.engine.ops.status import HISTORY_EVENTS, HISTORY_OUTCOMES
from scrapeq.errors import ConfigError

MINUTE = 60_000


def claim_all(q: Queue, n: int) -> list:  # type: ignore[type-arg]
    jobs = []
    for _ in range(10):
        jobs += q.claim(n - len(jobs)).jobs
        if len(jobs) == n:
            return jobs
    raise AssertionError(f"claimed {len(jobs)} of {n}")


def test_settles_are_counted_per_minute_and_lane(make_queue: Callable[..., Queue]) -> None:
    q = make_queue(domain_concurrency=100, max_attempts=1, breaker_failures=100)
    q.enqueue_many([f"https://shop-1.example.com/p/{i}" for i in range(5)])
    q.enqueue_many([f"https://shop-2.example.com/b/{i}" for i in range(3)], lane="bulk")
    q.enqueue("https://shop-3.example.com/", lane="critical")
    jobs = claim_all(q, 9)
    normal = [j for j in jobs if j.lane == "normal"]
    bulk = [j for j in jobs if j.lane == "bulk"]
    q.settle_many([q.done(j) for j in normal[:3]])
    q.throttle(normal[3], 30)
    q.release(normal[4])
    (stopping,) = [j for j in jobs if j.lane == "critical"]
    q.release(stopping, shutdown=True)  # a worker stopping: no outcome of the job
    q.fail(bulk[0], "http_404", "gone")
    q.retry(bulk[1], kind="timeout")  # max_attempts=1: dead
    q.settle_many([q.done(bulk[2]), q.done(bulk[2])])  # the second one is stale: not counted
    h = q.history(5)
    assert h["minutes"] == 5 and h["step"] == 60
    assert h["start_ms"] % MINUTE == 0
    assert h["now_ms"] - h["start_ms"] < 5 * MINUTE
    assert set(h["outcomes"]) == set(HISTORY_OUTCOMES)
    assert set(h["events"]) == set(HISTORY_EVENTS)
    last = {o: series[-1] for o, series in h["outcomes"].items()}
    assert last == {"done": 4, "retried": 0, "throttled": 1, "released": 1, "dead": 2}
    assert all(sum(s[:-1]) == 0 for s in h["outcomes"].values()), "only the current minute"
    assert {o: s[-1] for o, s in h["lanes"]["normal"].items()} == {
        "done": 3, "retried": 0, "throttled": 1, "released": 1, "dead": 0,
    }  # fmt: skip
    assert h["lanes"]["bulk"]["dead"][-1] == 2
    assert h["lanes"]["bulk"]["done"][-1] == 1


def test_retries_and_breaker_events_land_in_their_minutes(
    make_queue: Callable[..., Queue],
) -> None:
    q = make_queue(breaker_failures=1, breaker_max_trips=2, breaker_cooldown=1)
    q.enqueue("https://shop-1.example.com/p/1")
    (job,) = claim_all(q, 1)
    q.retry(job, kind="timeout", delay=0, domain_failed=True)  # minute 0: retried, trip
    q.testing_clock_offset_ms += 3 * MINUTE
    (job,) = claim_all(q, 1)  # the probe
    q.retry(job, kind="timeout", delay=0, domain_failed=True)  # minute 3: retried, retired
    h = q.history(10)
    assert h["outcomes"]["retried"][-4] == 1 and h["outcomes"]["retried"][-1] == 1
    assert sum(h["outcomes"]["retried"]) == 2
    assert h["events"]["trip"][-4] == 1
    assert h["events"]["retired"][-1] == 1
    assert sum(h["events"]["trip"]) == 1, "the retiring trip is a retirement"


def test_reaped_leases_are_counted(make_queue: Callable[..., Queue]) -> None:
    q = make_queue(lease=1)
    q.enqueue("https://shop-1.example.com/p/1")
    (job,) = claim_all(q, 1)
    assert q.heartbeat([job], lease=2) == [True]
    # its handler runs: an expired lease spends the attempt (unmarked, it is given back)
    assert q.mark_handler_running([job]) == [True]
    q.testing_clock_offset_ms += 5 * MINUTE
    q.reap()
    h = q.history(2)
    assert h["outcomes"]["retried"][-1] == 1


def test_history_is_bounded_in_time_and_keys(
    make_queue: Callable[..., Queue], redis_client: redis.Redis
) -> None:
    q = make_queue(domain_concurrency=100)
    for hour in range(30):
        if hour:
            q.testing_clock_offset_ms += 60 * MINUTE
        q.enqueue(f"https://shop-1.example.com/p/{hour}")
        (job,) = claim_all(q, 1)
        q.ack(job)
    keys = redis_client.keys("sq:{default}:history:*")
    assert len(keys) == 30  # written 30 hours apart on the Redis clock, so none expired yet
    for key in keys:
        ttl = redis_client.pttl(key)
        assert 0 < ttl <= 25 * 60 * MINUTE
    h = q.history(1440)
    assert len(h["outcomes"]["done"]) == 1440
    assert sum(h["outcomes"]["done"]) == 24, "the last 24 hours answered, not the older ones"
    fields = sum(redis_client.hlen(k) for k in keys)
    assert fields == 30


@pytest.mark.parametrize("minutes", [0, 1441, -5])
def test_history_minutes_are_checked(make_queue: Callable[..., Queue], minutes: int) -> None:
    with pytest.raises(ConfigError, match="minutes"):
        make_queue().history(minutes)
