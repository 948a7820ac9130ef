"""Append results to a JSON Lines file, whole lines or nothing (sinks/_lines.py: each line
is one ``os.write`` under ``flock`` on an ``O_APPEND`` descriptor; a write that fails
part-way is cut back to the size the file had before it)."""

from __future__ import annotations

import json
from typing import Any

from ._lines import LineFile, append_whole

__all__ = ["JsonlSink", "append_whole"]

#: ``json.dumps(record, ensure_ascii=False, separators=(",", ":"), default=str)`` with its
#: encoder made once, not once per line (the same text).
_ENCODE = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=str).encode


class JsonlSink(LineFile):
    """Append one JSON line per record to ``path`` (created with its folders if missing).

    ``write`` returns once the whole line is in the file (handed to the operating system, so
    a crash of the worker after the ack cannot lose it), or raises ``OSError`` having left
    nothing of it behind (see the module docstring). ``close`` syncs the file to disk; it
    never raises: a failed sync is logged as an error.
    Lines of concurrent writes are joined into one ``os.write`` (sinks/_lines.py): each
    ``write`` still returns once its line is in the file.
    """

    _JOIN = True

    async def write(self, record: dict[str, Any]) -> None:
        line = (_ENCODE(record) + "\n").encode("utf-8")
        if self._JOIN and self._regular:  # self.append(line) without its frame: joined
            await self._join(line)
        else:
            await self.append(line)
