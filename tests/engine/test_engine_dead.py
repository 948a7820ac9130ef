"""Dead letters: history, fail, replay, purge, corrupt payloads and the spike alarm.

Runs against a real Redis; time is moved with ``Queue.testing_clock_offset_ms``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from scrapeq.engine.model.job import Job
from scrapeq.engine.queue import Queue
from scrapeq.errors import ConfigError

pytestmark = pytest.mark.backends

SEC = 1000
HOUR = 3600

QueueFactory = Callable[..., Queue]


def url(shop: int, page: int = 1) -> str:
    return f"https://shop-{shop}.example.com/p/{page}"


def dom(shop: int) -> str:
    return f"shop-{shop}.example.com"


def at(q: Queue, seconds: float) -> None:
    q.testing_clock_offset_ms = round(seconds * SEC)


def claim_all(q: Queue, n: int = 1000) -> list[Job]:
    """Claim until nothing more is claimable now."""
    out: list[Job] = []
    while True:
        got = q.claim(min(n - len(out), 100)).jobs if len(out) < n else []
        if not got:
            return out
        out.extend(got)


def fail_all(q: Queue, reason: str = "http_404") -> list[str]:
    """Claim everything claimable and fail it; answers the ids, in claim order."""
    ids = []
    while True:
        jobs = q.claim(100).jobs
        if not jobs:
            return ids
        answers = q.settle_many([q.failing(j, reason, f"gone: {j.url}") for j in jobs])
        assert set(answers) == {"dead"}
        ids.extend(j.id for j in jobs)


def counts(q: Queue) -> dict[str, int]:
    return q.status()["counts"]  # type: ignore[no-any-return]


# --- 1. what a dead letter keeps ------------------------------------------------------------


def test_dead_letter_keeps_payload_last_error_and_bounded_history(
    make_queue: QueueFactory,
) -> None:
    q = make_queue()
    payload = {"sku": 42, "tags": ["a", "b"], "nested": {"x": None}}
    job_id = q.enqueue(url(1), max_attempts=12, payload=payload, lane="critical").id
    answers = []
    for i in range(1, 13):
        at(q, i)
        (job,) = q.claim().jobs
        assert job.attempts == i
        answers.append(
            q.retry(job, delay=0, kind="http_503", message=f"try {i}", domain_failed=None)
        )
    assert answers == ["retried"] * 11 + ["dead"]

    (dead,) = q.dead_letters()
    assert dead.id == job_id
    assert dead.payload == payload
    assert dead.lane == "critical"
    assert dead.url == url(1)
    assert dead.dead_reason == "max_attempts"
    assert dead.died_ms is not None
    assert dead.attempts == 12
    assert len(dead.errors) == 10
    assert [e.message for e in dead.errors] == [f"try {i}" for i in range(3, 13)]
    assert dead.last_error is not None and dead.last_error.message == "try 12"
    ats = [e.at_ms for e in dead.errors]
    assert ats == sorted(ats)
    assert q.get_job(job_id) == dead


# --- 2. fail and listing --------------------------------------------------------------------


def test_fail_dead_letters_at_once_and_listing(make_queue: QueueFactory) -> None:
    q = make_queue(domain_concurrency=10)
    order: list[str] = []
    for step, (shop, reason) in enumerate(
        [(1, "http_404"), (2, "http_410"), (1, "http_451"), (2, "invalid_content"), (1, "x")]
    ):
        at(q, step)
        job_id = q.enqueue(url(shop, step)).id
        (job,) = q.claim().jobs
        assert job.id == job_id and job.attempts == 1
        assert q.fail(job, reason, f"message {step}") == "dead"
        order.append(job_id)

    newest_first = list(reversed(order))
    dead = q.dead_letters()
    assert [j.id for j in dead] == newest_first
    reasons = ["x", "invalid_content", "http_451", "http_410", "http_404"]
    assert [j.dead_reason for j in dead] == reasons
    assert dead[0].last_error is not None
    assert (dead[0].last_error.kind, dead[0].last_error.message) == ("x", "message 4")
    assert all(j.attempts == 1 and j.max_attempts == 5 for j in dead)

    shop1 = q.dead_letters(domain=dom(1))
    assert [j.id for j in shop1] == [order[4], order[2], order[0]]
    assert {j.domain for j in shop1} == {dom(1)}
    assert [j.id for j in q.dead_letters(domain=dom(2), limit=1)] == [order[3]]
    assert [j.id for j in q.dead_letters(limit=2)] == newest_first[:2]
    assert q.dead_letters(domain=dom(9)) == []
    assert counts(q)["dead"] == 5


# --- 3. replay --------------------------------------------------------------------------------


def _exhausted(q: Queue, shop: int, page: int, lane: str = "bulk") -> str:
    """A job of `shop` that died with its budget spent (max_attempts=1)."""
    job_id = q.enqueue(url(shop, page), lane=lane, max_attempts=1).id
    jobs = [j for j in claim_all(q) if j.id == job_id]
    assert len(jobs) == 1
    answer = q.retry(jobs[0], delay=0, kind="timeout", message="slow", domain_failed=None)
    assert answer == "dead"
    return job_id


def test_replay_by_id_without_reset_gives_one_more_attempt(make_queue: QueueFactory) -> None:
    q = make_queue()
    job_id = _exhausted(q, 1, 1, lane="bulk")
    enqueued = counts(q)["enqueued"]
    assert counts(q)["dead"] == 1

    moved, missing, _ = q.replay(ids=[job_id, "nope", "ffff"])
    assert moved == 1
    assert missing == ["nope", "ffff"]
    assert counts(q)["dead"] == 0
    assert counts(q)["enqueued"] == enqueued
    assert q.dead_letters() == []

    # Claimable now even in the bulk lane (eligible now); lane and history are kept.
    (job,) = q.claim().jobs
    assert job.id == job_id
    assert job.lane == "bulk"
    assert job.attempts == 1 and job.max_attempts == 1
    assert job.dead_reason is None
    assert [(e.kind, e.message) for e in job.errors] == [("timeout", "slow")]
    # The one more attempt is the last: a failure ends dead again.
    assert q.retry(job, delay=0, domain_failed=None) == "dead"
    assert q.replay(ids=[job_id]) == (1, [], [])
    assert q.replay(ids=[job_id]) == (0, [job_id], [])  # no longer a dead letter


def test_replay_with_reset_restores_the_budget(make_queue: QueueFactory) -> None:
    q = make_queue()
    job_id = q.enqueue(url(1), max_attempts=3).id
    for i in range(3):
        at(q, i)
        (job,) = q.claim().jobs
        q.retry(job, delay=0, domain_failed=None)
    assert q.dead_letters()[0].attempts == 3
    assert q.replay(ids=[job_id], reset_attempts=True) == (1, [], [])
    (job,) = q.claim().jobs
    assert job.attempts == 1
    assert job.budget_left == 2
    assert len(job.errors) == 3


def test_replay_without_reset_keeps_unspent_attempts(make_queue: QueueFactory) -> None:
    q = make_queue()
    job_id = q.enqueue(url(1), max_attempts=5).id
    (job,) = q.claim().jobs
    q.fail(job, "http_404")
    q.replay(ids=[job_id])
    (job,) = q.claim().jobs
    assert job.attempts == 2  # the spent attempt still counts


def test_replay_resets_the_release_budget(make_queue: QueueFactory) -> None:
    q = make_queue(max_releases=1)
    job_id = q.enqueue(url(1)).id
    answers = [q.release(q.claim().jobs[0], delay=0) for _ in range(2)]
    assert answers == ["released", "dead"]
    assert q.dead_letters()[0].dead_reason == "max_releases"
    assert q.replay(ids=[job_id]) == (1, [], [])
    (job,) = q.claim().jobs
    assert job.releases == 0
    assert q.release(job, delay=0) == "released", "the budget starts again"


def test_replay_by_domain_and_all(make_queue: QueueFactory) -> None:
    q = make_queue(domain_concurrency=10)
    q.enqueue_many([url(s, p) for s in (1, 2, 3) for p in range(4)])
    dead_ids = fail_all(q)
    assert len(dead_ids) == 12
    status = q.status()
    assert status["counts"]["dead"] == 12
    enqueued = status["counts"]["enqueued"]

    assert q.replay(domain=dom(2)) == (4, [], [])
    assert counts(q)["dead"] == 8
    assert q.dead_letters(domain=dom(2)) == []
    by_domain = {d["domain"]: d for d in q.status()["domains"]}
    assert by_domain[dom(2)]["dead"] == 0 and by_domain[dom(2)]["ready"] == 4
    assert by_domain[dom(1)]["dead"] == 4
    got = claim_all(q)
    assert {j.domain for j in got} == {dom(2)} and len(got) == 4

    assert q.replay(domain=dom(9)) == (0, [], [])
    assert q.replay(all=True) == (8, [], [])
    assert counts(q)["dead"] == 0
    assert counts(q)["enqueued"] == enqueued
    got = claim_all(q)
    assert {j.domain for j in got} == {dom(1), dom(3)} and len(got) == 8


def test_replay_of_an_expired_job_makes_it_claimable(make_queue: QueueFactory) -> None:
    q = make_queue()
    job_id = q.enqueue(url(1), expires=10).id
    at(q, 11)
    assert q.claim().jobs == []
    assert [j.dead_reason for j in q.dead_letters()] == ["expired"]
    assert q.replay(ids=[job_id], reset_attempts=True) == (1, [], [])
    got = q.claim().jobs  # "a replayed job becomes claimable now"
    assert [j.id for j in got] == [job_id]


def test_replay_requires_exactly_one_selection(make_queue: QueueFactory) -> None:
    q = make_queue()
    with pytest.raises(ConfigError):
        q.replay()
    with pytest.raises(ConfigError):
        q.replay(ids=["1"], all=True)


# --- 4. replay of many ----------------------------------------------------------------------


def test_replay_of_many_goes_through_in_slices(make_queue: QueueFactory, redis_client) -> None:
    q = make_queue(domain_concurrency=200)
    urls = [url(s, p) for s in range(7) for p in range(50)]
    q.enqueue_many(urls)
    assert len(fail_all(q)) == 350
    assert counts(q)["dead"] == 350

    calls: list[int] = []
    original = q._step

    def spy(step: Any) -> Any:
        answer = original(step)
        if getattr(step, "script", None) == "replay":
            calls.append(answer.moved)
        return answer

    q._step = spy  # type: ignore[method-assign]
    assert q.replay(all=True) == (350, [], [])
    assert len(calls) >= 4 and max(calls) <= 100  # bounded slices
    assert counts(q)["dead"] == 0
    assert redis_client.zcard(q.keys.dead) == 0
    assert len(claim_all(q)) == 350


# --- 5. purge ---------------------------------------------------------------------------------


def test_purge_all(make_queue: QueueFactory, redis_client) -> None:
    q = make_queue(domain_concurrency=1000)
    q.enqueue_many([url(s, p) for s in range(3) for p in range(300)])
    ids = fail_all(q)
    assert len(ids) == 900
    assert q.purge() == 900  # more than one purge slice (500)
    assert counts(q)["dead"] == 0
    assert q.dead_letters() == []
    assert redis_client.exists(*[q.keys.job(i) for i in ids]) == 0
    assert redis_client.zcard(q.keys.domain_dead(dom(1))) == 0
    assert q.purge() == 0


def test_purge_older_than(make_queue: QueueFactory, redis_client) -> None:
    q = make_queue(domain_concurrency=100)
    q.enqueue_many([url(1, p) for p in range(5)] + [url(2, p) for p in range(5)])
    old_ids = fail_all(q)
    at(q, 2 * HOUR)
    q.enqueue_many([url(1, p) for p in range(10, 13)])
    new_ids = fail_all(q)
    at(q, 2 * HOUR + 60)

    assert q.purge(older_than=HOUR) == 10
    assert {j.id for j in q.dead_letters()} == set(new_ids)
    assert redis_client.exists(*[q.keys.job(i) for i in old_ids]) == 0
    assert redis_client.exists(*[q.keys.job(i) for i in new_ids]) == 3
    assert redis_client.zcard(q.keys.domain_dead(dom(2))) == 0
    assert q.purge(older_than=HOUR) == 0
    assert q.purge(older_than=30) == 3
    assert counts(q)["dead"] == 0


def test_purge_by_domain(make_queue: QueueFactory, redis_client) -> None:
    q = make_queue(domain_concurrency=100)
    q.enqueue_many([url(1, p) for p in range(4)] + [url(2, p) for p in range(3)])
    fail_all(q)
    assert q.purge(domain=dom(1)) == 4
    assert {j.domain for j in q.dead_letters()} == {dom(2)}
    assert redis_client.zcard(q.keys.dead) == 3


# --- 6. corrupt payloads ----------------------------------------------------------------------


def _lacking_fields(job_id: str) -> str:
    return json.dumps({"id": job_id, "url": "https://shop-1.example.com/p/9"})


@pytest.mark.parametrize("garbage", ["{not json", "lacking", "[1, 2]", '"a string"'])
def test_corrupt_ready_job_is_dead_lettered_by_the_claim(
    make_queue: QueueFactory, redis_client, garbage: str
) -> None:
    q = make_queue(domain_concurrency=10)
    ids = [r.id for r in q.enqueue_many([url(1, p) for p in range(3)])]
    bad = ids[0]  # the domain's head
    text = _lacking_fields(bad) if garbage == "lacking" else garbage
    redis_client.set(q.keys.job(bad), text)

    got = q.claim(10).jobs  # does not raise
    assert sorted(j.id for j in got) == sorted(ids[1:])
    (dead,) = q.dead_letters()
    assert dead.id == bad
    assert dead.dead_reason == "corrupt_payload"
    assert dead.raw == text
    assert dead.domain == dom(1)
    assert redis_client.zscore(q.keys.domain_dead(dom(1)), bad) is not None
    status = q.status()
    # a text that names no lane leaves its lane's ready counter one high, for the audit
    assert status["counts"]["ready"] == 1
    assert status["counts"]["inflight"] == 2
    assert status["counts"]["dead"] == 1
    assert [p.kind for p in q.audit(repair=True).problems] == ["lane_ready_count"]
    assert q.status()["counts"]["ready"] == 0


def test_corrupt_head_does_not_block_the_domain_one_at_a_time(
    make_queue: QueueFactory, redis_client
) -> None:
    q = make_queue()
    ids = [r.id for r in q.enqueue_many([url(1, p) for p in range(3)])]
    redis_client.set(q.keys.job(ids[0]), "{not json")
    redis_client.set(q.keys.job(ids[1]), _lacking_fields(ids[1]))
    (job,) = q.claim(1).jobs
    assert job.id == ids[2]
    assert {j.dead_reason for j in q.dead_letters()} == {"corrupt_payload"}
    assert len(q.dead_letters()) == 2


@pytest.mark.parametrize("garbage", ["{not json", "lacking"])
def test_corrupt_delayed_job_is_dead_lettered_when_promoted(
    make_queue: QueueFactory, redis_client, garbage: str
) -> None:
    q = make_queue(domain_concurrency=10)
    bad = q.enqueue(url(1, 1), delay=30).id
    good = q.enqueue(url(1, 2), delay=30).id
    text = _lacking_fields(bad) if garbage == "lacking" else garbage
    redis_client.set(q.keys.job(bad), text)
    assert q.claim(10).jobs == []
    at(q, 31)
    got = q.claim(10).jobs
    assert [j.id for j in got] == [good]
    (dead,) = q.dead_letters()
    assert (dead.id, dead.dead_reason, dead.raw) == (bad, "corrupt_payload", text)
    assert redis_client.zscore(q.keys.delayed, bad) is None
    assert q.status()["counts"]["delayed"] == 0


def test_corrupt_delayed_job_leaves_no_phantom_delayed_counts(
    make_queue: QueueFactory, redis_client
) -> None:
    """A truncated write still names its domain and lane: the delayed counters are fixed."""
    q = make_queue()
    bad = q.enqueue(url(1, 1), delay=30).id
    truncated = f'{{"id":"{bad}","domain":"{dom(1)}","lane":"normal","url":"https:'
    redis_client.set(q.keys.job(bad), truncated)
    at(q, 31)
    assert q.claim().jobs == []
    status = q.status()
    assert status["counts"]["delayed"] == 0
    assert status["lanes"]["normal"]["delayed"] == 0
    (info,) = q.domains_info([dom(1)])
    assert info["delayed"] == 0


def test_missing_job_key_is_skipped(make_queue: QueueFactory, redis_client) -> None:
    q = make_queue(domain_concurrency=10)
    ids = [r.id for r in q.enqueue_many([url(1, p) for p in range(3)])]
    redis_client.delete(q.keys.job(ids[0]))
    got = q.claim(10).jobs
    assert sorted(j.id for j in got) == sorted(ids[1:])
    assert q.dead_letters() == []
    assert redis_client.zscore(q.keys.domain_queue(dom(1)), ids[0]) is None


def test_missing_job_key_leaves_a_ready_count_the_audit_repairs(
    make_queue: QueueFactory, redis_client
) -> None:
    """Ready jobs are counted per lane (no per-job lane index, issue 13): an id whose job key
    is gone names no lane, so its lane's counter stays one high until `audit --repair`."""
    q = make_queue(domain_concurrency=10)
    ids = [r.id for r in q.enqueue_many([url(1, p) for p in range(3)])]
    redis_client.delete(q.keys.job(ids[0]))
    assert len(q.claim(10).jobs) == 2
    assert q.status()["lanes"]["normal"]["ready"] == 1
    assert [p.kind for p in q.audit(repair=True).problems] == ["lane_ready_count"]
    status = q.status()
    assert status["counts"]["ready"] == 0
    assert status["lanes"]["normal"]["ready"] == 0


