"""The domain registry (issue 13, the sparse memory case): every domain the queue knows, with
its count of jobs enqueued, in 1,024 small hashes ``sq:{Q}:reg:<b>`` instead of a set and a
per-domain hash, so a domain that only has jobs queued has no key of its own but its ready
queue. Also: the audit of the registry's counter, and the migration of a queue written
before (a set ``sq:{Q}:domains`` and ``enq`` in each domain's hash) by the queue's schema
(issue 22: ``schema`` in ``sq:{Q}:meta``, lua/migrate-1.lua run when a client opens it)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable

import pytest
import redis

from scrapeq.engine.lua import scripts
from scrapeq.engine.model.keys import REGISTRY_BUCKETS, registry_bucket
from scrapeq.engine.queue import Queue
from scrapeq.errors import NotFound, ScriptError
from support.cli_helpers import run
from support.registry import as_written_before, registered

MakeQueue = Callable[..., Queue]
#: The schema this code writes (lua/migrate-1.lua: the number of its migrations).
SCHEMA = 1

NAMES = [
    "shop-1.example.com",
    "shop-2.example.com",
    "a.b.c.d.example.co.uk",
    "shop.example.com:8080",
    "xn--bcher-kva.example",
    "x" * 63 + ".example.com",
]


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


def test_a_queue_written_before_is_migrated_when_opened(
    make_queue: MakeQueue, redis_client: redis.Redis
) -> None:
    q = make_queue()
    q.enqueue_many([f"https://shop-{i % 4}.example.com/p/{i}" for i in range(12)])
    before = as_written_before(redis_client, q)
    assert len(before) == 4

    # a client opening the queue (its first read) moves the old registry
    opened = make_queue()
    assert opened.domain_names() == sorted(before)
    assert not redis_client.exists(q.keys.domains)
    assert registered(redis_client, q) == before
    assert redis_client.get(q.keys.domain_count) == "4"
    assert all(redis_client.hget(q.keys.domain(d), "enq") is None for d in before)
    assert redis_client.hget(q.keys.meta, "schema") == str(SCHEMA)

    # and then behaves: counts, enqueues, claims, overrides, audit
    assert all(opened.domain_known(d) for d in before)
    assert sum(opened.status()["breakers"].values()) == 4
    assert opened.breaker_reset("shop-1.example.com") == "closed"
    opened.enqueue_many(["https://shop-0.example.com/again", "https://fresh.example.com/"])
    assert len(opened.claim(13).jobs) == 9  # at most 2 a domain in flight
    expected = dict(before, **{"shop-0.example.com": before["shop-0.example.com"] + 1})
    expected["fresh.example.com"] = 1
    assert registered(redis_client, q) == expected
    assert redis_client.get(q.keys.domain_count) == "5"
    assert sum(opened.status()["breakers"].values()) == 5
    assert opened.audit().ok


def call_migrate(client: redis.Redis, q: Queue, create: bool, budget: int) -> list[int]:
    script = client.register_script(scripts.load_source("migrate"))
    args = json.dumps({"create": create, "budget": budget})
    return [int(x) for x in script(keys=[q.keys.prefix], args=[0, q._config_json, args])]


def test_a_large_old_registry_is_migrated_in_slices(
    make_queue: MakeQueue, redis_client: redis.Redis
) -> None:
    q = make_queue()
    names = [f"d{i:04d}.example.com" for i in range(2500)]
    for start in range(0, len(names), 500):  # the old layout, written by hand
        redis_client.sadd(q.keys.domains, *names[start : start + 500])
    for i, d in enumerate(names[:10]):
        redis_client.hset(q.keys.domain(d), mapping={"enq": i + 1, "done": i})
    redis_client.hset(q.keys.stats, "enqueued", 55)

    assert call_migrate(redis_client, q, False, 1000) == [0, 1]  # a slice: not finished
    assert redis_client.scard(q.keys.domains) == 1500
    assert redis_client.hget(q.keys.meta, "schema") is None
    assert call_migrate(redis_client, q, False, 1000) == [0, 1]
    assert call_migrate(redis_client, q, False, 1000) == [SCHEMA, 0]
    assert call_migrate(redis_client, q, False, 1000) == [SCHEMA, 0]  # nothing left to do
    assert not redis_client.exists(q.keys.domains)
    assert redis_client.get(q.keys.domain_count) == "2500"
    counts = registered(redis_client, q)
    assert sorted(counts) == names
    assert [counts[d] for d in names[:11]] == [*range(1, 11), 0]
    assert redis_client.hgetall(q.keys.domain(names[3])) == {"done": "3"}


def test_opening_migrates_every_slice(make_queue: MakeQueue, redis_client: redis.Redis) -> None:
    q = make_queue(partitions=2)
    q.enqueue("https://one.example.com/")
    home, parts = q.keys, q.parts
    names = [f"d{i:04d}.example.com" for i in range(2200)]
    redis_client.sadd(parts[1].domains, *names)  # an old partition, past one slice
    redis_client.hdel(parts[1].meta, "schema")
    opened = make_queue(partitions=2)
    assert opened.counts()["ready"] == 1
    assert not redis_client.exists(parts[1].domains)
    assert sum(int(redis_client.get(k.domain_count) or 0) for k in parts) == 2201
    assert redis_client.hget(home.meta, "schema") == str(SCHEMA)
    assert all(redis_client.hget(k.meta, "schema") == str(SCHEMA) for k in parts)


def test_a_fresh_queue_starts_at_the_current_schema(
    make_queue: MakeQueue, redis_client: redis.Redis
) -> None:
    q = make_queue()
    # reads and an empty claim of a queue with no key write none
    assert q.status()["counts"]["ready"] == 0 and not q.claim(1).jobs
    assert q.enqueue_many([]) == []
    assert not q.exists() and redis_client.dbsize() == 0
    q.enqueue("https://a.example.com/")
    assert redis_client.hget(q.keys.meta, "schema") == str(SCHEMA)
    assert call_migrate(redis_client, q, False, 1) == [SCHEMA, 0]


def test_a_queue_of_a_newer_schema_is_refused(
    make_queue: MakeQueue, redis_client: redis.Redis
) -> None:
    q = make_queue()
    q.enqueue("https://a.example.com/")
    redis_client.hset(q.keys.meta, "schema", SCHEMA + 1)
    keys = {k: redis_client.dump(k) for k in redis_client.scan_iter()}
    newer = make_queue()
    for call in (
        newer.status,
        newer.counts,
        lambda: newer.claim(1),
        lambda: newer.enqueue("https://b.example.com/"),
        newer.domain_names,
        lambda: newer.domain_set("a.example.com", delay=1.0),
    ):
        with pytest.raises(ScriptError) as refused:
            call()
        text = str(refused.value)
        assert f"schema {SCHEMA + 1}" in text and "upgrade scrapeq" in text and "\n" not in text
    assert {k: redis_client.dump(k) for k in redis_client.scan_iter()} == keys


def test_a_newer_schema_is_one_line_in_the_cli(
    redis_url: str, redis_client: redis.Redis, capsys: pytest.CaptureFixture[str]
) -> None:
    redis_client.hset("sq:{old}:meta", "schema", SCHEMA + 1)
    code, out, err = run(capsys, "--redis", redis_url, "--queue", "old", "status")
    assert code != 0 and "Traceback" not in out + err
    assert f"schema {SCHEMA + 1}" in err and len(err.strip().splitlines()) == 1, err


#: Scripts the client runs on an opened queue: none reads the layout before the migrations.
OPENED = ["audit", "breaker", "cancel", "claim", "domain_info", "domain_set", "domains",
          "enqueue", "reap", "renew", "replay", "settle", "status"]  # fmt: skip


@pytest.mark.parametrize("name", OPENED)
def test_the_scripts_carry_no_reader_of_an_old_layout(name: str) -> None:
    text = scripts.load_source(name)
    assert "P .. 'domains'" not in text and "K.DOMAINS" not in text, name
    assert "legacy" not in text.lower() and "'enq'" not in text, name
    migrate = scripts.load_source("migrate")  # the one home of the old layout
    assert "P .. 'domains'" in migrate and "'enq'" in migrate


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


@pytest.mark.parametrize("partitions", [1, 3])
def test_a_queue_cleared_and_filled_again_by_one_client_is_stamped(
    make_queue: MakeQueue, redis_client: redis.Redis, partitions: int
) -> None:
    """A clear resets what the client knew of the queue's schema, with one partition as with
    several: the enqueue after it stamps the queue again (it was left unstamped with one)."""
    q = make_queue(partitions=partitions)
    q.enqueue("https://a.example/1")
    assert redis_client.hget(q.keys.meta, "schema") == str(SCHEMA)
    q.clear()
    assert redis_client.hget(q.keys.meta, "schema") is None
    q.enqueue("https://a.example/2")
    assert redis_client.hget(q.keys.meta, "schema") == str(SCHEMA)
