"""bench/freshness_live.py at small size: the real worker process revisits a loopback site
(issue 37) and the report adds up: both live runs fetched after the warm-up, the oracle had
scrapeq's fetches, every freshness a share, the scheduled load reported per domain."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "freshness_live.py"


def test_small_live_freshness_runs_and_adds_up(tmp_path: Path) -> None:
    out = tmp_path / "live.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    args = ["--domains", "2", "--pages", "10", "--seconds", "20", "--warmup", "8"]
    proc = subprocess.run([sys.executable, str(BENCH), *args, "--json", str(out)],
                          capture_output=True, text=True, timeout=120, env=env)  # fmt: skip
    assert out.exists(), proc.stdout[-2000:] + proc.stderr[-2000:]
    report = json.loads(out.read_text())
    by = {p["name"]: p for p in report["policies"]}
    assert set(by) == {"scrapeq", "uniform", "oracle"}
    for p in by.values():
        assert 0 < p["freshness"] <= 1 and p["fetches"] > 0
    assert by["oracle"]["fetches"] == by["scrapeq"]["fetches"] and by["oracle"]["of_oracle"] == 1
    # the revisit budget (1/s a domain) is spent after the first visits, not left idle
    assert all(used > 0.5 for used in report["budget_used"].values()), report["budget_used"]
    assert all(load and load > 0 for load in by["scrapeq"]["scheduled_load"])
    assert proc.returncode in (0, 1)  # the verdicts' exit code: checked at full size
