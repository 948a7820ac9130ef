"""Many total deadlines of one length, kept by one timer.

``asyncio.timeout()`` schedules a timer handle per use and leaves it, cancelled, in the event
loop's heap until the heap is cleaned; at thousands of fetches a second that bookkeeping is a
large share of the client's CPU (measured in docs/BENCHMARKS.md). The fetcher's deadlines all
have the same length (``request_timeout``), so they fall due in the order they were set: one
ordered dict of open deadlines and one task that sleeps until the oldest one is due serve
them all, and a deadline that ends in time costs a dict insert and delete.

Semantics follow ``asyncio.timeout()``: at the deadline the task is cancelled, and the
``CancelledError`` leaving the ``with`` block becomes a :class:`TimeoutError`, unless the
task was also cancelled by someone else (then it stays a ``CancelledError``).
"""

from __future__ import annotations

import asyncio
import contextlib
from types import TracebackType

__all__ = ["Deadline", "Deadlines"]


class Deadline:
    """One open deadline: a sync context manager used inside a task."""

    __slots__ = ("_cancelling", "_owner", "_task", "due", "fired")

    def __init__(self, owner: Deadlines, task: asyncio.Task[object]) -> None:
        self._owner = owner
        self._task = task
        self._cancelling = 0
        self.due = 0.0
        self.fired = False

    def __enter__(self) -> Deadline:
        self._cancelling = self._task.cancelling()
        owner = self._owner  # opened: due in order, the timer started if none runs
        loop = asyncio.get_running_loop()
        self.due = loop.time() + owner.seconds
        owner._open_[self] = None
        if owner._timer is None:
            owner._timer = loop.create_task(owner._watch())
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        owner = self._owner  # closed: the timer stops with the last one
        owner._open_.pop(self, None)
        if not owner._open_ and owner._timer is not None:
            # Nothing left to watch: stop the timer now (a new deadline starts a new one).
            timer, owner._timer = owner._timer, None
            timer.cancel()
        if not self.fired:
            return
        # Take back our cancellation (always, as asyncio.timeout does); it is ours to turn
        # into a TimeoutError only when nobody else cancelled the task meanwhile.
        ours_only = self._task.uncancel() <= self._cancelling
        if ours_only and exc_type is asyncio.CancelledError:
            raise TimeoutError from exc

    def expire(self) -> None:
        """Called by the timer at the deadline: cancel the task."""
        self.fired = True
        self._task.cancel()


class Deadlines:
    """Deadlines of ``seconds`` each, for any number of tasks of one event loop.

    ``with deadlines.start():`` inside a task bounds the block like
    ``async with asyncio.timeout(seconds):``. Call :meth:`close` when done (an idle instance
    holds no task: the timer stops when no deadline is open).
    """

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._open_: dict[Deadline, None] = {}  # insertion order = due order
        self._timer: asyncio.Task[None] | None = None

    def start(self) -> Deadline:
        """A deadline ``seconds`` from when its ``with`` block is entered (in a task)."""
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("a deadline must be used inside a task")
        return Deadline(self, task)

    def __len__(self) -> int:
        return len(self._open_)

    async def _watch(self) -> None:
        me = asyncio.current_task()
        loop = asyncio.get_running_loop()
        try:
            while self._open_:
                oldest = next(iter(self._open_))
                wait = oldest.due - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                    continue
                del self._open_[oldest]
                oldest.expire()
        finally:
            if self._timer is me:
                self._timer = None

    def close(self) -> None:
        """Stop the timer; open deadlines no longer fire."""
        timer, self._timer = self._timer, None
        if timer is not None:
            with contextlib.suppress(RuntimeError):  # its loop may be closed already
                timer.cancel()
        self._open_.clear()
