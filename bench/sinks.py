"""Results sinks end to end: the worker's jobs/s writing to each sink, against JSONL's.

The fleet of ``bench/worker_throughput.py`` (100 loopback sites in their own process, a small
HTML page each) and a private redis-server; a private PostgreSQL cluster (Debian's binaries,
``bench/_postgres.py``, fsync on) unless ``--no-postgres``. For each sink, in rounds whose
order rotates so machine drift hits all alike: the N URLs are enqueued (not timed) into the
flushed server, then ``Worker(queue, concurrency=200, burst=True, sink=...)`` with
``Settings(allow_private=True, domain_concurrency=4)`` is timed from start to burst exit.
Sinks: none (no results written: the ceiling), JSONL (the reference), CSV, SQLite (a new
file a run) and PostgreSQL (a new table a run). Reported: jobs/s (median and best of the
rounds), the median's ratio to JSONL's, rows per transaction (database sinks: rows written /
transactions), and the machine's load before and after (it is shared and noisy: the sinks
are compared side by side in one run, not across runs). Bar: SQLite and PostgreSQL at least
0.8x JSONL's median jobs/s.

Run: ``.venv/bin/python bench/sinks.py [--quick] [--urls N] [--rounds R] [--no-postgres]
[--redis-server PATH]``; exit 1 when the bar is missed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import redis

from _postgres import private_postgres
from _redis import add_server_args, format_table, load_note, private_redis
from scrapeq.engine.config.settings import Settings
from scrapeq.engine.queue import AsyncQueue, Queue
from scrapeq.runtime.sinks import CsvSink, JsonlSink, PostgresSink, Sink, SqliteSink
from scrapeq.runtime.worker import Worker
from worker_throughput import fleet, make_urls

CONCURRENCY = 200
BAR = 0.8
QUEUE = "bench"


def _settings() -> Settings:
    return Settings(allow_private=True, domain_concurrency=4, queue=QUEUE)


async def _timed(redis_url: str, sink: Sink | None) -> float:
    queue = AsyncQueue.from_url(redis_url, settings=_settings())
    try:
        started = time.perf_counter()
        await Worker(queue, concurrency=CONCURRENCY, burst=True, sink=sink).run_async()
        return time.perf_counter() - started
    finally:
        await queue.close()


def _enqueue(redis_url: str, urls: list[str]) -> None:
    redis.Redis.from_url(redis_url).flushdb()
    q = Queue.from_url(redis_url, settings=_settings())
    try:
        for i in range(0, len(urls), 1000):
            q.enqueue_many(urls[i : i + 1000])
    finally:
        q.close()


def _makers(folder: Path, pg_url: str | None) -> dict[str, Callable[[int], Sink | None]]:
    makers: dict[str, Callable[[int], Sink | None]] = {
        "none": lambda run: None,
        "jsonl": lambda run: JsonlSink(folder / f"r{run}.jsonl"),
        "csv": lambda run: CsvSink(folder / f"r{run}.csv"),
        "sqlite": lambda run: SqliteSink(folder / f"r{run}.db"),
    }
    if pg_url is not None:
        makers["postgres"] = lambda run: PostgresSink(f"{pg_url}?table=r{run}")
    return makers


@contextlib.contextmanager
def _postgres(wanted: bool) -> Iterator[str | None]:
    if not wanted:
        yield None
        return
    with private_postgres() as url:
        yield url


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="3,000 URLs, 2 rounds")
    parser.add_argument("--urls", type=int, default=None, help="jobs per run (10,000)")
    parser.add_argument("--rounds", type=int, default=None, help="rounds (3)")
    parser.add_argument("--no-postgres", action="store_true", help="skip PostgreSQL")
    add_server_args(parser)
    args = parser.parse_args()
    n = args.urls or (3_000 if args.quick else 10_000)
    rounds = args.rounds or (2 if args.quick else 3)
    load_before = load_note()
    times: dict[str, list[float]] = {}
    per_tx: dict[str, list[float]] = {}
    with (
        fleet(100) as f,
        private_redis(args.redis_server) as server,
        _postgres(not args.no_postgres) as pg_url,
        tempfile.TemporaryDirectory(prefix="scrapeq-bench-sinks-") as tmp,
    ):
        urls = make_urls(f.ports, n)
        makers = _makers(Path(tmp), pg_url)
        names = list(makers)
        run = 0
        for r in range(rounds):
            order = names[r % len(names) :] + names[: r % len(names)]
            for name in order:
                run += 1
                _enqueue(server.url, urls)
                sink = makers[name](run)
                seconds = asyncio.run(_timed(server.url, sink))
                times.setdefault(name, []).append(n / seconds)
                if isinstance(sink, SqliteSink | PostgresSink) and sink.batches:
                    per_tx.setdefault(name, []).append(sink.rows / sink.batches)
                print(f"round {r + 1} {name}: {n / seconds:,.0f} jobs/s", file=sys.stderr)
    return _report(n, rounds, times, per_tx, load_before)


def _report(
    n: int,
    rounds: int,
    times: dict[str, list[float]],
    per_tx: dict[str, list[float]],
    load_before: str,
) -> int:
    ref = statistics.median(times["jsonl"])
    rows: list[list[Any]] = []
    for name, rates in times.items():
        tx = per_tx.get(name)
        rows.append([
            name, f"{statistics.median(rates):,.0f}", f"{max(rates):,.0f}",
            f"{statistics.median(rates) / ref:.2f}",
            f"{statistics.median(tx):.1f}" if tx else "-",
        ])  # fmt: skip
    print(f"bench/sinks.py: {n:,} jobs a run, concurrency {CONCURRENCY}, {rounds} rounds")
    print(format_table(["sink", "jobs/s median", "best", "x JSONL", "rows/transaction"], rows))
    print(f"before: {load_before}; after: {load_note()}")
    missed = [s for s in ("sqlite", "postgres")
              if s in times and statistics.median(times[s]) < BAR * ref]  # fmt: skip
    print("PASS" if not missed else f"FAIL: {', '.join(missed)} under {BAR}x JSONL")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
