"""Run one benchmark on two commits side by side, alternating, and compare a figure.

A change that "changes no behaviour" (a reshaping) must also cost nothing: this runs the
benchmark of each commit, from that commit's own tree (``git worktree add --detach`` into a
temporary folder, its ``src/`` first on ``PYTHONPATH``, this interpreter), in ABBA order
(old, new, new, old, ...) so the drift of a shared machine hits both alike. From each run's
output it picks the figure ``--pick`` matches (a regular expression whose first group is a
number; the last match of a run counts; ``--pick`` may be repeated) and prints each commit's
figures, their medians and the ratio new/old. A bench that exits 1 (its bar missed) still gives
its figures.

Run: ``.venv/bin/python bench/ab_commits.py --old REV [--new REV] [--rounds N]
--pick REGEX [--pick REGEX] -- bench/claim_throughput.py --quick``. ``--new`` defaults to the
working tree (uncommitted changes included). A run that fails (an exit status other than 0 or
1, or a figure not found) stops it with a message.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--old", required=True, help="the commit to compare against")
    parser.add_argument("--new", default=None, help="the other commit (default: working tree)")
    parser.add_argument("--rounds", type=int, default=2, help="ABBA rounds (default 2: 4 runs)")
    parser.add_argument(
        "--pick",
        required=True,
        action="append",
        help="a regex whose first group is the figure (repeat for several figures)",
    )
    parser.add_argument("--show", type=int, default=0, help="print the last N lines of each run")
    parser.add_argument("bench", nargs=argparse.REMAINDER, help="-- BENCH.py [ARGS...]")
    args = parser.parse_args(argv)
    if args.bench and args.bench[0] == "--":
        args.bench = args.bench[1:]
    if not args.bench:
        parser.error("name the benchmark after --, e.g. -- bench/claim_throughput.py --quick")
    if args.rounds < 1:
        parser.error("--rounds must be >= 1")
    return args


def checkout(rev: str, into: Path) -> Path:
    """A detached worktree of ``rev`` under ``into``."""
    path = into / rev.replace("/", "_")
    subprocess.run(
        ["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(path), rev], check=True
    )
    return path


def run(tree: Path, bench: list[str], show: int) -> str:
    env = dict(os.environ, PYTHONPATH=str(tree / "src"))
    proc = subprocess.run(
        [sys.executable, str(tree / bench[0]), *bench[1:]],
        cwd=tree, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    # A bench exits 1 when it misses its bar: its figures still count (a run without them
    # fails at --pick); any other status is a failed run.
    if proc.returncode not in (0, 1):
        sys.stderr.write(proc.stdout[-2000:] + proc.stderr[-4000:])
        raise SystemExit(f"ab_commits: {bench[0]} failed in {tree} (exit {proc.returncode})")
    if show:
        print("\n".join(proc.stdout.splitlines()[-show:]))
    return proc.stdout


def pick(pattern: re.Pattern[str], out: str) -> float:
    found = pattern.findall(out)
    if not found:
        raise SystemExit(f"ab_commits: --pick {pattern.pattern!r} matched nothing")
    last = found[-1]
    return float((last[0] if isinstance(last, tuple) else last).replace(",", ""))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    patterns = [re.compile(p) for p in args.pick]
    tmp = Path(tempfile.mkdtemp(prefix="scrapeq-ab-"))
    trees: dict[str, Path] = {}
    try:
        trees["old"] = checkout(args.old, tmp)
        trees["new"] = checkout(args.new, tmp) if args.new else ROOT
        figures: dict[tuple[str, int], list[float]] = {}
        order = ["old", "new", "new", "old"] * args.rounds
        for i, side in enumerate(order, 1):
            out = run(trees[side], args.bench, args.show)
            values = [pick(pattern, out) for pattern in patterns]
            for k, value in enumerate(values):
                figures.setdefault((side, k), []).append(value)
            print(f"run {i}/{len(order)} {side}: {', '.join(f'{v:g}' for v in values)}", flush=True)
        names = {"old": args.old, "new": args.new or "working tree"}
        print(f"\n{' '.join(args.bench)}")
        for k, pattern in enumerate(patterns):
            print(f"pick {pattern.pattern!r}")
            medians = {}
            for side in ("old", "new"):
                values = figures[(side, k)]
                medians[side] = statistics.median(values)
                listed = ", ".join(f"{v:g}" for v in values)
                print(f"  {side} {names[side]}: {listed}; median {medians[side]:g}")
            ratio = medians["new"] / medians["old"] if medians["old"] else float("nan")
            print(f"  new/old: {ratio:.3f}")
    finally:
        for tree in trees.values():
            if tree != ROOT:
                subprocess.run(
                    ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)],
                    check=False,
                )
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