def test_replay_skips_corrupt_dead_letters(make_queue: QueueFactory, redis_client) -> None:
    q = make_queue(domain_concurrency=10)
    ids = [r.id for r in q.enqueue_many([url(1, p) for p in range(2)])]
    redis_client.set(q.keys.job(ids[0]), "{not json")
    (good,) = q.claim(10).jobs
    q.fail(good, "http_404")
    assert len(q.dead_letters()) == 2

    moved, _, _ = q.replay(all=True)
    assert moved == 1  # only the real job; the corrupt one is skipped (replay-1.lua header)
    got = q.claim(10).jobs
    assert [j.id for j in got] == [good.id]
    assert all(j.url for j in got)
    (still_dead,) = q.dead_letters()
    assert still_dead.dead_reason == "corrupt_payload"


# --- 7. the dead-letter spike alarm -----------------------------------------------------------


def test_dead_letter_spike_alarm(make_queue: QueueFactory) -> None:
    """The spike counts failures charged to the domain's breaker (issue 21: not 404s)."""
    q = make_queue(domain_concurrency=100)
    q.enqueue_many([url(1, p) for p in range(30)] + [url(2, p) for p in range(2)])
    jobs = q.claim(100).jobs
    assert len(jobs) == 32
    items = [q.failing(j, "http_500", "boom", domain_failed=True) for j in jobs]
    assert set(q.settle_many(items)) == {"dead"}
    status = q.status()
    spikes = [a for a in status["alarms"] if a["kind"] == "dead_letter_spike"]
    assert [a["domain"] for a in spikes] == [dom(1)]
    assert "30 failures" in spikes[0]["message"]


def test_no_spike_alarm_for_404s(make_queue: QueueFactory) -> None:
    q = make_queue(domain_concurrency=100)
    q.enqueue_many([url(1, p) for p in range(30)])
    assert len(fail_all(q)) == 30  # http_404: expected page faults
    assert q.status()["alarms"] == []


def test_no_spike_alarm_for_a_few_dead_letters(make_queue: QueueFactory) -> None:
    q = make_queue(domain_concurrency=100)
    q.enqueue_many([url(2, p) for p in range(2)])
    fail_all(q)
    assert q.status()["alarms"] == []
