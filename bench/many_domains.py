"""The cost of ``status()`` at many domains, and the domain table before and after domain_ttl.

For each domain count (10,000, 100,000 and 1,000,000 by default) a flushed private
redis-server gets one ready job per domain (``enqueue_many``, 500 a call), plus a few
unwell domains so status has something to pick: 20 open breakers (``breaker_trip``) and 20
dead letters. Then ``Queue.status()`` runs ``--repeat`` times (default 5): the median wall
time, the Redis calls one status makes (every step the queue sends: script calls and plain
commands, counted by wrapping ``Queue._step``), the size of its JSON and of the domain list
are printed. Bar (issue 13): at 1,000,000 domains, at most 50 ms and 100 Redis calls.

The domain table part (``--ttl-up-to``, default 1,000,000: every count): the queue is
drained (claim 500 and ack, with ``Settings(domain_ttl=60, domain_concurrency=10)``), the
clock moved 61 s ahead (the scripts' testing clock offset), and ``reap`` (the housekeeping a
claim also runs, ``budget`` 1,000 domains a call) called until it forgets nothing more; the
number of domains in the registry (``sq:{Q}:dcount``) and the used memory are printed
before and after. The open and dead-letter domains stay (an open breaker is not idle; dead
letters keep their domain).

Run: ``.venv/bin/python bench/many_domains.py [--counts 10000,100000,1000000] [--repeat 5]
[--ttl-up-to N] [--redis-server PATH]``
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Any

import redis

from _redis import add_server_args, format_table, private_redis
from scrapeq.engine.config.settings import Settings
from scrapeq.engine.lua.scripts import Step, reap
from scrapeq.engine.queue import Queue

BAR_MS = 50.0
BAR_CALLS = 100
CHUNK = 20_000
UNWELL = 20
TTL_S = 60.0


@dataclass(frozen=True, slots=True)
class Row:
    domains: int
    load_s: float
    status_ms: float
    calls: int
    json_bytes: int
    listed: int
    table_before: int = 0
    table_after: int = 0
    mem_before: int = 0
    mem_after: int = 0
    forget_s: float = 0.0


class CountingQueue(Queue):
    """A Queue that counts the steps (Redis calls) its operations send."""

    steps = 0

    def _step(self, step: Step) -> Any:
        self.steps += 1
        return super()._step(step)


def domain_url(i: int) -> str:
    return f"https://d{i:07d}.example.com/item/1"


def load(q: Queue, n: int) -> float:
    began = time.perf_counter()
    for start in range(0, n, CHUNK):
        specs = [q.prepare(domain_url(i)) for i in range(start, min(n, start + CHUNK))]
        q.enqueue_many(specs)
    return time.perf_counter() - began


def make_unwell(q: Queue, n: int) -> None:
    """UNWELL open breakers and UNWELL dead letters, on domains of their own."""
    for i in range(UNWELL):
        q.breaker_trip(f"d{i:07d}.example.com")
    # critical: claimed before the backlog
    extra = [
        q.prepare(f"https://dead{i:03d}.example.com/x", lane="critical") for i in range(UNWELL)
    ]
    q.enqueue_many(extra)
    left = UNWELL
    while left:
        jobs = q.claim(UNWELL).jobs
        for j in jobs:
            if j.domain.startswith("dead") and left:
                q.fail(j, "http_404")
                left -= 1
            else:
                q.ack(j)
        if not jobs:
            break


def time_status(q: CountingQueue, repeat: int) -> tuple[float, int, int, int]:
    times, calls = [], []
    status: dict[str, Any] = {}
    for _ in range(repeat):
        q.steps = 0
        began = time.perf_counter()
        status = q.status()
        times.append((time.perf_counter() - began) * 1000)
        calls.append(q.steps)
    return statistics.median(times), max(calls), len(json.dumps(status)), len(status["domains"])


def used_memory(client: redis.Redis) -> int:
    return int(client.info("memory")["used_memory"])


def drain_and_forget(q: Queue, client: redis.Redis) -> tuple[int, int, int, int, float]:
    while True:
        jobs = q.claim(500).jobs
        if not jobs:
            break
        q.settle_many([q.done(j) for j in jobs])
    before, mem_before = int(client.get(q.keys.domain_count) or 0), used_memory(client)
    q.testing_clock_offset_ms += round((TTL_S + 1) * 1000)
    began = time.perf_counter()
    while True:
        gone = int(client.get(q.keys.domain_count) or 0)
        q._drive(_reap_op(1000))
        if int(client.get(q.keys.domain_count) or 0) == gone:
            break
    forget_s = time.perf_counter() - began
    return (
        before,
        int(client.get(q.keys.domain_count) or 0),
        mem_before,
        used_memory(client),
        forget_s,
    )


def _reap_op(budget: int) -> Any:
    return (yield reap(budget))


def run(url: str, n: int, repeat: int, ttl: bool) -> Row:
    settings = Settings(domain_ttl=TTL_S, domain_concurrency=10, lease=3600)
    q = CountingQueue.from_url(url, settings=settings)
    q.client.flushall()
    load_s = load(q, n)
    make_unwell(q, n)
    status_ms, calls, size, listed = time_status(q, repeat)
    row = Row(n, load_s, status_ms, calls, size, listed)
    if ttl:
        before, after, mem_before, mem_after, forget_s = drain_and_forget(q, q.client)
        row = Row(
            n,
            load_s,
            status_ms,
            calls,
            size,
            listed,
            before,
            after,
            mem_before,
            mem_after,
            forget_s,
        )
    q.close()
    return row


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--counts", default="10000,100000,1000000", help="domain counts")
    parser.add_argument("--repeat", type=int, default=5, help="status() calls timed per count")
    parser.add_argument(
        "--ttl-up-to", type=int, default=1_000_000, help="run the domain_ttl part up to this count"
    )
    add_server_args(parser)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    counts = [int(c) for c in args.counts.split(",")]
    rows = []
    with private_redis(args.redis_server) as server:
        print(f"redis-server {server.version}: {server.binary}")
        for n in counts:
            rows.append(run(server.url, n, args.repeat, n <= args.ttl_up_to))
            print(f"  {n:,} domains done", file=sys.stderr)
    print(
        f"\nstatus() with one ready job per domain, {UNWELL} open breakers and {UNWELL} dead "
        f"letters (median of {args.repeat}):"
    )
    print(
        format_table(
            ["domains", "load s", "status ms", "Redis calls", "JSON bytes", "domains listed"],
            [[r.domains, r.load_s, r.status_ms, r.calls, r.json_bytes, r.listed] for r in rows],
        )
    )
    ttl_rows = [r for r in rows if r.table_before]
    if ttl_rows:
        print(
            f"\nThe domain registry (sq:{{Q}}:dcount) after draining, before and after domain_ttl "
            f"({TTL_S:g} s) housekeeping:"
        )
        print(
            format_table(
                ["domains", "before", "after", "used_memory before", "after", "forget s"],
                [
                    [
                        r.domains,
                        r.table_before,
                        r.table_after,
                        r.mem_before,
                        r.mem_after,
                        r.forget_s,
                    ]
                    for r in ttl_rows
                ],
            )
        )
    big = rows[-1]
    passed = big.status_ms <= BAR_MS and big.calls <= BAR_CALLS
    print(
        f"\n{'PASS' if passed else 'FAIL'}: at {big.domains:,} domains status() took "
        f"{big.status_ms:.1f} ms and {big.calls} Redis calls; bar <= {BAR_MS:g} ms and "
        f"<= {BAR_CALLS} calls"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
