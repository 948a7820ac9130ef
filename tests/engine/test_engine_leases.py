"""Leases, fencing tokens, heartbeats, release, throttle and retry against a real Redis.

Time is moved with ``Queue.testing_clock_offset_ms`` (added to the Redis clock in every script
call), never by sleeping.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import redis

from scrapeq.engine.lua.scripts import Settled
from scrapeq.engine.model.job import Job
from scrapeq.engine.queue import AsyncQueue, Queue
from scrapeq.errors import StaleLease

pytestmark = pytest.mark.backends

SEC = 1000

QueueFactory = Callable[..., Queue]


def url(shop: int, page: int = 1) -> str:
    return f"https://shop-{shop}.example.com/p/{page}"


def at(q: Queue, seconds: float) -> None:
    """Move the queue's clock to ``seconds`` after the test's start."""
    q.testing_clock_offset_ms = round(seconds * SEC)


def redis_now_ms(client: redis.Redis, q: Queue) -> int:
    """The clock the scripts see: Redis TIME plus the queue's offset."""
    secs, micros = client.time()
    return int(secs) * SEC + int(micros) // 1000 + q.testing_clock_offset_ms


def claim_one(q: Queue) -> Job:
    claimed = q.claim()
    assert len(claimed.jobs) == 1, claimed
    return claimed.jobs[0]


def domain_info(q: Queue, domain: str) -> dict[str, Any]:
    (info,) = q.domains_info([domain])
    return info


def kinds(job: Job) -> list[str]:
    return [e.kind for e in job.errors]


# --- 1. lease expiry in the handler is an attempt (outside it, given back: test_engine_faults)


def test_lease_expiry_is_reaped_as_an_attempt(make_queue: QueueFactory, redis_client) -> None:
    q = make_queue(lease=60)
    job_id = q.enqueue(url(1)).id
    first = claim_one(q)
    assert (first.id, first.attempts) == (job_id, 1)
    at(q, 10)
    assert q.heartbeat([first]) == [True]
    assert q.mark_handler_running([first]) == [True]  # its handler ran, then its worker died

    at(q, 69)
    assert q.claim().jobs == []
    assert redis_client.zscore(q.keys.inflight, job_id) is not None

    at(q, 71)
    before = redis_now_ms(redis_client, q)
    again = q.claim().jobs
    assert redis_client.zscore(q.keys.inflight, job_id) is None
    if again:  # the jittered backoff drew ~0 ms: promoted by the same claim
        second = again[0]
    else:
        score = redis_client.zscore(q.keys.delayed, job_id)
        assert score is not None, "the reaped job must wait in the delayed set"
        assert 0 <= score - before <= 15 * SEC + 1000  # backoff_ms(1) < base
        stored = q.get_job(job_id)
        assert stored is not None
        assert stored.attempts == 1
        assert kinds(stored) == ["lease_expired"]
        assert stored.dead_reason is None
        at(q, 71 + 16)
        second = claim_one(q)
    assert second.id == job_id
    assert second.attempts == 2
    assert second.token > first.token
    assert "lease_expired" in kinds(second)


# --- 2. a job that kills workers ends dead ---------------------------------------------------


def test_job_that_keeps_crashing_workers_ends_dead(make_queue: QueueFactory) -> None:
    q = make_queue(lease=60, max_attempts=3, backoff_base=1, backoff_cap=1)
    job_id = q.enqueue(url(1)).id
    t = 0.0
    for attempt in (1, 2, 3):
        job = claim_one(q)
        assert (job.id, job.attempts) == (job_id, attempt)
        at(q, t + 10)
        assert q.mark_handler_running([job]) == [True]  # it ran, then took its worker down
        t += 71  # past the lease: the reap spends the attempt
        at(q, t)
        assert q.reap()[0] == 1
        t += 2  # past the (<= 1 s) backoff
        at(q, t)
    assert q.claim().jobs == []
    (dead,) = q.dead_letters()
    assert dead.id == job_id
    assert dead.dead_reason == "max_attempts"
    assert dead.attempts == 3
    assert kinds(dead) == ["lease_expired"] * 3
    assert q.status()["counts"]["dead"] == 1
    assert q.status()["counts"]["inflight"] == 0


# --- 3. stale tokens are refused -------------------------------------------------------------


def _reaped_and_reclaimed(q: Queue) -> tuple[Job, Job]:
    """Claim, let the lease expire, re-claim: (the old Job object, the new one)."""
    old = claim_one(q)
    at(q, 61)
    q.reap()
    at(q, 61 + 2)  # backoff_base=1 s: due again
    new = claim_one(q)
    assert new.id == old.id and new.token > old.token
    return old, new


