"""Claim + settle through a 3-master Redis Cluster with ``partitions = 1`` and ``3``; each
node's CPU per job.

A cluster of 3 masters (``--replicas 1`` adds a replica each) is built from the same binary as
the tests (``tests/support/cluster_proc.py``). One queue, filled with ``--jobs`` jobs (60-character
URLs over 100 domains, not timed), then drained by ``--clients`` processes running::

    claimed = q.claim(64)
    q.settle_many([q.done(j) for j in claimed.jobs])

- ``partitions = 1``: the queue is one hash tag, so one node.
- ``partitions = 3``: its domains spread over three tags; the queue's name is picked so that
  the three tags fall on the three masters (with more tags than masters, the spread is what
  the slot hash gives).

Printed per layout: jobs/s over the whole drain, and per node the jobs it held, the server CPU
it used (``INFO cpu`` user + sys deltas) and that per job, and the bytes a queued job costs
(``used_memory`` deltas of all masters after the fill, less their script caches, / jobs: in
cluster mode Redis also indexes every key by its slot, which a standalone server does not).

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
from scrapeq.engine.config.settings import Settings
from scrapeq.engine.model.keys import Keys
from scrapeq.engine.queue import Queue
from support.cluster_proc import ClusterNode, RedisCluster

DOMAINS = 100
BATCH = 64
SETTINGS = dict(domain_concurrency=10_000, allow_private=True)


def _urls(n: int) -> list[str]:
    # 60 characters: https://shop-NN.example.com/products/item-NNNNNNN?ref=abcdef
    return [f"https://shop-{i % DOMAINS:02d}.example.com/products/item-{i:07d}?ref=abcdef" for i in
            range(n)]  # fmt: skip


def _drain(url: str, queue: str, partitions: int, out: Any) -> None:
    settings = Settings(queue=queue, partitions=partitions, **SETTINGS)  # type: ignore[arg-type]
    q = Queue.from_url(url, settings=settings)
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


def _spread_name(cluster: RedisCluster, partitions: int) -> str:
    """A queue name whose partition tags fall on as many masters as they can."""
    best, spread = "bench", 0
    for i in range(1000):
        name = f"bench{i}"
        keys = [Keys(name, p) if partitions > 1 else Keys(name) for p in range(partitions)]
        ports = {cluster.master_of(k.meta).port for k in keys}
        if len(ports) > spread:
            best, spread = name, len(ports)
        if spread == min(partitions, cluster.masters):
            break
    return best


def _cpu(nodes: list[ClusterNode]) -> dict[int, float]:
    out = {}
    for node in nodes:
        c = node.client()
        try:
            out[node.port] = server_cpu(c)
        finally:
            c.close()
    return out


def _memory(nodes: list[ClusterNode]) -> int:
    """used_memory of the nodes, less their script caches (loaded by the first calls)."""
    total = 0
    for node in nodes:
        c = node.client()
        try:
            info = c.info("memory")
            total += int(info["used_memory"]) - int(info.get("used_memory_scripts", 0))
        finally:
            c.close()
    return total


def _held(cluster: RedisCluster, name: str, partitions: int) -> dict[int, int]:
    """Jobs queued per master port now."""
    out: dict[int, int] = {}
    keys = [Keys(name, p) if partitions > 1 else Keys(name) for p in range(partitions)]
    for k in keys:
        node = cluster.master_of(k.meta)
        c = node.client()
        try:
            # lanes count their ready jobs in the stats hash (ready:<lane>) since issue 13
            stats = c.hgetall(k.stats)
            n = int(c.zcard(k.delayed)) + sum(
                int(v) for f, v in stats.items() if str(f).startswith("ready:")
            )
        finally:
            c.close()
        out[node.port] = out.get(node.port, 0) + n
    return out


def run_layout(cluster: RedisCluster, partitions: int, clients: int, jobs: int) -> dict[str, Any]:
    cluster.flush()
    masters = cluster.live_masters()
    name = _spread_name(cluster, partitions)
    settings = Settings(queue=name, partitions=partitions, **SETTINGS)  # type: ignore[arg-type]
    before = _memory(masters)
    q = Queue.from_url(cluster.url, settings=settings)
    urls = _urls(jobs)
    for start in range(0, jobs, 500):
        q.enqueue_many(urls[start : start + 500])
    q.close()
    bytes_per_job = (_memory(masters) - before) / jobs
    held = _held(cluster, name, partitions)
    ctx = multiprocessing.get_context("spawn")
    out: Any = ctx.Queue()
    procs = [
        ctx.Process(target=_drain, args=(cluster.url, name, partitions, out))
        for _ in range(clients)
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
    per_node = {n.port: (cpu1[n.port] - cpu0[n.port], held.get(n.port, 0)) for n in masters}
    return {
        "served": served,
        "elapsed": elapsed,
        "per_node": per_node,
        "bytes_per_job": bytes_per_job,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=30_000, help="jobs in the queue")
    parser.add_argument("--clients", type=int, default=3, help="client processes")
    parser.add_argument("--replicas", type=int, default=0, choices=(0, 1))
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="scrapeq-bench-cluster-"))
    cluster = RedisCluster(workdir, replicas=args.replicas).start()
    try:
        print(f"cluster: 3 masters, {args.replicas} replica(s) each; {load_note()}")
        print(
            f"claim {BATCH} + settle_many by {args.clients} client processes, "
            f"{args.jobs:,} jobs over {DOMAINS} domains\n"
        )
        for partitions in (1, 3):
            r = run_layout(cluster, partitions, args.clients, args.jobs)
            rows = []
            for port, (used, held) in sorted(r["per_node"].items()):
                per_job = f"{used / held * 1e6:.1f}" if held else "-"
                rows.append([f"127.0.0.1:{port}", held, f"{used:.2f}", per_job])
            print(f"partitions={partitions}: {r['served'] / r['elapsed']:,.0f} jobs/s "
                  f"({r['served']:,} jobs in {r['elapsed']:.2f} s); "
                  f"{r['bytes_per_job']:.0f} bytes a queued job")  # fmt: skip
            print(format_table(["node", "jobs held", "CPU s", "CPU us/job"], rows))
            print()
    finally:
        cluster.stop()


if __name__ == "__main__":
    main()
