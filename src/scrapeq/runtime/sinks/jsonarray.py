"""Results as one JSON array in a ``.json`` file (``--results pages.json``), as Scrapy's feed
export writes one: ``[`` first, one record a line, ``,`` and a line break between records,
``]`` last.

The file is a whole JSON array after every record, not only once the worker closed it: each
record is written over the array's closing ``]`` together with a new one (``,\\n{record}\\n]\\n``,
one ``pwrite`` at the ``]``'s place, under the ``flock`` of sinks/_lines.py), so a worker
killed, several worker processes, or a reader opening the file mid-run, find a JSON array. A
write that fails part-way (a full disk) puts the closing ``]`` back. An existing file must hold
a JSON array (``[]`` included): its records are kept and the new ones added to it (a new run
of the same crawl continues the file, as ``.jsonl`` does; Scrapy's ``-o`` would append a second
array, which is not JSON: start a new file for a new array). A file that is not one is refused
before any job is claimed. A pipe or a device gets ``[`` when opened, records with ``,``
between them and ``]`` at close.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import os
import stat
from pathlib import Path
from typing import Any

from scrapeq.errors import ConfigError

from ._lines import LineFile, append_whole

__all__ = ["JsonArraySink"]

#: An empty array, as a new file starts.
_EMPTY = b"[\n]\n"
#: Bytes read back from the end of the file to find the closing ``]``.
_TAIL = 4096
_SPACE = b" \t\r\n"


class JsonArraySink(LineFile):
    """Add one record per write to the JSON array in ``path`` (module docstring).

    Args:
        path: the file (created with its folders if missing).
    """

    _MODE = os.O_RDWR
    _APPEND = False  # written at the closing ']', not at the end

    def __init__(self, path: str | Path) -> None:
        super().__init__(path)
        self._stream_records = 0  # records written to a pipe or device since it was opened
        self._streaming = False

    async def open(self) -> None:
        """Create the file as an empty array, or check the one there holds an array."""
        async with self._lock:
            await asyncio.to_thread(self._open)

    def _opened(self, fd: int) -> None:
        info = os.fstat(fd)
        self._streaming = not stat.S_ISREG(info.st_mode)
        if self._streaming:
            self._stream_records = 0
            append_whole(fd, b"[\n", info)
        elif info.st_size == 0:
            os.pwrite(fd, _EMPTY, 0)
        else:
            self._closing(fd, info.st_size)

    def _closing(self, fd: int, size: int) -> tuple[int, bool]:
        """(where the array's last value or ``[`` ends, whether the array is empty), or a
        ConfigError: the file does not hold a JSON array."""
        start = os.pread(fd, 64, 0).lstrip(_SPACE)
        at = max(size - _TAIL, 0)
        tail = os.pread(fd, size - at, at).rstrip(_SPACE)
        if not start.startswith(b"[") or not tail.endswith(b"]"):
            raise ConfigError(
                "results",
                f"{self.path}: not a JSON array (a .json file holds one, which scrapeq adds "
                "its records to); use a new file, or .jsonl for JSON Lines",
            )
        before = tail[:-1].rstrip(_SPACE)
        end = at + len(before)
        return end, end == 0 or before.endswith(b"[")

    def _encode(self, data: bytes) -> bytes:
        if self._streaming:  # a pipe: nothing can be written back
            data = (b",\n" if self._stream_records else b"") + data
            self._stream_records += 1
        return data

    def _append_regular(self, fd: int, info: os.stat_result, data: bytes) -> None:
        if info.st_size == 0:  # emptied (copytruncate): an array again
            os.pwrite(fd, _EMPTY, 0)
            info = os.fstat(fd)
        end, empty = self._closing(fd, info.st_size)
        text = (b"\n" if empty else b",\n") + data + b"\n]\n"
        done = 0
        try:
            while done < len(text):
                n = os.pwrite(fd, text[done:], end + done)
                if n <= 0:
                    raise OSError(errno.EIO, "the results file took no bytes")
                done += n
            os.ftruncate(fd, end + len(text))
        except OSError:
            # put the array's end back where it was (what was written over it is cut)
            with contextlib.suppress(OSError):
                os.ftruncate(fd, end)
                os.pwrite(fd, b"\n]\n", end)
            raise

    async def write(self, record: dict[str, Any]) -> None:
        line = json.dumps(record, ensure_ascii=False, separators=(",", ":"), default=str)
        await self.append(line.encode("utf-8"))

    async def close(self) -> None:
        async with self._lock:
            if self._fd is not None and self._streaming:
                fd = self._fd
                await asyncio.to_thread(append_whole, fd, b"\n]\n")
        await super().close()
