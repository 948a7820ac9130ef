"""Issue 25's data-integrity regression: a worker process SIGKILLed after a settle's answer
and before the results line it writes from that answer (revisit = on: every done page's line
says what the settle decided) lost the line for good, the job being settled. With the
owed-lines ledger another worker writes it.

The kill is staged without a hook in scrapeq: worker A's ``--results`` file is a FIFO whose
pipe holds one page (4 KiB) and whose reader (this test) reads nothing while A runs. A's first
lines fill the pipe; every later write blocks in the kernel, after its job's settle answered.
Once Redis says every job is done, A is killed: the lines it wrote are in the pipe, the others
were never written. Worker B (``scrapeq worker --results b.jsonl``) then runs: every job must
have its line, in the pipe or in B's file. Real ``scrapeq worker`` processes, a real loopback
site, bounded (about 10 seconds).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from scrapeq import Queue
from support.processes import wait_until
from support.sites import SiteThread, ok
from support.workers import SCRAPEQ, WorkerProc, clean_env, counts, results

JOBS = 30
#: Worker settings: a short lease, so B takes over A's lines a couple of seconds after their
#: settle; revisits on (their next visits, a minute later, stay delayed for the whole test).
WORKER_ENV: dict[str, Any] = {"lease": 2, "shutdown_grace": 2, "revisit": "on"}
F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)


@pytest.fixture
def procs() -> Iterator[list[WorkerProc]]:
    started: list[WorkerProc] = []
    yield started
    for proc in started:
        proc.kill_all()


def start(procs: list[WorkerProc], redis_url: str, tmp_path: Path, target: Path) -> WorkerProc:
    argv = [SCRAPEQ, "--redis", redis_url, "worker", "--allow-private", "--concurrency", "50",
            "--results", str(target)]  # fmt: skip
    log = tmp_path / f"worker-{len(procs)}.log"
    procs.append(WorkerProc.start(argv, log, env=clean_env(**WORKER_ENV), cwd=tmp_path))
    return procs[-1]


def drain(fd: int) -> bytes:
    """What the pipe holds, read without blocking."""
    out = b""
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError as exc:
            if exc.errno == errno.EAGAIN:
                return out
            raise
        if not chunk:
            return out
        out += chunk


def test_a_worker_killed_between_a_settle_and_its_line_loses_no_line(
    redis_url: str, tmp_path: Path, site_thread: SiteThread, q: Queue, procs: list[WorkerProc]
) -> None:
    site = site_thread.start(ok)
    ids = {r.id for r in q.enqueue_many([site.url(f"/p/{i}") for i in range(JOBS)])}
    fifo = tmp_path / "a.jsonl"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # A's writes find a reader: no EPIPE
    try:
        fcntl.fcntl(reader, F_SETPIPE_SZ, 4096)  # one page: a few lines, then writes block
        a = start(procs, redis_url, tmp_path, fifo)
        wait_until(lambda: counts(q)["done"] == JOBS, 30, "worker A to settle every job")
        time.sleep(0.5)  # A acknowledges the lines it could write (every 50 ms)
        a.kill_all()  # SIGKILL: A's blocked writes never happen
        assert a.popen.returncode == -signal.SIGKILL
        by_a = [json.loads(line) for line in drain(reader).decode().splitlines()]
    finally:
        os.close(reader)
    assert len(by_a) < JOBS, "the kill caught lines settled but not written"

    b_file = tmp_path / "b.jsonl"
    b = start(procs, redis_url, tmp_path, b_file)

    def written() -> set[str]:
        return {r["id"] for r in by_a} | {r["id"] for r in results(b_file)}

    with contextlib.suppress(AssertionError):  # on failure, the check below says what is missing
        wait_until(lambda: written() >= ids, 15, "worker B to write the lines A owed")
    b.signal(signal.SIGTERM)
    assert b.wait(15) == 0, b.text()
    by_b = results(b_file)
    missing = ids - written()
    assert not missing, f"{len(missing)} of {JOBS} jobs have no results line (A wrote {len(by_a)})"
    # exactly the lines A did not write: those it wrote it had acknowledged before the kill
    assert sorted(r["id"] for r in by_b) == sorted(ids - {r["id"] for r in by_a})
    for row in by_a + by_b:  # the lines B wrote are the lines A would have written
        assert row["outcome"] == "done" and row["changed"] is True and row["status"] == 200
    assert counts(q)["done"] == JOBS and q.owed_count() == 0
    print(f"A wrote {len(by_a)} lines before the kill; B wrote {len(by_b)} (taken over)")
