"""The sink protocol and the callable sink."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

__all__ = ["CallableSink", "Sink"]


@runtime_checkable
class Sink(Protocol):
    """Receives result records; ``write`` returning means the record is kept."""

    async def write(self, record: dict[str, Any]) -> None: ...

    async def close(self) -> None: ...


class CallableSink:
    """Hand each record to a function (sync functions run in a thread).

    Args:
        fn: called with the record; may be ``async``. An exception fails the write.
    """

    def __init__(self, fn: Callable[[dict[str, Any]], Any]) -> None:
        self._fn = fn
        self._is_async = inspect.iscoroutinefunction(fn)

    async def write(self, record: dict[str, Any]) -> None:
        if self._is_async:
            await self._fn(record)
        else:
            await asyncio.to_thread(self._fn, record)

    async def close(self) -> None:
        return None
