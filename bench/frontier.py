"""The URLFrontier service's speed and memory (issue 43): PutURLs ingestion over one and two
client streams, GetURLs latency serving 100 URLs from a large queue, Redis memory per URL.

The service runs as its own process (``scrapeq frontier serve``, loopback) over a private
redis-server; the clients are this process (grpcio, blocking stubs, one channel a stream).

* **ingest, 1 stream / 2 streams**: N discovered URLs (60-character URLs over 1,000 hosts,
  all distinct, no metadata) sent on one PutURLs stream, then N others split over two
  streams sent at once from two threads; URLs/s = URLs acked / wall time from the first
  send to the last ack. Each URL is an enqueue with ``unique = seen`` (seen-set, job,
  domain registry) in the service's batches of up to 256.
* **2 streams to 2 services**: the same with a second service process on the same Redis,
  one stream each (the services share nothing but Redis).
* **discovered batches**: the same over PutDiscovered, batches of 50 URLs (a page's links).
* **memory**: ``used_memory`` growth over the URLs queued (jobs, their held fingerprints,
  seen-set, domains, registry), per URL, measured after the 1-stream run (N URLs queued);
  the service runs with ``seen_capacity`` = N (the seen-set sized for the crawl).
* **GetURLs 100**: with Q URLs queued (Q = 100,000 by default, over 10,000 hosts), GetURLs of
  100 URLs (``max_queues`` 100, ``max_urls_per_queue`` 1, lease 60 s), repeated R times; the
  latency of each call from the request to the last URL received (p50, p95, max).

Beside each ingestion run, the **service's CPU time per URL** (user + system of the service
processes, from ``/proc/<pid>/stat``, over the run): on a shared, loaded machine the wall
clock measures the neighbours as much as the service, its CPU time much less so.

No bar is set by the issue: the figures are reported as measured. ``--quick``: N = 20,000,
Q = 20,000, R = 20.

``--src PATH``: the service runs the scrapeq of that source tree (default: this one's), so
two commits are compared side by side: ``--src /work/main/src`` then without, alternately.

Run: ``.venv/bin/python bench/frontier.py [--quick] [--urls N] [--queued Q] [--calls R]
[--src PATH] [--redis-server PATH]``
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import redis

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))

from _redis import add_server_args, format_table, load_note, pct, private_redis  # noqa: E402
from scrapeq.engine.server.launcher import free_port  # noqa: E402
from scrapeq.interfaces.frontier import urlfrontier_pb2 as pb  # noqa: E402
from scrapeq.interfaces.frontier import urlfrontier_pb2_grpc as pb_grpc  # noqa: E402

#: Hosts of the ingestion runs, and of the queue GetURLs serves from (each host gives at most
#: its politeness limit a call: 2 leased at once with domain_concurrency auto).
HOSTS, GET_HOSTS = 1_000, 10_000


def url(run: str, i: int, hosts: int = HOSTS) -> str:
    """A distinct 60-character URL of one of ``hosts`` hosts."""
    text = f"https://h{i % hosts:05d}.example.com/{run}/item/{i:012d}"
    return text + "x" * (60 - len(text))


def items(run: str, start: int, stop: int) -> Iterator[pb.URLItem]:
    hosts = GET_HOSTS if run == "get" else HOSTS
    for i in range(start, stop):
        info = pb.URLInfo(url=url(run, i, hosts))
        yield pb.URLItem(discovered=pb.DiscoveredURLItem(info=info))


def put_stream(target: str, run: str, start: int, stop: int, acked: list[int]) -> None:
    with grpc.insecure_channel(target) as channel:
        stub = pb_grpc.URLFrontierStub(channel)
        n = sum(1 for a in stub.PutURLs(items(run, start, stop)) if a.status == pb.AckMessage.OK)
    acked.append(n)


def ingest(targets: list[str], run: str, n: int, streams: int) -> tuple[int, float]:
    """URLs acked OK and seconds, over ``streams`` concurrent PutURLs streams (stream k to
    service ``targets[k % len(targets)]``)."""
    acked: list[int] = []
    bounds = [n * k // streams for k in range(streams + 1)]
    threads = [
        threading.Thread(
            target=put_stream,
            args=(targets[k % len(targets)], run, bounds[k], bounds[k + 1], acked),
        )
        for k in range(streams)
    ]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(acked), time.perf_counter() - started


def ingest_batches(target: str, run: str, n: int, size: int = 50) -> tuple[int, float]:
    def batches() -> Iterator[pb.DiscoveredBatch]:
        for start in range(0, n, size):
            infos = [pb.URLInfo(url=url(run, i)) for i in range(start, min(n, start + size))]
            yield pb.DiscoveredBatch(ID=str(start), items=infos)

    started = time.perf_counter()
    with grpc.insecure_channel(target) as channel:
        stub = pb_grpc.URLFrontierStub(channel)
        ok = sum(
            sum(1 for s in ack.statuses if s == pb.AckMessage.OK)
            for ack in stub.PutDiscovered(batches())
        )
    return ok, time.perf_counter() - started


def get_latencies(target: str, calls: int) -> tuple[list[float], int]:
    params = pb.GetParams(
        max_queues=100, max_urls_per_queue=1, delay_requestable=60, crawlID="DEFAULT"
    )
    latencies, served = [], 0
    with grpc.insecure_channel(target) as channel:
        stub = pb_grpc.URLFrontierStub(channel)
        for _ in range(calls):
            started = time.perf_counter()
            served += sum(1 for _ in stub.GetURLs(params))
            latencies.append((time.perf_counter() - started) * 1000)
    return latencies, served


def used_memory(client: redis.Redis) -> int:
    time.sleep(0.5)
    return int(client.info("memory")["used_memory"])


class Service:
    """``scrapeq frontier serve`` as a process on a free loopback port."""

    #: The source tree whose scrapeq the service runs (``--src``).
    src = ROOT / "src"

    def __init__(self, redis_url: str, **settings: str) -> None:
        self.port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("SCRAPEQ_")}
        env["PYTHONPATH"] = str(self.src)
        env.update({f"SCRAPEQ_{k.upper()}": v for k, v in settings.items()})
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "scrapeq", "--redis", redis_url, "frontier", "serve",
             "--grpc", f"127.0.0.1:{self.port}"],
            env=env, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert self.proc.stderr is not None
        line = self.proc.stderr.readline()
        if not line.startswith("frontier on "):
            raise SystemExit(f"bench/frontier.py: the service did not start: {line.strip()}")

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def cpu(self) -> float:
        """CPU seconds (user + system) the service process has used so far."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        self.proc.communicate(timeout=30)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--urls", type=int, default=None, help="URLs per ingestion run")
    parser.add_argument("--queued", type=int, default=None, help="queue size for GetURLs")
    parser.add_argument("--calls", type=int, default=None, help="GetURLs calls timed")
    parser.add_argument("--src", type=Path, default=None, help="the service's source tree")
    add_server_args(parser)
    args = parser.parse_args(argv)
    if args.src is not None:
        Service.src = args.src.resolve()
    n = args.urls or (20_000 if args.quick else 50_000)
    queued = args.queued or (20_000 if args.quick else 100_000)
    calls = args.calls or (20 if args.quick else 50)
    rows: list[list[object]] = []
    with private_redis(args.redis_server) as server:
        client = redis.Redis.from_url(server.url)
        # the seen-set sized for the run (seen_capacity), as a crawl of that size states it
        service = Service(server.url, seen_capacity=str(n))
        try:
            base = used_memory(client)

            def row(name: str, services: list[Service], run: Any) -> int:
                cpu = sum(s.cpu() for s in services)
                ok, secs = run()
                us = (sum(s.cpu() for s in services) - cpu) / max(ok, 1) * 1e6
                rows.append([name, ok, secs, ok / secs, us])
                return int(ok)

            ok = row("PutURLs, 1 stream", [service], lambda: ingest([service.target], "one", n, 1))
            per_url = (used_memory(client) - base) / max(ok, 1)
            row("PutURLs, 2 streams", [service], lambda: ingest([service.target], "two", n, 2))
            second = Service(server.url, seen_capacity=str(n))
            try:
                pair = [service.target, second.target]
                row("PutURLs, 2 streams to 2 services", [service, second],
                    lambda: ingest(pair, "pair", n, 2))  # fmt: skip
            finally:
                second.stop()
            row("PutDiscovered, batches of 50", [service],
                lambda: ingest_batches(service.target, "batch", n))  # fmt: skip
            client.flushall()
            service.stop()
            service = Service(server.url, seen_capacity=str(queued))
            ingest([service.target], "get", queued, 2)
            latencies, served = get_latencies(service.target, calls)
        finally:
            service.stop()
        print(
            f"bench/frontier.py: redis {server.version}, service from {Service.src}, {load_note()}"
        )
        headers = ["ingestion", "URLs acked", "seconds", "URLs/s", "service CPU us/URL"]
        print(format_table(headers, rows))
        print(
            f"\nmemory: {per_url:.0f} bytes of Redis per URL queued ({n:,} URLs, {HOSTS:,} hosts,"
            f" seen_capacity {n:,})"
        )
        print(
            f"\nGetURLs of 100 URLs from a queue of {queued:,} over {GET_HOSTS:,} hosts"
            f" ({calls} calls, {served:,} served):"
            f" p50 {pct(latencies, 50):.1f} ms, p95 {pct(latencies, 95):.1f} ms,"
            f" max {max(latencies):.1f} ms"
        )
        print("no bar: issue 43 sets none; figures as measured")
    return 0


if __name__ == "__main__":
    sys.exit(main())
