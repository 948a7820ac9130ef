"""What a worker tells Redis of its browsers (issue 42): benched, or usable again.

A worker's browser pool benched after crashes or failed launches in a row
(:mod:`.browser_pool`) is said in Redis (``lua/browser_down-1.lua``) so that ``status``, its
``--json``, the dashboard, ``/metrics`` and the progress line raise the ``browsers_down``
alarm, as ``exits_down`` is raised when every proxy rests. The state sent is always the
pool's current one (a bench and its end in quick succession cannot arrive reversed).
"""

from __future__ import annotations

import asyncio
import logging

from scrapeq.engine.model.urls import redact_text
from scrapeq.engine.queue import AsyncQueue
from scrapeq.runtime.browser_pool import BrowserPool

__all__ = ["BenchNotice"]

log = logging.getLogger("scrapeq.browser")


class BenchNotice:
    """Tells the queue when ``pool`` is benched or back (set as its ``on_bench``).

    Args:
        queue: the worker's queue.
        worker: this worker process's name (its reporter's id: host:pid:random).
        pool: the browsers.
    """

    def __init__(self, queue: AsyncQueue, worker: str, pool: BrowserPool) -> None:
        self.queue = queue
        self.worker = worker
        self.pool = pool
        self._lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[None]] = set()
        self._said = False  # an entry of ours may be in Redis
        pool.on_bench = self

    def __call__(self, wait: float | None) -> None:
        task = asyncio.get_running_loop().create_task(self._send())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send(self) -> None:
        async with self._lock:
            state = self.pool.bench()
            try:
                if state is None:
                    await self.queue.browser_down(self.worker, None)
                    self._said = False
                else:
                    wait, failures, why = state
                    self._said = True
                    await self.queue.browser_down(
                        self.worker, wait, failures=failures, reason=redact_text(why)
                    )
            except Exception as exc:  # the alarm only: the bench itself is in the pool
                log.warning("could not tell the queue of this worker's browsers: %s", exc)

    async def close(self) -> None:
        """At the worker's end: its entry removed (a stopped worker's browsers wait for
        nothing)."""
        for task in list(self._tasks):
            await asyncio.gather(task, return_exceptions=True)
        if self._said:
            async with self._lock:
                try:
                    await self.queue.browser_down(self.worker, None)
                except Exception as exc:
                    log.debug("could not clear this worker's browsers_down: %s", exc)
                self._said = False
