"""Run N worker processes under one supervisor.

Each child is its own process with its own event loop and connections. The supervisor
forwards SIGTERM/SIGINT to every child as SIGTERM (a second signal is forwarded again, which
makes the children release at once), and restarts a child that crashed (non-zero exit while
nobody asked it to stop). With ``--burst`` a child that exits 0 is done and is not restarted;
the supervisor returns once every child has exited. A child still alive ``kill_after``
seconds after the first signal (the CLI passes ``shutdown_grace`` plus :data:`KILL_MARGIN`),
or :data:`KILL_MARGIN` seconds after a second one, is killed (SIGKILL): a worker bounds its
own exit (``shutdown_grace`` plus ``worker.EXIT_MARGIN``), so one that overstays is wedged (a
C call that never returns), and its jobs are safe with their leases.

Restarts never starve the queue (:func:`restart_delay`): a child that died after doing useful
work (it settled a job: :mod:`.progress`, or lived :data:`STABLE_AFTER` seconds) restarts
after :data:`RESTART_MIN`, since its death was one job's doing (a handler calling
``os._exit``, a parser's segfault) and the queue's other jobs are waiting; only a child that
dies at once again and again (a broken start) is restarted ever later, doubling up to
:data:`RESTART_MAX`, low enough that a slot comes back while the cause may have gone.

A child's arguments may be built again before each start (``refresh``): a restarted child
then starts from what its parent knows now (the proxy file read again, or the last pool
read well), and a setting that went bad mid-run cannot make a crash loop of its restarts.

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

from scrapeq.runtime import backoff as waits
from scrapeq.runtime import progress
from scrapeq.runtime.process_exit import exit_now

__all__ = ["restart_delay", "supervise"]

log = logging.getLogger("scrapeq.supervisor")

#: Seconds before a dead child is started again: at least RESTART_MIN, doubling while its
#: successors die at once, at most RESTART_MAX (see :func:`restart_delay`).
RESTART_MIN, RESTART_MAX = 0.5, 5.0
#: A child alive this long did useful work, whether or not it settled anything (an idle
#: queue): its death resets the backoff like a settlement does.
STABLE_AFTER = 10.0
#: Seconds a child may take past its grace period before it is killed: a worker's own exit
#: bound past the grace (``worker.EXIT_MARGIN``, 3 s, its teardown included) plus a second
#: for a machine so loaded that the teardown overran its share.
KILL_MARGIN = 4.0
#: Seconds the summary logged after the children may wait for Redis (a healthy one answers
#: its three calls in milliseconds): when Redis stopped answering, the children exit by
#: ``shutdown_grace`` plus ``worker.EXIT_MARGIN`` and the supervisor well within 5 s of it.
SUMMARY_MARGIN = 0.5
_PR_SET_PDEATHSIG = 1


def restart_delay(backoff: float | None, worked: bool) -> tuple[float, float]:
    """When to start a dead child's successor: ``(delay, next backoff)``, seconds.

    Args:
        backoff: the slot's current backoff (None: no child of the slot died yet).
        worked: the dead child settled a job or lived :data:`STABLE_AFTER` seconds.

    A child that worked restarts after :data:`RESTART_MIN`; one that did not waits the
    slot's backoff, which doubles (capped at :data:`RESTART_MAX`) until a child works.
    """
    delay = RESTART_MIN if worked or backoff is None else backoff
    return delay, waits.backoff(delay, 2, RESTART_MAX)  # one failure more: doubled, capped


def _child_main(
    target: Callable[..., int], args: tuple[Any, ...], parent: int, counter: progress.Counter
) -> None:
    """Body of a child process: die with the supervisor, count its settlements for it
    (:mod:`.progress`), exit with ``target``'s answer."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:  # the supervisor died before prctl took effect
            os.kill(os.getpid(), signal.SIGTERM)
    progress.install(counter)
    code = target(*args)
    # Done: its jobs are settled or left to their leases, its files and connections closed.
    exit_now(code)  # without the interpreter's finalization (runtime/process_exit.py)


class _Supervisor:
    def __init__(
        self,
        target: Callable[..., int],
        args: tuple[Any, ...],
        processes: int,
        kill_after: float | None,
        refresh: Callable[[], tuple[Any, ...]] | None = None,
    ) -> None:
        self._ctx = multiprocessing.get_context("spawn")
        self._target = target
        self._args = args
        self._refresh = refresh
        self._children: dict[int, multiprocessing.process.BaseProcess] = {}
        self._restart_at: dict[int, float] = {}
        self._backoff: dict[int, float] = {}
        self._started: dict[int, float] = {}  # slot -> monotonic time its child started
        self._settled = {slot: self._ctx.RawValue("Q", 0) for slot in range(processes)}
        self._stopping = 0
        self._processes = processes
        self._exit = 0
        self._kill_after = kill_after
        self._kill_at: float | None = None  # monotonic time children still alive are killed

    def _spawn(self, slot: int) -> None:
        self._settled[slot].value = 0
        args = self._args if self._refresh is None else self._refresh()
        proc = self._ctx.Process(
            target=_child_main,
            args=(self._target, (*args, slot), os.getpid(), self._settled[slot]),
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
        self._started[slot] = time.monotonic()
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
        settled = self._settled[slot].value
        lived = time.monotonic() - self._started[slot]
        worked = settled > 0 or lived >= STABLE_AFTER
        delay, self._backoff[slot] = restart_delay(self._backoff.get(slot), worked)
        self._restart_at[slot] = time.monotonic() + delay
        log.warning(
            "worker process %d died (exit %s) after %.1f s having settled %d jobs: "
            "restarting in %.1f s",
            slot, code, lived, settled, delay,
        )  # fmt: skip

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
    refresh: Callable[[], tuple[Any, ...]] | None = None,
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
        refresh: called before each child is started, in this process: the ``args`` that
            child gets (the CLI reads the proxy file again there, keeping the last good pool
            when it no longer parses: ``interfaces/cli/workers.py``). None: ``args``.

    Returns:
        0, or 1 when a child ended otherwise than by exit 0 or SIGTERM while stopping (a
        killed child included).
    """
    return _Supervisor(target, args, processes, kill_after, refresh).run()
