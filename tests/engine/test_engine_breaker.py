"""The per-domain circuit breaker, end to end against a real Redis.

Time is moved with ``Queue.testing_clock_offset_ms`` (added to the Redis clock in every
script call), never slept. Cooldowns are measured exactly: the ``open_until`` field of the
domain hash minus the ``at`` field (the script's NOW) of the domain's latest ``trip`` event.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import pytest
import redis

from scrapeq import Job, NotFound, Queue

pytestmark = pytest.mark.backends

QueueFactory = Callable[..., Queue]


@pytest.fixture
def make_queue(make_queue: QueueFactory) -> QueueFactory:
    """conftest's queues, named ``brk``."""
    return lambda **overrides: make_queue(queue="brk", **overrides)


# --- helpers ------------------------------------------------------------------------------


def dom(i: int) -> str:
    return f"shop-{i}.example.com"


def enqueue(q: Queue, d: str, n: int, start: int = 0, **options: Any) -> list[str]:
    results = q.enqueue_many([f"https://{d}/p/{i}" for i in range(start, start + n)], **options)
    assert all(r.status == "added" for r in results)
    return [r.id for r in results]


def info(q: Queue, d: str) -> dict[str, Any]:
    return q.domains_info([d])[0]


def state(q: Queue, d: str) -> str:
    return str(info(q, d)["state"])


def take(q: Queue, d: str, n: int = 1) -> list[Job]:
    """Claim up to ``n`` jobs; every one must belong to domain ``d``."""
    jobs = q.claim(n).jobs
    assert jobs, f"expected jobs of {d}"
    assert {j.domain for j in jobs} == {d}
    return jobs


def take1(q: Queue, d: str) -> Job:
    jobs = take(q, d, 1)
    assert len(jobs) == 1
    return jobs[0]


def fail(q: Queue, job: Job) -> str:
    """A transient failure (timeout) that counts against the domain."""
    return q.retry(job, kind="timeout", delay=0, domain_failed=True)


def breaker_fields(r: redis.Redis, q: Queue, d: str) -> dict[str, Any]:
    fields = ("state", "fails", "win", "open_until", "trips", "probe")
    return dict(zip(fields, r.hmget(q.keys.domain(d), fields), strict=True))


def now_ms(r: redis.Redis, q: Queue) -> int:
    sec, usec = r.time()
    return int(sec) * 1000 + int(usec) // 1000 + q.testing_clock_offset_ms


def advance_past(r: redis.Redis, q: Queue, at_ms: int, extra_ms: int = 1000) -> None:
    """Move q's clock to ``extra_ms`` after the instant ``at_ms``."""
    q.testing_clock_offset_ms += max(at_ms - now_ms(r, q), 0) + extra_ms


def open_until_ms(r: redis.Redis, q: Queue, d: str) -> int:
    return int(r.hget(q.keys.domain(d), "open_until") or 0)


def half_open_probe(r: redis.Redis, q: Queue, d: str) -> Job:
    """Domain ``d`` with 40 jobs, tripped, its cooldown over: its one probe, claimed."""
    enqueue(q, d, 40)
    trip_by_failures(q, d)
    advance_past(r, q, open_until_ms(r, q, d))
    (probe,) = take(q, d, 10)
    return probe


def events_of(r: redis.Redis, q: Queue, kind: str, d: str | None = None) -> list[dict[str, str]]:
    """Raw events (newest first) of one kind, optionally of one domain."""
    out = []
    for _, fields in r.xrevrange(q.keys.events, "+", "-"):
        if fields["kind"] == kind and (d is None or fields["domain"] == d):
            out.append(fields)
    return out


def last_cooldown_s(r: redis.Redis, q: Queue, d: str) -> float:
    """Cooldown of the domain's latest trip: open_until minus the trip's NOW, in seconds."""
    trips = events_of(r, q, "trip", d)
    assert trips, f"no trip event for {d}"
    return (open_until_ms(r, q, d) - int(trips[0]["at"])) / 1000


def trip_by_failures(q: Queue, d: str, n: int = 5) -> None:
    """n consecutive transient failures of domain d, claimed one at a time."""
    for _ in range(n):
        fail(q, take1(q, d))


# --- 1. consecutive trip -------------------------------------------------------------------


