"""One queue over several hash tags (``partitions = P``): keys, routing, claims in turn, the
whole queue in every read, and the number of partitions fixed while the queue is in use.
Run on the single test server and on the test cluster (``backends``)."""

from __future__ import annotations

import asyncio
import time
import zlib
from collections.abc import Callable
from typing import Any

import pytest
import redis

from scrapeq import AsyncQueue, Queue, Settings
from scrapeq.engine.model.keys import REGISTRY_BUCKETS
from scrapeq.engine.queue import partition_of, partition_of_id
from scrapeq.errors import ConfigError
from scrapeq.runtime.worker import Worker
from support.script_calls import script_calls
from support.sites import ok, sites

pytestmark = pytest.mark.backends

QueueFactory = Callable[..., Queue]


def dom(i: int) -> str:
    return f"shop-{i}.example.com"


def urls(domains: int, per: int) -> list[str]:
    return [f"https://{dom(d)}/p/{p}" for d in range(domains) for p in range(per)]


def test_a_domain_has_one_partition_by_a_stable_hash() -> None:
    assert partition_of("shop-1.example.com", 1) == 0
    assert partition_of("shop-1.example.com", 3) == zlib.crc32(b"shop-1.example.com") % 3
    assert {partition_of(dom(i), 3) for i in range(20)} == {0, 1, 2}
    assert partition_of_id("l1a7836ffe651.2", 3) == 2
    assert partition_of_id("l1a7836ffe651", 3) == 0
    assert partition_of_id("l1a7836ffe651.7", 3) == 0  # not a partition of this queue


def test_one_partition_keeps_the_key_names(make_queue: QueueFactory, redis_client: Any) -> None:
    q = make_queue(queue="shop")
    q.enqueue_many(urls(5, 2))
    assert redis_client.get("sq:{shop}:dcount") == "5"
    assert redis_client.hget("sq:{shop}:meta", "parts") is None
    job = q.claim(1).jobs[0]
    assert "." not in job.id


def test_keys_spread_over_the_partitions(make_queue: QueueFactory, redis_client: Any) -> None:
    q = make_queue(queue="shop", partitions=3)
    results = q.enqueue_many(urls(12, 3))
    assert all(r.status == "added" for r in results)
    assert redis_client.hget("sq:{shop}:meta", "parts") == "3"
    assert not redis_client.exists("sq:{shop}:domains", "sq:{shop}:dcount")
    for i in range(3):
        members = {
            d
            for b in range(REGISTRY_BUCKETS)
            for d in redis_client.hkeys(f"sq:{{shop:{i}}}:reg:{b}")
        }
        assert members == {dom(d) for d in range(12) if partition_of(dom(d), 3) == i}
        assert redis_client.get(f"sq:{{shop:{i}}}:dcount") == str(len(members))
    assert q.domain_names() == sorted(dom(d) for d in range(12))
    assert all(q.domain_known(dom(d)) for d in range(12)) and not q.domain_known(dom(99))
    for url, r in zip(urls(12, 3), results, strict=True):
        domain = url.split("/")[2]
        assert partition_of_id(r.id, 3) == partition_of(domain, 3)
    assert q.counts()["ready"] == 36
    status = q.status()
    assert status["counts"]["ready"] == 36
    assert [d["domain"] for d in status["domains"]] == sorted(dom(d) for d in range(12))
    assert status["lanes"]["normal"]["ready"] == 36


def test_claims_drain_every_partition_and_settle_where_each_job_lives(
    make_queue: QueueFactory,
) -> None:
    q = make_queue(queue="shop", partitions=3, domain_concurrency=100)
    q.enqueue_many(urls(9, 10))
    seen: set[str] = set()
    for _ in range(50):
        claimed = q.claim(16)
        if not claimed.jobs:
            break
        assert q.heartbeat(claimed.jobs) == [True] * len(claimed.jobs)
        assert q.mark_handler_running(claimed.jobs) == [True] * len(claimed.jobs)
        assert q.settle_many([q.done(j) for j in claimed.jobs]) == ["done"] * len(claimed.jobs)
        seen.update(j.id for j in claimed.jobs)
    assert len(seen) == 90
    assert {partition_of_id(i, 3) for i in seen} == {0, 1, 2}
    counts = q.counts()
    assert (counts["done"], counts["ready"], counts["inflight"]) == (90, 0, 0)
    assert q.claim(5).next_due is None  # every partition said: nothing scheduled
    assert q.audit().problems == []


