"""Results into a SQLite table (the standard library's ``sqlite3``)."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from scrapeq.errors import ConfigError

from ._batch import BatchSink
from ._rows import COLUMNS, KEY, row_of, table_name

__all__ = ["SqliteSink"]

#: Seconds a write waits for another process's transaction on the same file.
BUSY_TIMEOUT = 30.0

_TYPES = {"depth": "INTEGER", "status": "INTEGER", "attempts": "INTEGER", "bytes": "INTEGER",
          "elapsed_ms": "REAL"}  # fmt: skip


def _create_sql(table: str) -> str:
    columns = ",\n  ".join(
        f"{c} {_TYPES.get(c, 'TEXT')}" + (" PRIMARY KEY" if c == KEY else "")
        + (" NOT NULL" if c in (KEY, "url", "outcome") else "")
        for c in COLUMNS
    )  # fmt: skip
    return f"CREATE TABLE IF NOT EXISTS {table} (\n  {columns}\n)"


def _upsert_sql(table: str) -> str:
    names = ", ".join(COLUMNS)
    marks = ", ".join("?" for _ in COLUMNS)
    updates = ", ".join(f"{c} = excluded.{c}" for c in COLUMNS if c != KEY)
    return (
        f"INSERT INTO {table} ({names}) VALUES ({marks}) ON CONFLICT({KEY}) DO UPDATE SET {updates}"
    )


class SqliteSink(BatchSink):
    """Upsert one row per job into ``table`` of the SQLite file ``path``.

    The table (docs/INTERFACE.md, "Results in a database") is created on first use, or
    checked: a table missing a column, or whose ``job_id`` is not its key, is a ConfigError
    before anything is written. Batches are one ``BEGIN IMMEDIATE`` transaction each; the
    file is in WAL mode, so several worker processes may share it (a writer waits up to
    :data:`BUSY_TIMEOUT` seconds for another). A committed row survives a crash of the worker
    (``synchronous=NORMAL``: the JSONL sink's guarantee).

    Args:
        path: the database file (created with its folders if missing).
        table: the table's name (letters, digits, _).
    """

    def __init__(self, path: str | Path, table: str = "results") -> None:
        super().__init__()
        self.path = Path(path)
        self.table = table_name(table)
        self._db: sqlite3.Connection | None = None
        self._upsert = _upsert_sql(self.table)

    def _connect(self) -> sqlite3.Connection:
        if self._db is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(
                self.path, timeout=BUSY_TIMEOUT, isolation_level=None, check_same_thread=False
            )
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            self._db = db
        return self._db

    def _prepare(self) -> None:
        try:
            db = self._connect()
            db.execute(_create_sql(self.table))
            _check_layout(db, self.table)
        except sqlite3.Error as exc:
            self._disconnect()
            raise ConfigError("results", f"sqlite {self.path}: {exc}") from exc

    def _store(self, rows: Sequence[tuple[Any, ...]]) -> None:
        db = self._connect()
        try:
            db.execute("BEGIN IMMEDIATE")
            db.executemany(self._upsert, rows)
            db.execute("COMMIT")
        except BaseException:
            self._disconnect()  # rolls back; the next batch connects again
            raise

    def _row(self, record: dict[str, Any]) -> tuple[Any, ...]:
        return row_of(record)

    def _row_error(self, exc: Exception) -> bool:
        return isinstance(exc, sqlite3.DataError | sqlite3.IntegrityError)

    def _disconnect(self) -> None:
        if self._db is not None:
            db, self._db = self._db, None
            db.close()


def _check_layout(db: sqlite3.Connection, table: str) -> None:
    info = db.execute(f"PRAGMA table_info({table})").fetchall()
    have = {row[1]: row for row in info}
    missing = [c for c in COLUMNS if c not in have]
    if missing:
        raise ConfigError(
            "results",
            f"table {table} has no column {', '.join(missing)}: "
            "use another table (?table=NAME) or add them",
        )
    keys = [row[1] for row in info if row[5]]
    if keys != [KEY] and not _unique_on_key(db, table):
        message = f"table {table}: {KEY} must be its primary key (one row per job)"
        raise ConfigError("results", message)


def _unique_on_key(db: sqlite3.Connection, table: str) -> bool:
    for index in db.execute(f"PRAGMA index_list({table})").fetchall():
        if index[2]:  # unique
            cols = [r[2] for r in db.execute(f'PRAGMA index_info("{index[1]}")').fetchall()]
            if cols == [KEY]:
                return True
    return False