def test_consecutive_failures_trip_and_a_success_resets_the_count(
    make_queue: QueueFactory, redis_client: redis.Redis
) -> None:
    q = make_queue(breaker_failures=5)
    d, other = dom(1), dom(2)
    enqueue(q, d, 60)

    trip_by_failures(q, d, 4)
    assert info(q, d)["consecutive_failures"] == 4
    q.ack(take1(q, d))
    assert info(q, d)["consecutive_failures"] == 0
    trip_by_failures(q, d, 4)
    before = info(q, d)
    assert before["state"] == "closed"
    assert before["consecutive_failures"] == 4
    assert before["open_until"] is None
    assert not events_of(redis_client, q, "trip", d)

    fail(q, take1(q, d))
    after = info(q, d)
    assert after["state"] == "open"
    assert after["open_until"] is not None and after["open_until"] > now_ms(redis_client, q)
    assert after["trips"] == 1
    assert after["consecutive_failures"] == 0
    assert [e["kind"] for e in q.events() if e["domain"] == d].count("trip") == 1
    assert after["ready"] >= 50

    # While open: none of its jobs, whatever the claim size; other domains keep flowing.
    enqueue(q, other, 30)
    flowed = 0
    for _ in range(10):
        claimed = q.claim(10).jobs
        assert all(j.domain == other for j in claimed)
        flowed += len(claimed)
        for j in claimed:
            q.ack(j)
    assert flowed >= 10
    assert state(q, d) == "open"
    assert info(q, d)["inflight"] == 0


# --- 2. open costs nothing ------------------------------------------------------------------


def test_open_domain_is_parked_and_its_jobs_are_never_touched(
    make_queue: QueueFactory, redis_client: redis.Redis
) -> None:
    q = make_queue(domain_concurrency=5)
    d, other = dom(1), dom(2)
    ids = enqueue(q, d, 5000)
    for job in take(q, d, 5):
        fail(q, job)
    assert state(q, d) == "open"
    enqueue(q, other, 200)
    for j in q.claim(10).jobs:  # this claim promotes the 5 retried jobs into the parked zset
        assert j.domain == other
        q.ack(j)

    k = q.keys
    until = open_until_ms(redis_client, q, d)
    assert redis_client.zscore(k.domains_wait, d) == until
    assert redis_client.zscore(k.domains_ready, d) is None
    zset_before = redis_client.zrange(k.domain_queue(d), 0, -1, withscores=True)
    assert len(zset_before) == 5000
    sample = [k.job(i) for i in ids[::100]] + [k.job(ids[-1])]
    jobs_before = redis_client.mget(sample)

    for _ in range(50):
        claimed = q.claim(10).jobs
        assert all(j.domain == other for j in claimed)
        for j in claimed:
            q.ack(j)

    assert redis_client.zrange(k.domain_queue(d), 0, -1, withscores=True) == zset_before
    assert redis_client.mget(sample) == jobs_before
    assert redis_client.zscore(k.domains_wait, d) == until
    assert redis_client.zscore(k.domains_ready, d) is None
    assert info(q, d)["inflight"] == 0


# --- 3. failure-rate trip -----------------------------------------------------------------


def test_failure_rate_trips_at_min_calls(
    make_queue: QueueFactory, redis_client: redis.Redis
) -> None:
    q = make_queue(breaker_failures=100, breaker_window=20, breaker_rate=0.5, breaker_min_calls=10)
    d = dom(1)
    enqueue(q, d, 30)
    for call in range(1, 10):  # success, failure, ... : 9 calls, 4 failures
        job = take1(q, d)
        if call % 2:
            q.ack(job)
        else:
            fail(q, job)
    assert state(q, d) == "closed"
    assert info(q, d)["window"] == "010101010"

    fail(q, take1(q, d))  # 10th call: 5 of 10 failed = 50%
    assert state(q, d) == "open"
    (trip,) = events_of(redis_client, q, "trip", d)
    assert "5 of the last 10" in trip["message"]


def test_no_rate_trip_below_min_calls(make_queue: QueueFactory) -> None:
    q = make_queue(breaker_failures=100, breaker_window=20, breaker_rate=0.5, breaker_min_calls=10)
    d = dom(1)
    enqueue(q, d, 20)
    trip_by_failures(q, d, 9)  # 100% failures, but only 9 calls
    i = info(q, d)
    assert i["state"] == "closed"
    assert i["consecutive_failures"] == 9
    fail(q, take1(q, d))  # the 10th call reaches min_calls
    assert state(q, d) == "open"


