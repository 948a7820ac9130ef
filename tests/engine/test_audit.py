"""scrapeq audit: each kind of damage made by hand on a real Redis is found, then repaired.

Each test damages one structure the way a fault would (an evicted key, a lost write, a
counter left behind), checks the audit names it precisely, repairs it, and checks the queue
then works: the jobs can still be claimed and the audit is clean.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
import redis

from scrapeq.engine.ops.audit import Snapshot, find_suspects
from scrapeq.engine.queue import Queue

pytestmark = pytest.mark.backends

QueueFactory = Callable[..., Queue]


def url(shop: int, page: int = 1) -> str:
    return f"https://shop-{shop}.example.com/p/{page}"


def dom(shop: int) -> str:
    return f"shop-{shop}.example.com"


def kinds(q: Queue, **options: Any) -> list[tuple[str, str]]:
    report = q.audit(**options)
    return sorted((p.kind, p.subject) for p in report.problems)


def drain(q: Queue) -> int:
    """Claim and ack everything claimable now; answers how many."""
    done = 0
    for _ in range(50):
        jobs = q.claim(100).jobs
        if not jobs:
            return done
        q.settle_many([q.done(j) for j in jobs])
        done += len(jobs)
    return done


@pytest.fixture
def q(make_queue: QueueFactory) -> Queue:
    return make_queue(domain_concurrency=2, lease=60)


def test_a_healthy_busy_queue_is_clean(q: Queue) -> None:
    q.enqueue_many([url(i, p) for i in range(5) for p in range(6)], unique=True)
    q.enqueue(url(9), delay=30)
    jobs = q.claim(7).jobs
    q.settle_many(
        [
            q.done(jobs[0]),
            q.retrying(jobs[1], delay=10),
            q.fail(jobs[2], "http_404") if False else q.failing(jobs[2], "http_404"),
        ]
    )
    report = q.audit()
    assert report.ok and report.problems == [], report.as_dict()
    assert report.checked["jobs"] == 30
    assert report.checked["leases"] == 4
    assert report.checked["domains"] == 6


def test_an_evicted_ready_job_is_an_id_without_job(q: Queue, redis_client: redis.Redis) -> None:
    ids = [r.id for r in q.enqueue_many([url(1, 1), url(1, 2)])]
    redis_client.delete(q.keys.job(ids[0]))
    # in its ready queue, and counted in its lane's ready counter
    assert kinds(q) == [("id_without_job", ids[0]), ("lane_ready_count", "normal")]
    report = q.audit(repair=True)
    assert report.ok and all(p.repaired for p in report.problems)
    assert q.audit().problems == []
    assert drain(q) == 1


def test_a_job_key_no_structure_names_is_filed_again(q: Queue, redis_client) -> None:
    (job_id,) = [r.id for r in q.enqueue_many([url(1)])]
    redis_client.zrem(q.keys.domain_queue(dom(1)), job_id)  # a lost write
    redis_client.hincrby(q.keys.stats, "ready:normal", -1)  # the write that counted it
    assert ("job_without_place", job_id) in kinds(q)
    q.audit(repair=True)
    assert q.audit().problems == []
    assert drain(q) == 1


def test_a_wrong_inflight_counter_strands_the_domain_until_repaired(q: Queue, redis_client) -> None:
    q.enqueue_many([url(1, p) for p in range(3)])
    redis_client.hset(q.keys.domain(dom(1)), "inflight", 2)  # leases that no longer exist
    redis_client.zrem(q.keys.domains_ready, dom(1))
    assert q.claim(5).jobs == [], "stranded: at its cap with nothing in flight"
    assert kinds(q) == [("inflight_count", dom(1)), ("stranded_domain", dom(1))]
    report = q.audit(repair=True)
    assert report.ok, report.as_dict()
    assert q.audit().problems == []
    assert drain(q) == 3


def test_a_job_in_two_places_keeps_the_most_advanced(q: Queue, redis_client) -> None:
    q.enqueue_many([url(1, 1), url(1, 2)])
    (job, _) = q.claim(2).jobs
    redis_client.zadd(q.keys.delayed, {job.id: 0})  # a replayed write from an old AOF
    assert kinds(q) == [("delayed_count", dom(1)), ("job_in_two_places", job.id),
                        ("lane_delayed_count", "normal")]  # fmt: skip
    q.audit(repair=True)
    assert q.audit().problems == []
    assert redis_client.zscore(q.keys.inflight, job.id) is not None
    assert q.ack(job) == "done"


def test_lease_records_and_stale_fingerprints(q: Queue, redis_client) -> None:
    ids = [r.id for r in q.enqueue_many([url(1), url(2)], unique=True)]
    (a, b) = q.claim(2).jobs
    redis_client.hdel(q.keys.prefix + "leased", a.id)
    redis_client.hset(q.keys.prefix + "leased", "zz9", dom(3))
    redis_client.hset(q.keys.unique, "feedface", "gone1")
    found = kinds(q)
    assert ("lease_domain", a.id) in found and ("lease_domain", "zz9") in found
    assert ("stale_fingerprint", "feedface") in found
    q.audit(repair=True)
    assert q.audit().problems == []
    assert redis_client.hget(q.keys.prefix + "leased", a.id) == a.domain
    assert sorted(ids) == sorted([a.id, b.id])


def test_a_second_pending_job_of_a_unique_url_is_named(q: Queue, redis_client) -> None:
    """Two pending jobs of one unique URL (as a sitemap's lastmod made them before issue 38,
    item 10) are found: the one carrying a fingerprint another pending job holds. Which one
    to drop is the operator's: reported, not repaired. A unique job whose fingerprint no job
    holds takes it again."""
    first = q.enqueue(url(1), unique="seen")
    second = q.enqueue(url(1, 2), unique="seen")
    # by hand, as the defect left it: the second job of the URL's fingerprint
    fp = json.loads(redis_client.get(q.keys.job(first.id)))["f"]
    raw = json.loads(redis_client.get(q.keys.job(second.id)))
    redis_client.hdel(q.keys.unique, raw["f"])
    raw["u"], raw["f"] = url(1), fp
    redis_client.set(q.keys.job(second.id), json.dumps(raw))
    [problem] = q.audit().problems
    assert (problem.kind, problem.subject) == ("duplicate_pending", second.id)
    assert first.id in problem.detail and not problem.repaired
    assert not q.audit(repair=True).ok  # two jobs of one URL: which one to drop is not ours
    q.cancel(ids=[first.id])  # its fingerprint released: the other job holds none
    [problem] = q.audit().problems
    assert (problem.kind, problem.subject) == ("duplicate_pending", second.id)
    assert "held by no pending job" in problem.detail
    report = q.audit(repair=True)
    assert report.ok and report.problems[0].repaired
    assert q.audit().problems == []
    assert q.enqueue(url(1), unique="seen").status == "duplicate"


def test_a_corrupt_job_text_becomes_a_dead_letter(q: Queue, redis_client) -> None:
    (job_id,) = [r.id for r in q.enqueue_many([url(1)])]
    redis_client.set(q.keys.job(job_id), '{"id": "' + job_id + '", "domain": "shop-1.ex')
    # the truncated text names no lane: its lane's ready counter is one too many
    assert kinds(q) == [("corrupt_job", job_id), ("lane_ready_count", "normal")]
    q.audit(repair=True)
    assert q.audit().problems == []
    assert q.status()["lanes"]["normal"]["ready"] == 0
    (dead,) = q.dead_letters()
    assert dead.dead_reason == "corrupt_payload"


def test_a_retired_domain_out_of_the_drain_set_is_stranded(q: Queue, redis_client) -> None:
    q.enqueue_many([url(1, p) for p in range(3)])
    redis_client.hset(q.keys.domain(dom(1)), "state", "retired")
    redis_client.zrem(q.keys.domains_ready, dom(1))
    assert kinds(q) == [("stranded_domain", dom(1))]
    q.audit(repair=True)
    assert q.audit().problems == []
    q.reap()
    assert q.status()["counts"]["dead"] == 3, "the retired backlog was drained"


async def test_the_async_queue_audits_too(make_async_queue, redis_client) -> None:
    q = make_async_queue()
    ids = [r.id for r in await q.enqueue_many([url(1)])]
    redis_client.delete(q.keys.job(ids[0]))
    kinds = [p.kind for p in (await q.audit()).problems]
    assert kinds == ["id_without_job", "lane_ready_count"]
    report = await q.audit(repair=True)
    assert [(p.kind, p.repaired) for p in report.problems] == [(k, True) for k in kinds]
    assert (await q.audit()).ok


def test_suspicions_that_no_longer_hold_are_not_reported(q: Queue) -> None:
    """A job that moved between two reads of the scan raises a suspicion, checked again."""
    q.enqueue_many([url(1)])
    snap = Snapshot(jobs={}, delayed=["a1"], domains={dom(1): {"inflight": "5"}})
    suspects = find_suspects(snap)
    assert {"k": "id_without_job", "id": "a1", "place": "delayed"} in suspects
    assert {"k": "inflight_count", "d": dom(1)} in suspects
    answers = q._drive(_check(suspects))
    assert answers == [(False, False, "")] * len(suspects)


def _check(items: list[dict[str, Any]]):  # type: ignore[no-untyped-def]
    from scrapeq.engine.lua import scripts

    return (yield scripts.audit(items, False))


def test_report_as_json(q: Queue, redis_client) -> None:
    (job_id,) = [r.id for r in q.enqueue_many([url(1)])]
    redis_client.delete(q.keys.job(job_id))
    data = json.loads(json.dumps(q.audit().as_dict()))
    assert data["ok"] is False
    assert {p["kind"] for p in data["problems"]} == {"id_without_job", "lane_ready_count"}


def test_cli_audit_exits_1_with_the_list_then_repairs(
    q: Queue, redis_client, redis_url: str, capsys
) -> None:
    from scrapeq.interfaces.cli import main

    ids = [r.id for r in q.enqueue_many([url(1, 1), url(1, 2)])]
    assert main(["--redis", redis_url, "audit"]) == 0
    assert "clean" in capsys.readouterr().out
    redis_client.delete(q.keys.job(ids[0]))
    assert main(["--redis", redis_url, "audit", "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["ok"] is False and data["problems"][0]["subject"] == ids[0]
    assert main(["--redis", redis_url, "audit", "--repair"]) == 0
    out = capsys.readouterr().out
    assert "id_without_job" in out and "all repaired" in out
    assert main(["--redis", redis_url, "audit"]) == 0


def test_a_queue_under_load_audits_clean(make_queue: QueueFactory) -> None:
    """Jobs move while the audit scans: suspicions that do not hold are never reported."""
    import random
    import threading
    import time

    busy = make_queue(domain_concurrency=3, lease=60, backoff_base=0.001, backoff_cap=0.001)
    auditor = make_queue(domain_concurrency=3)
    busy.enqueue_many([url(i % 20, i) for i in range(600)], unique=True)
    stop = time.monotonic() + 3
    rng = random.Random(7)

    def work() -> None:
        while time.monotonic() < stop:
            jobs = busy.claim(40).jobs
            items = []
            for j in jobs:
                roll = rng.random()
                if roll < 0.6:
                    items.append(busy.done(j))
                elif roll < 0.8:
                    items.append(busy.retrying(j, delay=0, domain_failed=None))
                elif roll < 0.9:
                    items.append(busy.releasing(j, delay=0))
                else:
                    items.append(busy.failing(j, "http_404"))
            busy.settle_many(items)
            busy.enqueue_many([url(rng.randrange(20), rng.randrange(10**6)) for _ in range(20)])

    worker = threading.Thread(target=work)
    worker.start()
    reports = []
    try:
        while time.monotonic() < stop:
            reports.append(auditor.audit())
    finally:
        worker.join()
    assert len(reports) >= 2
    assert [p for r in reports for p in r.problems] == []
    assert sum(r.suspected for r in reports) > 0, "the scans saw jobs move (and dismissed it)"
    assert auditor.audit().problems == []


def test_the_set_of_open_breakers_agrees_with_the_domains(q: Queue, redis_client) -> None:
    q.enqueue_many([url(1), url(2)])
    q.breaker_trip(dom(1))
    assert redis_client.smembers(q.keys.prefix + "open") == {dom(1)}
    redis_client.srem(q.keys.prefix + "open", dom(1))  # a lost write
    redis_client.sadd(q.keys.prefix + "open", dom(2))
    assert kinds(q) == [("open_set", dom(1)), ("open_set", dom(2))]
    q.audit(repair=True)
    assert q.audit().problems == []
    assert q.figures()["open_breakers"] == 1
    q.breaker_reset(dom(1))
    assert redis_client.smembers(q.keys.prefix + "open") == set()
