"""The domain registry (issue 13, the sparse memory case): every domain the queue knows, with
its count of jobs enqueued, in 1,024 small hashes ``sq:{Q}:reg:<b>`` instead of a set and a
per-domain hash, so a domain that only has jobs queued has no key of its own but its ready
queue. Also: the migration of a queue written before (a set ``sq:{Q}:domains`` and ``enq``
in each domain's hash), and the audit of the registry's counter."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import pytest
import redis

from scrapeq.engine.keys import REGISTRY_BUCKETS, registry_bucket
from scrapeq.engine.queue import Queue
from scrapeq.errors import NotFound

MakeQueue = Callable[..., Queue]

NAMES = [
    "shop-1.example.com",
    "shop-2.example.com",
    "a.b.c.d.example.co.uk",
    "shop.example.com:8080",
    "xn--bcher-kva.example",
    "x" * 63 + ".example.com",
]


def registered(client: redis.Redis, q: Queue) -> dict[str, int]:
    out: dict[str, int] = {}
    for key in q.keys.registry_keys:
        out.update({d: int(n) for d, n in client.hgetall(key).items()})
    return out


def test_python_and_lua_agree_on_each_domains_bucket(
    make_queue: MakeQueue, redis_client: redis.Redis
) -> None:
    q = make_queue()
    q.enqueue_many([f"http://{d}/p" for d in NAMES])
    for d in NAMES:
        assert redis_client.hexists(q.keys.registry(registry_bucket(d)), d), d
    assert {registry_bucket(d) for d in NAMES} <= set(range(REGISTRY_BUCKETS))
    # spread evenly, so the buckets stay small (Redis's compact encoding ends at 128 fields)
    load = Counter(registry_bucket(f"d{i:05d}.example.com") for i in range(50_000))
    assert len(load) == REGISTRY_BUCKETS and max(load.values()) <= 80


def test_registry_counts_domains_and_their_jobs(
    make_queue: MakeQueue, redis_client: redis.Redis
) -> None:
    q = make_queue()
    q.enqueue_many([f"https://shop-{i % 3}.example.com/p/{i}" for i in range(10)])
    assert registered(redis_client, q) == {
        "shop-0.example.com": 4,
        "shop-1.example.com": 3,
        "shop-2.example.com": 3,
    }
    assert redis_client.get(q.keys.domain_count) == "3"
    assert sum(q.status()["breakers"].values()) == 3
    assert q.domain_names() == [f"shop-{i}.example.com" for i in range(3)]
    info = {d["domain"]: d for d in q.domains_info()}
    assert info["shop-0.example.com"]["enqueued"] == 4

    # an override registers a domain the queue never saw, with nothing enqueued
    q.domain_set("new.example.com", delay=1.0)
    assert redis_client.get(q.keys.domain_count) == "4"
    assert registered(redis_client, q)["new.example.com"] == 0
    q.enqueue("https://new.example.com/")
    assert redis_client.get(q.keys.domain_count) == "4"
    assert registered(redis_client, q)["new.example.com"] == 1


def test_a_domain_with_only_queued_jobs_has_no_hash_of_its_own(
    make_queue: MakeQueue, redis_client: redis.Redis
) -> None:
    q = make_queue()
    q.enqueue_many([f"https://only-queued.example.com/p/{i}" for i in range(2)])
    assert not redis_client.exists(q.keys.domain("only-queued.example.com"))
    assert redis_client.exists(q.keys.domain_queue("only-queued.example.com"))
    job = q.claim(1).jobs[0]
    assert redis_client.hget(q.keys.domain(job.domain), "inflight") == "1"


def test_unknown_domains_are_still_refused(make_queue: MakeQueue) -> None:
    q = make_queue()
    q.enqueue("https://known.example.com/")
    assert q.domain_known("known.example.com") and not q.domain_known("unknown.example.com")
    with pytest.raises(NotFound):
        q.breaker_reset("unknown.example.com")
    assert q.breaker_reset("known.example.com") == "closed"


def as_written_before(client: redis.Redis, q: Queue) -> dict[str, int]:
    """Turn the queue's registry into the layout of a queue written before it had buckets."""
    before = registered(client, q)
    for d, enq in before.items():
        client.sadd(q.keys.domains, d)
        client.hset(q.keys.domain(d), "enq", enq)
    client.delete(*q.keys.registry_keys, q.keys.domain_count, q.keys.registry_index)
    return before


def test_a_queue_written_before_is_read_and_migrated(
    make_queue: MakeQueue, redis_client: redis.Redis
) -> None:
    q = make_queue()
    q.enqueue_many([f"https://shop-{i % 4}.example.com/p/{i}" for i in range(12)])
    before = as_written_before(redis_client, q)
    assert len(before) == 4

    # before the migration: listed, counted, known
    assert q.domain_names() == sorted(before)
    assert all(q.domain_known(d) for d in before)
    assert sum(q.status()["breakers"].values()) == 4
    assert q.breaker_reset("shop-1.example.com") == "closed"

    # an enqueue for an old domain and for a new one, then a claim's housekeeping migrates
    q.enqueue_many(["https://shop-0.example.com/again", "https://fresh.example.com/"])
    q.claim(1)
    assert not redis_client.exists(q.keys.domains)
    expected = dict(before, **{"shop-0.example.com": before["shop-0.example.com"] + 1})
    expected["fresh.example.com"] = 1
    assert registered(redis_client, q) == expected
    assert redis_client.get(q.keys.domain_count) == "5"
    assert all(redis_client.hget(q.keys.domain(d), "enq") is None for d in before)
    assert sum(q.status()["breakers"].values()) == 5
    assert q.audit().ok


def test_audit_finds_and_repairs_the_domain_counter(
    make_queue: MakeQueue, redis_client: redis.Redis
) -> None:
    q = make_queue()
    q.enqueue_many([f"https://shop-{i}.example.com/" for i in range(7)])
    assert q.audit().ok
    redis_client.set(q.keys.domain_count, 3)
    report = q.audit()
    assert [(p.kind, p.subject, p.repaired) for p in report.problems] == [
        ("domain_count", "registry", False)
    ]
    assert "counter 3, domains 7" in report.problems[0].detail
    repaired = q.audit(repair=True)
    assert [(p.kind, p.repaired) for p in repaired.problems] == [("domain_count", True)]
    assert redis_client.get(q.keys.domain_count) == "7"
    assert q.audit().ok
