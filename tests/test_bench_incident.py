"""bench/incident.py --quick: the harness runs scrapeq and plain Scrapy against the fleet (not
the speed: only that each system ran and the fleet's counts came back)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("scrapy")

BENCH = Path(__file__).resolve().parent.parent / "bench" / "incident.py"


def test_quick_incident_runs_scrapeq_and_a_peer(tmp_path: Path) -> None:
    out = tmp_path / "incident.json"
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=100,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = {r["system"]: r for r in json.loads(out.read_text())}
    assert set(results) == {"scrapeq", "scrapy"}
    for r in results.values():
        assert r["healthy_done"] > 0, r.get("log_tail")
        assert set(r["faulty_fetches"]) == {f"shop-{n}.example.com" for n in range(41, 46)}
        assert r["timeline"] and r["timeline"][-1][1] == r["healthy_done"]
    assert results["scrapeq"]["lost"] == 0
    # The burst site saw scrapeq's critical jobs (a peer may not reach its burst in a quick
    # run: plain Scrapy's downloader can be full of requests queued for the hanging site).
    scrapeq = results["scrapeq"]
    assert scrapeq["burst_fetched"] == scrapeq["burst"] == 40, scrapeq.get("log_tail")
    assert 0 <= scrapeq["burst_p50"] <= scrapeq["burst_p99"]
    assert 0 <= results["scrapy"]["burst_fetched"] <= 40
    assert "healthy in 30 s" in proc.stdout


def test_an_unknown_system_is_one_line_and_exit_2() -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--systems", "nope"], capture_output=True, text=True
    )
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("incident: unknown system 'nope' (known: scrapeq, scrapy, ")


def test_python_for_runs_that_system_under_the_given_interpreter(tmp_path: Path) -> None:
    # arq pins redis-py < 6, so it runs from a venv of its own: --python-for NAME=PYTHON.
    marker = tmp_path / "used"
    wrapper = tmp_path / "python"
    wrapper.write_text(f'#!/bin/sh\necho "$@" > {marker}\nexec {sys.executable} "$@"\n')
    wrapper.chmod(0o755)
    out = tmp_path / "incident.json"
    argv = ["--quick", "--systems", "scrapeq", "--duration", "8", "--json", str(out)]
    proc = subprocess.run(
        [sys.executable, str(BENCH), *argv, "--python-for", f"scrapeq={wrapper}"],
        capture_output=True,
        text=True,
        timeout=100,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "--child scrapeq" in marker.read_text()
    (result,) = json.loads(out.read_text())
    assert result["healthy_done"] > 0, result.get("log_tail")


@pytest.mark.parametrize(
    "value", ["arq", "nope=/usr/bin/python3", "arq=/nonexistent/python", "=/usr/bin/python3"]
)
def test_a_bad_python_for_is_one_line_and_exit_2(value: str) -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--python-for", value], capture_output=True, text=True
    )
    assert proc.returncode == 2
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("incident: --python-for"), line
