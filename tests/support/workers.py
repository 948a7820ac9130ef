"""Workers as the end-to-end tests run them: ``scrapeq worker`` subprocesses with a clean
environment (:class:`WorkerProc`, :func:`clean_env`), and an in-process worker run until
its jobs are done (:func:`run_until_done`)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

from scrapeq import AsyncQueue, Queue
from scrapeq.runtime.worker import Worker
from support.processes import descendants

_BIN = Path(sys.executable).parent / "scrapeq"
SCRAPEQ = str(_BIN) if _BIN.exists() else (shutil.which("scrapeq") or "scrapeq")

#: Settings every worker subprocess gets (as SCRAPEQ_* variables): quick retries, one site
#: may take many jobs at once.
BASE_ENV = {"backoff_base": 0.1, "backoff_cap": 0.5, "domain_concurrency": 50}


def clean_env(**settings: Any) -> dict[str, str]:
    """PATH, HOME and PYTHONPATH of this process (a worktree's tests run its own code), plus
    the given settings as SCRAPEQ_* variables."""
    env = {k: os.environ[k] for k in ("PATH", "HOME", "PYTHONPATH") if k in os.environ}
    env.update({f"SCRAPEQ_{k.upper()}": str(v) for k, v in {**BASE_ENV, **settings}.items()})
    return env


def results(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def counts(q: Queue) -> dict[str, int]:
    return q.status()["counts"]  # type: ignore[no-any-return]


class WorkerProc:
    """One ``scrapeq worker`` subprocess, its output in a log file."""

    def __init__(self, popen: subprocess.Popen[bytes], log: Path, out: IO[bytes]) -> None:
        self.popen = popen
        self.log = log
        self._out = out
        self.known: set[int] = set()  # descendants seen, killed in the finalizer

    @classmethod
    def start(cls, argv: list[str], log: Path, *, env: dict[str, str], cwd: Path) -> WorkerProc:
        """Run ``argv`` in a session of its own, stdout and stderr into ``log``."""
        out = open(log, "wb")  # noqa: SIM115 (closed by kill_all)
        try:
            popen = subprocess.Popen(
                argv,
                env=env,
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except BaseException:
            out.close()
            raise
        return cls(popen, log, out)

    @property
    def pid(self) -> int:
        return self.popen.pid

    def wait(self, timeout: float) -> int:
        try:
            return self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"worker pid {self.pid} still running after {timeout} s; log:\n{self.text()}"
            ) from None

    def signal(self, sig: int) -> None:
        self.popen.send_signal(sig)

    def running(self) -> bool:
        return self.popen.poll() is None

    def text(self) -> str:
        self._out.flush()
        return self.log.read_text(errors="replace")

    def kill_all(self) -> None:
        if self.running():
            self.known.update(descendants(self.pid))
        for pid in [self.pid, *self.known]:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(10)
        self._out.close()


async def run_until_done(
    q: AsyncQueue, total: int, timeout: float = 15.0, concurrency: int = 16
) -> dict[str, Any]:
    """Run a worker until ``total`` jobs are done (or ``timeout``); the queue's counts."""
    worker = Worker(q, concurrency=concurrency)
    task = asyncio.create_task(worker.run_async())
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and not task.done():
            if (await q.status())["counts"]["done"] >= total:
                break
            await asyncio.sleep(0.05)
    finally:
        worker.stop()
        await asyncio.wait_for(task, 30)
    return dict((await q.status())["counts"])
