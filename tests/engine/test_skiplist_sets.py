"""The sorted sets a call writes a member at a time are skiplists (``includes/calls.lua``,
SKIPLIST_MARK): the inflight set, the ready domains and the active ones, on Redis 6.2 (the
session's server, EVALSHA) and Redis 7 (functions). The mark that makes them so is added and
removed within one call: no reader ever sees it, and a server whose small sets take longer
members than the mark (a larger ``zset-max-listpack-value``) keeps them lists and answers the
same.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from scrapeq import Job, Queue, Settings

DOMAINS = 5


@pytest.fixture(params=["redis6", "redis7"])
def url(request: pytest.FixtureRequest, redis_server: str) -> Iterator[str]:
    found = redis_server if request.param == "redis6" else request.getfixturevalue("redis7_server")
    client = redis.Redis.from_url(found)
    client.flushall()
    client.close()
    yield found


def _members(client: redis.Redis, key: str) -> list[str]:
    return [m.decode() for m in client.zrange(key, 0, -1)]


def _encoding(client: redis.Redis, key: str) -> str:
    return client.object("encoding", key).decode()  # type: ignore[no-any-return, union-attr]


def _claim_and_settle_some(url: str) -> tuple[Queue, redis.Redis, list[Job], list[Job]]:
    """40 jobs over 5 domains; 20 claimed, 10 of them settled: the 10 others are in flight.
    Calls of 8 members or more (calls.lua: SKIPLIST.from)."""
    q = Queue.from_url(url, "sk", settings=Settings(domain_concurrency=100))
    q.enqueue_many([f"https://d{i % DOMAINS}.example/p/{i}" for i in range(40)])
    jobs = q.claim(20).jobs
    assert len(jobs) == 20
    assert q.settle_many([q.done(j) for j in jobs[:10]]) == ["done"] * 10
    return q, redis.Redis.from_url(url), jobs[:10], jobs[10:]


def test_the_sets_a_call_writes_a_member_at_a_time_are_skiplists_and_hold_no_mark(
    url: str,
) -> None:
    q, client, settled, held = _claim_and_settle_some(url)
    try:
        inflight, ready = q.keys.inflight, q.keys.domains_ready
        active = f"{q.keys.prefix}active"
        for key in (inflight, ready, active):
            assert _encoding(client, key) == "skiplist", key
            assert not [m for m in _members(client, key) if " " in m], key
        assert _members(client, inflight) == sorted(j.id for j in held)
        assert client.zcard(inflight) == 10
        queued = [f"d{i}.example" for i in range(DOMAINS)]
        queued = [d for d in queued if client.zcard(q.keys.domain_queue(d))]
        assert len(queued) >= 2
        assert sorted(_members(client, ready)) == queued
        assert sorted(_members(client, active)) == sorted({j.domain for j in settled})
        assert q.status()["counts"]["inflight"] == 10
        # the rest goes through as before, and the sets left empty are gone
        rest = q.claim(30).jobs
        assert len(rest) == 20
        assert q.settle_many([q.done(j) for j in rest + held]) == ["done"] * 30
        assert q.status()["counts"]["done"] == 40
        assert not client.exists(inflight, ready)
    finally:
        q.close()
        client.close()


def test_a_server_whose_small_sets_take_longer_members_keeps_lists_and_answers_the_same(
    redis_server: str,
) -> None:
    client = redis.Redis.from_url(redis_server)
    client.flushall()
    old = client.config_get("zset-max-ziplist-value")["zset-max-ziplist-value"]
    client.config_set("zset-max-ziplist-value", 1024)  # 6.2's name (7 takes it as an alias)
    try:
        q, other, _, held = _claim_and_settle_some(redis_server)
        try:
            assert _encoding(client, q.keys.inflight) == "ziplist"
            assert _members(client, q.keys.inflight) == sorted(j.id for j in held)
            assert not [m for m in _members(client, q.keys.domains_ready) if " " in m]
            assert q.status()["counts"]["inflight"] == 10
        finally:
            q.close()
            other.close()
    finally:
        client.config_set("zset-max-ziplist-value", old)
        client.close()


def test_a_call_of_a_few_members_leaves_a_list_a_list(url: str) -> None:
    # under SKIPLIST.from (8) a call walks a small list for less than the mark would cost
    q = Queue.from_url(url, "sk", settings=Settings(domain_concurrency=100))
    client = redis.Redis.from_url(url)
    try:
        q.enqueue_many([f"https://d{i % DOMAINS}.example/p/{i}" for i in range(20)])
        jobs = q.claim(3).jobs
        assert q.settle_many([q.done(j) for j in jobs[:2]]) == ["done"] * 2
        for key in (q.keys.inflight, q.keys.domains_ready, f"{q.keys.prefix}active"):
            assert _encoding(client, key) in ("listpack", "ziplist"), key
        assert _members(client, q.keys.inflight) == [jobs[2].id]
    finally:
        q.close()
        client.close()
