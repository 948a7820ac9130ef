"""The sink protocol and the callable sink."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

__all__ = ["CallableSink", "RecordRefused", "Sink"]


class RecordRefused(Exception):
    """The store refused this one record for its content, not for being unreachable: a text
    PostgreSQL does not take (a NUL, ``\\u0000`` in JSON), a value too large for its column.
    Writing it again cannot work, so the worker writes the job's line without its result
    instead (docs/DESIGN.md, "Results lines"), where a store that is down gets the job
    released and claims paused.

    Attributes:
        reason: the store's first line about it (``unsupported Unicode escape sequence``).
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


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
