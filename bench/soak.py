"""Soak: the whole system for minutes under worker crashes and a Redis restart, then the ledger.

What runs, all on 127.0.0.1:

* a private redis-server with an append-only file in a temporary folder
  (``bench/_redis.AofRedis``, ``appendfsync everysec``), stopped and removed at exit;
* the fleet of :mod:`scrapeq.demo.fleet` in its own process: 30 healthy shops (medians 30-150 ms),
  and the faulty cast: one hanging site, one answering 503, one delisted (404), one throttling
  (429 with ``Retry-After: 2`` past 10 requests a second), one dripping its body a byte every
  0.25 s, two flaky shops (500 to 20% of requests);
* ``--workers`` ``scrapeq worker`` processes (default 2, ``--concurrency 100`` each), all
  appending to one results JSONL;
* this process: it enqueues the jobs at a steady rate over the first 80% of the run (each
  faulty site gets a fifth of a healthy shop's share) and injects the faults.

Faults: a SIGKILL of a random worker process every ~30 s at random moments (at least 3 in a
run), each restarted at once; one Redis restart between 35% and 55% of the run (SIGTERM, 2 s
down, started again on the same port and AOF). After the run the faults stop, the workers
drain the queue (bounded by ``--drain``), get SIGTERM, and the ledger is read.

Figures:

* jobs/s: jobs ended (done or dead) over the time from the first enqueue to the last job's
  end. The jobs arrive at a steady rate, so this is the arrival rate when the queue keeps up;
  it is not a capacity figure (``bench/worker_throughput.py`` is);
* fetches per job: requests the fleet's servers counted, over jobs enqueued; for the healthy
  shops alone it shows the re-fetches the kills cost;
* freshness of healthy domains: enqueue (this process's clock, just before the enqueue call)
  to done (``finished_at`` of the job's last ``done`` line in the results), p50, p99, max.

Ledger and bar (PASS when all hold): enqueued (as this process counted it, and as the queue
did) equals done + dead; zero lost (every enqueued id has a ``done`` line or is a dead letter,
and the queue's ``lost`` counter is 0); zero stranded (nothing ready, delayed or in flight,
and no domain holds an in-flight slot); the audit (``Queue.audit()``) finds no problem; the
drain ended within ``--drain`` seconds.

``--quick`` runs 30 s with 5,000 jobs: the jobs scale with the duration (50,000 per 300 s,
the same arrival rate). Exit 1 on FAIL.

Run: ``.venv/bin/python bench/soak.py [--quick] [--duration S] [--jobs N] [--workers N]
[--concurrency N] [--drain S] [--seed N] [--redis-server PATH]``
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import IO, Any, TypeVar

import orjson

from _redis import AofRedis, add_server_args, format_table, load_note, pct, server_version
from scrapeq import Queue, Settings
from scrapeq.demo.fleet import Fleet, Mode, SiteSpec
from scrapeq.engine.model.keys import Keys
from scrapeq.errors import RedisUnavailable

T = TypeVar("T")

QUEUE = "soak"
#: Jobs per second of run time (50,000 in 5 minutes).
JOBS_PER_S = 50_000 / 300
#: Share of the run over which jobs arrive; the rest lets the tail finish under faults.
PRODUCE_SHARE = 0.8
#: A worker kill every this many seconds on average (at least MIN_KILLS a run).
KILL_EVERY, MIN_KILLS = 30.0, 3
#: Seconds Redis stays down in its restart.
OUTAGE = 2.0
TICK = 0.1

#: The settings of the workers (as SCRAPEQ_* variables) and of this process's queue: short
#: timeouts and cooldowns so faulty domains settle within a run, leases that a killed
#: worker's jobs come back from in seconds.
SOAK_SETTINGS: dict[str, Any] = {
    "request_timeout": 3.0,
    "lease": 5.0,
    "domain_concurrency": 4,
    "backoff_base": 0.5,
    "backoff_cap": 5.0,
    "breaker_cooldown": 2.0,
    "breaker_cooldown_max": 8.0,
    "breaker_max_trips": 4,
    "shutdown_grace": 2.0,
}


# --- the plan -----------------------------------------------------------------------------


def soak_sites(seed: int) -> list[SiteSpec]:
    """30 healthy shops and the faulty cast (see the module docstring)."""
    rng = random.Random(seed)
    shops = [
        SiteSpec(f"shop-{i:02d}.example.com", latency_ms=math.exp(rng.uniform(3.4, 5.0)))
        for i in range(1, 31)
    ]
    faulty = [
        SiteSpec("hang.example.com", Mode.HANG, weight=0.2),
        SiteSpec("error.example.com", Mode.ERROR, latency_ms=20, weight=0.2),
        SiteSpec("gone.example.com", Mode.GONE, latency_ms=30, weight=0.2),
        SiteSpec("throttle.example.com", Mode.THROTTLE, rate=10, weight=0.2),
        SiteSpec("drip.example.com", Mode.DRIP, weight=0.2),
        SiteSpec("flaky-1.example.com", Mode.FLAKY, fail_share=0.2),
        SiteSpec("flaky-2.example.com", Mode.FLAKY, fail_share=0.2),
    ]
    return shops + faulty


@dataclass
class Plan:
    """What the run will do: its jobs in arrival order and when each fault comes."""

    duration: float
    jobs: list[tuple[str, SiteSpec]]
    kills: list[tuple[float, int]]  # (seconds into the run, worker slot)
    restart_at: float

    @classmethod
    def build(cls, fleet: Fleet, duration: float, n_jobs: int, workers: int, seed: int) -> Plan:
        rng = random.Random(seed)
        total = sum(s.weight for s in fleet.sites)
        jobs: list[tuple[str, SiteSpec]] = []
        for spec in fleet.sites:
            for _ in range(max(1, round(n_jobs * spec.weight / total))):
                port = fleet.ports[spec.name]
                jobs.append((f"http://127.0.0.1:{port}/p/{len(jobs) + 1}", spec))
        rng.shuffle(jobs)
        n_kills = max(MIN_KILLS, round(duration / KILL_EVERY))
        times = sorted(rng.uniform(0.1, 0.9) * duration for _ in range(n_kills))
        kills = [(t, rng.randrange(workers)) for t in times]
        return cls(duration, jobs, kills, rng.uniform(0.35, 0.55) * duration)


# --- the worker processes ------------------------------------------------------------------


def _scrapeq() -> list[str]:
    exe = Path(sys.executable).parent / "scrapeq"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "scrapeq"]


class Workers:
    """``scrapeq worker`` processes, one a slot, each restartable; logs in ``folder``."""

    def __init__(self, url: str, folder: Path, n: int, concurrency: int) -> None:
        self.url, self.folder, self.concurrency = url, folder, concurrency
        self.results = folder / "results.jsonl"
        self.slots: list[subprocess.Popen[bytes] | None] = [None] * n
        self._logs: list[IO[bytes]] = []
        self.started = 0
        self.env = {k: os.environ[k] for k in ("PATH", "HOME") if k in os.environ}
        self.env.update({f"SCRAPEQ_{k.upper()}": str(v) for k, v in SOAK_SETTINGS.items()})

    def start(self, slot: int) -> None:
        log = open(self.folder / f"worker-{slot}-{self.started}.log", "wb")  # noqa: SIM115
        self._logs.append(log)
        self.started += 1
        args = ["--redis", self.url, "--queue", QUEUE, "worker", "--allow-private",
                "--concurrency", str(self.concurrency), "--results", str(self.results)]  # fmt: skip
        self.slots[slot] = subprocess.Popen(
            [*_scrapeq(), *args],
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def kill(self, slot: int) -> int:
        """SIGKILL the slot's process and start another; answers the killed pid."""
        proc = self.slots[slot]
        assert proc is not None
        proc.kill()
        proc.wait(10)
        self.start(slot)
        return proc.pid

    def stop(self, timeout: float = 15.0) -> list[int | None]:
        """SIGTERM every process, SIGKILL what outlives ``timeout``; answers exit codes."""
        codes: list[int | None] = []
        live = [p for p in self.slots if p is not None]
        for proc in live:
            if proc.poll() is None:
                proc.terminate()
        for proc in live:
            try:
                codes.append(proc.wait(timeout))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                codes.append(None)
        for log in self._logs:
            log.close()
        self.slots = [None] * len(self.slots)
        return codes


