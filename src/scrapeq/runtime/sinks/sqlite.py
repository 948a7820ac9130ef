"""Results into a SQLite table (the standard library's ``sqlite3``)."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from scrapeq.errors import ConfigError

from ._batch import BatchSink
from ._rows import (
    ADDED,
    COLUMNS,
    KEY,
    LATEST,
    check_layout,
    check_types,
    create_sql,
    table_name,
    upsert_sql,
    view_sql,
)

__all__ = ["SqliteSink"]

log = logging.getLogger("scrapeq.sinks")

#: Seconds a write waits for another process's transaction on the same file.
BUSY_TIMEOUT = 30.0

_TYPES = {"depth": "INTEGER", "status": "INTEGER", "attempts": "INTEGER", "bytes": "INTEGER",
          "elapsed_ms": "REAL", "changed": "INTEGER", "not_modified": "INTEGER"}  # fmt: skip


def _wanted(column: str) -> tuple[str, frozenset[str]]:
    """The type the sink writes in ``column`` and a STRICT table's types that keep it."""
    kind = _TYPES.get(column, "TEXT")
    return kind, frozenset({kind, "ANY", "INT"} if kind == "INTEGER" else {kind, "ANY"})


_WANTED = {c: _wanted(c) for c in COLUMNS}


class SqliteSink(BatchSink[sqlite3.Connection]):
    """Upsert one row per job into ``table`` of the SQLite file ``path``.

    The table (docs/INTERFACE.md, "Results in a database") is created on first use, or
    checked: a table missing a column, whose ``job_id`` is not its key, or (a STRICT table)
    with a column whose type cannot hold what the sink writes there, is a ConfigError before
    anything is written. Batches are one ``BEGIN IMMEDIATE`` transaction each; the
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
        self._upsert = upsert_sql(self.table, ["?"] * len(COLUMNS))

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
            db.execute(create_sql(self.table, _TYPES, "TEXT", (KEY, "url", "outcome")))
            added = _migrate(db, self.table)
            _check_layout(db, self.table)
            _make_view(db, self.table, again=added)
        except sqlite3.Error as exc:
            self._disconnect()
            raise ConfigError("results", f"sqlite {self.path}: {exc}") from exc

    def _write(self, db: sqlite3.Connection, rows: Sequence[tuple[Any, ...]]) -> None:
        db.execute("BEGIN IMMEDIATE")
        db.executemany(self._upsert, rows)
        db.execute("COMMIT")

    def _row_error(self, exc: Exception) -> bool:
        return isinstance(exc, sqlite3.DataError | sqlite3.IntegrityError)


def _migrate(db: sqlite3.Connection, table: str) -> bool:
    """Add the columns of :data:`ADDED` the table lacks (a table of an earlier scrapeq);
    answers whether it added any. Another process adding the same column meanwhile is
    fine."""
    have = {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
    if not have:
        return False  # no such table: the layout check says so
    added = False
    for column in ADDED:
        if column not in have:
            try:
                db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {_TYPES.get(column, 'TEXT')}")
            except sqlite3.OperationalError as exc:
                if "duplicate column" not in str(exc):
                    raise
            added = True
    return added


def _make_view(db: sqlite3.Connection, table: str, *, again: bool) -> None:
    """The view ``<table>_latest`` (``_rows.view_sql``), made when missing, or ``again``
    (columns were added). A table or view of that name made by someone else is left alone."""
    select = view_sql(table)
    if select is None:
        return
    view = table + LATEST
    found = db.execute("SELECT type FROM sqlite_master WHERE name = ?", (view,)).fetchone()
    if found is not None and (found[0] != "view" or not again):
        if found[0] != "view":
            log.warning("results table %s: %s is a %s, not scrapeq's view of each URL's "
                        "latest row: left as it is", table, view, found[0])  # fmt: skip
        return
    db.execute("BEGIN IMMEDIATE")
    try:
        db.execute(f"DROP VIEW IF EXISTS {view}")
        db.execute(f"CREATE VIEW {view} AS {select}")
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise


def _check_layout(db: sqlite3.Connection, table: str) -> None:
    info = db.execute(f"PRAGMA table_info({table})").fetchall()
    keys = [row[1] for row in info if row[5]]
    check_layout(
        table, {row[1] for row in info}, lambda: keys == [KEY] or _unique_on_key(db, table)
    )
    # SQLite's types are affinities: a table that is not STRICT takes any value in any column
    # (an INTEGER or TIMESTAMP finished_at keeps the ISO text, a JSON column the JSON text),
    # so only a STRICT table's types, which refuse a value of another type at every write,
    # are checked (STRICT came with SQLite 3.37, as pragma_table_list).
    if sqlite3.sqlite_version_info >= (3, 37) and db.execute(
        "SELECT strict FROM pragma_table_list WHERE name = ? AND schema = 'main'", (table,)
    ).fetchone() == (1,):
        types = {row[1]: (row[2], row[2].upper()) for row in info}
        check_types(table, types, _WANTED)


def _unique_on_key(db: sqlite3.Connection, table: str) -> bool:
    for index in db.execute(f"PRAGMA index_list({table})").fetchall():
        if index[2]:  # unique
            cols = [r[2] for r in db.execute(f'PRAGMA index_info("{index[1]}")').fetchall()]
            if cols == [KEY]:
                return True
    return False
