"""The settle phase: finished jobs are settled many per script call, flushed every few
milliseconds; each answer is counted, logged and handed to the ``on_settled`` hook
(:class:`Settler`)."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import logging
import time
from collections.abc import Callable
from typing import Any

from scrapeq.engine.lua.scripts import Settled, Settlement
from scrapeq.engine.model.job import Job
from scrapeq.errors import ScriptError
from scrapeq.runtime import progress
from scrapeq.runtime.backoff import backoff
from scrapeq.runtime.records import log_deferred
from scrapeq.runtime.reporter import SEED_DEFERRED, log_seed_deferred
from scrapeq.runtime.worker_core import RECONNECT_MAX, RECONNECT_MIN, Pending, WorkerCore

log = logging.getLogger("scrapeq.worker")

#: Most settlements sent in one script call.
SETTLE_MAX = 500
#: Settle buffer flush period, seconds.
SETTLE_EVERY = 0.005


class Settler(WorkerCore):
    """The settle buffer of a worker: ``_pending`` sent by ``_flush``, answers counted."""

    def _log_outcome(self, job: Job, settlement: Settlement, status: Settled) -> None:
        self.stats.count(status)
        if self.metrics is not None:
            self.metrics.settled(job.lane, status)
        if status == "done":  # the common case: one cached level check
            if log.isEnabledFor(logging.DEBUG):
                where = {"job_id": job.id, "domain": job.domain}
                log.debug("done job=%s domain=%s", job.id, job.domain, extra=where)
        elif status == "dead":
            reason = status.reason or settlement.reason or "failed"  # the script's reason
            log.info(
                "dead letter job=%s domain=%s reason=%s kind=%s",
                job.id, job.domain, reason, settlement.kind,
                extra={"job_id": job.id, "domain": job.domain, "kind": settlement.kind,
                       "reason": reason},
            )  # fmt: skip
        elif status == "stale":
            log.warning("job %s: lease lost before settling (stale token)", job.id,
                        extra={"job_id": job.id, "domain": job.domain})  # fmt: skip
        elif self.follow_links and job.depth == 0 and status in SEED_DEFERRED:
            log_seed_deferred(job, _as_drawn(settlement, status), status)  # say why it waits
        elif log.isEnabledFor(logging.DEBUG):
            log_deferred(job, _as_drawn(settlement, status), status)

    def _call_hook(self, hook: Callable[..., Any], *args: Any) -> None:
        """Call a hook of the user's (``on_claimed``, ``on_settled``): a coroutine it returns
        runs as a task of this run (awaited before it ends); an error is logged, never ours."""
        try:
            ran = hook(*args)
        except Exception:
            log.exception("hook %s failed", getattr(hook, "__name__", hook))
            return
        if inspect.isawaitable(ran):
            task = asyncio.ensure_future(ran)
            self._hook_tasks.add(task)
            task.add_done_callback(self._hook_done)

    def _hook_done(self, task: asyncio.Future[Any]) -> None:
        self._hook_tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("hook failed", exc_info=task.exception())

    async def _submit(self, settlement: Settlement, job: Job | None = None) -> Settled:
        """Buffer a settlement and wait for its answer (counted and logged with ``job``)."""
        future: asyncio.Future[Settled] = asyncio.get_running_loop().create_future()
        self._pending.append((settlement, job, future))
        return await future

    def _answer(self, item: Pending, status: Settled) -> None:
        settlement, job, future = item
        if job is not None:
            self._log_outcome(job, settlement, status)
            if self.on_settled is not None:
                self._call_hook(self.on_settled, job, settlement, status)
        if future is not None and not future.done():
            future.set_result(status)

    def _answer_all(self, batch: list[Pending], statuses: list[Settled]) -> None:
        """:meth:`_answer` each item of a settled batch; a job done with nothing more to do
        for it (no future awaiting it, no metrics, no ``on_settled`` hook, no debug line) is
        counted in bulk: it is most of a batch, and four calls each."""
        if (
            self.metrics is not None
            or self.on_settled is not None
            or log.isEnabledFor(logging.DEBUG)
        ):
            for item, status in zip(batch, statuses, strict=True):
                self._answer(item, status)
            return
        done = 0
        for item, status in zip(batch, statuses, strict=True):
            if status == "done" and item[2] is None and item[1] is not None:
                done += 1
            else:
                self._answer(item, status)
        self.stats.done += done

    async def _settle_loop(self) -> None:
        while not self._loops_end.is_set():
            await asyncio.sleep(SETTLE_EVERY)
            if self._gather.settle_due(self._pending, time.monotonic()):
                await self._flush()
                self._gather.settled()

    async def _flush(self) -> None:
        # One flush at a time: the exit path's last flush waits for the settle loop's call in
        # flight (its answers counted) before the loop is cancelled, never in mid-call.
        async with self._flush_lock:
            await self._flush_pending()

    async def _flush_pending(self) -> None:
        failures = 0  # settle calls failed in a row: the reconnect's backoff
        while self._pending:
            batch, self._pending = self._pending[:SETTLE_MAX], self._pending[SETTLE_MAX:]
            sent = time.monotonic()
            try:
                statuses = await self.queue.settle_many([item[0] for item in batch])
            except asyncio.CancelledError:  # unanswered: still ours (and counted at exit)
                self._pending = batch + self._pending
                raise
            except ScriptError as exc:  # a deterministic refusal: never let it block the rest
                await self._settle_singly(batch, exc)
                continue
            except Exception as exc:  # keep the batch: this task must never die
                self._pending = batch + self._pending
                self._redis_failed(exc, "settling")
                failures += 1
                await asyncio.sleep(backoff(RECONNECT_MIN, failures, RECONNECT_MAX))
                continue
            self._health.ok(sent)
            progress.settled(len(batch))
            self._answer_all(batch, statuses)
            self._landed()

    def _landed(self) -> None:
        """Settlements landed: their domains' slots are free in Redis, the claim loop may
        claim again (runtime/gather.py: the queue moved)."""
        self._gather.moved()
        self._queue_moved.set()
        self._slot_freed.set()

    async def _settle_singly(self, batch: list[Pending], exc: Exception) -> None:
        """Settle a refused batch item by item; an item refused alone is left to its lease."""
        log.warning("settle batch refused (%s): settling its %d items one by one", exc, len(batch))
        for item in batch:
            settlement = item[0]
            try:
                (status,) = await self.queue.settle_many([settlement])
            except ScriptError as one:
                log.error("job %s: settlement refused, its lease will expire: %s",
                          settlement.job_id, one)  # fmt: skip
                status = Settled("error")
            except Exception:
                self._pending.insert(0, item)
                continue
            progress.settled(1)
            self._answer(item, status)
        self._landed()


def _as_drawn(settlement: Settlement, status: Settled) -> Settlement:
    """The settlement with the delay the settle script drew for it (a ``backoff`` item)."""
    if status.delay_ms is None:
        return settlement
    return dataclasses.replace(settlement, delay_ms=status.delay_ms)