# --- the run -------------------------------------------------------------------------------


@dataclass
class Run:
    """What happened: enqueue times, faults, the drain."""

    enqueued_at: dict[str, tuple[float, SiteSpec]] = field(default_factory=dict)
    faults: list[tuple[float, str]] = field(default_factory=list)
    first_enqueue: float = 0.0
    drained_in: float | None = None
    worker_exits: list[int | None] = field(default_factory=list)


def _retrying(call: Callable[[], T], attempts: int = 100) -> T:
    """Run ``call``, again while Redis is unreachable (the restart; about 10 s at most)."""
    for _ in range(attempts - 1):
        try:
            return call()
        except RedisUnavailable:
            time.sleep(0.1)
    return call()


def _produce(q: Queue, plan: Plan, run: Run, elapsed: float) -> None:
    """Enqueue the jobs due by ``elapsed`` seconds (a steady rate over PRODUCE_SHARE)."""
    span = plan.duration * PRODUCE_SHARE
    due = min(len(plan.jobs), math.ceil(len(plan.jobs) * min(elapsed / span, 1.0)))
    batch = plan.jobs[len(run.enqueued_at) : due]
    if not batch:
        return
    now = time.time()
    run.first_enqueue = run.first_enqueue or now
    # Retrying cannot enqueue twice: Redis only restarts between two calls of this loop, so a
    # call that fails was sent on a connection the old server had closed, and never ran.
    answers = _retrying(lambda: q.enqueue_many([url for url, _ in batch]))
    for answer, (_, spec) in zip(answers, batch, strict=True):
        run.enqueued_at[answer.id] = (now, spec)


