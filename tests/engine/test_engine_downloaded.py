"""A claimed job's domain slot given back when its download ends (``Queue.downloaded``,
``lua/downloaded-1.lua``), against a real Redis: the domain's next job is claimable while the
job's callback runs, and its settle, reap or forced cancel frees no slot a second time.

Time is moved with ``Queue.testing_clock_offset_ms``, never slept.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest
import redis

from scrapeq import Job, Queue
from scrapeq.engine.lua.scripts import DownloadSample
from scrapeq.errors import ScriptError

pytestmark = pytest.mark.backends

QueueFactory = Callable[..., Queue]
D = "shop.example.com"


def enqueue(q: Queue, n: int, domain: str = D) -> list[str]:
    results = q.enqueue_many([f"https://{domain}/p/{i}" for i in range(n)])
    assert all(r.status == "added" for r in results)
    return [r.id for r in results]


def counter(r: redis.Redis, q: Queue, domain: str = D) -> int:
    """The domain's count of slots taken, as the scripts keep it."""
    return int(r.hget(q.keys.domain(domain), "inflight") or 0)


def claim1(q: Queue) -> Job:
    jobs = q.claim(5).jobs
    assert len(jobs) == 1, jobs
    return jobs[0]


def test_a_downloaded_job_lets_its_domain_next_job_be_claimed(
    make_queue: QueueFactory, redis_client: redis.Redis
) -> None:
    q = make_queue(queue="dl", domain_concurrency=1)
    enqueue(q, 3)
    first = claim1(q)
    assert q.claim(5).jobs == [], "the domain's one slot is taken"

    assert q.downloaded([first]) == [True]
    assert counter(redis_client, q) == 0
    second = claim1(q)
    assert q.claim(5).jobs == [], "the slot went to the second job"
    assert counter(redis_client, q) == 1

    # the first job keeps its lease: renewed, then settled; its settle frees no slot again
    assert q.heartbeat([first]) == [True]
    assert q.ack(first) == "done"
    assert counter(redis_client, q) == 1
    assert q.claim(5).jobs == [], "the second job still holds the slot"
    assert q.ack(second) == "done"
    assert counter(redis_client, q) == 0
    assert len(q.claim(5).jobs) == 1
    assert q.audit().problems == []


def test_giving_back_twice_frees_one_slot(
    make_queue: QueueFactory, redis_client: redis.Redis
) -> None:
    q = make_queue(queue="dl", domain_concurrency=2)
    enqueue(q, 4)
    a, b = q.claim(2).jobs
    assert counter(redis_client, q) == 2
    assert q.downloaded([a, a]) == [True, True]
    assert q.downloaded([a]) == [True]
    assert counter(redis_client, q) == 1, "one lease, one slot back"
    assert q.audit().problems == []
    assert q.retry(a, delay=0) == "retried"
    assert counter(redis_client, q) == 1, "b's slot"
    assert q.ack(b) == "done"
    assert counter(redis_client, q) == 0


def test_a_stale_lease_gives_nothing_back(
    make_queue: QueueFactory, redis_client: redis.Redis
) -> None:
    q = make_queue(queue="dl", domain_concurrency=1, lease=60)
    enqueue(q, 2)
    job = claim1(q)
    assert q.ack(job) == "done"
    second = claim1(q)
    assert q.downloaded([job]) == [False], "settled already"
    assert counter(redis_client, q) == 1
    forged = dataclasses.replace(second, token=second.token + 1)
    assert q.downloaded([forged]) == [False], "not its token"
    assert counter(redis_client, q) == 1
    assert q.claim(5).jobs == []


def test_a_reaped_lease_whose_slot_came_back_frees_none_again(
    make_queue: QueueFactory, redis_client: redis.Redis
) -> None:
    q = make_queue(queue="dl", domain_concurrency=1, lease=60)
    enqueue(q, 3)
    first = claim1(q)
    assert q.downloaded([first]) == [True]
    second = claim1(q)
    q.testing_clock_offset_ms = 50_000
    assert q.heartbeat([second]) == [True]  # the second one's worker lives on
    q.testing_clock_offset_ms = 61_000  # the first one's lease is over
    reaped, _, _ = q.reap()
    assert reaped == 1
    assert counter(redis_client, q) == 1, "the second job's slot, still taken"
    assert q.claim(5).jobs == []
    assert q.audit().problems == []
    assert redis_client.zscore(q.keys.inflight, first.id) is None
    assert redis_client.zscore(q.keys.delayed, first.id) is not None, "its attempt given back"


def test_a_forced_cancel_of_a_downloaded_job_frees_none_again(
    make_queue: QueueFactory, redis_client: redis.Redis
) -> None:
    q = make_queue(queue="dl", domain_concurrency=1)
    enqueue(q, 3)
    first = claim1(q)
    assert q.downloaded([first]) == [True]
    claim1(q)
    assert q.cancel(ids=[first.id], force=True).cancelled == 1
    assert counter(redis_client, q) == 1
    assert q.claim(5).jobs == []
    assert q.audit().problems == []


