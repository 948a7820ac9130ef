"""``--dist loadgroup`` sends every test of an ``xdist_group`` to one process
(``support/xdist_groups.py``; ``make test`` runs ``-n 2 --dist loadgroup``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent

MODULE = """
import os
import pytest

pytestmark = pytest.mark.xdist_group("together")


@pytest.mark.parametrize("i", range(8))
def test_one(i: int) -> None:
    with open(os.environ["WHERE"], "a") as f:
        f.write(os.environ["PYTEST_XDIST_WORKER"] + "\\n")
"""


def test_a_group_runs_in_one_process(tmp_path: Path) -> None:
    (tmp_path / "test_grouped.py").write_text(MODULE)
    (tmp_path / "conftest.py").write_text("pytest_plugins = ['support.xdist_groups']\n")
    where = tmp_path / "where"
    env = {**os.environ, "WHERE": str(where), "PYTHONPATH": str(TESTS)}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", "loadgroup",
         "-p", "no:cacheprovider", "--rootdir", str(tmp_path), "-c", os.devnull, str(tmp_path)],
        capture_output=True, text=True, env=env, timeout=100,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    workers = where.read_text().split()
    assert len(workers) == 8 and len(set(workers)) == 1, workers