def _done(q: Queue) -> int:
    return int(_retrying(lambda: q.status())["counts"]["done"])


def _inflight(q: Queue) -> int:
    return int(_retrying(lambda: q.client.zcard(Keys(QUEUE).inflight)))


def _restart_redis(server: AofRedis, q: Queue, run: Run, at: float) -> None:
    """SIGTERM Redis, keep it down OUTAGE seconds, start it; note when work resumed."""
    done_before = _done(q)
    server.stop(signal.SIGTERM)
    time.sleep(OUTAGE)
    started = time.monotonic()
    server.start()
    load = time.monotonic() - started
    deadline = time.monotonic() + 60
    while _done(q) <= done_before and time.monotonic() < deadline:
        time.sleep(0.05)
    resumed = time.monotonic() - started - load
    note = (
        f"Redis SIGTERM, down {OUTAGE:.0f} s + {load:.2f} s to start and load its AOF; "
        f"first job done {resumed:.2f} s after it answered"
    )
    run.faults.append((at, note))


def _chaos(q: Queue, server: AofRedis, workers: Workers, plan: Plan, run: Run) -> None:
    """Enqueue at a steady rate and inject the faults, for ``plan.duration`` seconds."""
    kills = list(plan.kills)
    restart_at: float | None = plan.restart_at
    t0 = time.monotonic()
    while (elapsed := time.monotonic() - t0) < plan.duration:
        _produce(q, plan, run, elapsed)
        if kills and elapsed >= kills[0][0]:
            _, slot = kills.pop(0)
            held = _inflight(q)
            pid = workers.kill(slot)
            note = f"SIGKILL worker {slot} (pid {pid}), {held} jobs in flight; restarted"
            run.faults.append((elapsed, note))
        if restart_at is not None and elapsed >= restart_at:
            restart_at = None
            _restart_redis(server, q, run, elapsed)
        time.sleep(TICK)
    _produce(q, plan, run, plan.duration)


