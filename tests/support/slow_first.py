"""The slowest modules first, so ``make test``'s processes end together.

``--dist loadgroup`` hands each process one test (or one ``xdist_group``) at a time, in
collection order. A long test collected late (the live revisit crawl, 50 s, is in
``tests/runtime``, collected last) starts when the other processes have little left, and the
run waits for it alone. Longest-first is the classic cure: this hook orders the modules by the
duration of their longest test, as recorded in ``tests/durations.txt`` (written by
``scripts/test_durations.py`` from a run with ``--durations=0``). A module's tests keep their
order and stay together (module fixtures are set up once per process as before); a module the
file does not name keeps its place after the recorded ones. A stale file only orders worse.
"""

from __future__ import annotations

from pathlib import Path

import pytest

DURATIONS = Path(__file__).resolve().parent.parent / "durations.txt"


def load(path: Path = DURATIONS) -> dict[str, float]:
    """``{test node id: seconds}`` from lines ``<seconds> <node id>`` (``#`` comments)."""
    found: dict[str, float] = {}
    if not path.exists():
        return found
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        seconds, _, nodeid = line.partition(" ")
        found[nodeid.strip()] = float(seconds)
    return found


def module_order(nodeids: list[str], seconds: dict[str, float]) -> list[int]:
    """Indices of ``nodeids`` with the modules ordered by their longest recorded test
    (descending; unrecorded modules after, in their order), each module's tests in order."""
    modules: dict[str, list[int]] = {}
    for index, nodeid in enumerate(nodeids):
        modules.setdefault(nodeid.split("::", 1)[0], []).append(index)

    def longest(module: str) -> float:
        return max(seconds.get(nodeids[i], 0.0) for i in modules[module])

    ordered = sorted(modules, key=lambda module: -longest(module))  # stable: ties keep order
    return [index for module in ordered for index in modules[module]]


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    seconds = load()
    if not seconds:
        return
    order = module_order([item.nodeid for item in items], seconds)
    items[:] = [items[i] for i in order]
