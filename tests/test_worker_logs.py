"""What the worker tells: transitions once across processes, progress, summaries, JSON lines.

Workers run as ``scrapeq worker`` subprocesses (their stderr read back from a file) against
the session's redis-server, fetching loopback sites served by a background thread of the test.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from scrapeq import Queue, Settings
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