def _ended(c: dict[str, int]) -> bool:
    left = c["ready"] + c["delayed"] + c["inflight"]
    return left == 0 and c["done"] + c["dead"] == c["enqueued"]


def _drain(q: Queue, run: Run, limit: float) -> None:
    started = time.monotonic()
    while time.monotonic() - started < limit:
        if _ended(_retrying(lambda: q.status())["counts"]):
            run.drained_in = time.monotonic() - started
            return
        time.sleep(0.5)


# --- the ledger and the figures ------------------------------------------------------------


@dataclass
class Ledger:
    """The end state, read after the workers stopped."""

    counts: dict[str, int]
    produced: int
    done_ids: dict[str, float]  # id -> finished_at of its last done line
    dead_ids: set[str]
    lost_counter: int
    reaped: int  # leases that expired unsettled: the jobs the kills caught
    stranded: list[str]
    audit: str
    audit_ok: bool
    torn_lines: int


def _results(path: Path) -> tuple[dict[str, float], int]:
    """Every job's last ``done`` time from the results; and the lines a kill tore."""
    done: dict[str, float] = {}
    torn = 0
    if not path.exists():
        return done, torn
    with path.open("rb") as f:
        for line in f:
            try:
                rec = orjson.loads(line)
            except orjson.JSONDecodeError:
                torn += 1
                continue
            if rec["outcome"] == "done":
                at = datetime.fromisoformat(rec["finished_at"]).timestamp()
                done[rec["id"]] = max(at, done.get(rec["id"], 0.0))
    return done, torn


def _audit(q: Queue) -> tuple[bool, str]:
    audit = getattr(q, "audit", None)
    if audit is None:
        return False, "unavailable: this build has no Queue.audit()"
    report = audit()
    if report.ok:
        return True, "clean"
    shown = "; ".join(f"{p.kind} {p.subject}: {p.detail}" for p in report.problems[:5])
    return False, f"{len(report.problems)} problems: {shown}"


def read_ledger(q: Queue, run: Run, workers: Workers) -> Ledger:
    counts = q.status()["counts"]
    done_ids, torn = _results(workers.results)
    dead_ids = set(q.client.zrange(Keys(QUEUE).dead, 0, -1))
    lost = int(q.client.hget(Keys(QUEUE).stats, "lost") or 0)
    reaped = int(q.client.hget(Keys(QUEUE).stats, "reaped") or 0)
    stranded = [
        f"{d['domain']} (inflight {d['inflight']}, ready {d['ready']}, delayed {d['delayed']})"
        for d in q.domains_info()
        if d["inflight"] or d["ready"] or d["delayed"]
    ]
    ok, text = _audit(q)
    return Ledger(
        counts, len(run.enqueued_at), done_ids, dead_ids, lost, reaped, stranded, text, ok, torn
    )


def missing(ledger: Ledger, run: Run) -> list[str]:
    """Enqueued ids that neither finished done nor are dead letters: lost jobs."""
    return [i for i in run.enqueued_at if i not in ledger.done_ids and i not in ledger.dead_ids]


def freshness(ledger: Ledger, run: Run) -> list[float]:
    """Seconds from enqueue to done of every healthy-domain job that is done."""
    out = []
    for job_id, (at, spec) in run.enqueued_at.items():
        if spec.healthy and job_id in ledger.done_ids:
            out.append(ledger.done_ids[job_id] - at)
    return out


@dataclass
class Kind:
    """One kind of site (a mode): how many, their jobs, how those ended, fetches counted."""

    mode: Mode
    sites: int = 0
    jobs: int = 0
    done: int = 0
    dead: int = 0
    fetches: int = 0

    def row(self) -> list[object]:
        name = "healthy shops" if self.mode is Mode.SHOP else str(self.mode)
        per_job = self.fetches / max(self.jobs, 1)
        return [name, self.sites, self.jobs, self.done, self.dead, self.fetches, per_job]


