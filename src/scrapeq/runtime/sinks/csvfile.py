"""Append results to a CSV file with a header line.

**Columns.** A new file's header is the database tables' columns (``_rows.COLUMNS``: one table
for both, so a CSV file and a table name a field alike: ``job_id``, ``parent_id``), with, when
the result's fields are named (``--extract``'s, or ``CsvSink(result_fields=...)``), a column
``result.<name>`` for each right after ``result``. A field's value is its cell (a list or a
dict as JSON text); the ``result`` cell then stays empty, unless the result does not fit those
columns (not a dict, or a key of no column), when it holds the whole result as JSON text, so
nothing is lost. Without named fields a result is one JSON cell, ``result``, as before (the
header is written once, before the first result is seen). An existing file keeps its own
header: a file of an earlier scrapeq (``id``, ``parent``, without ``changed``,
``not_modified``, ``skipped``, ``meta``, ``crawl_id``) is appended to in its columns, and the
fields it has no column for are not in its lines; a header with a column scrapeq does not
write is refused.

A text cell beginning with ``=``, ``+``, ``-``, ``@``, a tab or a CR is written with a single
quote before it (OWASP, "CSV Injection"): a spreadsheet opening the file shows the text and
never runs it as a formula (a page titled ``=HYPERLINK(...)`` stays a title). A reader wanting
the text back drops that leading ``'``. Numbers, empty cells, ``true``/``false`` and JSON text
(a dict or list, which starts with ``{`` or ``[``) are written as they are.
"""

from __future__ import annotations

import asyncio
import contextlib
import csv
import io
import json
import os
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from scrapeq.errors import ConfigError

from ._lines import LineFile, append_whole
from ._rows import COLUMNS

__all__ = ["CSV_FIELDS", "CsvSink", "csv_columns", "csv_header", "csv_line"]

#: A new file's header without named result fields: the tables' columns, in their order.
CSV_FIELDS = tuple(COLUMNS)
#: Column -> the record's field: the tables' columns, and the names of an earlier header.
_FIELD_OF = {**COLUMNS, "id": "id", "parent": "parent"}
#: The prefix of a named result field's column.
RESULT_PREFIX = "result."
#: Bytes of a header line read back, at most.
_HEADER_MAX = 65536


def csv_columns(result_fields: Sequence[str] = ()) -> tuple[str, ...]:
    """A new file's columns: :data:`CSV_FIELDS`, with ``result.<name>`` for each of
    ``result_fields`` right after ``result``."""
    at = CSV_FIELDS.index("result") + 1
    named = tuple(RESULT_PREFIX + f for f in dict.fromkeys(result_fields))
    return CSV_FIELDS[:at] + named + CSV_FIELDS[at:]


#: First characters that make a spreadsheet read a cell as a formula (OWASP).
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value
    return value


def _cells(record: dict[str, Any], columns: Sequence[str]) -> list[Any]:
    result = record.get("result")
    named = {c[len(RESULT_PREFIX) :] for c in columns if c.startswith(RESULT_PREFIX)}
    fits = result is None or (isinstance(result, dict) and named and set(result) <= named)
    cells = []
    for column in columns:
        if column.startswith(RESULT_PREFIX):
            value = result.get(column[len(RESULT_PREFIX) :]) if isinstance(result, dict) else None
        elif column == "result":
            value = None if fits else result
        else:
            value = record.get(_FIELD_OF[column])
        cells.append(_cell(value))
    return cells


def _row_text(cells: list[Any]) -> str:
    # The csv module leaves a bare CR unquoted when lines end in LF (Python 3.11), and a
    # reader then ends the row there: a row with one has every cell quoted.
    cr = any(isinstance(c, str) and "\r" in c for c in cells)
    out = io.StringIO()
    writer = csv.writer(
        out, lineterminator="\n", quoting=csv.QUOTE_ALL if cr else csv.QUOTE_MINIMAL
    )
    writer.writerow(cells)
    return out.getvalue()


def csv_line(record: dict[str, Any], columns: Sequence[str] = CSV_FIELDS) -> str:
    """One CSV line of a record in ``columns``: nested values (a dict or list) as JSON text,
    None as an empty cell, a text that could be a formula after a ``'`` (module docstring)."""
    return _row_text(_cells(record, columns))


def csv_header(columns: Sequence[str] = CSV_FIELDS) -> str:
    """The header line of ``columns``."""
    return _row_text(list(columns))


def _known(columns: Sequence[str]) -> bool:
    """Whether ``columns`` is a header scrapeq writes in (module docstring)."""
    return (
        "url" in columns
        and len(set(columns)) == len(columns)
        and all(c in _FIELD_OF or (c.startswith(RESULT_PREFIX) and c != RESULT_PREFIX)
                for c in columns)
    )  # fmt: skip


class CsvSink(LineFile):
    """Append one CSV line per record to ``path``, under a header written when it is created.

    Lines are written as the JSONL sink's (sinks/_lines.py): whole or not at all, a write
    that fails part-way (a full disk) cut back, several processes appending to one file
    under ``flock``, a file deleted or rotated away followed to a new one at the path. An
    existing file keeps its header, which must be one scrapeq writes in (:meth:`open` says
    so otherwise, before any job is claimed); each line is written in the columns of the
    header of the file it goes to. An empty file (new, made by a rotation, or truncated in
    place by ``copytruncate``) gets the header with its first line, under the lock: one
    header, however many processes write to it.

    Args:
        path: the file (created with its folders if missing).
        result_fields: the result's field names (``--extract``'s): a new file has a column
            ``result.<name>`` for each (module docstring).
    """

    _MODE = os.O_RDWR  # the header is read back through the descriptor

    def __init__(self, path: str | Path, result_fields: Sequence[str] = ()) -> None:
        super().__init__(path)
        self._new_columns = csv_columns(result_fields)
        #: The columns of the file open now (its header's).
        self.columns = self._new_columns
        self._record: dict[str, Any] = {}

    async def open(self) -> None:
        """Create the file with its header, or check the header of the one there."""
        async with self._lock:
            await asyncio.to_thread(self._open)

    def _opened(self, fd: int) -> None:
        info = os.fstat(fd)
        # an empty file, or a pipe or a device (nothing to read back): the header first
        if info.st_size == 0 or not stat.S_ISREG(info.st_mode):
            self.columns = self._new_columns
            append_whole(fd, csv_header(self.columns).encode(), info)
            return
        first = os.pread(fd, _HEADER_MAX, 0).split(b"\n", 1)
        columns: list[str] = []
        if len(first) == 2:
            with contextlib.suppress(UnicodeDecodeError, csv.Error):
                columns = next(csv.reader([first[0].decode("utf-8")]), [])
        if not _known(columns):
            raise ConfigError(
                "results",
                f"{self.path}: its first line is not scrapeq's CSV header; use a new file",
            )
        self.columns = tuple(columns)

    def _encode(self, data: bytes) -> bytes:
        return csv_line(self._record, self.columns).encode("utf-8")

    def _lines(self, info: os.stat_result, data: bytes) -> bytes:
        if info.st_size == 0:  # emptied in place (copytruncate): the header again
            self.columns = self._new_columns
            data = self._encode(data)
            return csv_header(self.columns).encode() + data
        return data

    async def write(self, record: dict[str, Any]) -> None:
        async with self._lock:  # LineFile.append's lock: the record is formatted under it
            self._record = record
            try:
                await asyncio.to_thread(self._append, b"")
            finally:
                self._record = {}
