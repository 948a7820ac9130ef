"""Redis Cluster as a target: detection, misconfigurations, routing, script loading.

The engine's script tests and the worker's tests run on the session cluster too (modules
marked ``backends``); these tests are about what only a cluster has.
"""

from __future__ import annotations

import json
import os

import pytest
import redis
import redis.asyncio.cluster
import redis.cluster

from scrapeq import AsyncQueue, Queue, Settings
from scrapeq.engine.server.connection import async_client, sync_client
from scrapeq.errors import ConfigError
from scrapeq.interfaces.cli import main
from support.cluster_proc import RedisCluster


def test_any_node_of_a_cluster_gets_the_cluster_client(
    redis_cluster: RedisCluster, cluster_url: str
) -> None:
    for node in redis_cluster.nodes:  # masters and replicas alike
        client = sync_client(node.url)
        try:
            assert isinstance(client, redis.cluster.RedisCluster)
            assert client.ping()
        finally:
            client.close()


def test_a_single_server_keeps_the_plain_client(redis_server: str) -> None:
    client = sync_client(redis_server)
    assert type(client) is redis.Redis
    client.close()


def test_cluster_off_against_a_cluster_node_is_one_line_naming_it(cluster_url: str) -> None:
    with pytest.raises(ConfigError) as info:
        Queue.from_url(cluster_url, settings=Settings(cluster="off"))
    text = str(info.value)
    assert "'cluster'" in text and "this server is a cluster node" in text
    assert "\n" not in text


def test_cluster_on_against_a_single_server_is_refused(redis_server: str) -> None:
    with pytest.raises(ConfigError, match="not a cluster node"):
        sync_client(redis_server, "on")


def test_a_single_server_client_on_the_wrong_node_says_it_is_a_cluster(
    redis_cluster: RedisCluster, cluster_url: str
) -> None:
    """The issue's report: ``error: 5718 127.0.0.1:6532`` becomes a sentence naming it."""
    owner = redis_cluster.master_of("sq:{shop}:meta")
    other = next(n for n in redis_cluster.live_masters() if n is not owner)
    q = Queue(redis.Redis.from_url(other.url, decode_responses=True), "shop")
    try:
        with pytest.raises(ConfigError) as info:
            q.enqueue("https://a.example/1")
    finally:
        q.close()
    text = str(info.value)
    assert "this server is a cluster node" in text
    assert f"127.0.0.1:{owner.port}" in text


def test_the_queue_lives_on_the_node_of_its_tag_whichever_node_is_named(
    redis_cluster: RedisCluster, cluster_url: str
) -> None:
    owner = redis_cluster.master_of("sq:{shop}:meta")
    for node in redis_cluster.live_masters():
        q = Queue.from_url(node.url, "shop")
        try:
            q.enqueue(f"https://a.example/{node.port}")
            assert q.counts()["ready"] >= 1
        finally:
            q.close()
    c = owner.client()
    try:
        assert c.exists("sq:{shop}:dcount")
    finally:
        c.close()
    assert Queue.from_url(cluster_url, "shop").counts()["ready"] == 3


def test_scripts_load_again_on_a_node_that_forgot_them(
    redis_cluster: RedisCluster, cluster_url: str
) -> None:
    """A promoted replica has an empty script cache: NOSCRIPT is answered by loading the
    script and calling again (what follows every failover)."""
    q = Queue.from_url(cluster_url, "shop")
    try:
        q.enqueue("https://a.example/1")
        for node in redis_cluster.live_masters():
            c = node.client()
            c.script_flush()
            c.close()
        q.enqueue("https://a.example/2")
        claimed = q.claim(5)
        assert len(claimed.jobs) == 2
    finally:
        q.close()


async def test_the_async_queue_on_a_cluster(redis_cluster: RedisCluster, cluster_url: str) -> None:
    client = async_client(cluster_url)
    assert isinstance(client, redis.asyncio.cluster.RedisCluster)
    q = AsyncQueue(client, "shop")
    try:
        await q.enqueue_many([f"https://d{i}.example/" for i in range(5)])
        for node in redis_cluster.live_masters():
            c = node.client()
            c.script_flush()
            c.close()
        claimed = await q.claim(10)
        assert len(claimed.jobs) == 5
        assert await q.settle_many([q.done(j) for j in claimed.jobs]) == ["done"] * 5
        assert (await q.counts())["done"] == 5
        assert (await q.audit()).problems == []
        assert "shop" in (await q.known_queues() or ([], False))[0]
    finally:
        await q.close()


def test_known_queues_finds_queues_on_every_node(
    redis_cluster: RedisCluster, cluster_url: str
) -> None:
    names = [f"q{i}" for i in range(12)]
    owners = {redis_cluster.master_of(f"sq:{{{n}}}:meta").port for n in names}
    assert len(owners) == 3  # the names spread over the three masters
    for name in names:
        q = Queue.from_url(cluster_url, name)
        q.enqueue("https://a.example/1")
        q.close()
    q = Queue.from_url(cluster_url)
    try:
        found = q.known_queues()
        assert found is not None and found.complete
        assert found.names == sorted(names)
        assert Queue.from_url(cluster_url, "q3").clear() > 0
        found = q.known_queues()
        assert found is not None and "q3" not in found.names
    finally:
        q.close()


def test_the_audit_reads_the_queue_on_its_node(cluster_url: str) -> None:
    q = Queue.from_url(cluster_url, "shop")
    try:
        q.enqueue_many([f"https://d{i % 4}.example/{i}" for i in range(40)])
        claimed = q.claim(10)
        q.settle_many([q.done(j) for j in claimed.jobs[:5]])
        report = q.audit()
        assert report.problems == []
        assert report.checked["jobs"] == 35
    finally:
        q.close()


def test_the_cli_works_through_a_node_that_does_not_own_the_queue(
    redis_cluster: RedisCluster,
    cluster_url: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The issue's report: status through such a node printed ``error: 5718 host:port``."""
    for name in [n for n in os.environ if n.startswith("SCRAPEQ_")]:
        monkeypatch.delenv(name)
    owner = redis_cluster.master_of("sq:{default}:meta")
    other = next(n for n in redis_cluster.live_masters() if n is not owner)
    enqueue = ["enqueue", "https://a.example/1", "https://b.example/2"]
    assert main(["--redis", other.url, *enqueue]) == 0
    capsys.readouterr()
    assert main(["--redis", other.url, "status", "--json"]) == 0
    out, _ = capsys.readouterr()
    assert json.loads(out)["counts"]["ready"] == 2
    monkeypatch.setenv("SCRAPEQ_CLUSTER", "off")
    code = main(["--redis", other.url, "status"])
    _, err = capsys.readouterr()
    assert code != 0
    assert len(err.strip().splitlines()) == 1
    assert "this server is a cluster node" in err
