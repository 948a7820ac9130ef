"""Append results to a JSON Lines file."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import IO, Any

__all__ = ["JsonlSink"]


class JsonlSink:
    """Append one JSON line per record to ``path`` (created with its folders if missing).

    Each write is flushed to the operating system before it returns, so a crash of the
    worker after the ack cannot lose a line; several worker processes may append to the same
    file (each line is one ``write`` of an ``O_APPEND`` file, so lines do not interleave).
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._file: IO[str] | None = None
        self._lock = asyncio.Lock()

    def _open(self) -> IO[str]:
        if self._file is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115
        return self._file

    def _append(self, line: str) -> None:
        f = self._open()
        f.write(line)
        f.flush()

    async def write(self, record: dict[str, Any]) -> None:
        line = json.dumps(record, ensure_ascii=False, separators=(",", ":"), default=str) + "\n"
        async with self._lock:
            await asyncio.to_thread(self._append, line)

    async def close(self) -> None:
        async with self._lock:
            if self._file is not None:
                self._file.flush()
                os.fsync(self._file.fileno())
                self._file.close()
                self._file = None