@pytest.mark.backends("single")  # counts one server's script calls
def test_a_partition_with_nothing_due_is_not_polled(
    make_queue: QueueFactory, redis_client: Any
) -> None:
    q = make_queue(queue="shop", partitions=3)
    q.enqueue(f"https://{dom(0)}/x", delay=30)
    assert q.claim(5).jobs == []  # polls the three partitions once
    redis_client.config_resetstat()
    for _ in range(20):
        claimed = q.claim(5)
        assert claimed.jobs == [] and claimed.next_due is not None
    stats = redis_client.info("commandstats")
    assert script_calls(stats) == 0, "an idle partition was polled again at once"
    time.sleep(1.1)  # PARTITION_RECHECK: a producer may have enqueued meanwhile
    q.claim(5)
    assert script_calls(redis_client.info("commandstats")) == 3


def test_dead_letters_replay_purge_see_the_whole_queue(make_queue: QueueFactory) -> None:
    q = make_queue(queue="shop", partitions=3, domain_concurrency=100)
    q.enqueue_many(urls(6, 2))
    claimed = q.claim(50).jobs
    assert len(claimed) == 12
    q.settle_many([q.failing(j, "gone") for j in claimed])
    assert q.dead_count() == 12
    assert q.dead_count(domain=dom(1)) == 2
    letters = q.dead_letters(limit=100)
    assert sorted(j.id for j in letters) == sorted(j.id for j in claimed)
    assert len(q.dead_letters(limit=5)) == 5
    assert len(q.dead_letters(domain=dom(2))) == 2
    one = claimed[0]
    assert q.replay(ids=[one.id]).moved == 1
    assert q.replay(domain=dom((one.domain == dom(3) and 4) or 3)).moved == 2
    assert q.replay(all=True).moved == 12 - 1 - 2
    assert q.counts()["ready"] == 12 and q.dead_count() == 0
    again = q.claim(50).jobs
    q.settle_many([q.failing(j, "gone") for j in again])
    assert q.purge() == 12 and q.dead_count() == 0


def test_the_audit_reads_every_partition_on_its_node(make_queue: QueueFactory) -> None:
    q = make_queue(queue="shop", partitions=3, domain_concurrency=100)
    q.enqueue_many(urls(9, 4))
    claimed = q.claim(10).jobs
    q.settle_many([q.done(j) for j in claimed[:4]])
    report = q.audit()
    assert report.problems == []
    assert report.checked["jobs"] == 36 - 4
    assert report.checked["leases"] == 6
    assert report.checked["domains"] == 9


def test_the_audit_repairs_a_partition(make_queue: QueueFactory, redis_client: Any) -> None:
    q = make_queue(queue="shop", partitions=3)
    results = q.enqueue_many(urls(9, 2))
    victim = results[5].id
    keys = q.parts[partition_of_id(victim, 3)]
    redis_client.delete(keys.job(victim))  # evicted
    found = q.audit().problems
    # the lane's ready counter still counts the evicted job (see tests/engine/test_audit.py)
    assert {(p.kind, p.subject) for p in found} == {
        ("id_without_job", victim),
        ("lane_ready_count", "normal"),
    }
    assert q.audit(repair=True).ok
    assert q.audit().problems == []
    assert q.counts()["ready"] == 17


