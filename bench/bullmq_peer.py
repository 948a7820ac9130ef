"""scrapeq against BullMQ (npm), what Redis spends per claimed and settled job (issue 40).

No fetching: the same ``--jobs`` jobs (20,000; a 60-character URL each, over 100 domains, as
``bench/claim_throughput.py`` makes them) are added, then processed, on one private
redis-server per system run (``bench/_redis.py``; the same binary for both):

* **BullMQ**: ``bench/bullmq/run.js`` adds the jobs (``Queue.addBulk``, batches of 500,
  ``removeOnComplete``), then a ``Worker`` with concurrency 64 whose processor returns at once
  runs until every job completed;
* **scrapeq**: ``claim(64)`` then ``settle_many(done)`` until the queue is empty
  (``claim_throughput.py``'s loop and queue: ``domain_concurrency=10000``, done jobs deleted).

Only the processing phase counts (the adding is left out). Per system:

* **jobs/s**: jobs over the processing phase's wall time (BullMQ: timed by run.js, from the
  worker's creation to its last completed job);
* **redis CPU us/job**: redis-server's ``used_cpu_user + used_cpu_sys`` (``INFO cpu``) over
  the phase, per job;
* **cmds/job**: commands Redis ran (``INFO commandstats``: scripts and the commands they run
  inside included, ``INFO`` left out), per job; **scripts/job**: EVAL/EVALSHA/FCALL calls;
* **kinstr/job**: thousands of instructions redis-server executed over the phase under
  ``valgrind --tool=callgrind`` (``--callgrind-jobs`` jobs, counting on only for the phase, as
  ``bench/redis_instructions.py``): the stable figure on a shared machine.

The systems alternate over ``--rounds`` rounds (the first system swaps each round); the
table shows medians and the ratios scrapeq/BullMQ, against issue 40's targets: Redis CPU per
job at most 0.7x BullMQ's and jobs/s at least 1.5x BullMQ's.

Needs ``node`` and ``npm``: when ``bench/bullmq/node_modules`` is missing, ``npm ci`` runs
there first. Run: ``PYTHONPATH=src .venv/bin/python bench/bullmq_peer.py [--jobs N]
[--rounds R] [--callgrind-jobs N] [--no-callgrind] [--redis-server PATH]``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import redis

from _redis import (
    SCRIPT_COMMANDS,
    add_server_args,
    commandstats,
    format_table,
    load_note,
    private_redis,
    server_cpu,
    server_version,
)
from claim_throughput import BAR_BATCH, build_specs, drain, enqueue, make_queue
from redis_instructions import _collect, _dumped, _free_port
from scrapeq.engine.server.launcher import find_redis_server

NODE_DIR = Path(__file__).resolve().parent / "bullmq"
SYSTEMS = ("BullMQ", "scrapeq")
CPU_TARGET = 0.7
RATE_TARGET = 1.5

#: a phase's hooks: called just before and just after the processing phase
Hook = Callable[[], None]


@dataclass(frozen=True, slots=True)
class Figures:
    """One system's processing phase on one server."""

    jobs: int
    seconds: float
    cpu_us: float
    commands: int
    scripts: int

    @property
    def rate(self) -> float:
        return self.jobs / self.seconds