@pytest.mark.parametrize("action", ["ack", "retry", "fail", "release", "throttle"])
def test_stale_token_is_refused_and_changes_nothing(
    make_queue: QueueFactory, redis_client, action: str
) -> None:
    q = make_queue(lease=60, backoff_base=1, backoff_cap=1)
    q.enqueue(url(1))
    old, new = _reaped_and_reclaimed(q)
    stored_before = redis_client.get(q.keys.job(old.id))
    lease_before = redis_client.zscore(q.keys.inflight, old.id)
    stats_before = redis_client.hgetall(q.keys.stats)
    domain_before = redis_client.hgetall(q.keys.domain(old.domain))

    calls = {
        "ack": lambda: q.ack(old),
        "retry": lambda: q.retry(old, delay=0),
        "fail": lambda: q.fail(old, "http_404"),
        "release": lambda: q.release(old),
        "throttle": lambda: q.throttle(old, retry_after=30),
    }
    with pytest.raises(StaleLease):
        calls[action]()

    assert redis_client.get(q.keys.job(old.id)) == stored_before
    assert redis_client.zscore(q.keys.inflight, old.id) == lease_before
    assert redis_client.hgetall(q.keys.stats) == stats_before
    assert redis_client.hgetall(q.keys.domain(old.domain)) == domain_before
    assert q.dead_letters() == []
    assert q.ack(new) == "done"
    assert q.get_job(new.id) is None


def test_stale_token_after_reap_before_reclaim_is_refused(make_queue: QueueFactory) -> None:
    q = make_queue(lease=60, backoff_base=100, backoff_cap=100)
    q.enqueue(url(1))
    old = claim_one(q)
    at(q, 61)
    q.reap()
    with pytest.raises(StaleLease):
        q.ack(old)
    stored = q.get_job(old.id)
    assert stored is not None and stored.dead_reason is None


def test_settle_many_answers_stale_per_item(make_queue: QueueFactory) -> None:
    q = make_queue(lease=60, backoff_base=1, backoff_cap=1, domain_concurrency=10)
    q.enqueue(url(1, 1))
    old, new = _reaped_and_reclaimed(q)
    q.enqueue_many([url(2, 1), url(3, 1)])
    others = q.claim(5).jobs
    assert len(others) == 2
    answers = q.settle_many(
        [q.done(others[0]), q.done(old), q.failing(others[1], "http_404"), q.done(new)]
    )
    assert answers == ["done", "stale", "dead", "done"]
    assert q.get_job(others[0].id) is None
    assert [j.id for j in q.dead_letters()] == [others[1].id]
    assert q.status()["counts"]["inflight"] == 0
    assert q.status()["counts"]["done"] == 2


# --- 4. fencing tokens only grow ------------------------------------------------------------


def test_fencing_token_only_grows(make_queue: QueueFactory) -> None:
    q = make_queue(lease=60, backoff_base=1, backoff_cap=1, domain_concurrency=10)
    q.enqueue_many([url(s, p) for s in (1, 2, 3) for p in (1, 2)])
    tokens: list[int] = []
    t = 0.0
    for _ in range(4):
        batch = q.claim(3).jobs
        assert batch
        tokens.extend(j.token for j in batch)
        for j in batch[:1]:
            q.retry(j, delay=0, domain_failed=None)
        for j in batch[1:2]:
            q.release(j)
        t += 61 + 2  # the rest expire and are re-claimed later with new tokens
        at(q, t)
    assert tokens == sorted(tokens)
    assert len(set(tokens)) == len(tokens)
    assert tokens[0] >= 1


# --- 5. heartbeats ----------------------------------------------------------------------------


def test_heartbeat_renews_the_lease(make_queue: QueueFactory, redis_client) -> None:
    q = make_queue(lease=60, backoff_base=1000, backoff_cap=1000)
    q.enqueue(url(1))
    job = claim_one(q)

    at(q, 50)
    assert q.heartbeat([job]) == [True]
    at(q, 100)
    assert q.reap()[0] == 0
    assert q.claim().jobs == []
    assert redis_client.zscore(q.keys.inflight, job.id) is not None
    assert q.status()["counts"]["inflight"] == 1

    at(q, 111)
    assert q.claim().jobs == []  # the claim reaps it; the backoff keeps it delayed
    assert redis_client.zscore(q.keys.inflight, job.id) is None
    stored = q.get_job(job.id)
    # renewed, then lost while its handler was not running: given back
    assert stored is not None and kinds(stored) == ["worker_lost"] and stored.attempts == 0
    assert stored.unused == 1
    assert q.heartbeat([job]) == [False]


