"""Cancelling pending jobs, keeping done jobs (keep_done), and where a job is (job_info).

Runs against a real Redis; time is moved with ``Queue.testing_clock_offset_ms``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis

import scrapeq.engine.ops.core
from scrapeq.engine.lua import scripts
from scrapeq.engine.queue import AsyncQueue, Queue
from scrapeq.errors import ConfigError, NotFound, StaleLease
from support.script_calls import script_calls

pytestmark = pytest.mark.backends

QueueFactory = Callable[..., Queue]
SEC = 1000


def url(shop: int, page: int = 1) -> str:
    return f"https://shop-{shop}.example.com/p/{page}"


def dom(shop: int) -> str:
    return f"shop-{shop}.example.com"


def audit_problems(q: Queue) -> list[tuple[str, str, str]]:
    return [(p.kind, p.subject, p.detail) for p in q.audit().problems]


def domain(q: Queue, shop: int) -> dict[str, Any]:
    (info,) = q.domains_info([dom(shop)])
    return info


def queue_keys(client: redis.Redis, q: Queue) -> set[str]:
    return set(client.keys(q.keys.prefix + "*"))


# --- 1. cancelling by id ------------------------------------------------------------------------


def test_cancel_a_ready_job_removes_it_everywhere_and_releases_its_fingerprint(
    make_queue: QueueFactory, redis_client: redis.Redis
) -> None:
    q = make_queue()
    gone = q.enqueue(url(1, 1), unique=True).id
    kept = q.enqueue(url(1, 2), unique=True).id
    result = q.cancel(ids=[gone])
    assert (result.cancelled, result.unknown, result.inflight) == (1, [], [])
    assert redis_client.exists(q.keys.job(gone)) == 0
    assert redis_client.zscore(q.keys.domain_queue(dom(1)), gone) is None
    status = q.status()
    assert status["lanes"]["normal"]["ready"] == 1
    counts = status["counts"]
    assert (counts["ready"], counts["cancelled"], counts["enqueued"]) == (1, 1, 2)
    assert q.enqueue(url(1, 1), unique=True).status == "added"  # the fingerprint was released
    assert kept in [j.id for j in q.claim(5).jobs]
    assert audit_problems(q) == []


def test_cancelling_a_domains_last_job_takes_the_domain_out_of_dispatch(
    make_queue: QueueFactory, redis_client: redis.Redis
) -> None:
    q = make_queue()
    only = q.enqueue(url(1)).id
    other = q.enqueue(url(2)).id
    assert q.cancel(ids=[only]).cancelled == 1
    assert redis_client.zscore(q.keys.domains_ready, dom(1)) is None  # refiled: nothing left
    assert [j.id for j in q.claim(10).jobs] == [other]
    assert audit_problems(q) == []


def test_cancel_a_delayed_job_fixes_the_delayed_counters(make_queue: QueueFactory) -> None:
    q = make_queue()
    later = q.enqueue(url(1, 1), delay=60, lane="bulk").id
    q.enqueue(url(1, 2), delay=60, lane="bulk")
    assert domain(q, 1)["delayed"] == 2
    assert q.cancel(ids=[later]).cancelled == 1
    status = q.status()
    assert status["counts"]["delayed"] == 1 and status["lanes"]["bulk"]["delayed"] == 1
    assert domain(q, 1)["delayed"] == 1
    assert audit_problems(q) == []


def test_an_inflight_job_is_refused_without_force(make_queue: QueueFactory) -> None:
    q = make_queue()
    q.enqueue(url(1))
    (job,) = q.claim(1).jobs
    result = q.cancel(ids=[job.id])
    assert (result.cancelled, result.inflight) == (0, [job.id])
    assert q.ack(job) == "done"  # untouched: the worker settles it as usual
    assert audit_problems(q) == []


def test_force_cancels_an_inflight_job_frees_its_slot_and_the_late_settle_is_stale(
    make_queue: QueueFactory,
) -> None:
    q = make_queue(domain_concurrency=1)
    first = q.enqueue(url(1, 1)).id
    second = q.enqueue(url(1, 2)).id
    (job,) = q.claim(5).jobs
    assert job.id == first and q.claim(5).jobs == []  # the domain is at its cap
    result = q.cancel(ids=[first], force=True)
    assert (result.cancelled, result.inflight) == (1, [])
    assert domain(q, 1)["inflight"] == 0
    assert [j.id for j in q.claim(5).jobs] == [second]  # its slot was given back at once
    assert q.heartbeat([job]) == [False]
    assert q.settle_many([q.done(job)]) == ["stale"]
    with pytest.raises(StaleLease):
        q.ack(job)
    counts = q.status()["counts"]
    assert (counts["done"], counts["cancelled"], counts["inflight"]) == (0, 1, 1)
    assert audit_problems(q) == []


def test_force_cancelling_a_half_open_probe_lets_another_probe_go(
    make_queue: QueueFactory,
) -> None:
    q = make_queue(breaker_cooldown=1)
    q.enqueue_many([url(1, p) for p in range(3)])
    q.breaker_trip(dom(1), cooldown=1)
    q.testing_clock_offset_ms = 2 * SEC
    (probe,) = q.claim(5).jobs
    assert q.claim(5).jobs == []  # half-open: one job in flight in total
    assert q.cancel(ids=[probe.id], force=True).cancelled == 1
    (next_probe,) = q.claim(5).jobs
    assert next_probe.id != probe.id
    assert q.ack(next_probe, domain_failed=False) == "done"
    assert domain(q, 1)["state"] == "closed"


def test_dead_done_and_unknown_ids_are_not_cancelled(make_queue: QueueFactory) -> None:
    q = make_queue(keep_done=60)
    dead_id, done_id, ready_id = (q.enqueue(url(1, p)).id for p in range(3))
    jobs = {j.id: j for j in q.claim(2).jobs}
    q.fail(jobs[dead_id], "http_404")
    q.ack(jobs[done_id])
    result = q.cancel(ids=[dead_id, done_id, "zz9", ready_id, ready_id])
    assert result.cancelled == 1
    assert (result.dead, result.done, result.unknown) == ([dead_id], [done_id], ["zz9", ready_id])
    assert q.status()["counts"]["dead"] == 1
    assert audit_problems(q) == []


def test_cancel_needs_exactly_one_of_ids_and_domain(make_queue: QueueFactory) -> None:
    q = make_queue()
    with pytest.raises(ConfigError):
        q.cancel()
    with pytest.raises(ConfigError):
        q.cancel(ids=["a1"], domain=dom(1))
    with pytest.raises(ConfigError):
        q.cancel(domain=dom(1), force=True)
    assert q.cancel(ids=[]).cancelled == 0


def test_cancel_by_id_in_many_slices(make_queue: QueueFactory) -> None:
    q = make_queue()
    ids = [r.id for r in q.enqueue_many([url(i % 7, i) for i in range(1_200)])]
    result = q.cancel(ids=ids)
    assert result.cancelled == 1_200 and q.status()["counts"]["ready"] == 0
    assert audit_problems(q) == []


# --- 2. cancelling a domain ---------------------------------------------------------------------


@pytest.fixture
def small_slices(monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setattr(scrapeq.engine.ops.core, "CANCEL_SLICE", 7)
    return 7


@pytest.mark.backends("single")  # counts one server's calls (INFO commandstats)
def test_cancel_a_domain_pages_through_its_ready_and_delayed_jobs(
    make_queue: QueueFactory, redis_client: redis.Redis, small_slices: int
) -> None:
    q = make_queue()
    # Delayed jobs of several domains with equal scores (one enqueue call, one delay): the
    # cursor through the shared delayed set must not skip nor repeat ties.
    q.enqueue_many([url(1 + i % 3, 100 + i) for i in range(60)], delay=60)
    # another domain's job whose payload and URL name the domain: not the domain's job
    q.enqueue(url(2, 7) + f"?domain={dom(1)}", delay=60, payload={"domain": dom(1)})
    q.enqueue_many([url(1, p) for p in range(25)])
    q.enqueue_many([url(2, p) for p in range(5)])
    q.enqueue(url(1, 999), delay=120, lane="bulk")
    redis_client.config_resetstat()
    result = q.cancel(domain=dom(1))
    assert result.cancelled == 25 + 20 + 1
    calls = script_calls(redis_client.info("commandstats"))
    assert calls >= (25 + 60 + 1) // small_slices  # bounded slices, not one call
    status = q.status()
    assert status["counts"]["ready"] == 5 and status["counts"]["delayed"] == 41
    assert status["counts"]["cancelled"] == 46
    assert status["lanes"]["bulk"]["delayed"] == 0
    assert domain(q, 1)["delayed"] == 0 and domain(q, 1)["ready"] == 0
    assert domain(q, 2)["delayed"] == 21 and domain(q, 3)["delayed"] == 20
    assert audit_problems(q) == []


def test_cancel_a_domain_leaves_its_inflight_jobs_and_says_how_many(
    make_queue: QueueFactory,
) -> None:
    q = make_queue(domain_concurrency=2)
    q.enqueue_many([url(1, p) for p in range(5)])
    jobs = q.claim(5).jobs
    assert len(jobs) == 2
    result = q.cancel(domain=dom(1))
    assert (result.cancelled, result.left_inflight) == (3, 2)
    assert [q.ack(j) for j in jobs] == ["done", "done"]
    assert audit_problems(q) == []


def test_cancel_an_unknown_domain_is_not_found(make_queue: QueueFactory) -> None:
    q = make_queue()
    q.enqueue(url(1))
    with pytest.raises(NotFound, match=r"unknown domain 'nowhere\.example\.com'"):
        q.cancel(domain="nowhere.example.com")
    assert q.status()["counts"]["ready"] == 1


# --- 3. keep_done ---------------------------------------------------------------------------------


def test_without_keep_done_a_done_job_key_is_deleted(
    make_queue: QueueFactory, redis_client: redis.Redis
) -> None:
    q = make_queue()
    job_id = q.enqueue(url(1)).id
    (job,) = q.claim().jobs
    q.ack(job)
    assert redis_client.exists(q.keys.job(job_id)) == 0
    assert q.job_info(job_id) is None


def test_keep_done_keeps_the_job_with_done_at_and_a_ttl(
    make_queue: QueueFactory, redis_client: redis.Redis
) -> None:
    q = make_queue(keep_done=60, domain_concurrency=50)
    ids = [r.id for r in q.enqueue_many([url(1, p) for p in range(40)], unique=True)]
    jobs = q.claim(40).jobs
    assert q.settle_many([q.done(j) for j in jobs]) == ["done"] * 40  # one batch
    for job_id in ids:
        ttl = redis_client.pttl(q.keys.job(job_id))
        assert 55_000 < ttl <= 60_000
    info = q.job_info(ids[0])
    assert info is not None and info.state == "done"
    assert info.done_ms is not None and info.kept_until_ms is not None
    assert 59_000 <= info.kept_until_ms - info.now_ms <= 60_000
    assert q.status()["counts"]["done"] == 40
    assert redis_client.hlen(q.keys.unique) == 0  # fingerprints released as before
    assert q.enqueue(url(1, 0), unique=True).status == "added"
    assert audit_problems(q) == []


def test_a_kept_done_job_expires(make_queue: QueueFactory, redis_client: redis.Redis) -> None:
    q = make_queue(keep_done=0.2)
    job_id = q.enqueue(url(1)).id
    (job,) = q.claim().jobs
    q.ack(job)
    assert q.job_info(job_id) is not None
    time.sleep(0.35)
    assert q.job_info(job_id) is None and redis_client.exists(q.keys.job(job_id)) == 0


def test_a_kept_done_job_refuses_a_second_settle_and_heartbeat(make_queue: QueueFactory) -> None:
    q = make_queue(keep_done=60)
    q.enqueue(url(1))
    (job,) = q.claim().jobs
    assert q.ack(job) == "done"
    assert q.settle_many([q.done(job), q.retrying(job, delay=0)]) == ["stale", "stale"]
    assert q.heartbeat([job]) == [False]
    assert q.status()["counts"]["done"] == 1


def test_the_audit_takes_a_kept_done_job_for_done(
    make_queue: QueueFactory, redis_client: redis.Redis
) -> None:
    q = make_queue(keep_done=60)
    job_id = q.enqueue(url(1)).id
    (job,) = q.claim().jobs
    q.ack(job)
    assert audit_problems(q) == []
    # A scan that read the job in flight and found it in no place a moment later raises a
    # suspicion; checked again, the job is done and kept: not a problem.
    answer = q._step(scripts.audit([{"k": "job_without_place", "id": job_id}], False))
    assert answer == [(False, False, "")]


def test_the_audit_reports_a_done_job_kept_past_keep_done(
    make_queue: QueueFactory, redis_client: redis.Redis
) -> None:
    q = make_queue(keep_done=60)
    job_id = q.enqueue(url(1)).id
    (job,) = q.claim().jobs
    q.ack(job)
    key = q.keys.job(job_id)
    text = redis_client.get(key)
    assert text is not None and '"done_at":' in text
    stored = json.loads(text)
    stored["done_at"] -= 3_600_000  # done an hour ago, and no TTL: it would stay for ever
    redis_client.set(key, json.dumps(stored))
    problems = audit_problems(q)
    assert [(k, s) for k, s, _ in problems] == [("job_without_place", job_id)]
    assert "done" in problems[0][2] and "no TTL" in problems[0][2]
    assert q.audit(repair=True).ok
    assert redis_client.exists(key) == 0
    assert audit_problems(q) == []


def test_the_audit_repair_gives_a_recent_done_job_its_ttl_back(
    make_queue: QueueFactory, redis_client: redis.Redis
) -> None:
    q = make_queue(keep_done=60)
    job_id = q.enqueue(url(1)).id
    (job,) = q.claim().jobs
    q.ack(job)
    key = q.keys.job(job_id)
    redis_client.persist(key)
    answer = q._step(scripts.audit([{"k": "job_without_place", "id": job_id}], True))
    assert answer[0][:2] == (True, True)
    assert 50_000 < redis_client.pttl(key) <= 60_000


# --- 4. where a job is ---------------------------------------------------------------------------


def test_job_info_of_each_place(make_queue: QueueFactory) -> None:
    q = make_queue(domain_concurrency=1, keep_done=60)
    ready = [q.enqueue(url(1, p)).id for p in range(4)]
    delayed = q.enqueue(url(2), delay=66, lane="bulk").id
    dead = q.enqueue(url(3)).id
    assert q.job_info("zz9") is None

    info = q.job_info(ready[2])
    assert info is not None
    assert (info.state, info.position, info.depth) == ("ready", 3, 4)
    assert info.job.url == url(1, 2) and info.job.domain == dom(1) and info.job.lane == "normal"

    info = q.job_info(delayed)
    assert info is not None and info.state == "delayed" and info.job.lane == "bulk"
    assert info.eligible_ms is not None and 65_000 <= info.eligible_ms - info.now_ms <= 66_000

    jobs = {j.id: j for j in q.claim(5).jobs}
    info = q.job_info(ready[0])
    assert info is not None and info.state == "inflight"
    assert info.lease_deadline_ms is not None
    assert 59_000 <= info.lease_deadline_ms - info.now_ms <= 60_000
    assert info.job.token == jobs[ready[0]].token and info.worker is None
    assert info.job.attempts == 1

    q.retry(jobs[dead], kind="http_503", message="busy", delay=0)
    q.testing_clock_offset_ms = 1
    (again,) = [j for j in q.claim(5).jobs if j.id == dead]
    q.fail(again, "http_404", "gone")
    info = q.job_info(dead)
    assert info is not None and info.state == "dead" and info.job.dead_reason == "http_404"
    assert [e.kind for e in info.job.errors] == ["http_503", "http_404"]

    q.ack(jobs[ready[0]])
    info = q.job_info(ready[0])
    assert info is not None and info.state == "done" and info.job.attempts == 1

    doc = info.as_dict()
    assert doc["state"] == "done" and doc["done_at"].endswith("+00:00")
    assert isinstance(doc["done_at_ms"], int) and doc["lease"] is None


async def test_job_info_and_cancel_on_the_async_queue(
    make_queue: QueueFactory, make_async_queue: Callable[..., AsyncQueue]
) -> None:
    q = make_queue()
    aq = make_async_queue()
    job_id = q.enqueue(url(1)).id
    info = await aq.job_info(job_id)
    assert info is not None and info.state == "ready"
    sync_info = q.job_info(job_id)
    assert sync_info is not None
    assert {**sync_info.as_dict(), "now": None, "now_ms": None} == {
        **info.as_dict(), "now": None, "now_ms": None,
    }  # fmt: skip
    result = await aq.cancel(ids=[job_id, "zz9"])
    assert (result.cancelled, result.unknown) == (1, ["zz9"])
    assert (await aq.cancel(domain=dom(1))).cancelled == 0  # known, nothing left
