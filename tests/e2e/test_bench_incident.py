"""bench/incident.py --quick: the harness runs scrapeq and plain Scrapy against the fleet (not
the speed: only that each system ran and the fleet's counts came back), and accounts for
every job after each run (done, failed, pending, lost)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from scrapeq.demo.fleet import default_sites
from scrapeq.demo.scenario import BASE_JOBS

pytest.importorskip("scrapy")

BENCH = Path(__file__).resolve().parents[2] / "bench" / "incident.py"


def _incident() -> ModuleType:
    spec = importlib.util.spec_from_file_location("incident", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _adds_up(r: dict[str, Any], jobs: int) -> None:
    a = r["accounting"]
    assert a["jobs"] == jobs, a
    assert a["done"] + a["failed"] + a["pending"] + a["lost"] == jobs, a
    assert min(a[c] for c in ("done", "failed", "pending", "lost", "stranded")) >= 0, a


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
    # Every job is accounted for: the job list (547 at --quick) and the burst (40).
    per_site = sum(BASE_JOBS.values())
    jobs = sum(max(1, round(per_site * s.weight * 0.1)) for s in default_sites()) + 40
    for r in results.values():
        _adds_up(r, jobs)
    # scrapeq keeps every job in Redis: nothing lost; the healthy pages and the burst done.
    sq = results["scrapeq"]["accounting"]
    assert sq["lost"] == 0 and sq["done"] >= results["scrapeq"]["healthy_done"] + 40, sq
    assert sq["pending"] > 0, sq  # the hanging site's backlog waits behind its breaker
    # Plain Scrapy's frontier is in its memory: nothing pending, and the hanging site's
    # backlog (none of it can end within the run: 30 s timeouts) is lost.
    hanging = next(s for s in default_sites() if s.name == "shop-43.example.com")
    sc = results["scrapy"]["accounting"]
    assert sc["pending"] == 0, sc
    assert sc["lost"] >= round(per_site * hanging.weight * 0.1), sc
    # The burst site saw scrapeq's critical jobs (a peer may not reach its burst in a quick
    # run: plain Scrapy's downloader can be full of requests queued for the hanging site).
    scrapeq = results["scrapeq"]
    assert scrapeq["burst_fetched"] == scrapeq["burst"] == 40, scrapeq.get("log_tail")
    assert 0 <= scrapeq["burst_p50"] <= scrapeq["burst_p99"]
    assert 0 <= results["scrapy"]["burst_fetched"] <= 40
    assert "healthy in 30 s" in proc.stdout and " pending " in proc.stdout


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
    wrapper.write_text(f'#!/bin/sh\necho "$@" >> {marker}\nexec {sys.executable} "$@"\n')
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
    # The system's child and the reading of its store after the run, both under it.
    used = marker.read_text()
    assert "--child scrapeq" in used and "--account scrapeq" in used, used
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


def test_accounting_puts_every_job_where_the_store_and_the_sites_say() -> None:
    incident = _incident()
    jobs = [f"http://127.0.0.1:1/p/{i}" for i in range(8)]
    outcomes = {
        jobs[0]: (1, ["200"]),  # fetched OK
        jobs[1]: (1, ["404"]),  # a final answer: no system retries it
        jobs[2]: (4, ["503"] * 4),  # every retry spent
        jobs[3]: (2, ["503", "503"]),  # retries left, and in the store's retry set below
        jobs[4]: (2, ["503", "503"]),  # retries left, in no record: popped and gone
        jobs[5]: (4, ["gave_up"] * 3),  # its last attempt was under way at the stop
        jobs[6]: (1, ["gave_up"]),  # started by a worker that is gone, in its record
    }
    store = {
        "finished": {},
        "pending": {"retries": [jobs[3]]},
        "stranded": {"started": [jobs[6]]},
    }
    # A system that records no end (Celery without a result backend): the sites tell.
    a = incident._account("celery", store, jobs, outcomes)
    assert (a["done"], a["failed"], a["pending"], a["lost"]) == (1, 2, 1, 4), a
    assert a["stranded"] == 1 and a["where"] == {"retries": 1, "started": 1}, a
    # One that records its failures (Dramatiq's dead letters): spent retries that are not
    # in them were not recorded as failed, so they are lost; a 404 it keeps no record of.
    a = incident._account("dramatiq", store, jobs, outcomes)
    assert (a["done"], a["failed"], a["pending"], a["lost"]) == (1, 1, 1, 5), a
    # One that records every end (RQ): only its records count.
    store["finished"] = {"rq:failed:incident": [jobs[2]], "rq:finished:incident": [jobs[1]]}
    a = incident._account("rq", store, jobs, outcomes)
    assert (a["done"], a["failed"], a["pending"], a["lost"]) == (1, 2, 1, 4), a
    # scrapeq: its own counts, against the job list (a job never enqueued is lost).
    counts = {"enqueued": 7, "done": 2, "dead": 1, "ready": 2, "delayed": 1, "inflight": 1,
              "cancelled": 0}  # fmt: skip
    a = incident._account("scrapeq", {"counts": counts}, jobs, {})
    assert (a["done"], a["failed"], a["pending"], a["lost"]) == (2, 1, 4, 1), a
    assert a["where"]["never enqueued"] == 1, a


def test_quick_incident_accounts_for_a_redis_peer_from_its_own_store(tmp_path: Path) -> None:
    # RQ (in the bench extra): its registries and queues are read with rq's own API.
    pytest.importorskip("rq")
    out = tmp_path / "incident.json"
    argv = ["--quick", "--systems", "rq", "--duration", "8", "--json", str(out)]
    proc = subprocess.run(
        [sys.executable, str(BENCH), *argv], capture_output=True, text=True, timeout=100
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (r,) = json.loads(out.read_text())
    per_site = sum(BASE_JOBS.values())
    jobs = sum(max(1, round(per_site * s.weight * 0.1)) for s in default_sites()) + 40
    _adds_up(r, jobs)
    a = r["accounting"]
    # 8 s is too short for the backlog: what is left waits in RQ's queue.
    assert a["done"] >= r["healthy_done"] > 0 and a["pending"] > 0, a
    assert a["where"].get("rq:queue:incident", 0) > 0, a