# --- 4. slow calls ----------------------------------------------------------------------------


def test_slow_successful_calls_trip_and_the_jobs_are_done(make_queue: QueueFactory) -> None:
    q = make_queue(breaker_failures=5)
    d = dom(1)
    enqueue(q, d, 10)
    done_ids = []
    for _ in range(5):
        job = take1(q, d)
        assert q.ack(job, domain_failed=True) == "done"
        done_ids.append(job.id)
    i = info(q, d)
    assert i["state"] == "open"
    assert i["done"] == 5
    assert all(q.get_job(j) is None for j in done_ids)
    st = q.status()
    assert st["counts"]["done"] == 5
    assert st["counts"]["dead"] == 0


# --- 5. permanent per-page failures ---------------------------------------------------------


def test_404s_never_count(make_queue: QueueFactory) -> None:
    q = make_queue(breaker_failures=5, breaker_min_calls=10)
    d = dom(1)
    enqueue(q, d, 60)
    for _ in range(30):
        assert q.fail(take1(q, d), "http_404", domain_failed=None) == "dead"
    i = info(q, d)
    assert i["state"] == "closed"
    assert i["consecutive_failures"] == 0
    assert i["window"] == ""

    # Nor do they break a streak of real failures: they carry no information at all.
    trip_by_failures(q, d, 4)
    for _ in range(10):
        q.fail(take1(q, d), "http_404", domain_failed=None)
    i = info(q, d)
    assert i["state"] == "closed"
    assert i["consecutive_failures"] == 4
    assert {j.dead_reason for j in q.dead_letters(domain=d, limit=100)} == {"http_404"}


# --- 6. cooldown, doubling, cap, jitter --------------------------------------------------


def test_cooldown_jitter_doubling_and_cap(
    make_queue: QueueFactory, redis_client: redis.Redis
) -> None:
    q = make_queue(
        domain_concurrency=5, breaker_cooldown_max=300, global_trip_min=1000, breaker_max_trips=8
    )
    domains = [dom(i) for i in range(8)]
    for d in domains:
        enqueue(q, d, 12)
    first = q.claim(100).jobs
    assert len(first) == 5 * len(domains)
    for job in first:
        fail(q, job)

    cools = {d: last_cooldown_s(redis_client, q, d) for d in domains}
    assert all(96 <= c <= 144 for c in cools.values()), cools
    assert len(set(cools.values())) > 1, "cooldowns carry jitter"

    # Trips 2, 3, 4: 240 s, then 480 s capped at 300 s; all +-20%.
    for trip_no, (low, high) in enumerate([(192, 288), (240, 360), (240, 360)], start=2):
        latest = max(open_until_ms(redis_client, q, d) for d in domains)
        advance_past(redis_client, q, latest)
        probes = q.claim(100).jobs
        assert sorted(j.domain for j in probes) == sorted(domains), "one probe per domain"
        for job in probes:
            fail(q, job)
        cools = {d: last_cooldown_s(redis_client, q, d) for d in domains}
        assert all(low <= c <= high for c in cools.values()), (trip_no, cools)
        assert all(info(q, d)["trips"] == trip_no for d in domains)
        assert all(state(q, d) == "open" for d in domains)


# --- 7. half-open ------------------------------------------------------------------------------


def test_half_open_allows_one_probe_and_success_closes_and_resets(
    make_queue: QueueFactory, redis_client: redis.Redis
) -> None:
    q = make_queue(domain_concurrency=4, breaker_failures=5)
    d = dom(1)
    enqueue(q, d, 40)
    trip_by_failures(q, d)
    assert state(q, d) == "open"
    parked = q.claim(10)
    assert parked.jobs == []
    assert parked.next_due is not None
    assert 95 <= parked.next_due <= 144, "a worker may sleep until the cooldown ends"

    advance_past(redis_client, q, open_until_ms(redis_client, q, d))
    assert state(q, d) == "half_open"  # reported once the cooldown is over
    probe = take(q, d, 10)
    assert len(probe) == 1
    assert breaker_fields(redis_client, q, d)["probe"] == probe[0].id
    assert q.claim(10).jobs == [], "only one probe in flight"
    assert state(q, d) == "half_open"

    q.ack(probe[0])
    i = info(q, d)
    assert i["state"] == "closed"
    assert i["trips"] == 0
    assert i["consecutive_failures"] == 0
    assert events_of(redis_client, q, "recovered", d)
    assert len(take(q, d, 10)) == 4, "concurrency back to normal"


