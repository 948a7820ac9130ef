"""Write ``tests/durations.txt`` from a pytest run's ``--durations=0`` report.

Run: ``make test PYTEST_ARGS='--durations=0' > run.log; python scripts/test_durations.py run.log``.
Each test's setup, call and teardown are summed; tests of at least ``--min`` seconds (default
1) are kept, slowest first. ``tests/support/slow_first.py`` orders the modules by them.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

LINE = re.compile(r"^([0-9.]+)s (?:setup|call|teardown)\s+(\S+)")
OUT = Path(__file__).resolve().parent.parent / "tests" / "durations.txt"


def parse(text: str) -> dict[str, float]:
    """``{node id: seconds}`` summed over a test's phases; an ``@group`` suffix dropped."""
    total: dict[str, float] = {}
    for line in text.splitlines():
        found = LINE.match(line.strip())
        if found:
            nodeid = re.sub(r"@\w+$", "", found.group(2))
            total[nodeid] = total.get(nodeid, 0.0) + float(found.group(1))
    return total


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log", type=Path, help="a pytest run's output with --durations=0")
    parser.add_argument("--min", type=float, default=1.0, help="seconds a test must take")
    args = parser.parse_args()
    total = parse(args.log.read_text())
    if not total:
        raise SystemExit(f"{args.log}: no --durations lines")
    kept = sorted(((s, n) for n, s in total.items() if s >= args.min), reverse=True)
    lines = ["# seconds node-id: written by scripts/test_durations.py (slowest first)"]
    lines += [f"{seconds:.2f} {nodeid}" for seconds, nodeid in kept]
    OUT.write_text("\n".join(lines) + "\n")
    print(f"{OUT}: {len(kept)} tests of at least {args.min} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