def need_node() -> str:
    """BullMQ's versions; runs ``npm ci`` in bench/bullmq when node_modules is missing."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        raise SystemExit("bullmq_peer: node and npm are needed (BullMQ runs in node)")
    if not (NODE_DIR / "node_modules" / "bullmq").is_dir():
        print("bullmq_peer: bench/bullmq/node_modules is missing: running npm ci there")
        npm_ci = ["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"]
        subprocess.run(npm_ci, cwd=NODE_DIR, check=True, stdout=subprocess.DEVNULL)
    node = subprocess.run(["node", "--version"], capture_output=True, text=True, check=True)
    pkg = json.loads((NODE_DIR / "node_modules" / "bullmq" / "package.json").read_text())
    return f"BullMQ {pkg['version']} on node {node.stdout.strip()}"


def bullmq_phase(port: int, n: int, before: Hook, after: Hook) -> float:
    """Add ``n`` jobs with run.js, then time its worker over them; the phase's seconds."""
    proc = subprocess.Popen(
        ["node", "run.js", str(port), str(n)], cwd=NODE_DIR, text=True,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdin is not None and proc.stdout is not None
    try:
        if proc.stdout.readline().strip() != "added":
            raise RuntimeError("bullmq: run.js did not add its jobs")
        before()
        proc.stdin.write("go\n")
        proc.stdin.flush()
        line = proc.stdout.readline().split()
        if len(line) != 2 or line[0] != "done":
            raise RuntimeError("bullmq: run.js did not finish its jobs")
        after()
        proc.stdin.write("close\n")
        proc.stdin.flush()
        if proc.wait(120) != 0:
            raise RuntimeError(f"bullmq: run.js exited with status {proc.returncode}")
        return float(line[1])
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def scrapeq_phase(url: str, n: int, before: Hook, after: Hook) -> float:
    """Enqueue ``n`` jobs, then time claim(64) + settle_many(done) until the queue is empty."""
    q = make_queue(url)
    try:
        enqueue(q, build_specs(q, n))
        before()
        start = time.perf_counter()
        done = drain(q, BAR_BATCH)
        seconds = time.perf_counter() - start
        after()
    finally:
        q.close()
    if done != n:
        raise RuntimeError(f"scrapeq: drained {done} jobs, enqueued {n}")
    return seconds


def run_phase(system: str, url: str, port: int, n: int, before: Hook, after: Hook) -> float:
    if system == "BullMQ":
        return bullmq_phase(port, n, before, after)
    return scrapeq_phase(url, n, before, after)


def measure(system: str, binary: Path | None, n: int) -> Figures:
    """One native run of ``system`` on a fresh private server: the phase's Redis counters."""
    with private_redis(binary) as server:
        client = redis.Redis.from_url(server.url)
        marks: list[tuple[float, dict[str, tuple[int, float]]]] = []

        def mark() -> None:
            marks.append((server_cpu(client), commandstats(client)))

        seconds = run_phase(system, server.url, server.port, n, mark, mark)
        client.close()
    (cpu0, stats0), (cpu1, stats1) = marks
    calls = {
        name: c - stats0.get(name, (0, 0.0))[0] for name, (c, _) in stats1.items() if name != "info"
    }
    scripts = sum(calls.get(name, 0) for name in SCRIPT_COMMANDS)
    return Figures(n, seconds, (cpu1 - cpu0) * 1e6, sum(calls.values()), scripts)


@contextlib.contextmanager
def callgrind_redis(binary: Path) -> Iterator[tuple[str, int, int, Path]]:
    """A redis-server under callgrind, counting off: (url, port, pid, callgrind out file)."""
    port = _free_port()
    with tempfile.TemporaryDirectory(prefix="sq-bullmq-cg-") as tmp:
        out = Path(tmp) / "callgrind.out"
        server = subprocess.Popen(
            ["valgrind", "--tool=callgrind", "--instr-atstart=no",
             f"--callgrind-out-file={out}", str(binary), "--port", str(port),
             "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", tmp],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            client = redis.Redis(port=port)
            for _ in range(600):
                with contextlib.suppress(redis.ConnectionError):
                    client.ping()
                    break
                time.sleep(0.1)
            else:
                raise RuntimeError("redis-server under callgrind did not answer")
            client.close()
            yield f"redis://127.0.0.1:{port}/0", port, server.pid, out
        finally:
            server.terminate()
            server.wait(120)


def instructions(system: str, binary: Path, n: int) -> float:
    """Instructions redis-server ran per job over ``system``'s processing phase."""
    with callgrind_redis(binary) as (url, port, pid, out):
        counted: list[int] = []

        def on() -> None:
            _collect(pid, True)

        def off() -> None:
            _collect(pid, False)
            counted.append(_dumped(pid, out))

        run_phase(system, url, port, n, on, off)
    return counted[0] / n


def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x"


def report(runs: dict[str, list[Figures]], instr: dict[str, float]) -> None:
    rows: list[list[object]] = []
    med: dict[str, list[float]] = {}
    for system in SYSTEMS:
        got = runs[system]
        med[system] = [
            statistics.median(f.rate for f in got),
            statistics.median(f.cpu_us / f.jobs for f in got),
            statistics.median(f.commands / f.jobs for f in got),
            statistics.median(f.scripts / f.jobs for f in got),
        ]
        k = instr.get(system)
        rows.append([system, *med[system], "-" if k is None else k / 1000])
    b, s = med["BullMQ"], med["scrapeq"]
    kb, ks = instr.get("BullMQ"), instr.get("scrapeq")
    rows.append(["scrapeq/BullMQ", *[ratio(x, y) for x, y in zip(s, b, strict=True)],
                 "-" if kb is None or ks is None else ratio(ks, kb)])  # fmt: skip
    headers = ["system", "jobs/s", "redis CPU us/job", "cmds/job", "scripts/job", "kinstr/job"]
    print(format_table(headers, rows))
    per_round = [
        f"{sf.rate / bf.rate:.2f}x / {sf.cpu_us / bf.cpu_us:.2f}x"
        for bf, sf in zip(runs["BullMQ"], runs["scrapeq"], strict=True)
    ]
    print("Per round, scrapeq/BullMQ jobs/s / redis CPU: " + ", ".join(per_round))
    cpu_ok = s[1] / b[1] <= CPU_TARGET
    rate_ok = s[0] / b[0] >= RATE_TARGET
    instr_note = "" if ks is None or kb is None else f"; instructions {ks / kb:.2f}x"
    print(f"Target redis CPU/job <= {CPU_TARGET}x BullMQ's: {'met' if cpu_ok else 'NOT met'} "
          f"({s[1] / b[1]:.2f}x median{instr_note})")  # fmt: skip
    print(
        f"Target jobs/s >= {RATE_TARGET}x BullMQ's: {'met' if rate_ok else 'NOT met'} "
        f"({s[0] / b[0]:.2f}x median)"
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--jobs", type=int, default=20_000, help="jobs per run (20000)")
    parser.add_argument("--rounds", type=int, default=3, help="alternated rounds (3)")
    parser.add_argument("--callgrind-jobs", type=int, default=2_000, help="jobs under callgrind")
    parser.add_argument("--no-callgrind", action="store_true", help="leave instructions out")
    add_server_args(parser)
    args = parser.parse_args(argv)
    if args.jobs < 100 or args.rounds < 1 or args.callgrind_jobs < 100:
        parser.error("--jobs and --callgrind-jobs >= 100, --rounds >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    versions = need_node()
    binary = args.redis_server or find_redis_server()
    callgrind = not args.no_callgrind
    if callgrind and not (shutil.which("valgrind") and shutil.which("callgrind_control")):
        print("bullmq_peer: valgrind not found: instructions left out", file=sys.stderr)
        callgrind = False
    print(f"{versions}; redis-server {server_version(binary)}: {binary}; {load_note()}")
    print(f"{args.jobs:,} jobs a run, 100 domains, claim/concurrency 64, {args.rounds} rounds")
    runs: dict[str, list[Figures]] = {s: [] for s in SYSTEMS}
    for r in range(args.rounds):
        for system in SYSTEMS if r % 2 == 0 else SYSTEMS[::-1]:
            f = measure(system, args.redis_server, args.jobs)
            runs[system].append(f)
            print(f"  round {r + 1}, {system}: {f.rate:,.0f} jobs/s, "
                  f"redis CPU {f.cpu_us / f.jobs:.1f} us/job")  # fmt: skip
    instr: dict[str, float] = {}
    if callgrind:
        for system in SYSTEMS:
            instr[system] = instructions(system, binary, args.callgrind_jobs)
            print(f"  callgrind, {system}: {instr[system] / 1000:,.1f}k instructions/job "
                  f"({args.callgrind_jobs:,} jobs)")  # fmt: skip
    print(f"\nMedians of {args.rounds} rounds ({load_note()}):")
    report(runs, instr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
