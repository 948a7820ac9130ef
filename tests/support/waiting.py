"""Waiting for a state in an async test: poll a condition until a deadline, never a bare sleep.

A test that must act once something has happened (requests in flight, a worker's leases
taken) polls for it with :func:`until`: it goes on as soon as the state holds, and under
load (``make test`` runs two workers on two cores) it waits as long as it takes, up to the
deadline, where a fixed sleep would race. The blocking twin is
:func:`support.processes.wait_until`.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")

#: Seconds between two looks at the condition.
POLL = 0.02


async def until(cond: Callable[[], T | Awaitable[T]], timeout: float, what: str) -> T:
    """Poll ``cond`` (a plain or an async callable) until it answers something true; answer
    that value. Fails the test after ``timeout`` seconds, naming ``what`` it waited for."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value  # type: ignore[return-value]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(POLL)