def test_heartbeat_with_stale_token_is_false(make_queue: QueueFactory, redis_client) -> None:
    q = make_queue(lease=60, backoff_base=1, backoff_cap=1)
    q.enqueue(url(1))
    old, new = _reaped_and_reclaimed(q)
    deadline = redis_client.zscore(q.keys.inflight, new.id)
    assert q.heartbeat([old, new], lease=300) == [False, True]
    renewed = redis_client.zscore(q.keys.inflight, new.id)
    assert renewed is not None and deadline is not None and renewed > deadline
    assert q.heartbeat([]) == []


# --- 6. release ------------------------------------------------------------------------------


def test_release_spends_no_attempt(make_queue: QueueFactory) -> None:
    q = make_queue()
    q.enqueue(url(1))
    job = claim_one(q)
    assert job.attempts == 1
    assert q.release(job, delay=0) == "released"
    again = claim_one(q)
    assert (again.id, again.attempts) == (job.id, 1)
    info = domain_info(q, job.domain)
    assert info["consecutive_failures"] == 0
    assert info["window"] == ""
    assert info["state"] == "closed"


def test_release_with_delay_waits(make_queue: QueueFactory) -> None:
    q = make_queue()
    q.enqueue(url(1))
    job = claim_one(q)
    assert q.release(job, delay=10) == "released"
    assert q.status()["counts"]["delayed"] == 1
    at(q, 9)
    assert q.claim().jobs == []
    at(q, 10.5)
    again = claim_one(q)
    assert (again.id, again.attempts) == (job.id, 1)


def test_release_does_not_touch_the_breaker(make_queue: QueueFactory) -> None:
    q = make_queue()
    q.enqueue_many([url(1, 1), url(1, 2)])
    first = claim_one(q)
    q.retry(first, delay=100)  # one failure: consecutive_failures 1
    second = claim_one(q)
    before = domain_info(q, second.domain)
    assert before["consecutive_failures"] == 1
    q.release(second)
    after = domain_info(q, second.domain)
    assert after["consecutive_failures"] == 1
    assert after["window"] == before["window"]


def test_release_budget_ends_dead_with_the_releases_in_the_history(
    make_queue: QueueFactory,
) -> None:
    q = make_queue(max_releases=2)
    job_id = q.enqueue(url(1)).id
    answers = []
    for _ in range(3):
        job = claim_one(q)
        assert job.attempts == 1
        answers.append(
            q.release(job, delay=0, kind="released:proxy_error", message="proxy refused")
        )
    # max_releases = releases a job may take (like max_throttles): the third one kills it.
    assert answers == ["released", "released", "dead"]
    (dead,) = q.dead_letters()
    assert (dead.id, dead.dead_reason, dead.releases, dead.attempts) == (
        job_id,
        "max_releases",
        3,
        0,
    )
    assert kinds(dead) == ["released:proxy_error"] * 3
    assert {e.message for e in dead.errors} == {"proxy refused"}
    assert q.status()["counts"]["dead"] == 1


def test_each_release_is_counted_and_recorded(make_queue: QueueFactory) -> None:
    q = make_queue()
    q.enqueue(url(1))
    job = claim_one(q)
    assert job.releases == 0
    assert q.release(job, delay=0) == "released"
    again = claim_one(q)
    assert again.releases == 1
    assert kinds(again) == ["released"]


def test_release_without_a_delay_backs_off_with_full_jitter(
    make_queue: QueueFactory, redis_client
) -> None:
    base = 10.0
    q = make_queue(backoff_base=base, backoff_cap=3600, domain_concurrency=50)
    n = 30
    q.enqueue_many([url(1, p) for p in range(n)])
    jobs = q.claim(n).jobs
    for j in jobs:  # one release taken already: the next bound is base * 2
        assert q.release(j, delay=0) == "released"
    jobs = q.claim(n).jobs
    assert len(jobs) == n and {j.releases for j in jobs} == {1}
    bound_ms = base * 2 * SEC
    delays = []
    for j in jobs:
        before = redis_now_ms(redis_client, q)
        answer = q.release(j)  # the settle script draws the delay and answers it
        after = redis_now_ms(redis_client, q)
        assert answer == "released" and isinstance(answer, Settled)
        score = redis_client.zscore(q.keys.delayed, j.id)
        if answer.delay_ms == 0:  # full jitter may draw 0 (1 in 20,000): ready at once
            assert score is None
            delays.append(0.0)
            continue
        assert score is not None, "a release without a delay waits"
        assert score - before >= 0 and score - after <= bound_ms
        assert answer.delay_ms is not None and score - after <= answer.delay_ms <= score - before
        delays.append(score - before)
    # Full jitter spreads over [0, bound]: 30 draws all in one half has odds 2**-29.
    assert min(delays) < bound_ms / 2 < max(delays)


