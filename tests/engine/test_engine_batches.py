"""Batched settle and claim calls end exactly where item-by-item calls end, against a real Redis.

settle-1.lua and claim-1.lua gather per-item writes into one call per kind (a domain's inflight
slots, deleted job keys, released fingerprints, leases) and read ahead (job texts, a run's ids).
Each scenario here runs twice on two queues of one server: once as one batch, once one item per
call, and the clock-free part of both stores must agree (counters, breaker fields, filing).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import redis

from scrapeq import Job, Queue
from scrapeq.engine.lua.scripts import Settlement
from scrapeq.errors import ScriptError

pytestmark = pytest.mark.backends

QueueFactory = Callable[..., Queue]

#: Domain hash fields that do not depend on the clock.
DOMAIN_FIELDS = ("inflight", "state", "fails", "win", "trips", "probe", "done", "delayed", "enq")


def dom(i: int) -> str:
    return f"shop-{i}.example.com"


def enqueue(q: Queue, d: str, n: int, **options: Any) -> list[str]:
    results = q.enqueue_many([f"https://{d}/p/{i}" for i in range(n)], **options)
    assert all(r.status == "added" for r in results)
    return [r.id for r in results]


def claim_all(q: Queue, n: int) -> dict[str, list[Job]]:
    by_domain: dict[str, list[Job]] = {}
    for job in q.claim(n).jobs:
        by_domain.setdefault(job.domain, []).append(job)
    return by_domain


def snapshot(r: redis.Redis, q: Queue, domains: list[str]) -> dict[str, Any]:
    """The clock-free state of q: domain fields, where every job is, counters."""
    k = q.keys
    snap = {
        "domains": {d: r.hmget(k.domain(d), DOMAIN_FIELDS) for d in domains},
        "ready": sorted(r.zrange(k.domains_ready, 0, -1)),
        "wait": sorted(r.zrange(k.domains_wait, 0, -1)),
        "inflight": sorted(r.zrange(k.inflight, 0, -1)),
        "delayed": sorted(r.zrange(k.delayed, 0, -1)),
        "dead": sorted(r.zrange(k.dead, 0, -1)),
        "queued": {d: r.zrange(k.domain_queue(d), 0, -1) for d in domains},
        "jobs": sorted(key.split(":job:")[1] for key in r.scan_iter(match=k.job("*"))),
        "unique": r.hgetall(k.unique),
        "stats": r.hgetall(k.stats),
        "paused": r.hget(k.meta, "paused_until") is not None,
    }
    return _ranked_ids(snap)


def _ranked_ids(snap: dict[str, Any]) -> dict[str, Any]:
    """Job ids replaced by their rank in enqueue order: two queues filled alike compare equal
    (ids come from the server clock, so their values differ from queue to queue)."""
    ids = {*snap["jobs"], *snap["unique"].values()}
    rank = {job_id: f"#{i}" for i, job_id in enumerate(sorted(ids))}

    def ranked(values: list[str]) -> list[str]:
        return [rank.get(v, v) for v in values]

    for key in ("inflight", "delayed", "dead", "jobs"):
        snap[key] = ranked(snap[key])
    snap["queued"] = {d: ranked(v) for d, v in snap["queued"].items()}
    snap["unique"] = {fp: rank.get(v, v) for fp, v in snap["unique"].items()}
    return snap


def settle_both_ways(
    make_queue: QueueFactory,
    r: redis.Redis,
    setup: Callable[[Queue], list[Settlement]],
    domains: list[str],
    **settings: Any,
) -> tuple[dict[str, Any], list[str], Queue]:
    """Run `setup` on two fresh queues; settle its items as one batch on the first, one by one
    on the second. Both must answer and end alike; returns the batch queue's snapshot."""
    batch_q = make_queue(queue="batch", **settings)
    single_q = make_queue(queue="single", **settings)
    batch_answers = batch_q.settle_many(setup(batch_q))
    single_answers = [single_q.settle_many([item])[0] for item in setup(single_q)]
    assert batch_answers == single_answers
    snap = snapshot(r, batch_q, domains)
    assert snap == snapshot(r, single_q, domains)
    return snap, batch_answers, batch_q