def test_reset_after_recovery_restarts_cooldown_from_base(
    make_queue: QueueFactory, redis_client: redis.Redis
) -> None:
    q = make_queue(breaker_failures=5)
    d = dom(1)
    enqueue(q, d, 40)
    trip_by_failures(q, d)
    advance_past(redis_client, q, open_until_ms(redis_client, q, d))
    q.ack(take1(q, d))
    assert state(q, d) == "closed"
    trip_by_failures(q, d)
    assert info(q, d)["trips"] == 1
    assert 96 <= last_cooldown_s(redis_client, q, d) <= 144


def test_a_probe_keeps_its_slot_when_its_download_ends(
    make_queue: QueueFactory, redis_client: redis.Redis
) -> None:
    q = make_queue(domain_concurrency=4, breaker_failures=5)
    d = dom(1)
    probe = half_open_probe(redis_client, q, d)
    assert q.downloaded([probe]) == [False], "its outcome decides the breaker"
    assert q.claim(10).jobs == [], "still only one probe in flight"
    q.ack(probe)
    assert state(q, d) == "closed"
    assert len(take(q, d, 10)) == 4


def test_half_open_probe_failure_reopens_with_doubled_cooldown(
    make_queue: QueueFactory, redis_client: redis.Redis
) -> None:
    q = make_queue(domain_concurrency=4, breaker_failures=5)
    d = dom(1)
    probe = half_open_probe(redis_client, q, d)
    fail(q, probe)
    i = info(q, d)
    assert i["state"] == "open"
    assert i["trips"] == 2
    assert 192 <= last_cooldown_s(redis_client, q, d) <= 288
    assert q.claim(10).jobs == []
    assert events_of(redis_client, q, "trip", d)[0]["message"].startswith("probe failed")


# --- 8. exactly one probe under concurrent claimers -------------------------------------


def _claim_together(queues: Sequence[Queue], n: int) -> list[Job]:
    barrier = threading.Barrier(len(queues))
    results: list[list[Job]] = [[] for _ in queues]
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            barrier.wait(timeout=10)
            results[i] = queues[i].claim(n).jobs
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(queues))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not errors, errors
    return [j for r in results for j in r]


def test_exactly_one_probe_under_concurrent_claimers(
    make_queue: QueueFactory, redis_client: redis.Redis
) -> None:
    q = make_queue(domain_concurrency=8, breaker_failures=5, global_trip_min=1000)
    claimers = [
        make_queue(domain_concurrency=8, breaker_failures=5, global_trip_min=1000) for _ in range(8)
    ]
    d = dom(1)
    enqueue(q, d, 200)
    trip_by_failures(q, d)
    for _round in range(3):
        advance_past(redis_client, q, open_until_ms(redis_client, q, d), extra_ms=1)
        for c in claimers:
            c.testing_clock_offset_ms = q.testing_clock_offset_ms
        got = _claim_together(claimers, 10)
        assert [j.domain for j in got] == [d], f"exactly one probe, got {len(got)}"
        assert breaker_fields(redis_client, q, d)["probe"] == got[0].id
        assert fail(q, got[0]) == "retried"
        assert state(q, d) == "open"


# --- 9. retirement ------------------------------------------------------------------------------


def _retire(q: Queue, r: redis.Redis, d: str) -> None:
    """Trip d three times in a row (max_trips=3): failures, then two failed probes."""
    for job in take(q, d, 5):
        fail(q, job)
    assert info(q, d)["trips"] == 1
    for _ in range(2):
        advance_past(r, q, open_until_ms(r, q, d))
        (probe,) = take(q, d, 10)
        fail(q, probe)


def _drain(q: Queue, r: redis.Redis, d: str) -> list[int]:
    """Claim until d has no ready jobs; answers dead letters added per claim."""
    added = []
    for _ in range(20):
        dead_before = r.zcard(q.keys.domain_dead(d))
        assert q.claim(10).jobs == []
        added.append(r.zcard(q.keys.domain_dead(d)) - dead_before)
        if info(q, d)["ready"] == 0:
            return added
    raise AssertionError(f"backlog never drained: {added}")


