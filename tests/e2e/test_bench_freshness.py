"""bench/freshness.py --quick: every policy runs over the same fleet and budget, and the
figures add up (fetches within the budget and the first crawl, bytes within the fleet's,
freshness a share), in both modes (due, as live; paced)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "freshness.py"


def test_quick_freshness_runs_every_policy_and_adds_up(tmp_path: Path) -> None:
    out = tmp_path / "freshness.json"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--json", str(out)],
        capture_output=True, text=True, timeout=100, env=env,
    )  # fmt: skip
    report = json.loads(out.read_text())
    by = {p["name"]: p for p in report["policies"]}
    assert set(by) == {"uniform", "nutch", "scrapeq", "oracle"}, proc.stderr[-2000:]
    slots = report["domains"] * report["budget_per_hour"] * report["hours"]
    # the report's mode is "due" (issue 37): a page is fetched when due, so a policy's
    # fetches are the budget's revisits plus the first crawl, not cut at the budget's slots
    assert report["mode"] == "due" and report["paced"]["mode"] == "paced"
    first = report["domains"] * report["pages_per_domain"]
    for p in by.values():
        assert 0 < p["freshness"] <= 1 and p["fetches"] <= slots + first
        assert 0 <= p["bytes_conditional"] <= p["bytes"] <= p["fetches"] * 60_000
    # uniform fills every fetch slot and sends no conditional request: full bodies
    assert by["uniform"]["fetches"] >= slots - report["domains"]
    # the rule ran once per scrapeq fetch, through Redis
    assert report["rule_calls"] == by["scrapeq"]["fetches"]
    assert by["oracle"]["of_oracle"] == 1.0
    assert by["scrapeq"]["freshness"] > by["uniform"]["freshness"]
    paced = {p["name"]: p for p in report["paced"]["policies"]}
    assert all(p["fetches"] <= slots + report["domains"] for p in paced.values())
    assert proc.returncode in (0, 1)  # the verdicts' exit code: checked at full size
