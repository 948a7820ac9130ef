"""The worker's instructions per plain job under callgrind, beside the bare aiohttp loop's per
request (issue 40): a figure the machine's load does not move, where ``bench/cost.py``'s CPU
times do.

Each measured run is a child process under ``valgrind --tool=callgrind`` (the worker alone:
the 100 loopback sites and redis-server run outside it, at full speed) doing one of:

* **plain**: ``bench/cost.py``'s plain row (the real ``Worker``, concurrency 200, a JSONL sink)
  over ``N`` jobs enqueued beforehand (not counted); **nosink**: the same without a sink;
* **bare**: the bare aiohttp loop (``bench/worker_throughput.py``) over the same URLs.

A run counts the whole process (start-up, imports), so each row runs at ``--small`` and at
``--jobs`` and the figure is the difference over the difference in jobs: instructions per
job of the steady work, the start-up cancelled out. Under callgrind the worker runs ~50x
slower while the sites and Redis do not, so the loop batches more per turn than at full speed:
the figure compares commits (``bench/ab_commits.py``) and rows, it is not the CPU of a real
run. Leases are long (``cost.py``'s ``slow``), so none expires meanwhile.

Run: ``.venv/bin/python bench/worker_instructions.py [--jobs 3300] [--small 300] [--rows
bare,plain] [--rounds 1]`` (about a minute a run of 3,300 jobs).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _redis import format_table, load_note
from cost import DOMAINS, _fill, _page, _work, redis_server, workload
from scrapeq.engine.server.launcher import find_redis_server
from worker_throughput import _bare, fleet

COLLECTED = re.compile(r"Collected : (\d+)")


def _child(row: str, url: str, ports: list[int], jobs: int, folder: Path) -> None:
    """The measured run (in the child, under callgrind)."""
    if row == "bare":
        urls = workload("plain", ports, jobs, None, slow=True).urls
        asyncio.run(_bare(urls, 200))
    else:
        asyncio.run(_work(url, workload(row, ports, jobs, None, slow=True), folder))


def _measure(row: str, url: str, ports: list[int], jobs: int, folder: Path) -> int:
    """Instructions of one run of ``row`` over ``jobs`` jobs, the queue filled first."""
    if row != "bare":
        asyncio.run(_fill(url, workload(row, ports, jobs, None, slow=True)))
    (folder / "results.jsonl").unlink(missing_ok=True)
    args = [row, url, json.dumps(ports), str(jobs), str(folder)]
    out = subprocess.run(
        ["valgrind", "--tool=callgrind", f"--callgrind-out-file={folder}/callgrind.out",
         sys.executable, __file__, "--child", *args],
        capture_output=True, text=True, env=dict(os.environ), check=False,
    )  # fmt: skip
    found = COLLECTED.search(out.stderr)
    if out.returncode != 0 or found is None:
        raise SystemExit(f"{row} ({jobs} jobs) failed under callgrind:\n{out.stderr[-3000:]}")
    return int(found.group(1))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument("--jobs", type=int, default=3300)
    parser.add_argument("--small", type=int, default=300)
    parser.add_argument("--rows", default="bare,plain", help="of bare,plain,nosink")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        row, url, ports, jobs, folder = args.child
        _child(row, url, json.loads(ports), int(jobs), Path(folder))
        return 0
    rows = [r for r in args.rows.split(",") if r]
    per_job: dict[str, list[float]] = {row: [] for row in rows}
    with contextlib.ExitStack() as stack:
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="scrapeq-instr-")))
        ports = list(stack.enter_context(fleet(DOMAINS, _page)).ports)
        server = stack.enter_context(redis_server(find_redis_server(), folder))
        print(f"{args.small:,} and {args.jobs:,} jobs a row over {DOMAINS} sites; {load_note()}")
        for _ in range(args.rounds):
            for row in rows:
                small = _measure(row, server.url, ports, args.small, folder)
                large = _measure(row, server.url, ports, args.jobs, folder)
                per_job[row].append((large - small) / (args.jobs - args.small))
                print(f"{row}: {small:,} / {large:,} instructions", flush=True)
    table = [[row, f"{statistics.median(per_job[row]):,.0f}"] for row in rows]
    print(format_table(["row", "worker instructions/job"], table))
    for row in rows:
        if row != "bare" and "bare" in per_job:
            ratio = statistics.median(per_job[row]) / statistics.median(per_job["bare"])
            print(f"{row} / bare, instructions per job: {ratio:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