def test_retirement_dead_letters_backlog_and_replay_brings_it_back(
    make_queue: QueueFactory, redis_client: redis.Redis
) -> None:
    q = make_queue(breaker_max_trips=3, breaker_failures=5, domain_concurrency=5)
    d = dom(1)
    enqueue(q, d, 250)
    enqueue(q, d, 3, start=1000, delay=3600)
    _retire(q, redis_client, d)

    i = info(q, d)
    assert i["state"] == "retired"
    assert i["trips"] == 3
    assert events_of(redis_client, q, "retired", d)
    assert i["ready"] + i["delayed"] + i["dead"] == 253
    assert i["ready"] >= 240

    added = _drain(q, redis_client, d)
    assert len(added) >= 3, "drained in bounded slices, not in one call"
    assert max(added) <= 200
    i = info(q, d)
    assert i["delayed"] == 3
    assert i["dead"] == 250

    q.testing_clock_offset_ms += 3_700_000  # the 3 delayed jobs come due
    assert q.claim(10).jobs == []
    i = info(q, d)
    assert (i["ready"], i["delayed"], i["inflight"], i["dead"]) == (0, 0, 0, 253)
    dead = q.dead_letters(domain=d, limit=500)
    assert len(dead) == 253
    assert {j.dead_reason for j in dead} == {"domain_unavailable"}

    late = q.enqueue(f"https://{d}/late")
    assert late.status == "dead"
    assert q.get_job(late.id).dead_reason == "domain_unavailable"  # type: ignore[union-attr]
    st = q.status()
    assert any(a["kind"] == "domain_retired" and a["domain"] == d for a in st["alarms"])
    assert [x["state"] for x in st["domains"] if x["domain"] == d] == ["retired"]

    assert q.breaker_reset(d) == "closed"
    i = info(q, d)
    assert i["state"] == "closed"
    assert i["trips"] == 0
    assert not any(a["kind"] == "domain_retired" for a in q.status()["alarms"])
    moved, missing, _ = q.replay(domain=d)
    assert (moved, missing) == (254, [])
    assert info(q, d)["ready"] == 254
    assert len(take(q, d, 10)) == 5


# --- 10. global-fault guard ---------------------------------------------------------------


def _eight_domains_one_success_each(q: Queue) -> tuple[list[str], dict[str, list[Job]]]:
    domains = [dom(i) for i in range(8)]
    for d in domains:
        enqueue(q, d, 7)
    by_domain: dict[str, list[Job]] = {d: [] for d in domains}
    for job in q.claim(100).jobs:
        by_domain[job.domain].append(job)
    assert all(len(v) == 7 for v in by_domain.values())
    for d in domains:
        q.ack(by_domain[d].pop())  # every domain is active
    return domains, by_domain


GUARD = {
    "global_trip_min": 5,
    "global_trip_share": 0.5,
    "global_trip_window": 60,
    "breaker_failures": 5,
    "domain_concurrency": 10,
}


def test_global_guard_pauses_dispatch_instead_of_condemning_sites(
    make_queue: QueueFactory, redis_client: redis.Redis
) -> None:
    q = make_queue(**GUARD)
    domains, jobs = _eight_domains_one_success_each(q)
    tripping = domains[:5]
    for n, d in enumerate(tripping):
        for job in jobs[d][:5]:
            fail(q, job)
        if n < 4:
            assert state(q, d) == "open"
            assert q.status()["paused_until"] is None

    st = q.status()
    assert st["paused_until"] is not None
    assert any(a["kind"] == "global_pause" for a in st["alarms"])
    assert events_of(redis_client, q, "global_pause")
    assert all(state(q, d) == "closed" for d in domains), "tripped domains are not left open"
    assert all(info(q, d)["open_until"] is None for d in tripping)
    claimed = q.claim(100)
    assert claimed.jobs == []
    assert claimed.next_due is not None and claimed.next_due > 60

    for d in domains:  # the spare job of each domain finishes during the pause
        q.ack(jobs[d][5])
    q.testing_clock_offset_ms += 150_000  # the pause is at most 144 s
    assert q.status()["paused_until"] is None
    resumed = q.claim(100).jobs
    assert {j.domain for j in resumed} == set(tripping), "the retried jobs flow again"
    assert len(resumed) == 25