def test_a_trip_in_the_middle_of_a_batch_frees_every_slot_and_files_the_domain(
    make_queue: QueueFactory, redis_client: redis.Redis
) -> None:
    a, b = dom(1), dom(2)

    def setup(q: Queue) -> list[Settlement]:
        enqueue(q, a, 9)  # 7 claimed (its cap), 2 stay queued
        enqueue(q, b, 2)
        jobs = claim_all(q, 9)
        ja, jb = jobs[a], jobs[b]
        assert len(ja) == 7
        return [
            q.done(ja[0]),
            q.retrying(ja[1], kind="timeout", delay=0),
            q.done(jb[0]),
            q.retrying(ja[2], kind="timeout", delay=0),
            q.retrying(ja[3], kind="timeout", delay=0),  # the third failure in a row trips
            q.done(ja[4]),  # outcomes after the trip leave the open breaker alone
            q.retrying(ja[5], kind="timeout", delay=0),
            q.done(jb[1]),
            q.done(ja[6]),
        ]

    snap, answers, q = settle_both_ways(
        make_queue, redis_client, setup, [a, b], breaker_failures=3, domain_concurrency=7
    )
    assert answers == [
        *["done", "retried", "done", "retried", "retried"],
        *["done", "retried", "done", "done"],
    ]
    assert snap["domains"][a][:2] == ["0", "open"]  # inflight 0, breaker open
    assert snap["domains"][b][0] == "0"
    assert a in snap["wait"] and a not in snap["ready"], "an open domain waits for its cooldown"
    assert snap["inflight"] == []
    assert q.domains_info([a])[0]["inflight"] == 0


def test_a_stale_token_among_fresh_ones_changes_nothing_for_it(
    make_queue: QueueFactory, redis_client: redis.Redis
) -> None:
    q = make_queue(queue="stale", domain_concurrency=10)
    d = dom(1)
    enqueue(q, d, 3)
    j1, j2, j3 = q.claim(3).jobs
    text_before = redis_client.get(q.keys.job(j2.id))
    lease_before = redis_client.zscore(q.keys.inflight, j2.id)
    wrong = Settlement(j2.id, j2.token + 1, "done", domain_failed=False)
    assert q.settle_many([q.done(j1), wrong, q.done(j3)]) == ["done", "stale", "done"]
    assert redis_client.get(q.keys.job(j2.id)) == text_before
    assert redis_client.zscore(q.keys.inflight, j2.id) == lease_before
    assert redis_client.hget(q.keys.domain(d), "inflight") == "1"
    assert redis_client.hget(q.keys.domain(d), "done") == "2"
    assert q.ack(j2) == "done"
    assert redis_client.hget(q.keys.domain(d), "inflight") == "0"


def test_a_job_named_twice_in_one_batch_is_stale_the_second_time(
    make_queue: QueueFactory, redis_client: redis.Redis
) -> None:
    d = dom(1)

    def setup(q: Queue) -> list[Settlement]:
        enqueue(q, d, 3)
        j1, j2, j3 = q.claim(3).jobs
        return [q.done(j1), q.retrying(j2, delay=0), q.done(j1), q.retrying(j2), q.done(j3)]

    snap, answers, _ = settle_both_ways(make_queue, redis_client, setup, [d], domain_concurrency=10)
    assert answers == ["done", "retried", "stale", "stale", "done"]
    assert snap["domains"][d][0] == "0"
    assert snap["stats"]["done"] == "2"


@pytest.mark.parametrize(
    "flags",
    [
        # a spotless window, then successes and failures interleaved within one batch
        [False] * 6 + [False, False, True, False, False, True, False, False],
        [False] * 6 + [True, False, False, False, False, False, False],
        [False, True, False] + [False] * 8,
        [False] * 6 + [False, True, True, False, True, False, False, True],
    ],
)
def test_mixed_outcomes_of_one_domain_leave_the_window_item_by_item_leaves(
    make_queue: QueueFactory, redis_client: redis.Redis, flags: list[bool]
) -> None:
    d = dom(1)

    def setup(q: Queue) -> list[Settlement]:
        enqueue(q, d, len(flags))
        jobs = q.claim(len(flags)).jobs
        assert len(jobs) == len(flags)
        return [
            q.retrying(job, kind="timeout", delay=0) if failed else q.done(job)
            for job, failed in zip(jobs, flags, strict=True)
        ]

    snap, _, _ = settle_both_ways(
        make_queue,
        redis_client,
        setup,
        [d],
        domain_concurrency=20,
        breaker_window=6,
        breaker_min_calls=6,
        breaker_failures=5,
        breaker_rate=0.6,
    )
    win = snap["domains"][d][3]
    assert win is not None and len(win) == 6


