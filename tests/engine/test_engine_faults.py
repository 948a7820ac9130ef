"""Engine faults: lost writes, evicted job keys, huge payloads, replay and uniqueness.

Each test reproduces a defect of issue 10 against a real redis-server: the first ones kill a
private server with an append-only file, cut the file back as a lost last second would, and
start it again.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest

from scrapeq.engine.config.settings import Settings
from scrapeq.engine.queue import Queue
from support.redis_proc import RedisProcess


def _queue(server: RedisProcess, **settings: object) -> Queue:
    return Queue.from_url(server.url, settings=Settings(**settings))  # type: ignore[arg-type]


def _lose_writes_since(server: RedisProcess, sizes: dict[Path, int]) -> None:
    """SIGKILL the server, cut its AOF back to ``sizes`` and start it again."""
    server.wait_aof_flushed()
    server.stop(signal.SIGKILL)
    server.truncate_aof(sizes)
    server.start()


# --- defect 1: tokens and ids repeat after Redis loses recent writes ------------------------


def test_tokens_never_repeat_after_lost_writes(aof_redis: RedisProcess) -> None:
    q = _queue(aof_redis)
    q.enqueue("https://shop-1.example.com/p/1")
    aof_redis.wait_aof_flushed()
    before_claim = aof_redis.aof_sizes()
    (old,) = q.claim().jobs
    q.close()

    _lose_writes_since(aof_redis, before_claim)

    q = _queue(aof_redis)
    (new,) = q.claim().jobs  # the claim was lost: the job is ready again
    assert new.id == old.id
    assert new.token > old.token, "a token issued before the loss was issued again"
    assert q.settle_many([q.done(old)]) == ["stale"]
    assert q.settle_many([q.done(new)]) == ["done"]
    q.close()


def test_job_ids_never_repeat_after_lost_writes(aof_redis: RedisProcess) -> None:
    q = _queue(aof_redis)
    q.enqueue("https://shop-1.example.com/p/1")
    aof_redis.wait_aof_flushed()
    before = aof_redis.aof_sizes()
    lost = q.enqueue("https://shop-1.example.com/p/2").id
    q.close()

    _lose_writes_since(aof_redis, before)

    q = _queue(aof_redis)
    again = q.enqueue("https://shop-2.example.com/p/9").id
    assert again != lost, "a job id issued before the loss was issued again"
    q.close()


def test_tokens_and_ids_keep_growing_and_sort_in_order(make_queue) -> None:
    q = make_queue()
    ids = [r.id for r in q.enqueue_many([f"https://s{i}.example.com/" for i in range(5)])]
    assert sorted(ids) == ids, "ids must sort in enqueue order"
    tokens = [j.token for j in q.claim(5).jobs]
    more = q.enqueue_many(["https://t.example.com/"])[0].id
    assert more > ids[-1]
    q.testing_clock_offset_ms = -3_600_000  # a server clock set back an hour
    later = q.enqueue_many(["https://u.example.com/"])[0].id
    assert later > more, "ids only grow, whatever the clock does"
    (job,) = q.claim(1).jobs
    assert job.token > max(tokens)


# --- defect 7: a missing job key strands its domain ------------------------------------------


def test_an_evicted_inflight_job_frees_its_domain_slot(make_queue, redis_client) -> None:
    q = make_queue(domain_concurrency=1, lease=60)
    first, second = (
        r.id
        for r in q.enqueue_many(
            ["https://shop-1.example.com/p/1", "https://shop-1.example.com/p/2"]
        )
    )
    (job,) = q.claim(5).jobs
    assert job.id == first
    redis_client.delete(q.keys.job(first))  # what an eviction policy does

    q.testing_clock_offset_ms = 61_000  # the lease expires
    claimed = q.claim(5).jobs
    assert [j.id for j in claimed] == [second], "the domain's other jobs must be claimed"
    (info,) = q.domains_info(["shop-1.example.com"])
    assert info["inflight"] == 1
    assert int(redis_client.hget(q.keys.stats, "lost") or 0) == 1
    assert [a["kind"] for a in q.status()["alarms"]] == ["jobs_lost"]
    assert q.settle_many([q.done(claimed[0])]) == ["done"]
    assert q.claim(5).next_due is None, "nothing is left: no lease, no stranded domain"
    assert redis_client.hlen(q.keys.prefix + "leased") == 0


def test_leases_remember_their_domain_until_settled_or_reaped(make_queue, redis_client) -> None:
    q = make_queue(lease=60)
    q.enqueue_many([f"https://shop-{i}.example.com/" for i in range(3)])
    jobs = q.claim(3).jobs
    leased = redis_client.hgetall(q.keys.prefix + "leased")
    assert leased == {j.id: j.domain for j in jobs}
    q.settle_many([q.done(jobs[0]), q.retrying(jobs[1], delay=0)])
    assert redis_client.hgetall(q.keys.prefix + "leased") == {jobs[2].id: jobs[2].domain}
    q.testing_clock_offset_ms = 61_000
    q.reap()
    assert redis_client.hlen(q.keys.prefix + "leased") == 0


def test_status_alarms_when_redis_may_evict_keys(make_queue, redis_client) -> None:
    q = make_queue()
    q.enqueue("https://shop-1.example.com/")
    assert not [a for a in q.status()["alarms"] if a["kind"] == "eviction_policy"]
    redis_client.config_set("maxmemory-policy", "allkeys-lru")
    try:
        alarms = [a for a in q.status()["alarms"] if a["kind"] == "eviction_policy"]
        assert len(alarms) == 1
        assert "allkeys-lru" in alarms[0]["message"]
        assert q.eviction_policy() == "allkeys-lru"
    finally:
        redis_client.config_set("maxmemory-policy", "noeviction")


async def test_a_worker_warns_at_start_when_redis_may_evict(
    redis_url, redis_client, caplog
) -> None:
    from scrapeq.engine.queue import AsyncQueue
    from scrapeq.runtime.worker import Worker

    redis_client.config_set("maxmemory-policy", "volatile-lru")
    q = AsyncQueue.from_url(redis_url)
    try:
        with caplog.at_level("WARNING", logger="scrapeq.worker"):
            await Worker(q, burst=True).run_async()
    finally:
        redis_client.config_set("maxmemory-policy", "noeviction")
        await q.close()
    assert any("volatile-lru" in r.getMessage() for r in caplog.records)


# --- defect 6: replay breaks uniqueness ------------------------------------------------------


def test_replay_never_makes_two_pending_jobs_with_one_fingerprint(make_queue) -> None:
    q = make_queue()
    page = "https://shop-1.example.com/p/1"
    first = q.enqueue(page, unique=True).id
    (job,) = q.claim().jobs
    assert q.fail(job, "http_404") == "dead"  # the fingerprint is free again
    newer = q.enqueue(page, unique=True)
    assert newer.status == "added"

    result = q.replay(ids=[first])
    assert (result.moved, result.missing, result.duplicates) == (0, [], [first])
    assert [j.id for j in q.dead_letters()] == [first], "the duplicate stays a dead letter"
    (held,) = q.claim().jobs
    assert held.id == newer.id
    assert q.ack(held) == "done"  # the fingerprint is released with the newer job
    third = q.enqueue(page, unique=True)
    assert third.status == "added"
    assert q.enqueue(page, unique=True).status == "duplicate"

    # once nothing pending holds it, the dead letter replays and takes the fingerprint back
    (job,) = q.claim().jobs
    assert q.ack(job) == "done"
    assert q.replay(all=True).moved == 1
    assert q.enqueue(page, unique=True).status == "duplicate"
    assert q.replay(all=True).duplicates == []


# --- defect 2: a claim whose reply is lost burns attempts of jobs nobody fetched -------------

MiB = 1 << 20


def test_payloads_over_max_payload_are_refused_at_enqueue(make_queue, redis_client) -> None:
    from scrapeq.errors import PayloadTooLarge

    q = make_queue(max_payload=64 * 1024)
    at_limit = "x" * (64 * 1024 - 2)  # its JSON text, quotes included, is exactly the limit
    assert q.enqueue("https://shop-1.example.com/a", payload=at_limit).status == "added"
    with pytest.raises(PayloadTooLarge, match=r"payload of 65,?537 bytes .*max_payload"):
        q.enqueue_many(
            ["https://shop-1.example.com/b", "https://shop-1.example.com/c"],
            payload=at_limit + "y",
        )
    assert q.status()["counts"]["enqueued"] == 1, "nothing of a refused batch is written"


def test_max_payload_must_stay_under_what_redis_accepts() -> None:
    from scrapeq.errors import ConfigError

    with pytest.raises(ConfigError, match="max_payload"):
        Settings(max_payload=600 * MiB)


def test_enqueue_and_claim_calls_are_bounded_by_bytes(make_queue, redis_client) -> None:
    q = make_queue(max_payload=MiB, domain_concurrency=100)
    big = "x" * (MiB - 100)
    results = q.enqueue_many([f"https://shop-1.example.com/{i}" for i in range(40)], payload=big)
    assert len(results) == 40
    first = q.claim(40).jobs
    assert 1 <= len(first) <= 9, "one claim answers at most ~8 MiB of job texts"
    got = len(first)
    while got < 40:
        more = q.claim(40).jobs
        assert more
        got += len(more)
    assert got == 40


def test_redis_refusing_a_huge_argument_is_payload_too_large(make_queue, redis_client) -> None:
    from scrapeq.errors import PayloadTooLarge

    q = make_queue(max_payload=4 * MiB)
    redis_client.config_set("proto-max-bulk-len", MiB)
    try:
        with pytest.raises(PayloadTooLarge, match="too large"):
            q.enqueue("https://shop-1.example.com/", payload="x" * (2 * MiB))
    finally:
        redis_client.config_set("proto-max-bulk-len", 512 * MiB)
    assert q.enqueue("https://shop-1.example.com/", payload="fits").status == "added"


def test_a_lease_never_heartbeated_gives_its_attempt_back(make_queue) -> None:
    q = make_queue(max_attempts=2, lease=60, backoff_base=0.001, backoff_cap=0.001)
    job_id = q.enqueue("https://shop-1.example.com/").id
    claims = 0
    offset = 0
    while True:
        claimed = q.claim().jobs
        if not claimed:
            dead = q.dead_letters()
            assert [j.id for j in dead] == [job_id]
            break
        claims += 1
        assert claims < 10, "a job whose claims are never answered must still die"
        offset += 61_000  # nobody heartbeats: the claim's reply was lost, or the worker died
        q.testing_clock_offset_ms = offset
        q.reap()
        q.testing_clock_offset_ms = offset = offset + 10
    # 2 x max_attempts silent leases are given back, then each counts: 4 + 2 claims
    assert claims == 6
    (job,) = q.dead_letters()
    assert job.dead_reason == "max_attempts"
    assert [e.kind for e in job.errors] == ["lease_unused"] * 4 + ["lease_expired"] * 2


def test_a_lease_that_expires_in_the_handler_spends_its_attempt(make_queue) -> None:
    q = make_queue(max_attempts=3, lease=60)
    job_id = q.enqueue("https://shop-1.example.com/").id
    (job,) = q.claim().jobs
    q.testing_clock_offset_ms = 20_000
    assert q.heartbeat([job]) == [True]
    assert q.mark_handler_running([job]) == [True]
    q.testing_clock_offset_ms = 90_000
    q.reap()
    stored = q.get_job(job_id)
    assert stored is not None and stored.attempts == 1 and stored.unused == 0
    assert [e.kind for e in stored.errors] == ["lease_expired"]
    assert "handler ran" in stored.errors[0].message


# --- issue 21 item 2: a crash charges the jobs whose handler ran, not those beside them --------


def _expire(q: Any, offset_ms: int) -> int:
    """Move the clock past every lease and reap; answers the new offset."""
    offset_ms += 61_000
    q.testing_clock_offset_ms = offset_ms
    q.reap()
    return offset_ms + 10


def test_a_worker_dying_beside_a_job_gives_its_attempt_back_within_a_budget(make_queue) -> None:
    """A heartbeated lease (the worker had the job for a while) that expires while the job's
    handler was not marked running: the worker died or stalled beside it (waiting on the
    network, queued for a handler). The attempt comes back, at most 2 x max_attempts times
    (a job killing workers in its handler causes max_attempts + 1 deaths), then each expiry
    counts, so a job that kills workers outside its handler still ends."""
    q = make_queue(max_attempts=2, lease=60, backoff_base=0.001, backoff_cap=0.001)
    job_id = q.enqueue("https://shop-1.example.com/").id
    offset, claims = 0, 0
    while claimed := q.claim().jobs:
        claims += 1
        assert claims < 10
        q.testing_clock_offset_ms = offset + 20_000
        assert q.heartbeat(claimed) == [True]
        offset = _expire(q, offset + 20_000)
    assert claims == 6, "4 given back, then 2 spent"
    (dead,) = q.dead_letters()
    assert dead.id == job_id and dead.dead_reason == "max_attempts"
    assert [e.kind for e in dead.errors] == ["worker_lost"] * 4 + ["lease_expired"] * 2
    assert dead.unused == 4


def test_a_mark_counts_for_its_own_lease_only(make_queue, redis_client) -> None:
    """The mark is the lease's token: a job marked under one lease and lost beside a crash
    under the next is given back; a stale token marks nothing and renews nothing."""
    q = make_queue(max_attempts=3, lease=60, backoff_base=0.001, backoff_cap=0.001)
    job_id = q.enqueue("https://shop-1.example.com/").id
    (first,) = q.claim().jobs
    assert q.mark_handler_running([first]) == [True]
    deadline = redis_client.zscore(q.keys.inflight, job_id)
    q.testing_clock_offset_ms = 30_000
    assert q.mark_handler_running([first]) == [True]
    assert redis_client.zscore(q.keys.inflight, job_id) == deadline, "a mark renews nothing"
    offset = _expire(q, 0)
    (second,) = q.claim().jobs
    assert (second.attempts, second.unused) == (2, 0)
    assert q.mark_handler_running([first]) == [False], "the first lease's token is stale"
    offset = _expire(q, offset)
    (third,) = q.claim().jobs
    stored = [e.kind for e in third.errors]
    assert stored == ["lease_expired", "lease_unused"], stored
    assert (third.attempts, third.unused) == (2, 1)
