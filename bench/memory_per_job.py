"""Redis memory per queued job: 60-character URL, no payload.

For each case (1, 100 and 10,000 domains; ready or delayed jobs) the server is flushed, left to
settle, and ``INFO memory`` ``used_memory`` is read before and after enqueuing N jobs (default
100,000, ``enqueue_many`` in chunks of 500). The difference over N is the cost of one job,
with every structure it implies: the job's compact JSON string, its entry in the domain's ready
zset (ready) or in the delayed zset (delayed; a lane has counters, no index of its own since
issue 13), its share of per-domain keys, and the keyspace's own hash table.

The domain count changes the zset encodings: with 10,000 domains each domain's ready zset holds
10 jobs and stays a compact ziplist; with 1 or 100 domains they are skiplists. A breakdown by
key family (``MEMORY USAGE``) follows the summary. The sparse case (N/2 domains with 2 jobs
each) shows the per-domain keys' share when few jobs share them: a domain that only has jobs
queued costs its ready zset, its place in ``domains:ready`` and its field in the domain
registry (no hash of its own until it is first claimed).

A second extra case enqueues the jobs (without uniqueness) into a queue that has had one
unique enqueue: each job then holds its URL's fingerprint (``sq:{Q}:unique`` and ``fp`` in its
JSON), the cost a queue pays once it asks for uniqueness (docs/DESIGN.md).

Bar: <= 350 bytes per job in the worst of the seven listed cases, the sparse one included
(issue 13; 600 before it).

Run: ``.venv/bin/python bench/memory_per_job.py [--quick] [--jobs N] [--redis-server PATH]``
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from typing import Any

import redis

from _redis import add_server_args, format_table, private_redis
from scrapeq.engine.lua.scripts import EnqueueSpec
from scrapeq.engine.queue import Queue

BAR_BYTES = 350.0
CHUNK = 500
DOMAIN_COUNTS = (1, 100, 10_000)
SETTLE_S = 0.5
URL_LEN = 60
DELAY_S = 3600.0


@dataclass(frozen=True, slots=True)
class Case:
    domains: int
    delayed: bool
    sparse: bool = False  # 2 jobs per domain
    holds: bool = False  # the other extra case: the queue has had a unique enqueue

    @property
    def label(self) -> str:
        text = f"{self.domains:,} domain{'s' if self.domains > 1 else ''}, " + (
            "delayed" if self.delayed else "ready"
        )
        text += " (queue had a unique enqueue)" if self.holds else ""
        return text + (" (2 jobs each)" if self.sparse else "")

    @property
    def listed(self) -> bool:
        return not self.holds


@dataclass(frozen=True, slots=True)
class Result:
    case: Case
    jobs: int
    before: int
    after: int
    breakdown: dict[str, float]  # key family -> bytes per job (MEMORY USAGE)
    encodings: dict[str, str]

    @property
    def per_job(self) -> float:
        return (self.after - self.before) / self.jobs


def domain_name(d: int) -> str:
    return f"d{d:05d}.example.com"  # same length for every domain count


def url_for(d: int, i: int) -> str:
    head = f"https://{domain_name(d)}/item/"
    return head + str(i).zfill(URL_LEN - len(head))


def build_specs(q: Queue, case: Case, n: int) -> list[EnqueueSpec]:
    delay = DELAY_S if case.delayed else 0.0
    specs = [q.prepare(url_for(i % case.domains, i), delay=delay) for i in range(n)]
    if any(len(s.url) != URL_LEN for s in (specs[0], specs[-1])):
        raise RuntimeError(f"URL is not {URL_LEN} characters: {specs[0].url}")
    return specs


def used_memory(client: redis.Redis) -> int:
    time.sleep(SETTLE_S)
    client.ping()
    info: dict[str, Any] = client.info("memory")
    return int(info["used_memory"])


def memory_usage(client: redis.Redis, keys: list[str]) -> int:
    pipe = client.pipeline(transaction=False)
    for key in keys:
        pipe.memory_usage(key, samples=0)
    return sum(int(v or 0) for v in pipe.execute())


def breakdown(q: Queue, case: Case, ids: list[str]) -> tuple[dict[str, float], dict[str, str]]:
    c, k, n = q.client, q.keys, len(ids)
    sample = ids[:: max(1, n // 2000)]
    job_bytes = memory_usage(c, [k.job(i) for i in sample]) / len(sample)
    domains = [domain_name(d) for d in range(case.domains)]
    families = {
        "job": job_bytes * n,
        "dq:*": memory_usage(c, [k.domain_queue(d) for d in domains]),
        "delayed": memory_usage(c, [k.delayed]),
        "domain:*": memory_usage(c, [k.domain(d) for d in domains]),
        "domain sets": memory_usage(c, [k.domains, k.domains_ready]),
        "registry": memory_usage(c, [*k.registry_keys, k.domain_count]),
        "unique": memory_usage(c, [k.unique]),
    }
    encodings = {
        "dq:<domain>": str(c.object("encoding", k.domain_queue(domains[0])) or "-"),
        "delayed": str(c.object("encoding", k.delayed) or "-"),
        "domains:ready": str(c.object("encoding", k.domains_ready) or "-"),
    }
    return {name: v / n for name, v in families.items()}, encodings


def measure(q: Queue, case: Case, n: int) -> Result:
    specs = build_specs(q, case, n)
    q.client.flushall()
    if case.holds:
        q.enqueue("https://unique.example.com/", unique=True)
    before = used_memory(q.client)
    ids: list[str] = []
    for start in range(0, n, CHUNK):
        ids += [r.id for r in q.enqueue_many(specs[start : start + CHUNK])]
    after = used_memory(q.client)
    counts = q.client.zcard(q.keys.delayed) if case.delayed else None
    if counts is not None and counts != n:
        raise RuntimeError(f"{case.label}: {counts} delayed jobs, expected {n}")
    parts, encodings = breakdown(q, case, ids)
    return Result(case, n, before, after, parts, encodings)


def summary_rows(results: list[Result]) -> list[list[object]]:
    rows: list[list[object]] = []
    for r in results:
        enc = r.encodings["delayed"] if r.case.delayed else r.encodings["dq:<domain>"]
        rows.append([r.case.label, r.jobs, r.before, r.after, r.per_job, enc])
    return rows


def breakdown_rows(results: list[Result]) -> tuple[list[str], list[list[object]]]:
    names = list(results[0].breakdown)
    headers = ["case", *names, "rest", "total"]
    rows: list[list[object]] = [
        [
            r.case.label,
            *[r.breakdown[n] for n in names],
            r.per_job - sum(r.breakdown.values()),
            r.per_job,
        ]
        for r in results
    ]
    return headers, rows


_LEGEND = """\
  job          the job's compact JSON string (key sq:{Q}:job:<id>, MEMORY USAGE of a sample)
  dq:*         the domains' ready zsets        delayed   sq:{Q}:delayed
  domain:*     the per-domain hashes (none for a domain that only has jobs queued)
  domain sets  sq:{Q}:domains:ready            unique    sq:{Q}:unique (held fingerprints)
  registry     the domain registry: sq:{Q}:reg:<b> (1,024 hashes, domain -> jobs enqueued)
               and sq:{Q}:dcount
  rest         used_memory delta minus the keys above: the keyspace hash table, stats, meta"""


def warm_up(q: Queue) -> None:
    """Load every script once so the script cache is not counted in the first case."""
    q.enqueue_many([q.prepare(url_for(0, 0))])
    q.enqueue_many([q.prepare(url_for(0, 1), delay=DELAY_S)])
    q.claim(1)
    q.client.flushall()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--quick",
        action="store_true",
        help="short run: 20,000 jobs per case (domain counts scaled to keep jobs per domain)",
    )
    parser.add_argument("--jobs", type=int, default=None, help="jobs per case (default 100,000)")
    parser.add_argument("--strict", action="store_true", help="exit 1 when the bar is missed")
    add_server_args(parser)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    n = args.jobs or (20_000 if args.quick else 100_000)
    counts = [min(d, max(1, n // 10)) for d in DOMAIN_COUNTS]  # at least 10 jobs a domain
    cases = [Case(d, delayed) for delayed in (False, True) for d in counts]
    cases.append(Case(n // 2, False, sparse=True))
    cases.append(Case(counts[0], False, holds=True))
    with private_redis(args.redis_server) as server:
        print(f"redis-server {server.version}: {server.binary}")
        print(f"{n:,} jobs per case, {URL_LEN}-character URLs, no payload, lane normal")
        if counts != list(DOMAIN_COUNTS):
            print(f"(domain counts scaled with the job count: {counts})")
        q = Queue.from_url(server.url, "bench")
        warm_up(q)
        results = [measure(q, case, n) for case in cases]
    print("\nused_memory before and after the enqueue (bytes):")
    headers = ["case", "jobs", "before", "after", "bytes/job", "zset encoding"]
    print(format_table(headers, summary_rows(results)))
    print("\nBreakdown by key family, bytes per job:")
    print(format_table(*breakdown_rows(results)))
    print(_LEGEND)
    listed = [r for r in results if r.case.listed]
    worst = max(listed, key=lambda r: r.per_job)
    sparse = next(r for r in results if r.case.sparse)
    holds = next(r for r in results if r.case.holds)
    passed = worst.per_job <= BAR_BYTES
    verdict = "PASS" if passed else "FAIL"
    print(
        f"\nWorst case of all: {max(r.per_job for r in results):,.0f} bytes/job. "
        f"Sparse queue ({sparse.case.label}): {sparse.per_job:,.0f} bytes/job,\n"
        "the per-domain keys shared by only 2 jobs each."
    )
    print(
        f"Once the queue has had a unique enqueue ({holds.case.label}): "
        f"{holds.per_job:,.0f} bytes/job,\nevery job holding its fingerprint (not a listed case)."
    )
    print(
        f"{verdict}: worst listed case {worst.per_job:,.0f} bytes/job ({worst.case.label}); "
        f"bar <= {BAR_BYTES:,.0f} bytes/job"
    )
    return 1 if args.strict and not passed else 0


if __name__ == "__main__":
    sys.exit(main())
