"""Claim + settle throughput of the core engine in one process, no fetching.

For each claim batch size (1, 16, 64) the queue is filled with N jobs spread over 100 domains
(not timed; ``enqueue_many`` in chunks of 500), then this loop is timed until the queue is
empty::

    claimed = q.claim(b)
    q.settle_many([q.done(j) for j in claimed.jobs])

``Settings(domain_concurrency=10_000)`` so the per-domain cap never limits a claim. Each
batch size runs several times on a flushed server; the median run is reported, with the
server-side script time per job (``INFO commandstats``: EVALSHA usec) beside the wall time.

Bar: >= 20,000 jobs/s at batch 64 (median run). An informational line follows: two processes
draining one queue together at batch 64 (not the bar, which is for one process).

``--adaptive``: the settle-side cost of ``domain_concurrency = auto`` (issue 14), side by side
in the same run: batch-64 drains, interleaved, with the fixed limit of the bar
(``domain_concurrency=10000``) and with ``auto``, every settlement carrying a latency
(``latency_ms=20``, as the worker's do), so the adaptive update in settle-1.lua
(``includes/adaptive.lua``) runs for every auto job; a third row settles fixed without a
latency (the bar's loop). With auto a domain's cap is its learned limit (2 at the start, up
to ``domain_concurrency_max``); 100 domains still fill a claim of 64.

When the bar is missed (or with ``--profile always``) a diagnosis follows: Redis time per job
split between claim-1.lua and settle-1.lua, the Redis commands each script runs per job and
their cost, the Lua-side overhead per ``redis.call`` (calibrated), and the Python functions
that take the rest (cProfile).

Run: ``.venv/bin/python bench/claim_throughput.py [--quick] [--profile auto|always|never]
[--keep-done S] [--adaptive] [--redis-server PATH]``. The exit status is 0 unless ``--strict``
and the bar is missed.
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import json
import multiprocessing
import pstats
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis

from _redis import (
    SCRIPT_COMMANDS,
    add_server_args,
    commandstats,
    format_table,
    load_note,
    private_redis,
    server_cpu,
)
from scrapeq.engine.config.settings import Settings
from scrapeq.engine.lua import scripts
from scrapeq.engine.lua.scripts import EnqueueSpec
from scrapeq.engine.model.job import Job
from scrapeq.engine.queue import Queue

BAR_JOBS_PER_S = 20_000.0
BAR_BATCH = 64
DOMAINS = 100
CHUNK = 500
BATCHES = (1, 16, 64)
FULL_JOBS = {1: 5_000, 16: 40_000, 64: 60_000}
QUICK_JOBS = {1: 1_000, 16: 4_000, 64: 8_000}


@dataclass(frozen=True, slots=True)
class Run:
    """One timed drain of the queue."""

    jobs: int
    seconds: float
    redis_us: float  # EVALSHA usec summed over the run (server side)
    redis_cpu_us: float  # CPU the redis-server process used over the run (user + sys)

    @property
    def rate(self) -> float:
        return self.jobs / self.seconds

    @property
    def us_per_job(self) -> float:
        return self.seconds / self.jobs * 1e6

    @property
    def redis_us_per_job(self) -> float:
        return self.redis_us / self.jobs

    @property
    def redis_cpu_per_job(self) -> float:
        return self.redis_cpu_us / self.jobs


def url_for(i: int) -> str:
    """A 60-character URL on one of DOMAINS domains."""
    return f"https://d{i % DOMAINS:03d}.example.com/catalogue/item/{i:021d}"


#: ``--keep-done S``: done jobs are kept S seconds (SET PX per job) instead of deleted.
KEEP_DONE = 0.0


def make_queue(url: str, concurrency: int | str = 10_000) -> Queue:
    client = redis.Redis.from_url(url, decode_responses=True)
    settings = Settings(domain_concurrency=concurrency, keep_done=KEEP_DONE)
    return Queue(client, "bench", settings=settings)


def build_specs(q: Queue, n: int) -> list[EnqueueSpec]:
    return [q.prepare(url_for(i)) for i in range(n)]


def enqueue(q: Queue, specs: list[EnqueueSpec]) -> None:
    for start in range(0, len(specs), CHUNK):
        q.enqueue_many(specs[start : start + CHUNK])


def drain(q: Queue, batch: int, latency_ms: int | None = None) -> int:
    """Claim and settle done until the queue is empty; with ``latency_ms`` every settlement
    carries that fetch latency (what an adaptive domain learns from)."""
    done = 0
    while True:
        claimed = q.claim(batch)
        if not claimed.jobs:
            return done
        settlements = [q.done(j) for j in claimed.jobs]
        if latency_ms is not None:
            settlements = [dataclasses.replace(s, latency_ms=latency_ms) for s in settlements]
        q.settle_many(settlements)
        done += len(claimed.jobs)


def timed_run(q: Queue, specs: list[EnqueueSpec], batch: int, latency_ms: int | None = None) -> Run:
    q.client.flushall()
    enqueue(q, specs)
    q.client.config_resetstat()
    cpu0 = server_cpu(q.client) * 1e6
    start = time.perf_counter()
    done = drain(q, batch, latency_ms)
    seconds = time.perf_counter() - start
    cpu = server_cpu(q.client) * 1e6 - cpu0
    if done != len(specs):
        raise RuntimeError(f"batch {batch}: drained {done} jobs, enqueued {len(specs)}")
    return Run(done, seconds, commandstats(q.client)["scripts"][1], cpu)


def measure_enqueue(q: Queue, n: int) -> list[list[object]]:
    q.client.flushall()
    start = time.perf_counter()
    specs = build_specs(q, n)
    prep = time.perf_counter() - start
    start = time.perf_counter()
    enqueue(q, specs)
    enq = time.perf_counter() - start
    return [
        ["q.prepare (validation, Python only)", n, prep, n / prep],
        [f"enqueue_many, prepared specs, chunks of {CHUNK}", n, enq, n / enq],
        ["both", n, prep + enq, n / (prep + enq)],
    ]


def throughput(q: Queue, sizes: dict[int, int], repeats: int) -> dict[int, list[Run]]:
    """``repeats`` runs at the bar's batch size, at most 3 at the others."""
    results: dict[int, list[Run]] = {}
    for batch in BATCHES:
        specs = build_specs(q, sizes[batch])
        runs = repeats if batch == BAR_BATCH else min(repeats, 3)
        results[batch] = [timed_run(q, specs, batch) for _ in range(runs)]
    return results


