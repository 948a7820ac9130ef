"""The exact seen-set's bucket count (issue 21, item 12): sized from ``seen_capacity`` by the
first seen enqueue, fixed for the queue's life, and 65,536 for queues written before.

A bucket is ``fingerprint mod buckets``; with a power of two that is the fingerprint's low
bits (the low 16 for 65,536, what earlier versions used). Runs against a real Redis.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable

import pytest
import redis

from scrapeq import Queue
from scrapeq.engine.lua.scripts import ScriptConfig, expand_includes
from scrapeq.engine.model.seen import (
    DEFAULT_SEEN_BUCKETS,
    MAX_SEEN_BUCKETS,
    SEEN_BUCKET_FILL,
    seen_buckets,
    stored_buckets,
)
from scrapeq.engine.model.urls import fingerprint64
from scrapeq.errors import ConfigError

QueueFactory = Callable[..., Queue]


def url(page: int, shop: int = 1) -> str:
    return f"https://shop-{shop}.example.com/p/{page}"


def seen_keys(client: redis.Redis, q: Queue) -> list[str]:
    return sorted(client.scan_iter(match=f"{q.keys.prefix}seen:*", count=1000))


def done_all(q: Queue, n: int) -> None:
    """Claim and ack ``n`` jobs (their pending fingerprints freed: only the seen-set answers)."""
    for job in q.claim(n).jobs:
        q.ack(job)


def test_bucket_counts_for_capacities() -> None:
    assert seen_buckets(10_000_000) == DEFAULT_SEEN_BUCKETS, "the default: earlier layouts"
    assert (seen_buckets(200_000), seen_buckets(1), seen_buckets(201)) == (1024, 1, 2)
    assert seen_buckets(10**15) == MAX_SEEN_BUCKETS
    for capacity in (1_000, 54_321, 200_000, 3_000_000, 10_000_000, 123_456_789):
        buckets = seen_buckets(capacity)
        assert buckets & (buckets - 1) == 0, "a power of two: the bucket is the low bits"
        assert SEEN_BUCKET_FILL / 2 < capacity / buckets <= SEEN_BUCKET_FILL
    assert stored_buckets("exact") == stored_buckets("exact/slice_ms=5") == DEFAULT_SEEN_BUCKETS
    assert stored_buckets("exact/slice_ms=5/buckets=8") == 8
    assert stored_buckets(None) is stored_buckets("bloom/m=8/k=1/chunk=8") is None


def test_buckets_are_sized_from_seen_capacity(
    make_queue: QueueFactory, redis_client: redis.Redis
) -> None:
    q = make_queue(unique="seen", seen_capacity=2_000, domain_concurrency=1000)
    urls = [url(i) for i in range(2_000)]
    assert all(r.added for r in q.enqueue_many(urls))
    keys = seen_keys(redis_client, q)
    # 2,000 / 200 a bucket at most: 10, the next power of two 16
    assert keys == sorted(q.keys.seen(b) for b in range(16)), keys[:20]
    assert {redis_client.object("encoding", k) for k in keys} == {"intset"}
    assert redis_client.hget(q.keys.meta, "seen") == "exact/buckets=16"
    for u in urls[:100]:
        fp = fingerprint64(u)
        assert redis_client.sismember(q.keys.seen(fp & 15), str(fp))
    done_all(q, 100)
    assert {r.status for r in q.enqueue_many(urls[:100])} == {"seen"}


def test_the_default_capacity_keeps_the_layout_of_earlier_versions(
    make_queue: QueueFactory, redis_client: redis.Redis
) -> None:
    q = make_queue(unique="seen")  # seen_capacity 10,000,000: 65,536 buckets
    fp = fingerprint64(url(1))
    q.enqueue(url(1))
    assert redis_client.hget(q.keys.meta, "seen") == "exact"
    assert redis_client.sismember(q.keys.seen(fp & 0xFFFF), str(fp))


def test_a_queue_written_before_keeps_its_65536_buckets(
    make_queue: QueueFactory, redis_client: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    old = make_queue(unique="seen")
    # what an earlier version wrote: the stamp 'exact', buckets by the low 16 bits
    redis_client.hset(old.keys.meta, "seen", "exact")
    for i in range(50):
        fp = fingerprint64(url(i))
        redis_client.sadd(old.keys.seen(fp & 0xFFFF), str(fp))
    q = make_queue(unique="seen", seen_capacity=1_000, domain_concurrency=1000)
    with caplog.at_level(logging.WARNING, logger="scrapeq"):
        answers = q.enqueue_many([url(i) for i in range(60)])
    assert [r.status for r in answers] == ["seen"] * 50 + ["added"] * 10
    fp = fingerprint64(url(55))
    assert redis_client.sismember(q.keys.seen(fp & 0xFFFF), str(fp)), "the old buckets"
    assert redis_client.hget(q.keys.meta, "seen") == "exact", "the stamp is left as it was"
    warned = [r.getMessage() for r in caplog.records if "seen_capacity" in r.getMessage()]
    assert len(warned) == 1 and "65,536" in warned[0], warned
    q.enqueue_many([url(i) for i in range(60, 70)])
    assert len([r for r in caplog.records if "seen_capacity" in r.getMessage()]) == 1, "once"


def test_a_later_capacity_does_not_rebucket_the_queue(
    make_queue: QueueFactory, redis_client: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    small = make_queue(unique="seen", seen_capacity=1_000, domain_concurrency=1000)
    small.enqueue_many([url(i) for i in range(100)])
    done_all(small, 100)
    assert redis_client.hget(small.keys.meta, "seen") == "exact/buckets=8"
    big = make_queue(unique="seen", seen_capacity=50_000_000)
    with caplog.at_level(logging.WARNING, logger="scrapeq"):
        answers = big.enqueue_many([url(i) for i in range(110)])
    assert [r.status for r in answers] == ["seen"] * 100 + ["added"] * 10
    assert len(seen_keys(redis_client, big)) == 8, "still 8 buckets"
    (warning,) = [r.getMessage() for r in caplog.records if "seen_capacity" in r.getMessage()]
    assert "8 buckets" in warning and "262,144" in warning, warning


@pytest.mark.parametrize("count", ["0", "4294967297"])
def test_a_damaged_bucket_count_is_another_layout(
    make_queue: QueueFactory, redis_client: redis.Redis, count: str
) -> None:
    q = make_queue(unique="seen", seen_capacity=1_000)
    redis_client.hset(q.keys.meta, "seen", f"exact/buckets={count}")
    with pytest.raises(ConfigError, match=f"built as exact/buckets={count} "):
        q.enqueue(url(1))
    assert seen_keys(redis_client, q) == [] and q.counts()["enqueued"] == 0


def test_sliced_seen_sets_use_the_sized_buckets(
    make_queue: QueueFactory, redis_client: redis.Redis
) -> None:
    q = make_queue(unique="seen", seen_capacity=1_000, recrawl_after=3600)
    q.enqueue_many([url(i) for i in range(300)])
    keys = seen_keys(redis_client, q)
    assert 1 <= len(keys) <= 8 and all(int(k.rsplit(":", 1)[1]) < 8 for k in keys), keys
    assert redis_client.hget(q.keys.meta, "seen") == "exact/slice_ms=900000/buckets=8"


def test_a_bad_bucket_argument_is_refused_before_anything_is_written(
    make_queue: QueueFactory, redis_client: redis.Redis
) -> None:
    q = make_queue(unique="seen", seen_capacity=1_000)
    config = ScriptConfig.from_settings(q.settings).to_json()
    enqueue = redis_client.register_script(expand_includes(
        "--@include common\n--@include domain\n--@include jobs\n--@include seen\n"
        "--@include enqueue\nlocal refused = arg_refusal(function()\n"
        "  for _, s in ipairs(ARG.jobs) do check_in(s.seen, 'seen', check_seen_arg) end\nend)\n"
        "if refused then return redis.error_reply(refused) end\n"
        "local bad = enqueue_check(ARG.jobs)\n"
        "if bad then return redis.error_reply(bad) end\nreturn 'ok'\n"
    ))  # fmt: skip
    for b in (-1, 2**32, 1.5, "7"):
        arg = json.dumps({"jobs": [{"seen": {"b": b, "f": "12"}}]})
        with pytest.raises(redis.ResponseError, match="SQ_BAD_ARG"):
            enqueue(keys=[q.keys.prefix], args=[0, config, arg])
    assert redis_client.keys(f"{q.keys.prefix}*") == [], "nothing written, not even the stamp"


def test_the_scrapy_dupefilter_reads_the_queues_buckets(
    make_queue: QueueFactory, redis_client: redis.Redis
) -> None:
    scrapy = pytest.importorskip("scrapy")
    from scrapeq.contrib.scrapy import DupeFilter

    q = make_queue(unique="seen", seen_capacity=1_000)
    df = DupeFilter()
    old, new = (scrapy.Request(f"https://shop-1.example.com/{p}") for p in ("a", "b"))
    assert not df.request_seen(old), "no queue yet"
    q.enqueue_many([q.prepare(old.url, unique="seen", fingerprint64=df.fingerprint_of(old, q))])
    assert redis_client.hget(q.keys.meta, "seen") == "exact/buckets=8"
    assert df.request_seen(old) and not df.request_seen(new)
