"""The table layout of the database sinks: one row per job, its last results record.

A row is keyed by the job's id: a job written again (a retry after a sink failure, a job
re-delivered because its worker died between the write and the ack, a dead letter replayed)
updates its row, never adds one. docs/INTERFACE.md documents the layout.
"""

from __future__ import annotations

import json
import re
from typing import Any

from scrapeq.errors import ConfigError

__all__ = ["COLUMNS", "JSON_COLUMNS", "KEY", "row_of", "table_name"]

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
}
#: Columns holding JSON (TEXT in SQLite, JSONB in PostgreSQL).
JSON_COLUMNS = frozenset({"result", "links"})
#: The upsert's key.
KEY = "job_id"

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")


def table_name(name: str) -> str:
    """A table name usable unquoted in SQL, or a ConfigError."""
    if not _NAME.match(name):
        raise ConfigError(
            "results",
            f"table {name[:60]!r}: use letters, digits and _ (not starting with a digit), "
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
