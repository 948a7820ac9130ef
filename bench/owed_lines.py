"""What the owed-lines ledger costs (issue 25): script time per settle and Redis bytes per line.

A settle whose answer the worker writes its results line from (revisit = on, a done page with
follow-ups under ``max_pages``/``max_bytes``, a retry that may end dead) carries the attempt's
record (``line``), and ``settle-1.lua`` keeps it with the answer in the partition's ledger
until the worker acknowledges it (``lua/includes/owed.lua``). Two cases, each settled with
the record and without it, interleaved in rounds in one run on one private redis-server, one
item a settle call (what a worker's settle costs per job before batching shares the call's
fixed cost):

- ``crawl page``: a done page with 10 follow-ups on its own domain under ``max_pages``;
- ``bare done``: a done page with ``revisit = on`` (its next visit scheduled), no follow-up.

Script time is ``INFO commandstats`` EVALSHA usec over the settle calls alone (the claims run
before ``CONFIG RESETSTAT``); the median round is reported. The record is a realistic line
(~530 bytes of JSON: a page's fields, a small result, link counts). Memory: ``MEMORY USAGE``
(every element sampled) of the ledger's two keys over the lines owed, after the with-ledger
rounds (nothing acknowledged), and the ``used_memory`` difference as a check.

Run: ``.venv/bin/python bench/owed_lines.py [--pages N] [--rounds R] [--redis-server PATH]``
(defaults 1,000 pages a case and round, 3 rounds: about 30 seconds).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from typing import Any

import redis

from _redis import add_server_args, commandstats, format_table, load_note, private_redis
from scrapeq.engine.config.settings import Settings
from scrapeq.engine.model.job import Job
from scrapeq.engine.queue import Queue

FOLLOW_UPS = 10


def record(job: Job) -> str:
    """A results record as the worker builds it (runtime/records.py ``_record``), as JSON."""
    return json.dumps({
        "id": job.id, "url": job.url, "final_url": job.url, "domain": job.domain,
        "lane": job.lane, "outcome": "done", "status": 200, "attempts": 1,
        "elapsed_ms": 41.3, "bytes": 18234, "finished_at": "2026-01-10T12:00:00.123456+00:00",
        "error": None, "result": {"title": "Product 1234 - Shop", "price": "19.90",
                                  "in_stock": True},
        "depth": 1, "parent": "l1a7836ffe651", "meta": None,
        "parent_url": "https://shop-1.example.com/category/7",
        "links": {"found": 60, "queued": 10, "skipped": {"scope": 40, "seen": 10}},
    }, separators=(",", ":"))  # fmt: skip


def claimed(q: Queue, n: int) -> list[Job]:
    jobs: list[Job] = []
    while len(jobs) < n:
        got = q.claim(min(500, n - len(jobs))).jobs
        if not got:
            raise RuntimeError(f"claimed {len(jobs)} of {n}")
        jobs += got
    return jobs


def settle_run(url: str, case: str, ledger: bool, pages: int, round_no: int) -> float:
    """Settle ``pages`` claimed jobs one a call; answers the script time per settle (us)."""
    name = f"{case.replace(' ', '-')}-{int(ledger)}-{round_no}"
    if case == "crawl page":
        settings = Settings(queue=name, max_pages=1_000_000, domain_concurrency=10_000)
    else:
        settings = Settings(queue=name, revisit="on", domain_concurrency=10_000)
    q = Queue.from_url(url, settings=settings)
    try:
        q.enqueue_many([f"https://shop-{i % 50}.example.com/p/{i}" for i in range(pages)])
        jobs = claimed(q, pages)
        items = []
        for job in jobs:
            follow = ()
            if case == "crawl page":
                follow = tuple(
                    q.prepare(f"{job.url}/link/{k}").child_of(job.id, 1, job.url)
                    for k in range(FOLLOW_UPS)
                )
            item = dataclasses.replace(q.done(job), follow=follow)
            items.append(dataclasses.replace(item, line=record(job)) if ledger else item)
        q.settle_many(items[:1])  # the client's first settle also opens the queue (schema)
        q.client.config_resetstat()
        for item in items[1:]:
            (answer,) = q.settle_many([item])
            if not answer.startswith("done"):
                raise RuntimeError(f"{case}: settle answered {answer}")
        calls, usec = commandstats(q.client)["scripts"]
        if calls != pages - 1:
            raise RuntimeError(f"{case}: {calls} script calls for {pages - 1} settles")
        return usec / calls
    finally:
        q.close()


def ledger_bytes(url: str) -> tuple[int, float, float]:
    """(lines owed, MEMORY USAGE bytes a line, used_memory bytes a line) of the ledgers the
    with-ledger runs left (nothing acknowledged)."""
    client = redis.Redis.from_url(url, decode_responses=True)
    try:
        keys = sorted(client.scan_iter("sq:{*}:owed*"))
        owed = sum(int(client.hlen(k)) for k in keys if k.endswith(":owed"))
        usage = sum(int(client.memory_usage(k, samples=0) or 0) for k in keys)
        before = int(client.info("memory")["used_memory"])
        for k in keys:
            client.unlink(k)
        time.sleep(0.3)
        after = int(client.info("memory")["used_memory"])
        return owed, usage / max(owed, 1), (before - after) / max(owed, 1)
    finally:
        client.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    add_server_args(parser)
    args = parser.parse_args(argv)
    cases = ("crawl page", "bare done")
    times: dict[tuple[str, bool], list[float]] = {(c, w): [] for c in cases for w in (0, 1)}
    with private_redis(args.redis_server) as server:
        print(f"redis {server.version}; {load_note()}; {args.pages} settles a case and round, "
              f"{args.rounds} rounds, one item a settle call")  # fmt: skip
        for r in range(args.rounds):
            for case in cases:
                for ledger in (False, True) if r % 2 == 0 else (True, False):
                    times[(case, ledger)].append(
                        settle_run(server.url, case, ledger, args.pages, r)
                    )
        owed, usage, used = ledger_bytes(server.url)
    rows: list[list[Any]] = []
    for case in cases:
        without = statistics.median(times[(case, False)])
        with_ = statistics.median(times[(case, True)])
        rows.append([case, f"{without:.1f}", f"{with_:.1f}", f"{with_ - without:+.1f}",
                     " / ".join(f"{t:.0f}" for t in times[(case, True)])])  # fmt: skip
    print(format_table(
        ["case", "us/settle without", "us/settle with ledger", "difference",
         "with ledger, each round"], rows))  # fmt: skip
    print(
        f"ledger: {owed:,} lines owed, {usage:.0f} bytes a line (MEMORY USAGE of owed and "
        f"owed:due), {used:.0f} by used_memory; record {len(record(_example()))} bytes"
    )
    return 0


def _example() -> Job:
    return Job.from_json(
        json.dumps(
            {
                "id": "l1a7836ffe652",
                "url": "https://shop-1.example.com/p/1",
                "domain": "shop-1.example.com",
                "lane": "normal",
            }
        )
    )


if __name__ == "__main__":
    sys.exit(main())
