"""Whole lines appended to a file by several writers: what the JSONL and CSV sinks share.

Each line is one ``os.write`` on an ``O_APPEND`` descriptor (no Python buffer: a failed line
is never written later by another call). Several worker processes may append to one file:
each holds an exclusive ``flock`` on the file while it appends, so a line is never split by
another process's. A write that fails part-way (disk full, file size limit, quota) is cut
back with ``ftruncate`` to the size the file had before it, under the same lock: no other
scrapeq writer can have appended meanwhile, so the cut removes exactly the partial line and
never another process's acknowledged one. Writers that do not take the lock (another program
appending to the file) are not covered. On a file that is not a regular one (``/dev/full``, a
pipe) nothing can be cut back; a write there is one ``os.write`` of the whole line.
"""

from __future__ import annotations

import asyncio
import errno
import fcntl
import logging
import os
import stat
from pathlib import Path

__all__ = ["LineFile", "append_whole"]

log = logging.getLogger("scrapeq.sinks")

#: ``fsync`` errors that say the file cannot be synced at all (a device, a pipe), not that
#: data was lost.
_UNSYNCABLE = (errno.EINVAL, errno.EROFS, errno.ENOTSUP)


class LineFile:
    """Appends whole lines to ``path`` (created with its folders if missing), or nothing.

    :meth:`append` returns once the whole line is in the file, or raises ``OSError`` having
    left nothing of it behind. :meth:`close` syncs the file to disk and never raises (a
    failed sync is logged as an error). :meth:`_prepare` runs before the file is first
    opened (the CSV sink writes or checks its header there).
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._fd: int | None = None
        self._lock = asyncio.Lock()

    def _prepare(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def _open(self) -> int:
        if self._fd is None:
            self._prepare()
            flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
            self._fd = os.open(self.path, flags, 0o666)
        return self._fd

    def _append(self, data: bytes) -> None:
        fd = self._open()
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            append_whole(fd, data)
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)

    async def append(self, data: bytes) -> None:
        """Append ``data`` (one or more whole lines) whole, or raise ``OSError``."""
        async with self._lock:
            await asyncio.to_thread(self._append, data)

    async def close(self) -> None:
        async with self._lock:
            fd, self._fd = self._fd, None
            if fd is not None:
                await asyncio.to_thread(_sync_and_close, fd, self.path)


def append_whole(fd: int, data: bytes) -> None:
    """Append ``data`` to ``fd`` (opened ``O_APPEND``, locked by the caller) whole, or not.

    A short write is continued (the rest lands right after it: the caller holds the lock);
    when a write fails, a regular file is cut back to its size before the first one.

    Raises:
        OSError: the write's error (``ENOSPC``, ``EFBIG``, ...), after the cut.
    """
    info = os.fstat(fd)
    regular = stat.S_ISREG(info.st_mode)
    view, done = memoryview(data), 0
    try:
        while done < len(data):
            n = os.write(fd, view[done:])
            if n <= 0:
                raise OSError(errno.EIO, "the results file took no bytes")
            done += n
    except OSError as exc:
        if done and regular:
            _cut_back(fd, info.st_size, exc)
        raise


def _cut_back(fd: int, size: int, cause: OSError) -> None:
    try:
        os.ftruncate(fd, size)
    except OSError as exc:
        # The file now ends in a partial line, which a reader must skip: say where.
        why = f"{cause.strerror}; a partial line is left at byte {size:,} ({exc.strerror})"
        raise OSError(cause.errno, why) from cause


def _sync_and_close(fd: int, path: Path) -> None:
    try:
        os.fsync(fd)
    except OSError as exc:
        if exc.errno not in _UNSYNCABLE:
            log.error("results file %s: sync at close failed, lines written may not be on "
                      "disk: %s", path, exc)  # fmt: skip
    finally:
        try:
            os.close(fd)
        except OSError as exc:
            log.error("results file %s: close failed: %s", path, exc)
