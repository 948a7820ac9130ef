"""A worker's wake-up on urgent work: claim as soon as it is enqueued, not at the next poll.

An idle claim loop sleeps until a slot frees or something is due, up to ``IDLE_MAX``; a job
of the most urgent lane enqueued meanwhile would wait for it. :func:`wake_on_urgent` blocks
on the queue's wake streams (:class:`~scrapeq.engine.facades.wake.UrgentSignal`) and wakes the claim
loop when one moves. A Redis error pauses it briefly (the claim loop reports Redis lost).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from redis.exceptions import RedisError

from scrapeq.engine.facades.wake import UrgentSignal
from scrapeq.engine.queue import AsyncQueue
from scrapeq.errors import RedisUnavailable

__all__ = ["wake_on_urgent"]

log = logging.getLogger("scrapeq.worker")

#: Longest blocking read, seconds (well within the client's socket timeout).
BLOCK = 1.0
#: Pause after a failed read, seconds.
RETRY = 1.0


async def wake_on_urgent(queue: AsyncQueue, wake: Callable[[], None], stop: asyncio.Event) -> None:
    """Call ``wake`` each time urgent work is enqueued on ``queue``, until ``stop`` is set."""
    signal = UrgentSignal(queue)
    if not signal.usable:
        log.debug("no wake-up on urgent work: the queue's partitions span cluster slots")
        return
    while not stop.is_set():
        try:
            if await signal.wait(BLOCK):
                queue.urgent_arrived()
                wake()
        except (RedisError, RedisUnavailable, OSError):
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), RETRY)
