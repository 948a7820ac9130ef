"""Run N worker processes under one supervisor.

Each child is its own process with its own event loop and connections. The supervisor
forwards SIGTERM/SIGINT to every child as SIGTERM (a second signal is forwarded again, which
makes the children release at once), and restarts a child that crashed (non-zero exit while
nobody asked it to stop) with a capped backoff. With ``--burst`` a child that exits 0 is done
and is not restarted; the supervisor returns once every child has exited. A child still alive
``kill_after`` seconds after the first signal (the CLI passes ``shutdown_grace`` plus
:data:`KILL_MARGIN`), or :data:`KILL_MARGIN` seconds after a second one, is killed (SIGKILL):
a worker bounds its own exit, so one that overstays is wedged (a C call that never returns),
and its jobs are safe with their leases.

Children start with SIGINT ignored: a terminal's Ctrl-C signals the whole foreground process
group, and a child that took it directly *and* as the forwarded SIGTERM would see two
signals and release its jobs at once instead of draining them. On Linux a child also gets
SIGTERM when the supervisor dies (even by SIGKILL), so no worker outlives its supervisor.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import multiprocessing
import multiprocessing.process
import os
import signal
import sys
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

__all__ = ["supervise"]

log = logging.getLogger("scrapeq.supervisor")

RESTART_MIN, RESTART_MAX = 0.5, 30.0
#: Seconds a child may take past its grace period before it is killed: a worker's own exit
#: bound past the grace (``worker.EXIT_MARGIN``, 3 s) plus closing its connections and the
#: interpreter's exit, with room to spare on a loaded machine.
KILL_MARGIN = 10.0
_PR_SET_PDEATHSIG = 1


def _child_main(target: Callable[..., int], args: tuple[Any, ...], parent: int) -> None:
    """Body of a child process: die with the supervisor, exit with ``target``'s answer."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:  # the supervisor died before prctl took effect
            os.kill(os.getpid(), signal.SIGTERM)
    sys.exit(target(*args))


class _Supervisor:
    def __init__(
        self,
        target: Callable[..., int],
        args: tuple[Any, ...],
        processes: int,
        kill_after: float | None,
    ) -> None:
        self._ctx = multiprocessing.get_context("spawn")
        self._target = target
        self._args = args
        self._children: dict[int, multiprocessing.process.BaseProcess] = {}
        self._restart_at: dict[int, float] = {}
        self._backoff: dict[int, float] = {}
        self._stopping = 0
        self._processes = processes
        self._exit = 0
        self._kill_after = kill_after
        self._kill_at: float | None = None  # monotonic time children still alive are killed

    def _spawn(self, slot: int) -> None:
        proc = self._ctx.Process(
            target=_child_main,
            args=(self._target, (*self._args, slot), os.getpid()),
            name=f"scrapeq-worker-{slot}",
        )
        # The child inherits an ignored SIGINT (see the module docstring). SIGINT is blocked
        # meanwhile so one sent to the supervisor now is delivered afterwards, not dropped.
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        handler = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            proc.start()
        finally:
            signal.signal(signal.SIGINT, handler)
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        self._children[slot] = proc
        log.info("worker process %d started pid=%s", slot, proc.pid)
        if self._stopping and proc.pid is not None:  # a signal came while it was starting
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGTERM)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._stopping += 1
        if self._kill_after is not None:
            wait = self._kill_after if self._stopping == 1 else KILL_MARGIN
            at = time.monotonic() + wait
            self._kill_at = at if self._kill_at is None else min(self._kill_at, at)
        log.info("supervisor got %s: forwarding", signal.Signals(signum).name)
        for proc in self._children.values():
            if proc.is_alive() and proc.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGTERM)

    def _reap(self, slot: int, proc: multiprocessing.process.BaseProcess) -> None:
        code = proc.exitcode
        del self._children[slot]
        if code == 0 or self._stopping:
            if code not in (0, None, -signal.SIGTERM):
                self._exit = 1
            return
        delay = self._backoff.get(slot, RESTART_MIN)
        self._backoff[slot] = min(delay * 2, RESTART_MAX)
        self._restart_at[slot] = time.monotonic() + delay
        log.warning("worker process %d died (exit %s): restarting in %.1f s", slot, code, delay)

    def _kill_overstaying(self) -> None:
        for slot, proc in self._children.items():
            if proc.is_alive() and proc.pid is not None:
                log.warning("worker process %d did not exit after the signal: killing it", slot)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGKILL)
        self._kill_at = None

    def run(self) -> int:
        previous = {s: signal.signal(s, self._on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
        try:
            for slot in range(self._processes):
                self._spawn(slot)
            while self._children or (self._restart_at and not self._stopping):
                for slot, proc in list(self._children.items()):
                    if not proc.is_alive():
                        proc.join()
                        self._reap(slot, proc)
                now = time.monotonic()
                for slot, at in list(self._restart_at.items()):
                    if self._stopping:
                        self._restart_at.clear()
                    elif at <= now:
                        del self._restart_at[slot]
                        self._spawn(slot)
                if self._kill_at is not None and now >= self._kill_at:
                    self._kill_overstaying()
                time.sleep(0.1)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        return self._exit


def supervise(
    target: Callable[..., int],
    args: tuple[Any, ...],
    processes: int,
    *,
    kill_after: float | None = None,
) -> int:
    """Run ``target(*args, slot)`` in ``processes`` child processes; answers the exit code.

    Args:
        target: the body of a child; must be importable (a module-level function): children
            are spawned.
        args: its arguments, before the child's slot number.
        processes: how many children.
        kill_after: seconds after the first SIGTERM/SIGINT when children still alive are
            killed (SIGKILL); after a second signal, :data:`KILL_MARGIN` seconds at most.
            ``None`` (the default): never.

    Returns:
        0, or 1 when a child ended otherwise than by exit 0 or SIGTERM while stopping (a
        killed child included).
    """
    return _Supervisor(target, args, processes, kill_after).run()
