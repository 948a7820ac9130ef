"""Scripts as Redis 7 function libraries (``scrapeq/engine/lua/library.py``, ADR 0061).

The builder's rules on small chunks; every script's library loaded into a real Redis 7 (its
locals, its groups' upvalues and what its load may call are the server's to judge); a queue
on Redis 7 calling its scripts as functions, on one server and on a cluster; and the ways back
to EVALSHA: a Redis 6.2, a user who may not load functions, a server that lost them.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from scrapeq import Queue, Settings
from scrapeq.engine.lua.library import ONCE_MARK, LibraryError, build_library, library_source
from scrapeq.engine.lua.source import SCRIPTS, load_source
from scrapeq.engine.server.launcher import RedisProcess
from scrapeq.errors import RedisUnavailable
from support.cluster_proc import RedisCluster
from support.redis7 import need_redis7, redis6
from support.script_calls import script_calls


@pytest.fixture(scope="module")
def redis7_url() -> Iterator[str]:
    server = RedisProcess(Path(tempfile.mkdtemp(prefix="sq-redis7-")), binary=need_redis7())
    server.start(10.0)
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture
def r7(redis7_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis7_url, decode_responses=True)
    client.flushall()
    client.function_flush()
    client.config_resetstat()
    yield client
    client.close()


def _queue(url: str, **settings: object) -> Queue:
    return Queue.from_url(url, "lib", settings=Settings(domain_concurrency=100, **settings))


def _round(q: Queue, n: int = 30) -> None:
    q.enqueue_many([f"https://d{i % 3}.example/p/{i}" for i in range(n)])
    jobs = q.claim(n).jobs
    assert len(jobs) == n
    assert q.settle_many([q.done(j) for j in jobs]) == ["done"] * n


# --- the builder ------------------------------------------------------------------------------


def test_a_statement_is_made_once_or_per_call_by_its_kind() -> None:
    source = "\n".join([
        "local A = 1",
        "local B = {x = 1}  " + ONCE_MARK,
        "local T = {n = 0}",
        "function T.f() return T.n end",
        "local function f() return A end",
        "local g",
        "do",
        "  function g() return B end",
        "end",
        "if A > 0 then return f() end",
    ])  # fmt: skip
    code = build_library("t", source).code
    body = code[code.index("local function __refill") :]
    assert "local A\n" in body and "A = 1" in body  # declared once, assigned each call
    assert "local B = {x = 1}" in body  # made once
    assert "local T = {}" in body and "__T = {n = 0}" in body and "__refill(T, __T)" in body
    assert "local function f() return A end" in body and "local g\n" in body
    assert "g = nil" not in body  # made by its block, once
    group = body[body.index("__G[#__G + 1] = function()") :]
    assert "if A > 0 then return f() end" in group and "function g()" not in group


def test_a_table_with_member_functions_starts_each_call_from_its_constructor(
    r7: redis.Redis,
) -> None:
    # a field a call sets (T.seen) or adds (T.extra) is gone at the next call; the functions
    # stay (moved to the table's metatable at its first refill: a refill walks no function)
    source = "\n".join([
        "local T = {n = 0}",
        "function T.bump() T.n = T.n + 1 return T.n end",
        "function T.get(k) return T[k] end",
        "local before = tostring(T.extra) .. ',' .. T.n",
        "T.extra = ARGV[1]",
        "T.bump()",
        "return {before, T.bump(), T.get('extra'), type(T.bump), tostring(rawget(T, 'bump'))}",
    ])  # fmt: skip
    lib = build_library("t", source)
    r7.function_load(lib.code, replace=True)
    for arg in ("a", "b"):
        assert r7.fcall(lib.name, 0, arg) == ["nil,0", 2, arg, "function", "nil"]


def test_a_chunk_that_uses_metatables_is_refused() -> None:
    with pytest.raises(LibraryError, match="metatables"):
        build_library("t", "local T = {}\nsetmetatable(T, {})\nreturn 1")
    build_library("t", "local T = {}\nreturn 'setmetatable'")  # in a string: not a use


def test_a_name_declared_twice_is_refused() -> None:
    with pytest.raises(LibraryError, match="'X' twice"):
        build_library("t", "local X = 1\nlocal function f() return X end\nlocal X = 2")


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_no_line_of_a_script_is_left_out_of_its_library(name: str) -> None:
    code = library_source(name).code
    for line in load_source(name).split("\n"):
        text = line.strip().removeprefix("local ")
        if not text or text.startswith("--"):
            continue
        head, _, _ = text.partition(" = ")  # a table refilled each call: `__T = {...}`
        assert text in code or (head.isidentifier() and f"local {head} = {{}}" in code), line


# --- on Redis 7 -------------------------------------------------------------------------------


def test_every_script_loads_as_a_library(r7: redis.Redis) -> None:
    for name in sorted(SCRIPTS):
        library = library_source(name)
        assert r7.function_load(library.code, replace=True) == library.name


def test_a_queue_calls_its_scripts_as_functions(r7: redis.Redis, redis7_url: str) -> None:
    q = _queue(redis7_url)
    _round(q)
    stats = r7.info("commandstats")
    assert stats["cmdstat_fcall"]["calls"] >= 3 and "cmdstat_evalsha" not in stats
    assert {x[x.index("library_name") + 1] for x in r7.function_list()} >= {
        library_source(n).name for n in ("enqueue", "claim", "settle")
    }
    q.close()


def test_a_server_that_lost_its_functions_gets_them_again(r7: redis.Redis, redis7_url: str) -> None:
    q = _queue(redis7_url)
    _round(q)
    r7.function_flush()  # as a new node after a failover, or FUNCTION FLUSH
    _round(q)
    assert "cmdstat_evalsha" not in r7.info("commandstats")
    q.close()


def test_a_user_who_may_not_load_functions_runs_the_scripts_by_evalsha(
    r7: redis.Redis, redis7_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    r7.acl_setuser("noload", enabled=True, passwords=["+pw"], keys=["*"],
                   commands=["+@all", "-function"])  # fmt: skip
    url = redis7_url.replace("redis://", "redis://noload:pw@")
    q = _queue(url)
    _round(q)
    stats = r7.info("commandstats")
    assert stats["cmdstat_evalsha"]["calls"] >= 2  # the claim and the settle: EVALSHA
    assert not caplog.records  # a refusal by the ACL is expected: nothing logged
    q.close()


def test_a_changed_configuration_is_checked_again(r7: redis.Redis, redis7_url: str) -> None:
    q = _queue(redis7_url)
    _round(q, 3)
    name = library_source("claim").name
    bad = json.loads(q._config_json) | {"conc": 0}
    with pytest.raises(redis.ResponseError, match="SQ_BAD_CONFIG conc"):
        r7.fcall(name, 1, q.keys.prefix, 0, json.dumps(bad), '{"n": 1}')
    assert r7.fcall(name, 1, q.keys.prefix, 0, q._config_json, '{"n": 1}') == [-1]
    q.close()


def test_each_queue_keeps_its_own_keys(redis7_url: str, r7: redis.Redis) -> None:
    queues = [Queue.from_url(redis7_url, f"q{i}") for i in range(70)]  # more than 64 prefixes
    for i, q in enumerate(queues):
        q.enqueue(f"https://d.example/{i}")
    for i, q in enumerate(queues):
        assert [j.url for j in q.claim(5).jobs] == [f"https://d.example/{i}"]
        q.close()


def test_a_redis_6_runs_the_scripts_by_evalsha() -> None:
    server = RedisProcess(Path(tempfile.mkdtemp(prefix="sq-redis6-")), binary=redis6())
    server.start(10.0)
    try:
        client = redis.Redis.from_url(server.url, decode_responses=True)
        q = _queue(server.url)
        _round(q)
        stats = client.info("commandstats")
        assert stats["cmdstat_evalsha"]["calls"] >= 3  # FCALL: "unknown command", uncounted
        client.config_set("maxmemory", 1)  # a write refused with OOM: for now, not a bug
        try:
            with pytest.raises(RedisUnavailable, match="OOM"):
                q.enqueue("https://d0.example/later")
        finally:
            client.config_set("maxmemory", 0)
        q.close()
        client.close()
    finally:
        server.stop()


@pytest.mark.xdist_group("redis7_cluster")
def test_a_partitioned_queue_on_a_redis_7_cluster_calls_functions_on_each_node() -> None:
    cluster = RedisCluster(Path(tempfile.mkdtemp(prefix="sq-cluster7-")), binary=need_redis7())
    cluster.start()
    try:
        settings = Settings(partitions=3, domain_concurrency=100)
        q = Queue.from_url(cluster.url, "lib", settings=settings)
        q.enqueue_many([f"https://d{i}.example/p" for i in range(30)])
        jobs = q.claim(30).jobs
        assert len(jobs) == 30
        q.settle_many([q.done(j) for j in jobs])
        counts = q.status()["counts"]
        assert counts["ready"] == counts["inflight"] == 0, counts
        calls = 0
        for node in cluster.nodes[: cluster.masters]:  # each has the libraries, loaded once
            c = node.client()
            stats = c.info("commandstats")
            assert "cmdstat_evalsha" not in stats and len(c.function_list()) >= 3, node.port
            calls += script_calls(stats)
            c.close()
        assert calls >= 4  # enqueue, claim, settle, status: each on a partition's node
        q.close()
    finally:
        cluster.stop()


def test_a_load_refused_for_now_is_retried_later_not_given_up(
    r7: redis.Redis, redis7_url: str
) -> None:
    q = _queue(redis7_url)
    r7.config_set("maxmemory", 1)  # FUNCTION LOAD is refused with OOM: for now
    try:
        with pytest.raises(RedisUnavailable, match="OOM"):
            q.claim(1)
    finally:
        r7.config_set("maxmemory", 0)
    _round(q)
    assert "cmdstat_evalsha" not in r7.info("commandstats")  # the function path, as before
    q.close()


def test_the_guides_acl_user_with_the_function_rules_runs_functions_and_nothing_is_refused(
    r7: redis.Redis, redis7_url: str
) -> None:
    guide = (Path(__file__).resolve().parents[2] / "docs/guide/redis.md").read_text()
    line = next(x for x in guide.splitlines() if x.startswith("ACL SETUSER scrapeq "))
    assert "`+fcall +function|load`" in guide
    rules = [">pw" if w == ">PASSWORD" else w for w in line.split()[3:]]
    rules = [r.replace("sq:{shops}", "sq:{lib}") for r in rules] + ["+fcall", "+function|load"]
    r7.execute_command("ACL", "SETUSER", "scrapeq", *rules)
    r7.acl_log_reset()
    q = _queue(redis7_url.replace("redis://", "redis://scrapeq:pw@"))
    _round(q)
    assert "cmdstat_evalsha" not in r7.info("commandstats")
    assert {f"{e['reason']}:{e['object']}" for e in r7.acl_log()} <= {"command:client"}
    q.close()
    r7.acl_deluser("scrapeq")
