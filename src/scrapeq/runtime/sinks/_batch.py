"""Group commit for the database sinks: the records waiting while one batch is written go in
the next, one transaction each.

A ``write`` returns once the transaction holding its record committed (the worker acks the job
only then), and raises when it failed: the worker then releases the job without spending an
attempt and pauses claiming. When the store refused that record alone for its content (a data
error, the record written again alone), it raises :class:`~._base.RecordRefused`: the worker
then writes the job's line without its result. The store is used from one thread of its own
(a database driver blocks, and a SQLite connection belongs to a thread); it is a daemon
thread, so a store that never answers cannot hold the process's exit.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, Generic, Protocol, TypeVar

from scrapeq.runtime.handlers import DaemonThreads

from ._base import RecordRefused
from ._rows import row_of

__all__ = ["BatchSink"]

#: Rows per transaction, at most.
MAX_BATCH = 500
#: Seconds a batch may take before its writes fail (the jobs are released).
WRITE_TIMEOUT = 60.0

_Waiting = tuple[tuple[Any, ...], "asyncio.Future[None]"]


class _Connection(Protocol):
    def close(self) -> None: ...


DB = TypeVar("DB", bound=_Connection)


class BatchSink(ABC, Generic[DB]):
    """A sink writing rows (:func:`~._rows.row_of`) in batches through :meth:`_store` on its
    own thread, over a database connection ``_db`` (None: not connected).

    Subclasses implement :meth:`_connect` (the connection, opened when there is none),
    :meth:`_prepare` (create or check the table; raise ConfigError for a layout it cannot
    use) and :meth:`_write` (rows in one transaction). Counters: ``batches`` and ``rows``
    written.
    """

    def __init__(self) -> None:
        self._waiting: list[_Waiting] = []
        self._flusher: asyncio.Task[None] | None = None
        self._thread = DaemonThreads(1, f"scrapeq-{type(self).__name__}")
        self._prepared = False
        self._db: DB | None = None
        self.batches = 0
        self.rows = 0

    async def open(self) -> None:
        """Create the table, or check the one there (before any job is claimed)."""
        if not self._prepared:
            await self._call(self._prepare)
            self._prepared = True

    async def write(self, record: dict[str, Any]) -> None:
        if not self._prepared:
            await self.open()
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append((self._row(record), future))
        if self._flusher is None:
            self._flusher = asyncio.create_task(self._flush())
        await future

    async def close(self) -> None:
        if self._flusher is not None:
            await asyncio.gather(self._flusher, return_exceptions=True)
        try:
            await self._call(self._disconnect)
        finally:
            self._thread.shutdown()
            # usable again: a later write connects (and checks the table) on a new thread
            self._thread = DaemonThreads(1, f"scrapeq-{type(self).__name__}")
            self._prepared = False

    async def _flush(self) -> None:
        try:
            while self._waiting:
                batch = self._waiting[:MAX_BATCH]
                del self._waiting[:MAX_BATCH]
                await self._write_batch(batch)
        finally:
            self._flusher = None

    async def _write_batch(self, batch: list[_Waiting]) -> None:
        """Write ``batch`` and answer its writers; never raises but a cancellation (which
        fails the writers not answered yet)."""
        try:
            await self._write_rows(batch)
        except asyncio.CancelledError as exc:
            _answer(batch, RuntimeError(f"sink write cancelled: {exc}"))
            raise
        except Exception as exc:
            if not self._row_error(exc):
                _answer(batch, exc)
                return
            if len(batch) == 1:  # this record's content: writing it again cannot work
                refused = self._refused(exc)
                refused.__cause__ = exc
                _answer(batch, refused)
                return
            # one record the store refuses (a NUL in a text, say) fails alone, not its batch
            for one in batch:
                await self._write_batch([one])
            return
        self.batches += 1
        self.rows += len(batch)
        _answer(batch, None)

    async def _write_rows(self, batch: list[_Waiting]) -> None:
        rows = [row for row, _ in batch]
        await asyncio.wait_for(self._call(self._store, rows), WRITE_TIMEOUT)

    async def _call(self, fn: Any, *args: Any) -> Any:
        return await asyncio.wrap_future(self._thread.submit(fn, *args))

    def _row_error(self, exc: Exception) -> bool:
        """Whether ``exc`` may come from one record of the batch (its rows are then written
        one by one, so the others are kept): a data error, not a lost connection."""
        return False

    def _refused(self, exc: Exception) -> RecordRefused:
        """What a write of one record whose store refused it (``exc``, a row error) raises."""
        text = str(exc).strip()
        return RecordRefused(text.splitlines()[0] if text else type(exc).__name__)

    def _store(self, rows: Sequence[tuple[Any, ...]]) -> None:
        db = self._connect()
        try:
            self._write(db, rows)
        except BaseException:
            self._disconnect()  # rolls back; the next batch connects again
            raise

    @abstractmethod
    def _connect(self) -> DB: ...

    @abstractmethod
    def _prepare(self) -> None: ...

    @abstractmethod
    def _write(self, db: DB, rows: Sequence[tuple[Any, ...]]) -> None: ...

    def _row(self, record: dict[str, Any]) -> tuple[Any, ...]:
        return row_of(record)

    def _disconnect(self) -> None:
        """Close the connection (a transaction not committed rolls back); the next batch
        connects again."""
        if self._db is not None:
            db, self._db = self._db, None
            db.close()


def _answer(batch: list[_Waiting], error: Exception | None) -> None:
    for _, future in batch:
        if future.done():
            continue
        if error is None:
            future.set_result(None)
        else:
            future.set_exception(error)