def test_shutdown_release_spends_no_budget_and_no_backoff(make_queue: QueueFactory) -> None:
    q = make_queue(max_releases=1)
    q.enqueue(url(1))
    for _ in range(3):
        job = claim_one(q)  # ready again at once: no backoff
        assert q.release(job, shutdown=True) == "released"
    stored = q.get_job(job.id)
    assert stored is not None
    assert (stored.releases, stored.attempts, stored.errors) == (0, 0, ())
    assert q.dead_letters() == []


# --- 7. throttle -----------------------------------------------------------------------------


def test_throttle_spends_no_attempt_and_parks_the_domain(make_queue: QueueFactory) -> None:
    q = make_queue(max_throttles=2, domain_concurrency=5)
    q.enqueue_many([url(1, 1), url(1, 2)])
    job = claim_one(q)
    assert q.throttle(job, retry_after=30) == "throttled"
    stored = q.get_job(job.id)
    assert stored is not None
    assert stored.attempts == 0
    assert stored.throttles == 1
    assert stored.last_error is not None and stored.last_error.kind == "http_429"

    other_domain = q.enqueue(url(2, 1)).id
    at(q, 29)
    got = q.claim(10).jobs
    assert [j.id for j in got] == [other_domain]  # shop-1 is parked, shop-2 flows
    assert q.claim(10).jobs == []

    at(q, 31)
    got = q.claim(10).jobs
    assert {j.domain for j in got} == {"shop-1.example.com"}
    assert len(got) == 2
    again = next(j for j in got if j.id == job.id)
    assert again.attempts == 1  # the throttle spent nothing
    assert again.throttles == 1


def test_throttle_budget_ends_dead(make_queue: QueueFactory) -> None:
    q = make_queue(max_throttles=2)
    job_id = q.enqueue(url(1)).id
    answers = []
    for i in range(3):
        at(q, i * 31)
        job = claim_one(q)
        assert job.attempts == 1
        answers.append(q.throttle(job, retry_after=30))
    # max_throttles = deferrals a job may take (INTERFACE.md): the third one kills it.
    assert answers == ["throttled", "throttled", "dead"]
    (dead,) = q.dead_letters()
    assert dead.id == job_id
    assert dead.dead_reason == "max_throttles"
    assert dead.throttles == 3
    assert dead.attempts == 0


# --- 8. retry --------------------------------------------------------------------------------


def test_retry_with_attempts_exhausted_is_dead(make_queue: QueueFactory) -> None:
    q = make_queue(max_attempts=2)
    job_id = q.enqueue(url(1)).id
    job = claim_one(q)
    assert q.retry(job, delay=0, kind="http_503", message="first") == "retried"
    job = claim_one(q)
    assert job.attempts == 2
    assert q.retry(job, kind="timeout", message="second") == "dead"
    (dead,) = q.dead_letters()
    assert dead.id == job_id
    assert dead.dead_reason == "max_attempts"
    assert dead.last_error is not None
    assert (dead.last_error.kind, dead.last_error.message) == ("timeout", "second")
    assert [(e.kind, e.message) for e in dead.errors] == [
        ("http_503", "first"),
        ("timeout", "second"),
    ]
    assert q.status()["counts"]["dead"] == 1


@pytest.mark.parametrize("attempts", [1, 3])
def test_retry_default_delay_is_full_jitter(
    make_queue: QueueFactory, redis_client, attempts: int
) -> None:
    base = 10.0
    q = make_queue(
        backoff_base=base, backoff_cap=3600, domain_concurrency=50, breaker_failures=1000
    )
    bound_ms = base * 2 ** (attempts - 1) * SEC
    n = 30
    q.enqueue_many([url(1, p) for p in range(n)])
    jobs = q.claim(n).jobs
    assert len(jobs) == n
    # Spend attempts - 1 attempts first with immediate retries.
    for _ in range(attempts - 1):
        for j in jobs:
            assert q.retry(j, delay=0, domain_failed=None) == "retried"
        jobs = q.claim(n).jobs
        assert len(jobs) == n
    assert {j.attempts for j in jobs} == {attempts}

    delays = []
    for j in jobs:
        before = redis_now_ms(redis_client, q)
        answer = q.retry(j, domain_failed=None)  # the settle script draws the delay
        after = redis_now_ms(redis_client, q)
        assert answer == "retried" and isinstance(answer, Settled)
        score = redis_client.zscore(q.keys.delayed, j.id)
        assert score is not None
        assert score - after <= bound_ms
        assert score - before >= 0
        assert answer.delay_ms is not None and score - after <= answer.delay_ms <= score - before
        delays.append(score - before)
    # Full jitter spreads over [0, bound]: 30 draws all in one half has odds 2**-29.
    assert min(delays) < bound_ms / 2 < max(delays)