def kinds(run: Run, ledger: Ledger, fleet: Fleet) -> list[Kind]:
    """Per kind of site, healthy shops first; fetches as the fleet's servers counted them."""
    stats = fleet.stats()
    by: dict[Mode, Kind] = {}
    for spec in fleet.sites:
        kind = by.setdefault(spec.mode, Kind(spec.mode))
        kind.sites += 1
        kind.fetches += stats[spec.name].requests
    for job_id, (_, spec) in run.enqueued_at.items():
        kind = by[spec.mode]
        kind.jobs += 1
        if job_id in ledger.dead_ids:
            kind.dead += 1
        elif job_id in ledger.done_ids:
            kind.done += 1
    return sorted(by.values(), key=lambda k: (k.mode is not Mode.SHOP, str(k.mode)))


def verdict(ledger: Ledger, run: Run, lost_ids: list[str]) -> list[str]:
    """What failed the bar (empty: PASS)."""
    c = ledger.counts
    checks = {
        "enqueued (this process) == enqueued (queue)": ledger.produced == c["enqueued"],
        "enqueued == done + dead": c["enqueued"] == c["done"] + c["dead"],
        "zero lost (ids)": not lost_ids,
        "zero lost (queue's counter)": ledger.lost_counter == 0,
        "zero stranded": not ledger.stranded and not c["ready"] + c["delayed"] + c["inflight"],
        "audit clean": ledger.audit_ok,
        "drained in time": run.drained_in is not None,
    }
    return [name for name, ok in checks.items() if not ok]


def report(run: Run, ledger: Ledger, fleet: Fleet, elapsed: float) -> bool:
    """Print the faults, the figures and the ledger; answers whether the bar is met."""
    lost_ids = missing(ledger, run)
    per_kind = kinds(run, ledger, fleet)
    print("\nfaults injected")
    for at, what in run.faults:
        print(f"{at:6.1f} s  {what}")
    ended = [ledger.done_ids.get(i, 0.0) for i in run.enqueued_at]
    span = max(max(ended, default=0.0), run.first_enqueue + 1e-3) - run.first_enqueue
    fresh = freshness(ledger, run)
    fetches = sum(k.fetches for k in per_kind)
    healthy = per_kind[0]
    print("\nfigures")
    figures = [
        ["jobs/s (ended, first enqueue to last done)", ledger.produced / span if span else 0.0],
        ["fetches per job (all sites)", fetches / max(ledger.produced, 1)],
        ["fetches per job (healthy shops)", healthy.fetches / max(healthy.jobs, 1)],
        ["re-fetches of healthy jobs", healthy.fetches - healthy.jobs],
        ["leases reaped (jobs the kills caught)", ledger.reaped],
        ["freshness p50 healthy (s)", pct(fresh, 50) if fresh else float("nan")],
        ["freshness p99 healthy (s)", pct(fresh, 99) if fresh else float("nan")],
        ["freshness max healthy (s)", max(fresh, default=float("nan"))],
        ["drain after the run (s)", run.drained_in if run.drained_in is not None else "timed out"],
        ["wall time (s)", elapsed],
    ]
    print(format_table(["figure", "value"], figures))
    print()
    heads = ["sites", "count", "jobs", "done", "dead", "fetches", "fetches/job"]
    print(format_table(heads, [k.row() for k in per_kind]))
    c = ledger.counts
    print("\nledger")
    print(format_table(["", "value"], [
        ["enqueued (this process / the queue)", f"{ledger.produced:,} / {c['enqueued']:,}"],
        ["done + dead", f"{c['done']:,} + {c['dead']:,} = {c['done'] + c['dead']:,}"],
        ["lost (ids without a done line or a dead letter)", len(lost_ids)],
        ["lost (the queue's counter)", ledger.lost_counter],
        ["left ready / delayed / in flight", f"{c['ready']} / {c['delayed']} / {c['inflight']}"],
        ["stranded domains", len(ledger.stranded)],
        ["audit", ledger.audit],
        ["results lines torn by a kill", ledger.torn_lines],
        ["worker exit codes (SIGTERM at the end)", str(run.worker_exits)],
    ]))  # fmt: skip
    for what in ledger.stranded[:10]:
        print(f"  stranded: {what}")
    if lost_ids:
        print(f"  lost ids (first 10): {', '.join(lost_ids[:10])}")
    failed = verdict(ledger, run, lost_ids)
    line = (
        f"{c['enqueued']:,} enqueued = {c['done']:,} done + {c['dead']:,} dead, "
        f"{len(lost_ids)} lost, {len(ledger.stranded)} stranded, audit {ledger.audit}"
    )
    if failed:
        line += f" (failed: {', '.join(failed)})"
    print(f"\n{'FAIL' if failed else 'PASS'}: {line}")
    return not failed


