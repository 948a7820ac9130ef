"""The domain registry, from a review of its first version (d09a965): an older queue's
domains read as before once migrated (enqueued counts, max_pages, status' count), a
status of a small partitioned queue reads only the buckets that hold domains, and a long
name's bucket leaves the compact encoding, as docs/DESIGN.md says."""

from __future__ import annotations

from collections.abc import Callable

import redis

from scrapeq.engine.model.keys import registry_bucket
from scrapeq.engine.queue import Queue
from support.registry import as_written_before

MakeQueue = Callable[..., Queue]


def test_a_migrated_domain_keeps_its_enqueued_count(
    make_queue: MakeQueue, redis_client: redis.Redis
) -> None:
    """DESIGN: an older queue is migrated when a client opens it; its domains keep their
    counts of jobs enqueued (their `enq`)."""
    q = make_queue()
    q.enqueue_many([f"https://old.example.com/p/{i}" for i in range(4)])
    as_written_before(redis_client, q)
    (info,) = make_queue().domains_info(["old.example.com"])
    assert info["enqueued"] == 4


def test_max_pages_holds_for_a_migrated_domain(
    make_queue: MakeQueue, redis_client: redis.Redis
) -> None:
    """over_max_pages reads the registry: a domain of an older queue that already has
    max_pages jobs enqueued (its `enq`) takes no more follow-ups once opened (the review
    found it took max_pages more while a claim's housekeeping had not moved it)."""
    q = make_queue(max_pages=3)
    q.enqueue_many([f"https://shop.example.com/p/{i}" for i in range(3)], unique="seen")
    parent = q.claim(1).jobs[0]
    as_written_before(redis_client, q)  # enq = 3 = max_pages
    opened = make_queue(max_pages=3)
    children = [
        opened.prepare(f"https://shop.example.com/c/{i}", unique="seen").child_of(parent.id, 1)
        for i in range(5)
    ]
    assert opened.settle_many([opened.done(parent, follow=children)]) == ["done"]
    assert opened.status()["counts"]["enqueued"] == 3, "every follow-up is over max_pages"


def test_status_counts_a_migrated_domain_once(
    make_queue: MakeQueue, redis_client: redis.Redis
) -> None:
    """status' domains is the registry's count: a domain of an older queue that gets an
    enqueue (or a domain_set) is counted once (the review found it twice while migrating)."""
    q = make_queue()
    q.enqueue_many([f"https://shop-{i}.example.com/" for i in range(4)])
    as_written_before(redis_client, q)
    opened = make_queue()
    assert sum(opened.status()["breakers"].values()) == 4
    opened.enqueue("https://shop-0.example.com/again")
    opened.domain_set("shop-1.example.com", delay=1.0)
    assert sum(opened.status()["breakers"].values()) == 4


def test_status_of_a_small_queue_does_not_read_every_bucket(
    make_queue: MakeQueue, redis_client: redis.Redis
) -> None:
    """status-1.lua's pick_top reads all 1,024 buckets (HKEYS) whenever a partition has at
    most status_top domains, even none: each status of a P=64 queue of 100 domains costs
    ~45 ms of Redis time (2.9 ms at 386affa; /tmp script in the review report)."""
    q = make_queue(partitions=4)
    q.enqueue_many([f"https://shop-{i}.example.com/" for i in range(6)])
    redis_client.config_resetstat()
    q.status()
    stats = redis_client.info("commandstats")
    hkeys = int(stats.get("cmdstat_hkeys", {}).get("calls", 0))
    assert hkeys <= 4 * 16, f"{hkeys} HKEYS for one status of 6 domains"


def test_a_long_domain_name_turns_its_bucket_into_a_hashtable(
    make_queue: MakeQueue, redis_client: redis.Redis
) -> None:
    """As DESIGN says: a name longer than hash-max-ziplist-value / hash-max-listpack-value (64
    bytes) turns its whole bucket (~100 domains at 100,000 a partition) into a hashtable,
    which costs memory, not correctness."""
    q = make_queue()
    long = "a" * 60 + "." + "b" * 20 + ".example.com"  # 93 bytes, a valid host
    b = registry_bucket(long)
    q.enqueue("https://short.example.com/")
    q.domain_set(long, delay=1.0)
    assert redis_client.object("encoding", q.keys.registry(b)) == "hashtable"
    assert q.domain_known(long) and long in q.domain_names()