def test_the_next_lease_of_the_job_holds_its_slot_again(
    make_queue: QueueFactory, redis_client: redis.Redis
) -> None:
    q = make_queue(queue="dl", domain_concurrency=1)
    enqueue(q, 1)
    first = claim1(q)
    assert q.downloaded([first]) == [True]
    assert q.release(first, delay=0) == "released"
    again = claim1(q)
    assert again.id == first.id and again.token != first.token
    assert counter(redis_client, q) == 1, "a new lease takes a slot"
    assert q.ack(again) == "done"
    assert counter(redis_client, q) == 0


def test_audit_repairs_a_counter_against_the_leases_holding_a_slot(
    make_queue: QueueFactory, redis_client: redis.Redis
) -> None:
    q = make_queue(queue="dl", domain_concurrency=3)
    enqueue(q, 4)
    a, b, _ = q.claim(3).jobs
    assert q.downloaded([a, b]) == [True, True]
    assert counter(redis_client, q) == 1
    redis_client.hset(q.keys.domain(D), "inflight", 3)  # a counter gone wrong
    problems = q.audit().problems
    assert [p.kind for p in problems] == ["inflight_count"]
    assert "leases 1" in problems[0].detail
    q.audit(repair=True)
    assert counter(redis_client, q) == 1
    assert q.audit().problems == []


def test_jobs_of_several_partitions_are_each_given_back(
    make_queue: QueueFactory, redis_client: redis.Redis
) -> None:
    q = make_queue(queue="dl", partitions=3, domain_concurrency=1)
    domains = [f"shop-{i}.example.com" for i in range(6)]
    for d in domains:
        enqueue(q, 2, d)
    jobs = q.claim(20).jobs
    assert sorted(j.domain for j in jobs) == domains
    assert q.claim(20).jobs == []
    assert q.downloaded(list(reversed(jobs))) == [True] * len(jobs)
    assert sorted(j.domain for j in q.claim(20).jobs) == domains
    assert q.settle_many([q.done(j) for j in jobs])
    assert q.audit().problems == []


# --- a download's sample: whether it charges its domain is the script's (issue 39) ----------

ADAPTIVE_STATE = ("alim", "alat", "abase", "acnt", "aok")


def adaptive_state(r: redis.Redis, q: Queue, domain: str = D) -> list[str | None]:
    got: list[str | None] = r.hmget(q.keys.domain(domain), list(ADAPTIVE_STATE))
    return got


def test_a_slow_answer_under_an_adaptive_domain_keeps_its_slot_until_its_settle(
    make_queue: QueueFactory, redis_client: redis.Redis
) -> None:
    """A download whose latency would cut an adaptive domain's limit (includes/adaptive_rule.lua,
    RULE.adaptive_charges) keeps its slot; a fast one gives it back. The sample is only asked
    about: the adaptive state is the same after ``downloaded``, and the settle records it once."""
    q = make_queue(queue="dl", domain_concurrency="auto", slow_call=30)
    enqueue(q, 6)
    first, slow = q.claim(5).jobs  # the adaptive limit starts at 2
    fast = DownloadSample(latency_ms=10, domain_failed=False)
    assert q.settle_many([dataclasses.replace(q.done(first), latency_ms=10)]) == ["done"]
    state = adaptive_state(redis_client, q)
    assert state[1] == "10", "the baseline: one answer of 10 ms"
    quick = q.claim(5).jobs[0]
    held = counter(redis_client, q)
    slow_sample = DownloadSample(latency_ms=1_000, domain_failed=False)
    assert q.downloaded([slow, quick], [slow_sample, fast]) == [False, True]
    assert counter(redis_client, q) == held - 1, "the fast one's slot alone came back"
    assert adaptive_state(redis_client, q) == state, "asked, not recorded"
    limit = float(state[0] or 0)
    settled = dataclasses.replace(q.done(slow), latency_ms=1_000)
    assert q.settle_many([settled]) == ["done"]
    assert counter(redis_client, q) == held - 2
    after = adaptive_state(redis_client, q)
    assert float(after[0] or 0) < limit, "the settle cut the limit for the slow answer"
    assert after[1] == "208", "the average took the slow answer once: 10 + 0.2 x 990"
    assert q.audit().problems == []


def test_a_sample_charging_the_breaker_or_signalling_overload_keeps_its_slot(
    make_queue: QueueFactory, redis_client: redis.Redis
) -> None:
    """Not adaptive: a failure (the breaker's input) or an overload keeps the slot; a
    success, with its latency however slow, gives it back."""
    q = make_queue(queue="dl", domain_concurrency=4)
    enqueue(q, 4)
    jobs = q.claim(4).jobs
    samples = [
        DownloadSample(latency_ms=10, domain_failed=True),
        DownloadSample(latency_ms=10, domain_failed=False, overload=True),
        DownloadSample(latency_ms=9_000, domain_failed=False),
        None,  # no sample: given back as before
    ]
    assert q.downloaded(jobs, samples) == [False, False, True, True]
    assert counter(redis_client, q) == 2


def test_a_bad_sample_is_refused_before_any_write(make_queue: QueueFactory) -> None:
    q = make_queue(queue="dl", domain_concurrency=2)
    enqueue(q, 1)
    (job,) = q.claim(1).jobs
    with pytest.raises(ScriptError, match="latency"):
        q.downloaded([job], [DownloadSample(latency_ms=-5)])