# --- entry point ---------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    p.add_argument("--quick", action="store_true", help="30 s and 5,000 jobs")
    p.add_argument("--duration", type=float, default=None, help="seconds of faults (300)")
    p.add_argument("--jobs", type=int, default=None, help="jobs (50,000 per 300 s of duration)")
    p.add_argument("--workers", type=int, default=2, help="worker processes (2)")
    p.add_argument("--concurrency", type=int, default=100, help="fetches per process (100)")
    p.add_argument("--drain", type=float, default=120.0, help="seconds the drain may take (120)")
    p.add_argument("--seed", type=int, default=1, help="seeds jobs, kills, latencies (1)")
    add_server_args(p)
    args = p.parse_args(argv)
    if args.duration is None:
        args.duration = 30.0 if args.quick else 300.0
    if args.jobs is None:
        args.jobs = round(JOBS_PER_S * args.duration)
    return args


@contextlib.contextmanager
def _folder() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="scrapeq-soak-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _tail(folder: Path, lines: int = 5) -> None:
    """The last lines of every worker log (after a FAIL, before the folder goes)."""
    for log in sorted(folder.glob("worker-*.log")):
        text = log.read_text(errors="replace").strip().splitlines()[-lines:]
        print(f"--- {log.name}\n" + "\n".join(text))


def _soak(args: argparse.Namespace, server: AofRedis, fleet: Fleet, folder: Path) -> bool:
    """One soak run on a started server and fleet; prints the report, answers PASS."""
    plan = Plan.build(fleet, args.duration, args.jobs, args.workers, args.seed)
    print(
        f"soak: {args.duration:g} s of faults, {len(plan.jobs):,} jobs arriving over "
        f"{args.duration * PRODUCE_SHARE:g} s, {args.workers} worker processes x "
        f"{args.concurrency}, {len(plan.kills)} kills, 1 Redis restart, seed {args.seed}"
    )
    print(f"redis-server {server_version(server.binary)}; {load_note()}")
    settings = Settings(queue=QUEUE, allow_private=True, **SOAK_SETTINGS)
    q = Queue.from_url(server.url, settings=settings)
    workers = Workers(server.url, folder, args.workers, args.concurrency)
    run = Run()
    started = time.monotonic()
    try:
        for slot in range(args.workers):
            workers.start(slot)
        _chaos(q, server, workers, plan, run)
        _drain(q, run, args.drain)
    finally:
        run.worker_exits = workers.stop()
    try:
        ledger = read_ledger(q, run, workers)
        return report(run, ledger, fleet, time.monotonic() - started)
    finally:
        q.close()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    fleet = Fleet(soak_sites(args.seed), seed=args.seed)
    with AofRedis(args.redis_server) as server, _folder() as folder, fleet:
        ok = _soak(args, server, fleet, folder)
        if not ok:
            _tail(folder)
    print(f"machine: {os.cpu_count()} CPUs, {load_note()}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
