"""CLI start-up: the wall time of one short ``scrapeq`` command (issue 38, item 18: a command
should answer within 0.3 s).

Each command is a fresh ``python -m scrapeq ...`` process, timed from spawn to exit:
``--version``, ``--help``, ``status --json`` and ``enqueue URL`` (the last two against a
private redis-server this bench starts, so no embedded server is started or stopped on the
way). The floors are what no change in scrapeq can cut: ``python -c pass``; ``import typer``;
typer with what its ``--help`` loads (``typer.rich_utils``: rich, its markdown) and with what
typer 0.29 loads to coerce the value of an option (``typer._adapters``: pydantic); ``import
redis`` (redis-py 8 imports its asyncio and cluster clients with the package), and the last
two together: the floor of a command that talks to Redis. Runs alternate (one of each
command, then again), so a burst of load on the machine falls on every row alike; each row
shows the median and the minimum of its runs' wall time, and the median of their CPU time
(user + system, of the child process).

``--src DIR`` (repeatable, e.g. ``--src /work/other/src --src src``) runs every command with
``PYTHONPATH=DIR`` for each tree named, alternating trees too, to compare two versions of the
code in the same run (a DIR may be a path list: ``--src /tmp/typer-0.28:src`` runs this tree
with another typer first on the path). It prints figures; it asserts nothing about them.

Bytecode: an installed package runs from its ``.pyc`` files, so the commands run with
``PYTHONPYCACHEPREFIX`` set to a temporary folder (and without ``PYTHONDONTWRITEBYTECODE``),
after one untimed run of each: the source trees are not written to. ``--no-bytecode`` times
them compiling every module from source instead (``PYTHONDONTWRITEBYTECODE=1`` without a
cache: what a checkout whose ``__pycache__`` cannot be written pays).

Run: ``PYTHONPATH=src .venv/bin/python bench/cli_start.py [-n 10] [--src DIR ...]
[--redis-server PATH]``
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _redis import add_server_args, format_table, load_note, private_redis

#: typer >= 0.29 coerces each option's value with a pydantic TypeAdapter (typer._adapters,
#: pydantic with it) once a command's options are parsed; older typers have no such module.
_ADAPTERS = "import typer\ntry:\n    import typer._adapters\nexcept ImportError:\n    pass"

_COMMANDS: list[tuple[str, list[str], bool]] = [
    # (row, argv after "python", uses the server)
    ("python -c pass", ["-c", "pass"], False),
    ('python -c "import typer"', ["-c", "import typer"], False),
    ("  + typer.rich_utils (--help)", ["-c", "import typer.rich_utils"], False),
    ("  + typer._adapters (pydantic)", ["-c", _ADAPTERS], False),
    ('python -c "import redis"', ["-c", "import redis"], False),
    ("  typer + _adapters + redis", ["-c", f"{_ADAPTERS}\nimport redis"], False),
    ("scrapeq --version", ["-m", "scrapeq", "--version"], False),
    ("scrapeq --help", ["-m", "scrapeq", "--help"], False),
    ("scrapeq status --json", ["-m", "scrapeq", "status", "--json"], True),
    ("scrapeq enqueue URL", ["-m", "scrapeq", "enqueue", "https://example.com/a"], True),
]


def _run(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """The wall time of one run, and its CPU time (user + system, of the child): on a machine
    shared with other work, the CPU time moves much less with the load than the wall time."""
    start = time.perf_counter()
    child = subprocess.Popen(
        [sys.executable, *argv], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    assert child.stderr is not None
    stderr = child.stderr.read()
    _pid, status, usage = os.wait4(child.pid, 0)
    took = time.perf_counter() - start
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({child.returncode}): {stderr.decode()}")
    return took, usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=10, help="runs of each command (default 10)")
    parser.add_argument(
        "--src",
        action="append",
        metavar="DIR",
        help="PYTHONPATH of a scrapeq tree to run (repeatable; default: as this process)",
    )
    parser.add_argument(
        "--no-bytecode", action="store_true", help="compile every module from source each run"
    )
    add_server_args(parser)
    args = parser.parse_args()
    trees = args.src or [os.environ.get("PYTHONPATH", "")]
    with private_redis(args.redis_server) as server, tempfile.TemporaryDirectory() as cache:
        base = {k: v for k, v in os.environ.items() if not k.startswith("SCRAPEQ_")}
        base["SCRAPEQ_REDIS_URL"] = server.url
        base["SCRAPEQ_QUEUE"] = "cli-start-bench"
        base.pop("PYTHONDONTWRITEBYTECODE", None)
        base.pop("PYTHONPYCACHEPREFIX", None)
        if args.no_bytecode:
            base["PYTHONDONTWRITEBYTECODE"] = "1"
        envs = {}
        for i, tree in enumerate(trees):  # a cache of its own per tree: same module names
            path = os.pathsep.join(str(Path(d).resolve()) for d in tree.split(os.pathsep) if d)
            envs[tree] = {**base, "PYTHONPATH": path}
            if not args.no_bytecode:
                envs[tree]["PYTHONPYCACHEPREFIX"] = str(Path(cache) / str(i))
        runs = [(row, argv, tree) for row, argv, _server in _COMMANDS
                for tree in (trees if row.startswith("scrapeq") else trees[:1])]  # fmt: skip
        for _row, argv, tree in runs:  # untimed: writes the bytecode cache
            _run(argv, envs[tree])
        times: dict[tuple[str, str], list[float]] = {}
        cpu: dict[tuple[str, str], list[float]] = {}
        for _ in range(args.n):
            for row, argv, tree in runs:
                wall, used = _run(argv, envs[tree])
                times.setdefault((row, tree), []).append(wall)
                cpu.setdefault((row, tree), []).append(used)
        code = "compiled from source each run" if args.no_bytecode else "from cached bytecode"
        print(f"redis-server {server.version}; {args.n} runs each, {code}; {load_note()}")
        print(f"python {sys.version.split()[0]} ({sys.executable})\n")
        rows: list[list[object]] = []
        for row, _argv, tree in runs:
            took = times[(row, tree)]
            label = row if len(trees) == 1 or not row.startswith("scrapeq") else f"{row} [{tree}]"
            used = statistics.median(cpu[(row, tree)])
            rows.append([label, statistics.median(took), min(took), used])
        print(format_table(["command", "median s", "min s", "CPU median s"], rows))


if __name__ == "__main__":
    main()