# --- 9. AsyncQueue mirrors Queue -------------------------------------------------------------


def _scenario_sync(q: Queue) -> dict[str, Any]:
    ids = [r.id for r in q.enqueue_many([url(1, 1), url(2, 1)])]
    claimed = q.claim(5)
    a, b = sorted(claimed.jobs, key=lambda j: j.id)
    out: dict[str, Any] = {
        "ids": ids,
        "claimed": [(j.id, j.attempts, j.domain) for j in (a, b)],
        "next_due": claimed.next_due,
        "ack": q.ack(a),
        "retry": q.retry(b, delay=5, kind="http_503"),
    }
    with pytest.raises(StaleLease):
        q.ack(a)
    out["status"] = q.status()
    out["job"] = q.get_job(b.id)
    return out


async def _scenario_async(q: AsyncQueue) -> dict[str, Any]:
    ids = [r.id for r in await q.enqueue_many([url(1, 1), url(2, 1)])]
    claimed = await q.claim(5)
    a, b = sorted(claimed.jobs, key=lambda j: j.id)
    out: dict[str, Any] = {
        "ids": ids,
        "claimed": [(j.id, j.attempts, j.domain) for j in (a, b)],
        "next_due": claimed.next_due,
        "ack": await q.ack(a),
        "retry": await q.retry(b, delay=5, kind="http_503"),
    }
    with pytest.raises(StaleLease):
        await q.ack(a)
    out["status"] = await q.status()
    out["job"] = await q.get_job(b.id)
    return out


def _comparable(result: dict[str, Any]) -> dict[str, Any]:
    # ids come from the server clock: compare their ranks in enqueue order
    rank = {job_id: i for i, job_id in enumerate(result.pop("ids"))}
    result["claimed"] = [(rank[i], *rest) for i, *rest in result["claimed"]]
    job: Job = result.pop("job")
    result["job"] = (rank[job.id], job.attempts, job.eligible_ms - job.created_ms > 0, kinds(job))
    result["job_lane"] = job.lane
    for lane in result["status"]["lanes"].values():
        lane.pop("oldest_ready_age")
    return result


async def test_async_queue_mirrors_queue(
    make_queue: QueueFactory,
    make_async_queue: Callable[..., AsyncQueue],
    redis_client,
) -> None:
    sync_result = _comparable(_scenario_sync(make_queue(queue="mirror-sync")))
    async_result = _comparable(await _scenario_async(make_async_queue(queue="mirror-async")))
    assert sync_result["status"].pop("queue") == "mirror-sync"
    assert async_result["status"].pop("queue") == "mirror-async"
    assert async_result == sync_result
    assert sync_result["ack"] == "done" and sync_result["retry"] == "retried"
    assert sync_result["status"]["counts"] == {
        "enqueued": 2,
        "ready": 0,
        "delayed": 1,
        "inflight": 0,
        "done": 1,
        "dead": 0,
        "cancelled": 0,
    }

    aq = make_async_queue(queue="mirror-async")
    aq.testing_clock_offset_ms = 6 * SEC
    (again,) = (await aq.claim()).jobs
    assert again.attempts == 2
    assert await aq.heartbeat([again]) == [True]
    assert await aq.release(again, delay=0) == "released"
    assert (await aq.status())["counts"]["ready"] == 1


def test_a_lone_surrogate_in_a_message_does_not_block_the_batch(
    make_queue: QueueFactory,
) -> None:
    q = make_queue(domain_concurrency=10)
    q.enqueue_many([url(1, 1), url(1, 2)])
    ja, jb = q.claim(2).jobs
    bad = b"\xff".decode("utf-8", "surrogateescape")
    assert q.settle_many([q.done(ja), q.retrying(jb, message=f"x{bad}", delay=0)]) == [
        "done",
        "retried",
    ]
    job = q.get_job(jb.id)
    assert job is not None and job.errors[-1].message == "x?"
