"""CLI start-up: the wall time of one short ``scrapeq`` command (issue 38, item 18: a command
should answer within 0.3 s).

Each command is a fresh ``python -m scrapeq ...`` process, timed from spawn to exit:
``--version``, ``--help``, ``status --json`` and ``enqueue URL`` (the last two against a
private redis-server this bench starts, so no embedded server is started or stopped on the
way). The floors are ``python -c pass`` and ``python -c "import typer"``: what no change in
scrapeq can cut. Runs alternate (one of each command, then again), so a burst of load on
the machine falls on every row alike; each row shows the median and the minimum of its runs.

``--src DIR`` (repeatable, e.g. ``--src /work/other/src --src src``) runs every command with
``PYTHONPATH=DIR`` for each tree named, alternating trees too, to compare two versions of the
code in the same run. It prints figures; it asserts nothing about them.

Run: ``PYTHONPATH=src .venv/bin/python bench/cli_start.py [-n 10] [--src DIR ...]
[--redis-server PATH]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from _redis import add_server_args, format_table, load_note, private_redis

_COMMANDS: list[tuple[str, list[str], bool]] = [
    # (row, argv after "python", uses the server)
    ("python -c pass", ["-c", "pass"], False),
    ('python -c "import typer"', ["-c", "import typer"], False),
    ("scrapeq --version", ["-m", "scrapeq", "--version"], False),
    ("scrapeq --help", ["-m", "scrapeq", "--help"], False),
    ("scrapeq status --json", ["-m", "scrapeq", "status", "--json"], True),
    ("scrapeq enqueue URL", ["-m", "scrapeq", "enqueue", "https://example.com/a"], True),
]


def _run(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, *argv], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    took = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.decode()}")
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=10, help="runs of each command (default 10)")
    parser.add_argument(
        "--src",
        action="append",
        metavar="DIR",
        help="PYTHONPATH of a scrapeq tree to run (repeatable; default: as this process)",
    )
    add_server_args(parser)
    args = parser.parse_args()
    trees = args.src or [os.environ.get("PYTHONPATH", "")]
    with private_redis(args.redis_server) as server:
        base = {k: v for k, v in os.environ.items() if not k.startswith("SCRAPEQ_")}
        base["SCRAPEQ_REDIS_URL"] = server.url
        base["SCRAPEQ_QUEUE"] = "cli-start-bench"
        envs = {tree: {**base, "PYTHONPATH": str(Path(tree).resolve()) if tree else ""}
                for tree in trees}  # fmt: skip
        times: dict[tuple[str, str], list[float]] = {}
        for _ in range(args.n):
            for row, argv, _server in _COMMANDS:
                for tree in trees:
                    times.setdefault((row, tree), []).append(_run(argv, envs[tree]))
        print(f"redis-server {server.version}; {args.n} runs each; {load_note()}")
        print(f"python {sys.version.split()[0]} ({sys.executable})\n")
        rows: list[list[object]] = []
        for row, _argv, _server in _COMMANDS:
            for tree in trees:
                took = times[(row, tree)]
                label = row if len(trees) == 1 or row.startswith("python") else f"{row} [{tree}]"
                if row.startswith("python") and tree != trees[0]:
                    label = f"{row} [{tree}]"
                rows.append([label, statistics.median(took), min(took)])
        print(format_table(["command", "median s", "min s"], rows))


if __name__ == "__main__":
    main()