def test_a_batch_that_trips_many_domains_pauses_like_item_by_item(
    make_queue: QueueFactory, redis_client: redis.Redis
) -> None:
    domains = [dom(i) for i in range(6)]

    def setup(q: Queue) -> list[Settlement]:
        for d in domains:
            enqueue(q, d, 4)
        jobs = claim_all(q, 100)
        items: list[Settlement] = []
        for round_ in range(4):  # one outcome per domain per round: the trips come last
            for d in domains:
                job = jobs[d][round_]
                if round_ == 0 or d == domains[5]:
                    items.append(q.done(job))
                else:
                    items.append(q.retrying(job, kind="timeout", delay=0))
        return items

    snap, _, q = settle_both_ways(
        make_queue,
        redis_client,
        setup,
        domains,
        breaker_failures=3,
        global_trip_min=3,
        global_trip_share=0.5,
        domain_concurrency=10,
    )
    assert snap["paused"], "five of six active domains tripped together"
    assert {snap["domains"][d][1] for d in domains} <= {None, "closed"}  # absent: closed
    assert all(snap["domains"][d][0] == "0" for d in domains)
    assert q.status()["counts"]["inflight"] == 0


def test_a_bad_outcome_refuses_the_whole_batch_before_any_write(
    make_queue: QueueFactory, redis_client: redis.Redis
) -> None:
    # Scripts check every input before their first write (issue 21, item 3): the items
    # before a bad one are not settled half-way; the client then settles them one by one.
    q = make_queue(queue="bad", domain_concurrency=10)
    d = dom(1)
    enqueue(q, d, 4)
    j1, j2, j3 = q.claim(3).jobs
    bogus = Settlement(j3.id, j3.token, "bogus")
    with pytest.raises(ScriptError, match="bogus"):
        q.settle_many([q.done(j1), q.retrying(j2, delay=0), bogus, q.done(j3)])
    assert sorted(redis_client.zrange(q.keys.inflight, 0, -1)) == sorted([j1.id, j2.id, j3.id])
    assert redis_client.hget(q.keys.domain(d), "inflight") == "3"
    assert redis_client.hget(q.keys.domain(d), "done") is None
    assert q.settle_many([q.done(j1), q.retrying(j2, delay=0), q.done(j3)]) == [
        "done",
        "retried",
        "done",
    ]
    assert q.get_job(j1.id) is None
    assert redis_client.hget(q.keys.domain(d), "inflight") == "0"
    assert d in redis_client.zrange(q.keys.domains_ready, 0, -1), "the queued jobs are ready"


def test_a_done_batch_releases_fingerprints_only_while_they_are_the_jobs_own(
    make_queue: QueueFactory, redis_client: redis.Redis
) -> None:
    q = make_queue(queue="fp", domain_concurrency=10)
    d = dom(1)
    ids = enqueue(q, d, 4, unique=True)
    plain = enqueue(q, dom(2), 1)
    jobs = {j.id: j for j in q.claim(5).jobs}
    held = redis_client.hgetall(q.keys.unique)
    # the plain job came after a unique enqueue: it holds its free fingerprint too
    assert sorted(held.values()) == sorted(ids + plain)
    taken_fp = next(fp for fp, job_id in held.items() if job_id == ids[1])
    redis_client.hset(q.keys.unique, taken_fp, "someone-else")
    answers = q.settle_many(
        [
            *(q.done(jobs[ids[0]]), q.done(jobs[ids[1]]), q.done(jobs[plain[0]])),
            *(q.failing(jobs[ids[2]], "http_404"), q.done(jobs[ids[3]])),
        ]
    )
    assert answers == ["done", "done", "done", "dead", "done"]
    assert redis_client.hgetall(q.keys.unique) == {taken_fp: "someone-else"}
    again = q.enqueue_many([f"https://{d}/p/0", f"https://{d}/p/1"], unique=True)
    assert [r.status for r in again] == ["added", "duplicate"]