def test_ids_find_their_partition(make_queue: QueueFactory) -> None:
    q = make_queue(queue="shop", partitions=3)
    ids = [r.id for r in q.enqueue_many(urls(6, 1))]
    info = q.job_info(ids[4])
    assert info is not None and info.state == "ready" and info.job.url == urls(6, 1)[4]
    job = q.get_job(ids[5])
    assert job is not None and job.url == urls(6, 1)[5]
    result = q.cancel(ids=[*ids[:3], "zzz.1"])
    assert result.cancelled == 3 and result.unknown == ["zzz.1"]
    assert q.cancel(domain=dom(3)).cancelled == 1
    assert q.counts()["ready"] == 2


def test_breakers_and_politeness_go_to_the_domain_s_partition(make_queue: QueueFactory) -> None:
    q = make_queue(queue="shop", partitions=3)
    q.enqueue_many(urls(6, 1))
    assert q.breaker_trip(dom(2), cooldown=60) == "open"
    assert q.domain_set(dom(4), concurrency=7)["concurrency"] == 7
    infos = {d["domain"]: d for d in q.domains_info([dom(2), dom(4)])}
    assert infos[dom(2)]["state"] == "open"
    assert any(e["domain"] == dom(2) for e in q.events())
    assert q.breaker_reset(dom(2)) == "closed"


def test_follow_ups_are_enqueued_in_their_own_partitions(make_queue: QueueFactory) -> None:
    q = make_queue(queue="shop", partitions=3, domain_concurrency=100)
    q.enqueue(f"https://{dom(0)}/seed")
    (job,) = q.claim(1).jobs
    follow = [q.prepare(f"https://{dom(i)}/next") for i in range(1, 9)]
    assert q.settle_many([q.done(job, follow=follow)]) == ["done"]
    got = q.claim(50).jobs
    assert sorted(j.url for j in got) == sorted(s.url for s in follow)
    for j in got:
        assert partition_of_id(j.id, 3) == partition_of(j.domain, 3)


def test_a_partitioned_queue_not_written_yet_reads_empty(make_queue: QueueFactory) -> None:
    """Reads of a new queue with partitions > 1 answer for an empty queue (they raised
    SQ_PARTITIONS "has 1 partition" before its first enqueue stamped it); the first enqueue
    then stamps it, and a read with other partitions is refused as before."""
    three = make_queue(queue="fresh", partitions=3)
    url = f"https://{dom(0)}/a"
    assert three.url_job(url) is None
    assert three.url_seen(url) is False
    assert three.counts()["ready"] == 0
    assert three.status()["counts"]["ready"] == 0
    assert not three.exists()
    three.enqueue(url, unique="seen")
    assert three.url_job(url) is not None
    assert three.url_seen(url) is True
    with pytest.raises(ConfigError, match=r"has 3 partition.*say 5"):
        make_queue(queue="fresh", partitions=5).counts()


def test_changing_partitions_of_a_queue_in_use_is_refused(make_queue: QueueFactory) -> None:
    one = make_queue(queue="shop")
    one.enqueue(f"https://{dom(0)}/a")
    three = make_queue(queue="shop", partitions=3)
    with pytest.raises(ConfigError, match=r"'partitions'.*1 partition.*say 3"):
        three.enqueue(f"https://{dom(0)}/b")
    with pytest.raises(ConfigError, match="'partitions'"):
        three.claim(1)
    assert one.clear() > 0
    three.enqueue(f"https://{dom(0)}/b")
    again = make_queue(queue="shop")
    with pytest.raises(ConfigError, match=r"has 3 partition.*say 1"):
        again.enqueue(f"https://{dom(0)}/c")
    with pytest.raises(ConfigError, match=r"has 3 partition.*say 1"):
        make_queue(queue="shop").status()  # it would show the queue empty
    five = make_queue(queue="shop", partitions=5)
    with pytest.raises(ConfigError, match=r"has 3 partition.*say 5"):
        five.claim(1)
    with pytest.raises(ConfigError, match=r"has 3 partition.*say 5"):
        make_queue(queue="shop", partitions=5).counts()
    assert three.clear() > 0
    assert not three.exists()
    five.enqueue(f"https://{dom(0)}/d")
    assert five.counts()["ready"] == 1


