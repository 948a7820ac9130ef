"""Which job a dying worker process takes with it: handlers beside each other, or alone.

A worker process that dies (``os._exit`` in a handler, a parser's segfault, kill -9) says
nothing: its leases expire and another worker's claim reaps them. The reap spends the
attempt of a job whose handler was *marked* running (``heartbeat-1.lua``, ``h``) and gives
it back otherwise, at most 2 x ``max_attempts`` times per job (``unused``;
``housekeeping.lua``).
Marking every job would cost a Redis write before every handler; this module marks only
where the mark can tell: :class:`HandlerRunner` runs the handler of a job whose attempt was
given back before (``job.unused``) *alone* in the process (:class:`HandlerGate`), with its
lease marked, and keeps the gate until the job's settlement is answered. A death then is
that job's own. So a handler that kills its worker on one page costs that page its
attempts (one crash given back, then ``max_attempts`` spent) while the jobs in flight beside
it (waiting on the network, queued for a handler, or whose handlers ran beside it the first
time) come back without spending one.

A handler held past ``max_job_time`` is marked too (:meth:`HandlerRunner.abandoned`): its
worker lives, knows the handler overran, and leaves the job to its lease.

Limits: a sync handler abandoned at ``handler_timeout`` keeps running on its thread, so a
call "alone" after it may share the process with it; the built-in handler (ours, never the
cause) runs as it is, unmarked.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from scrapeq.engine.model.job import Job
from scrapeq.engine.queue import AsyncQueue
from scrapeq.runtime.fetch import Response

__all__ = ["HandlerGate", "HandlerRunner"]

log = logging.getLogger("scrapeq.worker")


class HandlerGate:
    """Who may run a handler now in this process: any number of calls, or one call alone
    (why: the module's docstring). A call alone (:meth:`alone`) waits until no other call
    runs, and none starts until it releases the gate; calls waiting to run alone go before
    calls that come later."""

    def __init__(self) -> None:
        self._running = 0
        self._alone = False
        self._queued = 0  # calls waiting to run alone
        self._waiters: list[asyncio.Future[None]] = []

    async def shared(self) -> None:
        """Wait for a turn beside the other calls (at once unless one runs or waits alone);
        pair with :meth:`leave`."""
        while self._alone or self._queued:
            await self._wait()
        self._running += 1

    def leave(self) -> None:
        """A call taken by :meth:`shared` ended."""
        self._running -= 1
        if self._running == 0:
            self._wake()

    async def alone(self) -> None:
        """Wait until no other call runs, then hold the gate; pair with :meth:`release`."""
        self._queued += 1
        try:
            while self._alone or self._running:
                await self._wait()
        finally:
            self._queued -= 1
            self._wake()  # a cancelled waiter may have held shared calls back
        self._alone = True

    def release(self) -> None:
        """The call taken by :meth:`alone` ended (its settlement answered)."""
        self._alone = False
        self._wake()

    async def _wait(self) -> None:
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        await waiter

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)


class HandlerRunner:
    """Calls the handler through a :class:`HandlerGate`, alone for a job with ``unused``.

    Args:
        queue: the worker's queue (marks go through it).
        call: the handler caller (:func:`.handlers.handler_caller`).
    """

    def __init__(self, queue: AsyncQueue, call: Callable[[Job, Response], Awaitable[Any]]) -> None:
        self.gate = HandlerGate()
        self._queue = queue
        self._call = call
        self._handling: set[str] = set()  # ids of jobs whose handler runs now
        self._alone: set[str] = set()  # ids of jobs holding the gate until settled
        self._to_mark: list[Job] = []  # handlers abandoned at max_job_time

    async def call(self, job: Job, response: Response) -> Any:
        """Run the handler: beside others, or alone and marked when the job's attempt was
        given back before. An alone job holds the gate until :meth:`settled`."""
        if job.unused:
            await self._enter_alone(job)
        else:
            await self.gate.shared()
        self._handling.add(job.id)
        try:
            return await self._call(job, response)
        finally:
            self._handling.discard(job.id)
            if job.id not in self._alone:
                self.gate.leave()

    def alone(self, job: Job) -> bool:
        """Whether ``job`` holds the gate: its settlement must be answered before the next
        handler runs (the settle clears the mark with the lease)."""
        return job.id in self._alone

    def settled(self, job: Job) -> None:
        """The job left the worker (settled, released or cancelled): free the gate it held."""
        if job.id in self._alone:
            self._alone.discard(job.id)
            self.gate.release()

    def abandoned(self, job: Job) -> None:
        """The attempt is given up at ``max_job_time``: a handler still running is to blame,
        so its lease is marked (by :meth:`mark_abandoned`) and its expiry spends the attempt."""
        if job.id in self._handling and job.id not in self._alone:
            self._to_mark.append(job)

    async def mark_abandoned(self) -> None:
        """Mark the leases of the handlers given up since the last call (best effort: an
        unmarked lease gives its attempt back, within its budget)."""
        if not self._to_mark:
            return
        jobs, self._to_mark = self._to_mark, []
        try:
            await self._queue.mark_handler_running(jobs)
        except Exception as exc:  # the heartbeat loop must never die
            log.warning("could not mark %d abandoned handlers: %s", len(jobs), exc)

    async def _enter_alone(self, job: Job) -> None:
        await self.gate.alone()
        self._alone.add(job.id)
        try:
            (marked,) = await self._queue.mark_handler_running([job])
        except asyncio.CancelledError:
            self.settled(job)
            raise
        except Exception as exc:  # Redis away: run unmarked (a death gives the attempt back)
            log.warning("job %s: could not mark its handler running: %s", job.id, exc)
            return
        if not marked:
            log.warning("job %s: lease lost before its handler ran alone", job.id)
