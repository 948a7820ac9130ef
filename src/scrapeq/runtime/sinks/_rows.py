"""The table layout of the database sinks (and the CSV file's columns): one row per job, its
last results record.

A row is keyed by the job's id: a job written again (a retry after a sink failure, a job
re-delivered because its worker died between the write and the ack, a dead letter replayed)
updates its row, never adds one. docs/INTERFACE.md documents the layout.

**Migrations.** The columns of :data:`ADDED` came after the first layout (issue 38): a table
made before lacks them, and the sink adds each one missing (``ALTER TABLE ... ADD COLUMN``,
NULL in the rows already there) when it opens the table; every other column must be there
(a table without one is refused, as before). The view ``<table>_latest`` (:func:`view_sql`:
each URL's row of the latest ``finished_at``) is created with the table, or then, and made
again when a column was added (a view's columns are fixed when it is made).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any

from scrapeq.errors import ConfigError

__all__ = [
    "ADDED",
    "COLUMNS",
    "JSON_COLUMNS",
    "KEY",
    "LATEST",
    "check_layout",
    "check_types",
    "create_sql",
    "row_of",
    "table_name",
    "upsert_sql",
    "view_sql",
]

#: Column -> the results record's field it holds (docs/INTERFACE.md, "Results").
COLUMNS: dict[str, str] = {
    "job_id": "id",
    "url": "url",
    "final_url": "final_url",
    "domain": "domain",
    "lane": "lane",
    "depth": "depth",
    "parent_id": "parent",
    "parent_url": "parent_url",
    "outcome": "outcome",
    "status": "status",
    "attempts": "attempts",
    "error": "error",
    "elapsed_ms": "elapsed_ms",
    "bytes": "bytes",
    "finished_at": "finished_at",
    "result": "result",
    "links": "links",
    "body_path": "body_path",
    "changed": "changed",
    "not_modified": "not_modified",
    "skipped": "skipped",
    "meta": "meta",
    "crawl_id": "crawl_id",
}
#: Columns added to the first layout (issue 38): added to an existing table that lacks them.
ADDED = ("changed", "not_modified", "skipped", "meta", "crawl_id")
#: Columns holding JSON (TEXT in SQLite, JSONB in PostgreSQL).
JSON_COLUMNS = frozenset({"result", "links", "meta"})
#: Columns holding true or false (INTEGER 0/1 in SQLite, boolean in PostgreSQL).
BOOL_COLUMNS = frozenset({"changed", "not_modified"})
#: The view of each URL's latest row is named ``<table>`` + this.
LATEST = "_latest"
#: The upsert's key.
KEY = "job_id"

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")


def table_name(name: str) -> str:
    """A table name usable unquoted in SQL, or a ConfigError."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):  # fullmatch: no "x\n"
        raise ConfigError(
            "results",
            f"table {str(name)[:60]!r}: use letters, digits and _ (not starting with a digit), "
            "at most 63",
        )
    return name


def _json(value: Any) -> str | None:
    if value is None:
        return None
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def row_of(record: dict[str, Any]) -> tuple[Any, ...]:
    """The row of a results record, in :data:`COLUMNS` order (JSON columns as JSON text)."""
    return tuple(
        _json(record.get(field)) if column in JSON_COLUMNS else record.get(field)
        for column, field in COLUMNS.items()
    )


def create_sql(table: str, types: Mapping[str, str], text: str, not_null: Collection[str]) -> str:
    """The ``CREATE TABLE IF NOT EXISTS`` of the layout: each column of type ``types[c]``
    (else ``text``), keyed by :data:`KEY`, the columns ``not_null`` NOT NULL."""
    columns = ",\n  ".join(
        f"{c} {types.get(c, text)}" + (" PRIMARY KEY" if c == KEY else "")
        + (" NOT NULL" if c in not_null else "")
        for c in COLUMNS
    )  # fmt: skip
    return f"CREATE TABLE IF NOT EXISTS {table} (\n  {columns}\n)"


def upsert_sql(table: str, marks: Iterable[str]) -> str:
    """The upsert of one row (``marks``: each column's placeholder, in :data:`COLUMNS` order):
    a row whose :data:`KEY` is there already is updated."""
    names = ", ".join(COLUMNS)
    updates = ", ".join(f"{c} = excluded.{c}" for c in COLUMNS if c != KEY)
    return (
        f"INSERT INTO {table} ({names}) VALUES ({', '.join(marks)}) "
        f"ON CONFLICT ({KEY}) DO UPDATE SET {updates}"
    )


def view_sql(table: str) -> str | None:
    """The ``SELECT`` of the view ``<table>_latest``: each URL's row whose attempt finished
    last (ties: the greatest job id; a row without ``finished_at`` comes last); None when the
    view's name would be over 63 characters (PostgreSQL would cut it)."""
    if len(table) + len(LATEST) > 63:
        return None
    names = ", ".join(COLUMNS)
    return (
        f"SELECT {names} FROM (SELECT {names}, row_number() OVER (PARTITION BY url "
        f"ORDER BY finished_at IS NULL, finished_at DESC, {KEY} DESC) AS scrapeq_rank "
        f"FROM {table}) AS ranked "
        "WHERE scrapeq_rank = 1"
    )


def check_layout(table: str, have: Collection[str], keyed: Callable[[], bool]) -> None:
    """Refuse (ConfigError) a table without every column (``have``: its columns; those of
    :data:`ADDED` the sink adds) or, asked then, not ``keyed`` by :data:`KEY` alone: an upsert
    needs one row per job."""
    missing = [c for c in COLUMNS if c not in have and c not in ADDED]
    if missing:
        raise ConfigError(
            "results",
            f"table {table} has no column {', '.join(missing)}: "
            "use another table (?table=NAME) or add them",
        )
    if not keyed():
        message = f"table {table}: {KEY} must be its primary key (one row per job)"
        raise ConfigError("results", message)


def check_types(
    table: str,
    have: Mapping[str, tuple[str, str]],
    wanted: Mapping[str, tuple[str, Collection[str]]],
) -> None:
    """Refuse (ConfigError) a table with a column whose type cannot hold what the sink writes
    there as it is. ``have``: column -> (its type as shown, the name compared); ``wanted``:
    column -> (the type the sink writes, the names it accepts)."""
    for column in COLUMNS:
        shown, name = have[column]
        expected, accepted = wanted[column]
        if name not in accepted:
            raise ConfigError(
                "results",
                f"table {table}: column {column} is {shown}, the sink writes {expected}: "
                "use another table (?table=NAME) or change the column's type",
            )