def test_the_queue_is_listed_once_and_cleared_whole(
    make_queue: QueueFactory, redis_client: Any
) -> None:
    q = make_queue(queue="shop", partitions=3)
    q.enqueue_many(urls(9, 2))
    found = q.known_queues()
    assert found is not None and found.names == ["shop"]
    assert q.exists()
    assert q.clear() > 0
    assert not q.exists()
    left = [k for k in _all_keys(redis_client) if k.startswith("sq:{shop")]
    assert left == []


def test_a_clear_with_other_settings_clears_every_partition(
    make_queue: QueueFactory, redis_client: Any
) -> None:
    make_queue(queue="shop", partitions=3).enqueue_many(urls(9, 2))
    assert make_queue(queue="shop").clear() > 0  # settings of one partition: the home says 3
    assert [k for k in _all_keys(redis_client) if k.startswith("sq:{shop")] == []


def _all_keys(client: Any) -> list[str]:
    if isinstance(client, redis.RedisCluster):
        return list(client.scan_iter(match="*", target_nodes=redis.RedisCluster.PRIMARIES))
    return list(client.scan_iter(match="*"))


async def test_a_worker_drains_a_partitioned_queue(redis_url: str) -> None:
    settings = Settings(queue="crawl", partitions=3, allow_private=True, request_timeout=2.0)
    async with sites(*[ok] * 6) as started:
        q = AsyncQueue.from_url(redis_url, settings=settings)
        try:
            await q.enqueue_many([s.url(f"/p/{i}") for s in started for i in range(10)])
            await asyncio.wait_for(Worker(q, burst=True, concurrency=8).run_async(), 60)
            counts = await q.counts()
            assert (counts["done"], counts["ready"], counts["inflight"]) == (60, 0, 0)
            assert (await q.audit()).problems == []
            assert sum(s.total for s in started) == 60
        finally:
            await q.close()


def test_events_of_every_partition_in_order_with_one_cursor(make_queue: QueueFactory) -> None:
    q = make_queue(queue="shop", partitions=3)
    q.enqueue_many(urls(9, 1))
    tripped = [dom(i) for i in range(9)]
    for d in tripped:
        q.breaker_trip(d, cooldown=60)
    assert {partition_of(d, 3) for d in tripped} == {0, 1, 2}
    newest = q.events(count=4)
    assert len(newest) == 4
    seen: list[str] = []
    cursor = "0-0"
    for _ in range(30):
        page = q.events_after(cursor, count=2)
        if not page:
            break
        seen += [e["domain"] for e in page if e["kind"] == "trip"]
        ids = [e["id"] for e in page]
        assert ids == sorted(ids, key=lambda i: tuple(map(int, i.split("-"))))
        cursor = page[-1]["id"]
    assert sorted(seen) == sorted(tripped)


def test_status_details_at_most_status_top_domains_across_partitions(
    make_queue: QueueFactory,
) -> None:
    q = make_queue(queue="shop", partitions=3, status_top=5)
    q.enqueue_many(urls(30, 2))
    status = q.status()
    assert status["counts"]["ready"] == 60  # the counts cover the whole queue
    assert 0 < len(status["domains"]) <= 5  # the detail is cut to status_top
    small = make_queue(queue="few", partitions=3, status_top=50)
    small.enqueue_many(urls(7, 1))
    assert len(small.status()["domains"]) == 7  # every domain while there are few


def test_politeness_by_address_is_refused_with_partitions() -> None:
    """A job's partition is chosen from its host in the client, while a host's address group
    is learned in Redis (politeness = ip): the two cannot agree, so the pair is refused."""
    with pytest.raises(ConfigError, match="ip needs partitions = 1"):
        Settings(politeness="ip", partitions=3)
    assert Settings(politeness="ip").partitions == 1
    assert Settings(politeness="domain", partitions=3).partitions == 3
