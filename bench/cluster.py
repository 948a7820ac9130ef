"""Claim + settle through a 3-master Redis Cluster: one queue on one node, and the same load
over three nodes; each node's CPU per job.

A cluster of 3 masters (``--replicas 1`` adds a replica each) is built from the same binary as
the tests (``tests/cluster_proc.py``). Two layouts, each filled with ``--jobs`` jobs per queue
(60-character URLs over 100 domains, not timed), then drained by client processes running::

    claimed = q.claim(64)
    q.settle_many([q.done(j) for j in claimed.jobs])

- ``one slot``: one queue (one hash tag, so one node), drained by ``--clients`` processes.
  This is ``partitions = 1``.
- ``three slots``: three queues whose hash tags fall on the three masters, one client process
  each. scrapeq has no ``partitions`` setting yet (issue 13): three queues stand in for
  ``partitions = 3``, the layout it would make (the same scripts, one tag per node).

Printed per layout: jobs/s over the whole drain, and per node the server CPU it used
(``INFO cpu`` user + sys deltas) per job it served, and the bytes a queued job costs on the
node that holds it (``used_memory`` delta after the fill / jobs).

This machine has 2 cores for 3 servers and the clients: wall-clock throughput here is bounded
by the cores, not by Redis. The figure that carries to a bigger machine is the CPU per job: a
node's one core serves about 1 / (CPU per job) jobs a second, and a cluster of N masters N
times that while the load spreads over N tags.

Run: ``.venv/bin/python bench/cluster.py [--jobs N] [--clients N] [--replicas 0|1]``.
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _redis import format_table, load_note, server_cpu

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from cluster_proc import ClusterNode, RedisCluster
from scrapeq.engine.queue import Queue
from scrapeq.engine.settings import Settings

DOMAINS = 100
BATCH = 64
SETTINGS = dict(domain_concurrency=10_000, allow_private=True)


def _urls(n: int) -> list[str]:
    # 60 characters: https://shop-NN.example.com/products/item-NNNNNNN?ref=abcdef
    return [f"https://shop-{i % DOMAINS:02d}.example.com/products/item-{i:07d}?ref=abcdef" for i in
            range(n)]  # fmt: skip


def _drain(url: str, queue: str, out: Any) -> None:
    q = Queue.from_url(url, settings=Settings(queue=queue, **SETTINGS))  # type: ignore[arg-type]
    done = 0
    try:
        while True:
            claimed = q.claim(BATCH)
            if not claimed.jobs:
                break
            q.settle_many([q.done(j) for j in claimed.jobs])
            done += len(claimed.jobs)
    finally:
        q.close()
    out.put(done)


def _tags_on_each_master(cluster: RedisCluster) -> list[str]:
    """Three queue names whose hash tags fall on three different masters."""
    chosen: dict[int, str] = {}
    for i in range(1000):
        name = f"bench{i}"
        port = cluster.master_of(f"sq:{{{name}}}:meta").port
        chosen.setdefault(port, name)
        if len(chosen) == cluster.masters:
            break
    return list(chosen.values())


def _cpu(nodes: list[ClusterNode]) -> dict[int, float]:
    out = {}
    for node in nodes:
        c = node.client()
        try:
            out[node.port] = server_cpu(c)
        finally:
            c.close()
    return out


def _memory(node: ClusterNode) -> int:
    c = node.client()
    try:
        return int(c.info("memory")["used_memory"])
    finally:
        c.close()


def run_layout(
    cluster: RedisCluster, queues: list[str], clients_per_queue: int, jobs: int
) -> dict[str, Any]:
    cluster.flush()
    masters = cluster.live_masters()
    bytes_per_job = []
    for name in queues:
        owner = cluster.master_of(f"sq:{{{name}}}:meta")
        before = _memory(owner)
        q = Queue.from_url(cluster.url, settings=Settings(queue=name, **SETTINGS))  # type: ignore[arg-type]
        urls = _urls(jobs)
        for start in range(0, jobs, 500):
            q.enqueue_many(urls[start : start + 500])
        q.close()
        bytes_per_job.append((_memory(owner) - before) / jobs)
    out: Any = multiprocessing.get_context("spawn").Queue()
    procs = [
        multiprocessing.get_context("spawn").Process(target=_drain, args=(cluster.url, n, out))
        for n in queues
        for _ in range(clients_per_queue)
    ]
    cpu0 = _cpu(masters)
    t0 = time.perf_counter()
    for p in procs:
        p.start()
    served = sum(out.get(timeout=600) for _ in procs)
    elapsed = time.perf_counter() - t0
    for p in procs:
        p.join()
    cpu1 = _cpu(masters)
    per_node = {}
    for node in masters:
        served_here = sum(
            jobs for name in queues if cluster.master_of(f"sq:{{{name}}}:meta") is node
        )
        used = cpu1[node.port] - cpu0[node.port]
        per_node[node.port] = (used, served_here)
    return {
        "served": served,
        "elapsed": elapsed,
        "per_node": per_node,
        "bytes_per_job": sum(bytes_per_job) / len(bytes_per_job),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=30_000, help="jobs per queue")
    parser.add_argument("--clients", type=int, default=3, help="client processes, one slot")
    parser.add_argument("--replicas", type=int, default=0, choices=(0, 1))
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="scrapeq-bench-cluster-"))
    cluster = RedisCluster(workdir, replicas=args.replicas).start()
    try:
        three = _tags_on_each_master(cluster)
        layouts = [
            (f"one slot (partitions=1), {args.clients} clients", [three[0]], args.clients),
            ("three slots (3 queues for partitions=3), 3 clients", three, 1),
        ]
        print(f"cluster: 3 masters, {args.replicas} replica(s) each; {load_note()}")
        print(f"claim {BATCH} + settle_many, {args.jobs:,} jobs a queue over {DOMAINS} domains\n")
        for title, queues, clients in layouts:
            r = run_layout(cluster, queues, clients, args.jobs)
            rows = []
            for port, (used, served_here) in sorted(r["per_node"].items()):
                per_job = f"{used / served_here * 1e6:.1f}" if served_here else "-"
                rows.append([f"127.0.0.1:{port}", served_here, f"{used:.2f}", per_job])
            print(f"{title}: {r['served'] / r['elapsed']:,.0f} jobs/s "
                  f"({r['served']:,} jobs in {r['elapsed']:.2f} s); "
                  f"{r['bytes_per_job']:.0f} bytes a queued job")  # fmt: skip
            print(format_table(["node", "jobs", "CPU s", "CPU us/job"], rows))
            print()
    finally:
        cluster.stop()


if __name__ == "__main__":
    main()