def test_a_batch_of_many_domains_and_lanes_settles_like_item_by_item(
    make_queue: QueueFactory, redis_client: redis.Redis
) -> None:
    domains = [dom(i) for i in range(5)]

    def setup(q: Queue) -> list[Settlement]:
        for n, d in enumerate(domains):
            enqueue(q, d, 6, lane=("critical", "normal", "bulk")[n % 3])
        jobs = q.claim(30).jobs
        assert len(jobs) == 30
        items: list[Settlement] = []
        for i, job in enumerate(jobs):
            kind = i % 6
            if kind == 0:
                items.append(q.releasing(job))
            elif kind == 1:
                items.append(q.throttling(job, retry_after=5))
            elif kind == 2:
                items.append(q.failing(job, "http_404"))
            else:
                items.append(q.done(job, domain_failed=kind == 5))
        return items

    snap, _, _ = settle_both_ways(
        make_queue, redis_client, setup, domains, domain_concurrency=10, breaker_failures=5
    )
    assert snap["inflight"] == []
    assert all(snap["domains"][d][0] == "0" for d in domains)


def test_a_run_of_successes_around_a_failure_ends_with_the_windows_of_item_by_item(
    make_queue: QueueFactory, redis_client: redis.Redis
) -> None:
    # a batch writes a domain's window once for a run of successes (includes/breaker.lua:
    # BRK), and before a failure of any domain reads the breaker fields
    a, b = dom(1), dom(2)

    def setup(q: Queue) -> list[Settlement]:
        enqueue(q, a, 5)
        enqueue(q, b, 6)
        jobs = claim_all(q, 11)
        ja, jb = jobs[a], jobs[b]
        return [
            q.done(ja[0]),
            q.done(jb[0]),
            q.done(ja[1]),
            q.done(jb[1]),
            q.retrying(ja[2], kind="timeout", delay=0),
            *[q.done(j) for j in jb[2:5]],  # b's window full, spotless
            q.done(ja[3]),
            q.done(jb[5]),  # a spotless window: nothing to change
            q.done(ja[4]),
        ]

    snap, answers, _ = settle_both_ways(
        make_queue, redis_client, setup, [a, b], domain_concurrency=8, breaker_window=4,
        breaker_min_calls=4,
    )  # fmt: skip
    assert answers == ["done"] * 4 + ["retried"] + ["done"] * 6
    # inflight, state, fails, win
    assert snap["domains"][a][:4] == ["0", None, "0", "0100"]
    assert snap["domains"][b][:4] == ["0", None, "0", "0000"]


# --- claim --------------------------------------------------------------------------------


def test_a_claim_run_skips_orphans_corrupt_and_expired_jobs_within_its_budget(
    make_queue: QueueFactory, redis_client: redis.Redis
) -> None:
    q = make_queue(queue="run", domain_concurrency=10)
    d = dom(1)
    ids = enqueue(q, d, 8)
    expiring = q.enqueue(f"https://{d}/p/expiring", expires=1).id
    redis_client.delete(q.keys.job(ids[1]))  # an orphan id in the domain's zset
    redis_client.set(q.keys.job(ids[3]), f'{{"id": "{ids[3]}", "domain": "{d}"')  # truncated JSON
    q.testing_clock_offset_ms += 5_000
    claimed = q.claim(6).jobs
    # the first run pops 6 ids, the orphan and the corrupt job among them (4 leased); a
    # second run of the domain fills the claim
    assert [j.id for j in claimed] == [ids[0], ids[2], ids[4], ids[5], ids[6], ids[7]]
    assert redis_client.hget(q.keys.domain(d), "inflight") == "6"
    assert sorted(redis_client.zrange(q.keys.inflight, 0, -1)) == sorted(j.id for j in claimed)
    assert redis_client.zrange(q.keys.domain_queue(d), 0, -1) == [expiring]
    # the orphan and the truncated text name no lane: their lane's ready counter is left
    # to the audit
    assert redis_client.hget(q.keys.stats, "ready:normal") == "3"
    for job in claimed:
        stored = q.get_job(job.id)
        assert stored is not None and stored.token == job.token and stored.attempts == 1
    assert [j.dead_reason for j in q.dead_letters()] == ["corrupt_payload"]
    assert redis_client.hget(q.keys.stats, "orphans") == "1"
    assert q.claim(10).jobs == []
    assert {j.dead_reason for j in q.dead_letters()} == {"corrupt_payload", "expired"}
    assert redis_client.zcard(q.keys.domain_queue(d)) == 0
    assert redis_client.hget(q.keys.stats, "ready:normal") == "2"
    assert [p.kind for p in q.audit(repair=True).problems] == ["lane_ready_count"]
    assert redis_client.hget(q.keys.stats, "ready:normal") == "0"


