"""Append results to a CSV file with a header line.

A text cell beginning with ``=``, ``+``, ``-``, ``@``, a tab or a CR is written with a single
quote before it (OWASP, "CSV Injection"): a spreadsheet opening the file shows the text and
never runs it as a formula (a page titled ``=HYPERLINK(...)`` stays a title). A reader wanting
the text back drops that leading ``'``. Numbers, empty cells and JSON text (a dict or list,
which starts with ``{`` or ``[``) are written as they are.
"""

from __future__ import annotations

import asyncio
import csv
import io
import json
import os
import stat
from typing import Any

from scrapeq.errors import ConfigError

from ._lines import LineFile, append_whole

__all__ = ["CSV_FIELDS", "CsvSink"]

#: The header: the results record's fields (docs/INTERFACE.md), in this order.
CSV_FIELDS = (
    "id", "url", "final_url", "domain", "lane", "outcome", "status", "attempts", "elapsed_ms",
    "bytes", "finished_at", "error", "depth", "parent", "parent_url", "result", "links",
    "body_path",
)  # fmt: skip


#: First characters that make a spreadsheet read a cell as a formula (OWASP).
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value
    return value


def csv_line(record: dict[str, Any]) -> str:
    """One CSV line of a record: nested fields (a dict or list ``result``, ``links``) as JSON
    text, None as an empty cell, a text that could be a formula after a ``'`` (module
    docstring)."""
    cells = [_cell(record.get(f)) for f in CSV_FIELDS]
    # The csv module leaves a bare CR unquoted when lines end in LF (Python 3.11), and a
    # reader then ends the row there: a row with one has every cell quoted.
    cr = any(isinstance(c, str) and "\r" in c for c in cells)
    out = io.StringIO()
    writer = csv.writer(
        out, lineterminator="\n", quoting=csv.QUOTE_ALL if cr else csv.QUOTE_MINIMAL
    )
    writer.writerow(cells)
    return out.getvalue()


class CsvSink(LineFile):
    """Append one CSV line per record to ``path``, under a header written when it is created.

    Lines are written as the JSONL sink's (sinks/_lines.py): whole or not at all, a write
    that fails part-way (a full disk) cut back, several processes appending to one file
    under ``flock``, a file deleted or rotated away followed to a new one at the path. An
    existing file must start with the same header (:meth:`open` says so otherwise, before
    any job is claimed). An empty file (new, made by a rotation, or truncated in place by
    ``copytruncate``) gets the header with its first line, under the lock: one header, however
    many processes write to it.
    """

    _MODE = os.O_RDWR  # the header is read back through the descriptor

    async def open(self) -> None:
        """Create the file with its header, or check the header of the one there."""
        async with self._lock:
            await asyncio.to_thread(self._open)

    def _opened(self, fd: int) -> None:
        info = os.fstat(fd)
        # an empty file, or a pipe or a device (nothing to read back): the header first
        if info.st_size == 0 or not stat.S_ISREG(info.st_mode):
            append_whole(fd, _HEADER, info)
        elif os.pread(fd, len(_HEADER), 0) != _HEADER:
            raise ConfigError(
                "results",
                f"{self.path}: its first line is not scrapeq's CSV header; use a new file",
            )

    def _lines(self, info: os.stat_result, data: bytes) -> bytes:
        return _HEADER + data if info.st_size == 0 else data

    async def write(self, record: dict[str, Any]) -> None:
        await self.append(csv_line(record).encode("utf-8"))


_HEADER = csv_line(dict(zip(CSV_FIELDS, CSV_FIELDS, strict=True))).encode()