def _child(url: str, batch: int, go: Any, out: Any) -> None:
    q = make_queue(url)
    go.wait()
    out.put(drain(q, batch))
    q.close()


def multi_process_rate(q: Queue, url: str, specs: list[EnqueueSpec], batch: int, procs: int) -> Run:
    """Informational: ``procs`` processes drain one queue together (not the bar)."""
    q.client.flushall()
    enqueue(q, specs)
    q.client.config_resetstat()
    ctx = multiprocessing.get_context("fork")
    go, out = ctx.Event(), ctx.Queue()
    children = [ctx.Process(target=_child, args=(url, batch, go, out)) for _ in range(procs)]
    for child in children:
        child.start()
    time.sleep(0.5)  # let every child connect and wait at the start line
    cpu0 = server_cpu(q.client) * 1e6
    start = time.perf_counter()
    go.set()
    done = sum(out.get() for _ in children)
    seconds = time.perf_counter() - start
    cpu = server_cpu(q.client) * 1e6 - cpu0
    for child in children:
        child.join()
    if done != len(specs):
        raise RuntimeError(f"{procs} processes drained {done} jobs, enqueued {len(specs)}")
    return Run(done, seconds, commandstats(q.client)["scripts"][1], cpu)


def median_run(runs: list[Run]) -> Run:
    return sorted(runs, key=lambda r: r.rate)[len(runs) // 2]


#: ``--adaptive``'s rows: (label, domain_concurrency, latency_ms a settlement carries)
ADAPTIVE_ROWS: tuple[tuple[str, int | str, int | None], ...] = (
    ("10000, no latency (the bar's loop)", 10_000, None),
    ("10000, latency 20 ms", 10_000, 20),
    ("auto, latency 20 ms", "auto", 20),
)


def adaptive_cost(url: str, n: int, repeats: int) -> list[list[object]]:
    """Batch-64 drains with a fixed limit and with auto, interleaved run by run (so the
    machine's load falls on both alike); the median run of each."""
    queues = [make_queue(url, conc) for _, conc, _ in ADAPTIVE_ROWS]
    specs = build_specs(queues[0], n)
    runs: list[list[Run]] = [[] for _ in ADAPTIVE_ROWS]
    for _ in range(repeats):
        for i, (q, (_, _, latency)) in enumerate(zip(queues, ADAPTIVE_ROWS, strict=True)):
            runs[i].append(timed_run(q, specs, BAR_BATCH, latency))
    base = median_run(runs[0]).rate
    rows: list[list[object]] = []
    for (label, _, _), got in zip(ADAPTIVE_ROWS, runs, strict=True):
        med = median_run(got)
        rows.append([label, med.jobs, len(got), med.rate, f"{med.rate / base:.2f}",
                     med.redis_us_per_job, med.redis_cpu_per_job])  # fmt: skip
    for q in queues:
        q.close()
    return rows


def throughput_rows(results: dict[int, list[Run]]) -> list[list[object]]:
    rows: list[list[object]] = []
    for batch, runs in results.items():
        med = median_run(runs)
        rows.append(
            [
                batch,
                med.jobs,
                len(runs),
                med.rate,
                max(r.rate for r in runs),
                med.us_per_job,
                med.redis_us_per_job,
                f"{med.redis_us_per_job / med.us_per_job:.0%}",
                med.redis_cpu_per_job,
            ]
        )
    return rows


# --- diagnosis -------------------------------------------------------------------------------


Acc = dict[str, list[float]]


def _add_delta(
    acc: Acc, before: dict[str, tuple[int, float]], after: dict[str, tuple[int, float]]
) -> None:
    for name, (calls, usec) in after.items():
        c0, u0 = before.get(name, (0, 0.0))
        if name == "info" or calls == c0:
            continue
        slot = acc.setdefault(name, [0.0, 0.0])
        slot[0] += calls - c0
        slot[1] += usec - u0


@dataclass(frozen=True, slots=True)
class Split:
    """Server-side figures of one drain, split by script, plus batch shape."""

    claim: Acc
    settle: Acc
    jobs: int
    claims: int
    distinct_domains: float  # mean distinct domains per non-empty claim


def split_by_script(q: Queue, n: int, batch: int) -> Split:
    """Drain the queue with INFO commandstats read around every script call."""
    q.client.flushall()
    enqueue(q, build_specs(q, n))
    claim_acc: Acc = {}
    settle_acc: Acc = {}
    claims, distinct = 0, 0
    while True:
        s0 = commandstats(q.client)
        claimed = q.claim(batch)
        s1 = commandstats(q.client)
        _add_delta(claim_acc, s0, s1)
        if not claimed.jobs:
            return Split(claim_acc, settle_acc, n, claims, distinct / max(claims, 1))
        claims += 1
        distinct += len({j.domain for j in claimed.jobs})
        q.settle_many([q.done(j) for j in claimed.jobs])
        _add_delta(settle_acc, s1, commandstats(q.client))


def command_rows(acc: Acc, jobs: int) -> tuple[list[list[object]], float, float]:
    """Rows per inner command; (rows, redis.call per job, command usec per job)."""
    inner = {k: v for k, v in acc.items() if k not in ("scripts", *SCRIPT_COMMANDS)}
    rows: list[list[object]] = [
        [name.upper(), calls / jobs, usec / jobs, usec / calls]
        for name, (calls, usec) in sorted(inner.items(), key=lambda kv: -kv[1][1])
    ]
    total_calls = sum(c for c, _ in inner.values())
    total_usec = sum(u for _, u in inner.values())
    rows.append(["all commands", total_calls / jobs, total_usec / jobs, total_usec / total_calls])
    return rows, total_calls / jobs, total_usec / jobs


_BRIDGE_LUA = """
local n = tonumber(ARGV[1])
for i = 1, n do redis.call('HINCRBY', KEYS[1], 'f', 1) end
return n
"""

_CJSON_LUA = """
local n = tonumber(ARGV[1])
local s = ARGV[2]
for i = 1, n do local j = cjson.decode(s); s = cjson.encode(j) end
return n
"""


@dataclass(frozen=True, slots=True)
class Calibration:
    """Fixed costs measured on the same server and client (microseconds)."""

    rtt: float  # one PING round trip, client to server and back
    eval_floor: float  # server time of EVAL 'return 1'
    bridge: float  # one redis.call beyond the command's own time
    cjson: float  # cjson.decode + cjson.encode of one stored job
    empty_claim: float  # server time of claim-1.lua on an empty queue
    empty_settle: float  # server time of settle-1.lua with no items
    py_job: float  # Python: Job.from_json of one claimed job
    py_settle: float  # Python: q.done(job) + as_arg, json.dumps share per job


def _eval_us(client: redis.Redis, name: str, fn: Callable[[], object], times: int) -> float:
    client.config_resetstat()
    for _ in range(times):
        fn()
    return commandstats(client)[name][1] / times


def _per_call_us(fn: Callable[[], object], times: int) -> float:
    start = time.perf_counter()
    for _ in range(times):
        fn()
    return (time.perf_counter() - start) / times * 1e6


def calibrate(q: Queue, batch: int) -> Calibration:
    client = q.client
    client.flushall()
    enqueue(q, build_specs(q, batch))
    jobs = q.claim(batch).jobs
    sample_json = client.get(q.keys.job(jobs[0].id)) or "{}"
    texts = [json.dumps(_stored(client, q, j.id)) for j in jobs]
    n = 20_000
    client.config_resetstat()
    client.eval(_BRIDGE_LUA, 1, "bench:calibrate", n)
    stats = commandstats(client)
    bridge = (stats["eval"][1] - stats["hincrby"][1]) / n
    client.config_resetstat()
    client.eval(_CJSON_LUA, 0, n, sample_json)
    cjson_us = commandstats(client)["eval"][1] / n
    client.flushall()
    settle_none = scripts.settle([])
    cal = Calibration(
        rtt=_per_call_us(client.ping, 2000),
        eval_floor=_eval_us(client, "eval", lambda: client.eval("return 1", 0), 2000),
        bridge=bridge,
        cjson=cjson_us,
        empty_claim=_eval_us(client, "scripts", lambda: q.claim(batch), 2000),
        empty_settle=_eval_us(client, "scripts", lambda: q._step(settle_none), 2000),
        py_job=_per_call_us(lambda: [Job.from_json(t) for t in texts], 200) / len(texts),
        py_settle=_per_call_us(lambda: _settle_args(q, jobs), 200) / len(jobs),
    )
    return cal


def _stored(client: redis.Redis, q: Queue, job_id: str) -> Any:
    text = client.get(q.keys.job(job_id))
    return json.loads(text) if text else {}


def _settle_args(q: Queue, jobs: list[Job]) -> str:
    """What settle_many does in Python before the round trip: build and encode the items."""
    return scripts.settle([q.done(j) for j in jobs]).args


def python_profile(q: Queue, n: int, batch: int) -> tuple[list[list[object]], float]:
    """Top own-time Python functions of the loop (cProfile), per job; and the profiled wall."""
    q.client.flushall()
    enqueue(q, build_specs(q, n))
    prof = cProfile.Profile()
    start = time.perf_counter()
    prof.enable()
    done = drain(q, batch)
    prof.disable()
    wall = time.perf_counter() - start
    stats = pstats.Stats(prof)
    entries: list[tuple[float, int, str]] = []
    raw: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    for (file, line, func), (_cc, ncalls, tottime, _ct, _callers) in raw.items():
        where = "builtin" if file == "~" else f"{file.split('site-packages/')[-1]}:{line}"
        entries.append((tottime, ncalls, f"{func} ({where})"))
    entries.sort(reverse=True)
    rows: list[list[object]] = [
        [name[:80], calls / done, tot / done * 1e6] for tot, calls, name in entries[:12]
    ]
    return rows, wall / done * 1e6


def _script_rows(split: Split) -> list[tuple[str, float, float, float, list[list[object]]]]:
    out = []
    for label, acc in (("claim-1.lua", split.claim), ("settle-1.lua", split.settle)):
        rows, calls, cmd_us = command_rows(acc, split.jobs)
        out.append((label, acc["scripts"][1] / split.jobs, calls, cmd_us, rows))
    return out


def diagnose(url: str, n: int, batch: int, timed: Run) -> None:
    q = make_queue(url)
    print(f"\n== Diagnosis at batch {batch} ({n:,} jobs) ==")
    split = split_by_script(q, n, batch)
    cal = calibrate(q, batch)
    scripts_ = _script_rows(split)
    for label, _ev, _calls, _cmd, cmd_rows in scripts_:
        print(f"\nRedis commands run inside {label}, per job (INFO commandstats):")
        print(format_table(["command", "calls/job", "usec/job", "usec/call"], cmd_rows))

    print("\nFixed costs (same server, same client):")
    fixed = [
        ["PING round trip (loopback TCP, redis-py)", cal.rtt],
        ["EVAL 'return 1', server time", cal.eval_floor],
        ["one redis.call, beyond the command's own time", cal.bridge],
        ["cjson.decode + cjson.encode of one stored job", cal.cjson],
        [f"claim-1.lua claim({batch}) on an empty queue, server time", cal.empty_claim],
        ["settle-1.lua with no items, server time", cal.empty_settle],
        ["Python: Job.from_json of one claimed job", cal.py_job],
        ["Python: q.done(job) + Settlement.as_arg + json.dumps, per job", cal.py_settle],
    ]
    print(format_table(["what", "usec"], fixed))
    print(f"Mean distinct domains per claim({batch}): {split.distinct_domains:.1f}")

    total = timed.us_per_job
    rtt = 2 * cal.rtt / batch
    top: list[tuple[str, float]] = [
        ("Redis: claim-1.lua + settle-1.lua, server time", timed.redis_us_per_job),
        (f"loopback round trips (2 per {batch} jobs, PING time)", rtt),
        ("Python (decode, build, redis-py), by difference", total - timed.redis_us_per_job - rtt),
        ("total, wall clock", total),
    ]
    shaped: list[list[object]] = [[name, us, f"{us / total:.0%}"] for name, us in top]
    print(f"\nWhere one job's {total:.1f} us goes at batch {batch} (best timed run):")
    print(format_table(["part", "us/job", "share"], shaped))
    print(
        f"Redis alone caps this loop at {1e6 / timed.redis_us_per_job:,.0f} jobs/s "
        "(Python cost zero)."
    )
    inner: list[list[object]] = []
    split_total = 0.0
    for label, evalsha, calls, cmd_us, _rows in scripts_:
        bridge = calls * cal.bridge
        split_total += evalsha
        inner.append([f"{label}: the commands ({calls:.1f} redis.call)", cmd_us])
        inner.append([f"{label}: redis.call bridge ({calls:.1f} x {cal.bridge:.2f})", bridge])
        inner.append(
            [f"{label}: rest of the Lua (cjson, code, replies)", evalsha - cmd_us - bridge]
        )
    inner.append(["both scripts", split_total])
    print("\nInside Redis, per job (diagnosis drain, INFO commandstats around every call):")
    print(format_table(["part", "us/job"], inner))

    prof_rows, prof_wall = python_profile(q, n, batch)
    print(f"\nPython functions by own time (cProfile, inflated: {prof_wall:.1f} us/job profiled)")
    print("'recv' is the wait for Redis's answer:")
    print(format_table(["function", "calls/job", "own us/job"], prof_rows))


# --- main ------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="short run (smaller N, one run)")
    parser.add_argument(
        "--repeats", type=int, default=None, help="runs at batch 64 (default 5; others: 3)"
    )
    parser.add_argument(
        "--profile",
        choices=("auto", "always", "never"),
        default="auto",
        help="print the diagnosis: when the bar is missed (auto), always, or never",
    )
    parser.add_argument("--strict", action="store_true", help="exit 1 when the bar is missed")
    parser.add_argument(
        "--adaptive",
        action="store_true",
        help="also measure the settle-side cost of domain_concurrency = auto (batch 64)",
    )
    parser.add_argument(
        "--keep-done",
        type=float,
        default=0.0,
        help="keep done jobs S seconds (keep_done; default 0: deleted, as the bar is measured)",
    )
    add_server_args(parser)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    global KEEP_DONE
    KEEP_DONE = args.keep_done
    sizes = QUICK_JOBS if args.quick else FULL_JOBS
    repeats = args.repeats or (1 if args.quick else 5)
    with private_redis(args.redis_server) as server:
        print(f"redis-server {server.version}: {server.binary}; {load_note()}")
        print(f"{DOMAINS} domains, domain_concurrency=10000, 60-character URLs, no payload"
              + (f", keep_done={KEEP_DONE:g}" if KEEP_DONE else ""))  # fmt: skip
        q = make_queue(server.url)
        print("\nEnqueue (not part of the claim timing):")
        headers = ["step", "jobs", "seconds", "jobs/s"]
        print(format_table(headers, measure_enqueue(q, sizes[BAR_BATCH])))
        results = throughput(q, sizes, repeats)
        print("\nClaim + settle_many(done), one process, median run:")
        headers = [
            "batch",
            "jobs",
            "runs",
            "jobs/s",
            "best jobs/s",
            "us/job",
            "scripts us/job",
            "in scripts",
            "redis-server CPU us/job",
        ]
        print(format_table(headers, throughput_rows(results)))
        specs = build_specs(q, sizes[BAR_BATCH])
        multi = [
            multi_process_rate(q, server.url, specs, BAR_BATCH, 2) for _ in range(min(repeats, 3))
        ]
        m = median_run(multi)
        print(
            f"Informational, not the bar: 2 processes at batch {BAR_BATCH}: "
            f"{m.rate:,.0f} jobs/s (scripts {m.redis_us_per_job:.1f} us/job, redis-server CPU "
            f"{m.redis_cpu_per_job:.1f} us/job = {m.redis_cpu_us / m.seconds / 1e6:.0%} of a core)"
        )
        if args.adaptive:
            print(f"\nAdaptive limits' settle cost, batch {BAR_BATCH}, runs interleaved:")
            headers = ["domain_concurrency, settlements", "jobs", "runs", "jobs/s",
                       "vs first", "scripts us/job", "redis-server CPU us/job"]  # fmt: skip
            print(format_table(headers, adaptive_cost(server.url, sizes[BAR_BATCH], repeats)))
        rate = median_run(results[BAR_BATCH]).rate
        passed = rate >= BAR_JOBS_PER_S
        if args.profile == "always" or (args.profile == "auto" and not passed):
            best = max(results[BAR_BATCH], key=lambda r: r.rate)
            diagnose(server.url, sizes[BAR_BATCH] // 2, BAR_BATCH, best)
    verdict = "PASS" if passed else "FAIL"
    best_rate = max(r.rate for r in results[BAR_BATCH])
    print(
        f"\n{verdict}: {rate:,.0f} jobs/s at batch {BAR_BATCH}, median of {repeats} "
        f"(best {best_rate:,.0f}); bar >= {BAR_JOBS_PER_S:,.0f} jobs/s; {load_note()}"
    )
    return 1 if args.strict and not passed else 0


if __name__ == "__main__":
    sys.exit(main())
