"""bench/bullmq_peer.py in a small run (issue 40): BullMQ (npm, pinned by
``bench/bullmq/package-lock.json``; ``.ci/run`` runs ``npm ci`` there) and scrapeq each process
the same 300 jobs on a private redis-server; every figure is there and adds up (not the
speed). Without node or BullMQ's modules it is skipped on a workstation and fails under CI
(CI=true)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

BENCH_DIR = Path(__file__).resolve().parents[2] / "bench"
NODE_DIR = BENCH_DIR / "bullmq"
ROW = re.compile(r"^(BullMQ|scrapeq) +([\d,]+) +([\d.]+) +([\d.]+) +([\d.]+) +-$", re.MULTILINE)


def need_bullmq() -> None:
    """Skip (workstation) or fail (CI) without node, npm or bench/bullmq's node_modules."""
    why = None
    if shutil.which("node") is None or shutil.which("npm") is None:
        why = "no node or npm on PATH (apt-get install nodejs npm)"
    elif not (NODE_DIR / "node_modules" / "bullmq").is_dir():
        why = f"no node_modules in {NODE_DIR} (npm ci there; .ci/run does)"
    if why is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true but {why}")
        pytest.skip(why)


def test_both_systems_process_every_job_and_the_table_adds_up() -> None:
    need_bullmq()
    proc = subprocess.run(
        [sys.executable, str(BENCH_DIR / "bullmq_peer.py"), "--jobs", "300", "--rounds", "1",
         "--no-callgrind"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = {
        m[1]: [float(v.replace(",", "")) for v in m.groups()[1:]] for m in ROW.finditer(proc.stdout)
    }
    assert set(rows) == {"BullMQ", "scrapeq"}, proc.stdout
    for system, (rate, cpu_us, cmds, scripts) in rows.items():
        assert rate > 0 and cpu_us > 0, (system, proc.stdout)
        # every job costs Redis at least one script call's worth of commands; at most one
        # script call per job (BullMQ: moveToFinished, which also fetches the next job)
        assert cmds >= 1 and 0 < scripts <= cmds, (system, proc.stdout)
    # scrapeq settles 64 jobs a script call: 2 calls (claim, settle) per batch of 64
    assert rows["scrapeq"][3] < 0.1 < rows["BullMQ"][3], proc.stdout
    assert "scrapeq/BullMQ" in proc.stdout
    assert re.search(r"^Target redis CPU/job <= 0\.7x BullMQ's: (met|NOT met)", proc.stdout, re.M)
    assert re.search(r"^Target jobs/s >= 1\.5x BullMQ's: (met|NOT met)", proc.stdout, re.M)