def test_a_few_trips_do_not_pause_and_stay_open(make_queue: QueueFactory) -> None:
    q = make_queue(**GUARD)
    domains, jobs = _eight_domains_one_success_each(q)
    for d in domains[:3]:
        for job in jobs[d][:5]:
            fail(q, job)
    st = q.status()
    assert st["paused_until"] is None
    assert not any(a["kind"] == "global_pause" for a in st["alarms"])
    assert [state(q, d) for d in domains] == ["open"] * 3 + ["closed"] * 5
    for d in domains:
        q.ack(jobs[d][5])
    for d in domains:
        enqueue(q, d, 2, start=100)
    claimed = q.claim(100).jobs
    assert {j.domain for j in claimed} == set(domains[3:])


def test_failures_during_a_global_pause_do_not_condemn_a_site_afterwards(
    make_queue: QueueFactory,
) -> None:
    q = make_queue(**{**GUARD, "domain_concurrency": 20})
    domains = [dom(i) for i in range(8)]
    for d in domains:
        enqueue(q, d, 12)
    jobs: dict[str, list[Job]] = {d: [] for d in domains}
    for job in q.claim(200).jobs:
        jobs[job.domain].append(job)
    for d in domains:
        q.ack(jobs[d].pop())
    for d in domains[:5]:
        for job in jobs[d][:5]:
            fail(q, job)
    assert q.status()["paused_until"] is not None

    victim = domains[5]  # its in-flight jobs fail while our network is down
    for job in jobs[victim][:5]:
        fail(q, job)
    assert state(q, victim) == "closed"
    q.testing_clock_offset_ms += 150_000
    (job, *_) = [j for j in q.claim(200).jobs if j.domain == victim]
    fail(q, job)  # one failure after the pause
    assert state(q, victim) == "closed"


# --- 11. manual steering ------------------------------------------------------------------


def test_manual_trip_and_reset(make_queue: QueueFactory, redis_client: redis.Redis) -> None:
    q = make_queue(breaker_max_trips=3)
    d = dom(1)
    enqueue(q, d, 10)
    assert q.breaker_trip(d, cooldown=30) == "open"
    assert last_cooldown_s(redis_client, q, d) == 30
    assert state(q, d) == "open"
    assert q.claim(10).jobs == []

    for _ in range(5):  # trips stop at max_trips - 1: a hand trip never retires
        assert q.breaker_trip(d, cooldown=30) == "open"
        assert state(q, d) == "open"
        assert info(q, d)["trips"] <= 2
    assert info(q, d)["trips"] == 2

    q.testing_clock_offset_ms += 31_000
    assert state(q, d) == "half_open"
    q.testing_clock_offset_ms = 0
    assert q.breaker_reset(d) == "closed"
    i = info(q, d)
    assert (i["state"], i["trips"], i["open_until"]) == ("closed", 0, None)
    assert len(take(q, d, 10)) == 2
    assert events_of(redis_client, q, "reset", d)


def test_manual_trip_never_retires_after_real_trips(
    make_queue: QueueFactory, redis_client: redis.Redis
) -> None:
    q = make_queue(breaker_max_trips=3, domain_concurrency=5)
    d = dom(1)
    enqueue(q, d, 20)
    for job in take(q, d, 5):
        fail(q, job)
    advance_past(redis_client, q, open_until_ms(redis_client, q, d))
    fail(q, take1(q, d))
    assert info(q, d)["trips"] == 2  # max_trips - 1
    assert q.breaker_trip(d, cooldown=30) == "open"
    i = info(q, d)
    assert (i["state"], i["trips"]) == ("open", 2)
    assert last_cooldown_s(redis_client, q, d) == 30


def test_manual_trip_default_cooldown_is_never_below_the_base_cooldown(
    make_queue: QueueFactory, redis_client: redis.Redis
) -> None:
    q = make_queue(breaker_max_trips=1)
    for i in range(5):
        d = dom(i)
        enqueue(q, d, 1)
        assert q.breaker_trip(d) == "open"
        assert 96 <= last_cooldown_s(redis_client, q, d) <= 144


def test_manual_steering_of_unknown_domain_raises_not_found(make_queue: QueueFactory) -> None:
    q = make_queue()
    enqueue(q, dom(1), 1)
    with pytest.raises(NotFound):
        q.breaker_trip("nowhere.example.com", cooldown=30)
    with pytest.raises(NotFound):
        q.breaker_reset("nowhere.example.com")


# --- 12. late outcomes ----------------------------------------------------------------------


