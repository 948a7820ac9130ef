"""What the worker tells: transitions once across processes, progress, summaries, JSON lines.

Workers run as ``scrapeq worker`` subprocesses (their stderr read back from a file) against
the session's redis-server, fetching loopback sites served by a background thread of the test.
"""

from __future__ import annotations

import json
import logging
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from scrapeq import Queue, Settings
from scrapeq.logs import JsonFormatter, formatter
from sites import ok, status
from test_worker_process import SCRAPEQ, SiteThread, WorkerProc, clean_env

#: Quick retries; one site may take many jobs at once unless a test says otherwise.
QUICK = {"backoff_base": 0.1, "backoff_cap": 0.3}


@pytest.fixture
def site_thread() -> Iterator[SiteThread]:
    st = SiteThread()
    yield st
    st.close()


@pytest.fixture
def q(redis_url: str) -> Iterator[Queue]:
    queue = Queue.from_url(redis_url, settings=Settings(allow_private=True))
    yield queue
    queue.close()


@pytest.fixture
def spawn(redis_url: str, tmp_path: Path) -> Iterator[Callable[..., WorkerProc]]:
    """Start ``scrapeq [GLOBAL...] worker --allow-private ARGS``; its output in a file.

    ``glob`` are global options (``-v``), keywords are settings (``SCRAPEQ_*``).
    """
    started: list[WorkerProc] = []

    def start(*args: str, glob: tuple[str, ...] = (), **settings: Any) -> WorkerProc:
        log = tmp_path / f"worker-{len(started)}.log"
        out = open(log, "wb")  # noqa: SIM115 (closed by the finalizer)
        argv = [SCRAPEQ, "--redis", redis_url, *glob, "worker", "--allow-private", *args]
        popen = subprocess.Popen(
            argv,
            env=clean_env(**{**QUICK, **settings}),
            cwd=tmp_path,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        proc = WorkerProc(popen, log, out)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.kill_all()


def fields(line: str) -> dict[str, str]:
    """The ``name=value`` pairs of a text log line."""
    return dict(re.findall(r"(\w+)=(\S+)", line))


# --- the final summary ---------------------------------------------------------------------------


@pytest.mark.parametrize("processes", [1, 2])
def test_final_summary_counts_agree_with_status_after_a_retirement(
    q: Queue, site_thread: SiteThread, spawn: Callable[..., WorkerProc], processes: int
) -> None:
    bad = site_thread.start(status(500))
    good = site_thread.start(ok)
    q.enqueue_many([bad.url(f"/b/{i}") for i in range(30)])
    q.enqueue_many([good.url(f"/g/{i}") for i in range(10)])
    # The second failure in a row retires the domain (one trip is the limit): its two failed
    # jobs and its 28 queued ones end dead, drained by the claims.
    w = spawn(
        "--burst",
        "--processes",
        str(processes),
        domain_concurrency=1,
        breaker_failures=2,
        breaker_max_trips=1,
    )
    assert w.wait(30) == 0, w.text()

    counts = q.status()["counts"]
    assert (counts["done"], counts["dead"]) == (10, 30)
    summaries = [line for line in w.text().splitlines() if " done=" in line]
    assert summaries, w.text()
    final = fields(summaries[-1])
    assert (int(final["done"]), int(final["dead"])) == (10, 30), summaries[-1]


# --- JSON lines and -v ---------------------------------------------------------------------------


def test_json_log_lines_parse_and_carry_their_fields(
    q: Queue, site_thread: SiteThread, spawn: Callable[..., WorkerProc]
) -> None:
    gone = site_thread.start(status(404))
    flaky = site_thread.start(status(500))
    q.enqueue_many([gone.url("/a"), gone.url("/b")])
    q.enqueue_many([flaky.url("/c"), flaky.url("/d")], max_attempts=2)
    # Two processes: the supervised children log JSON at -v too (they start with bare logging).
    w = spawn("--burst", "--processes", "2", "--log-format", "json", glob=("-v",))
    assert w.wait(30) == 0, w.text()

    docs = [json.loads(line) for line in w.text().splitlines()]  # every line is one object
    for doc in docs:
        assert {"time", "level", "logger", "message"} <= set(doc), doc
        assert datetime.fromisoformat(doc["time"]).utcoffset() is not None, doc
    dead = [d for d in docs if d["message"].startswith("dead letter")]
    assert {(d["domain"], d["kind"]) for d in dead} == {
        (gone.domain, "http_404"),
        (flaky.domain, "http_500"),
    }
    assert {d["reason"] for d in dead if d["domain"] == flaky.domain} == {"max_attempts"}
    assert all(d["job_id"] and d["level"] == "INFO" for d in dead)
    retries = [d for d in docs if d["message"].startswith("retried ")]
    assert len(retries) == 2, docs  # each flaky job once, then dead
    for d in retries:
        assert (d["level"], d["domain"], d["kind"]) == ("DEBUG", flaky.domain, "http_500")
        assert 0 <= d["delay"] <= QUICK["backoff_base"]
        assert f"kind=http_500 delay={d['delay']:.2f}s attempt=1/2" in d["message"]
    (summary,) = [d for d in docs if d["message"].startswith("summary")]
    assert (summary["done"], summary["dead"]) == (0, 4)


def test_text_lines_by_default_and_json_from_the_setting(
    q: Queue, site_thread: SiteThread, spawn: Callable[..., WorkerProc]
) -> None:
    gone = site_thread.start(status(404))
    q.enqueue(gone.url("/a"))
    text = spawn("--burst")
    assert text.wait(30) == 0, text.text()
    assert "INFO scrapeq.worker dead letter job=" in text.text()
    with pytest.raises(json.JSONDecodeError):
        json.loads(text.text().splitlines()[0])

    q.enqueue(gone.url("/b"))
    as_json = spawn("--burst", log_format="json")  # SCRAPEQ_LOG_FORMAT
    assert as_json.wait(30) == 0, as_json.text()
    assert all(json.loads(line)["logger"] for line in as_json.text().splitlines())


def test_json_formatter_writes_tracebacks_and_any_field() -> None:
    logger = logging.getLogger("scrapeq.test-json")
    record = logger.makeRecord(
        logger.name, logging.ERROR, __file__, 1, "failed %s", ("x",), None,
        extra={"domain": "bücher.example", "path": Path("/tmp/r"), "n": 3},
    )  # fmt: skip
    try:
        raise ValueError("boom")
    except ValueError:
        record.exc_info = sys.exc_info()
    doc = json.loads(JsonFormatter().format(record))
    assert (doc["level"], doc["logger"], doc["message"]) == ("ERROR", logger.name, "failed x")
    assert (doc["domain"], doc["path"], doc["n"]) == ("bücher.example", "/tmp/r", 3)
    assert "ValueError: boom" in doc["exc"]
    assert "msg" not in doc and "args" not in doc
    with pytest.raises(ValueError, match="unknown log format"):
        formatter("yaml")
