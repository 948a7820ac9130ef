"""The handler threads: bounded, lazily started, cancellable while queued, never holding exit."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from concurrent.futures import CancelledError
from typing import Any

import pytest

from scrapeq.runtime.deadlines import Deadlines
from scrapeq.runtime.handlers import DaemonThreads, HandlerTimeout, handler_caller


def test_results_and_exceptions_come_back() -> None:
    pool = DaemonThreads(2)
    try:
        assert pool.submit(lambda a, b: a + b, 2, 3).result(5) == 5
        with pytest.raises(KeyError):
            pool.submit({}.__getitem__, "missing").result(5)
    finally:
        pool.shutdown()


def test_at_most_size_threads_and_a_cancelled_queued_call_never_runs() -> None:
    pool = DaemonThreads(2)
    gate = threading.Event()
    ran: list[int] = []

    def blocked(i: int) -> int:
        ran.append(i)
        gate.wait(10)
        return i

    try:
        running = [pool.submit(blocked, i) for i in range(2)]
        queued = pool.submit(blocked, 2)
        later = pool.submit(blocked, 3)
        time.sleep(0.1)
        assert pool.started == 2 and sorted(ran) == [0, 1]
        assert queued.cancel(), "a queued call can still be cancelled"
        gate.set()
        assert [f.result(5) for f in running] == [0, 1]
        assert later.result(5) == 3
        with pytest.raises(CancelledError):
            queued.result(0)
        assert 2 not in ran
        assert pool.started == 2
    finally:
        gate.set()
        pool.shutdown()


def test_size_must_be_positive() -> None:
    with pytest.raises(ValueError):
        DaemonThreads(0)


def test_a_stuck_call_does_not_hold_the_interpreter_exit() -> None:
    code = (
        "import threading\n"
        "from scrapeq.runtime.handlers import DaemonThreads\n"
        "pool = DaemonThreads(2)\n"
        "pool.submit(threading.Event().wait)\n"
        "pool.submit(threading.Event().wait)\n"
        "pool.shutdown()\n"
        "print('bye', flush=True)\n"
    )
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0 and proc.stdout == "bye\n", proc.stderr
    assert time.monotonic() - started < 10


# --- handler_caller ------------------------------------------------------------------------------


async def _async_own_timeout(job: Any, response: Any) -> Any:
    raise TimeoutError("the handler's own")


def _sync_own_timeout(job: Any, response: Any) -> Any:
    raise TimeoutError("the handler's own")


@pytest.mark.parametrize("handler", [_async_own_timeout, _sync_own_timeout])
async def test_a_handlers_own_timeout_error_is_not_a_handler_timeout(handler: Any) -> None:
    deadlines, threads = Deadlines(5.0), DaemonThreads(1)
    call = handler_caller(
        handler, in_thread=True, plain=False, deadlines=deadlines, threads=threads
    )
    try:
        with pytest.raises(TimeoutError, match="the handler's own"):
            await call(None, None)  # type: ignore[arg-type]
    finally:
        deadlines.close()
        threads.shutdown()


async def test_handler_timeout_says_what_became_of_each_call() -> None:
    deadlines, threads = Deadlines(0.1), DaemonThreads(1)
    gate = threading.Event()
    call = handler_caller(
        lambda job, response: gate.wait(10),
        in_thread=True,
        plain=False,
        deadlines=deadlines,
        threads=threads,
    )
    try:
        first = asyncio.create_task(call(None, None))  # type: ignore[arg-type]
        second = asyncio.create_task(call(None, None))  # type: ignore[arg-type]
        with pytest.raises(HandlerTimeout, match=r"after 0\.1 s .*its thread is abandoned"):
            await first
        with pytest.raises(HandlerTimeout, match=r"no handler thread free within 0\.1 s"):
            await second
    finally:
        gate.set()
        deadlines.close()
        threads.shutdown()