def test_outcomes_of_jobs_claimed_before_a_trip_do_not_move_an_open_breaker(
    make_queue: QueueFactory, redis_client: redis.Redis
) -> None:
    q = make_queue(domain_concurrency=10, breaker_failures=5)
    d = dom(1)
    enqueue(q, d, 20)
    jobs = take(q, d, 8)
    assert len(jobs) == 8
    for job in jobs[:5]:
        fail(q, job)
    before = breaker_fields(redis_client, q, d)
    assert before["state"] == "open"

    q.ack(jobs[5])
    fail(q, jobs[6])
    q.ack(jobs[7], domain_failed=True)
    assert breaker_fields(redis_client, q, d) == before
    assert info(q, d)["inflight"] == 0


def test_half_open_ignores_outcomes_of_non_probe_jobs(
    make_queue: QueueFactory, redis_client: redis.Redis
) -> None:
    # A lease longer than the cooldown: the old jobs must still be in flight when it ends.
    q = make_queue(domain_concurrency=10, breaker_failures=5, lease=600)
    d = dom(1)
    enqueue(q, d, 20)
    jobs = take(q, d, 7)
    for job in jobs[:5]:
        fail(q, job)
    old_fail, old_ok = jobs[5], jobs[6]
    advance_past(redis_client, q, open_until_ms(redis_client, q, d))

    # Cooldown over: half-open, but the two old jobs fill its single slot.
    assert q.claim(10).jobs == []
    assert breaker_fields(redis_client, q, d)["state"] == "half_open"
    fail(q, old_fail)
    after_fail = breaker_fields(redis_client, q, d)
    assert (after_fail["state"], after_fail["trips"]) == ("half_open", "1")
    assert len(events_of(redis_client, q, "trip", d)) == 1
    q.ack(old_ok)
    after_ok = breaker_fields(redis_client, q, d)
    assert (after_ok["state"], after_ok["trips"]) == ("half_open", "1")
    assert not events_of(redis_client, q, "recovered", d)

    (probe,) = take(q, d, 10)
    q.ack(probe)
    assert state(q, d) == "closed"


def test_job_released_to_a_retired_domain_is_drained_not_stranded(
    make_queue: QueueFactory,
) -> None:
    q = make_queue(breaker_max_trips=1, breaker_failures=1)
    q.enqueue_many(["https://a.example.com/1", "https://a.example.com/2"])
    ja, jb = q.claim(2).jobs
    q.retry(ja, kind="timeout", delay=0, domain_failed=True)  # retires the domain
    q.reap()
    q.release(jb)
    q.testing_clock_offset_ms += 3_600_000
    claimed = q.claim(10)
    assert claimed.jobs == []
    counts = q.status()["counts"]
    assert counts["ready"] == 0 and counts["dead"] == 2
    assert claimed.next_due is None or q.claim(10).next_due is None


def test_global_guard_leaves_a_retired_domain_retired(make_queue: QueueFactory) -> None:
    q = make_queue(
        breaker_failures=1, breaker_max_trips=2, breaker_cooldown=10, global_trip_min=2,
        lease=600, domain_concurrency=1,
    )  # fmt: skip
    q.enqueue("https://y.example.com/1")
    (jy,) = q.claim(1).jobs
    q.enqueue_many([f"https://x.example.com/{i}" for i in range(300)])
    (jx,) = q.claim(1).jobs
    q.retry(jx, kind="timeout", delay=0, domain_failed=True)  # first trip of x
    q.testing_clock_offset_ms += 15_000
    (probe,) = q.claim(5).jobs
    q.retry(probe, kind="timeout", delay=0, domain_failed=True)  # second trip: x retired
    q.claim(1)  # drains a slice of x's backlog
    q.retry(jy, kind="timeout", delay=0, domain_failed=True)  # y trips: the guard fires
    assert q.status()["paused_until"] is not None
    (x,) = q.domains_info(["x.example.com"])
    assert x["state"] == "retired", "the guard does not revive a retired domain"
    q.breaker_reset("x.example.com")
    q.testing_clock_offset_ms += 600_000
    q.enqueue("https://x.example.com/fresh", lane="critical")
    fresh = [j for j in q.claim(10).jobs if j.url.endswith("/fresh")]
    assert len(fresh) == 1, "after a reset the domain's new jobs are claimed, not drained"