def test_a_claim_run_stops_where_another_domain_is_more_urgent(
    make_queue: QueueFactory, redis_client: redis.Redis
) -> None:
    q = make_queue(queue="bound", domain_concurrency=10)
    a, b = dom(1), dom(2)
    first = enqueue(q, a, 3)
    q.testing_clock_offset_ms += 10
    middle = enqueue(q, b, 1)
    q.testing_clock_offset_ms += 10
    last = enqueue(q, a, 2)
    claimed = [j.id for j in q.claim(10).jobs]
    assert claimed == first + middle + last
    assert redis_client.zcard(q.keys.inflight) == 6
    assert redis_client.hget(q.keys.domain(a), "inflight") == "5"
    assert redis_client.zcard(q.keys.domain_queue(a)) == 0


def test_the_same_claims_one_at_a_time_and_in_batches_lease_the_same_jobs(
    make_queue: QueueFactory, redis_client: redis.Redis
) -> None:
    domains = [dom(i) for i in range(4)]

    def fill(q: Queue) -> dict[str, int]:
        """Enqueue the same jobs; answers each id's rank in enqueue order."""
        ids: list[str] = []
        for n, d in enumerate(domains):
            ids += enqueue(q, d, 5, lane=("critical", "normal", "bulk", "normal")[n])
        return {job_id: rank for rank, job_id in enumerate(ids)}

    one = make_queue(queue="one", domain_concurrency=3)
    many = make_queue(queue="many", domain_concurrency=3)
    one_rank = fill(one)
    many_rank = fill(many)
    singles = [one_rank[j.id] for _ in range(20) for j in one.claim(1).jobs]
    batched = [many_rank[j.id] for j in many.claim(20).jobs]
    assert len(batched) == 12  # 4 domains x 3 slots
    assert sorted(singles) == sorted(batched)
    assert snapshot(redis_client, one, domains) == snapshot(redis_client, many, domains)


def test_a_claim_files_every_lease_in_flight_at_its_deadline_past_one_zadd_slice(
    make_queue: QueueFactory, redis_client: redis.Redis
) -> None:
    # 600 leases are 1,200 ZADD arguments: two slices (includes/calls.lua), sent in
    # descending id order (claim-1.lua: add_inflight), next to leases already in flight
    q = make_queue(queue="slices", domain_concurrency=1000, lease=60)
    earlier = q.claim(1).jobs if enqueue(q, dom(99), 1) else []
    for i in range(30):
        enqueue(q, dom(i), 20)
    claimed = q.claim(1000).jobs
    assert len(claimed) == 600
    inflight = dict(redis_client.zrange(q.keys.inflight, 0, -1, withscores=True))
    assert sorted(inflight) == sorted(j.id for j in [*earlier, *claimed])
    for job in claimed:
        assert job.claimed_ms is not None
        assert inflight[job.id] == job.claimed_ms + 60_000
    # one score, members in id order: what ZADD keeps whatever order they were sent in
    ranked = redis_client.zrange(q.keys.inflight, 0, -1)
    assert ranked[-600:] == sorted(j.id for j in claimed)
