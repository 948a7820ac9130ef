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

Appends made while another is written are joined (a subclass that sets ``_JOIN``: the
JSONL sink's lines need nothing of the file but its end): one task writes all the lines
waiting to a regular file as one ``os.write``, so a worker finishing many pages at once
makes one thread hop and one ``flock`` for them, not one each, and each line waits for its
group's write alone (not for a turn of the lock per line before it: a loop iteration each).
A pipe or a device takes one line a write, each acknowledged once written, as before (the
kernel may split a pipe write of more than ``PIPE_BUF`` bytes, and a reader that stops would
hold the lines before it unacknowledged). Each line's ``append`` still returns once it is in the
file, or raises with nothing of it left (a group that fails is cut back whole).

A file deleted or rotated away (``rm``, logrotate's rename without ``copytruncate``) is
followed: before each append, under the lock, the path is looked up again (one ``stat``,
besides the ``fstat`` the append makes anyway); when it no longer names the open file, the
path is opened again (created if missing), one warning is logged, and the line goes there.
A line written while the file was being deleted (the descriptor's file has no name left once
the write returns) is written again to the new file, so a line never ends up only in a file
nobody can open: at least once, never lost. A rotated file keeps the lines written before the
rotation was seen.
"""

from __future__ import annotations

import asyncio
import errno
import fcntl
import functools
import logging
import os
import stat
from pathlib import Path

__all__ = ["LineFile", "append_whole"]

log = logging.getLogger("scrapeq.sinks")

#: ``fsync`` errors that say the file cannot be synced at all (a device, a pipe), not that
#: data was lost.
_UNSYNCABLE = (errno.EINVAL, errno.EROFS, errno.ENOTSUP)
#: Times one append opens the path again (it was deleted or replaced) before giving up.
_REOPENS = 3


class LineFile:
    """Appends whole lines to ``path`` (created with its folders if missing), or nothing.

    :meth:`append` returns once the whole line is in the file the path names, or raises
    ``OSError`` having left nothing of it behind. :meth:`close` syncs the file to disk and
    never raises (a failed sync is logged as an error). :meth:`_prepare` runs before the file
    is opened, :meth:`_opened` right after, under the lock (the CSV sink writes or checks its
    header there), each time it is opened again after a deletion or a rotation. ``reopened``
    counts those times.
    """

    #: Access mode of the descriptor (the CSV sink reads its header back: ``O_RDWR``).
    _MODE = os.O_WRONLY
    #: Open with ``O_APPEND`` (the JSON array sink writes before its closing ``]``: no).
    _APPEND = True
    #: Join the lines of appends waiting for the lock into one write (see the module's doc).
    _JOIN = False

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._fd: int | None = None
        self._lock = asyncio.Lock()
        self._joined: list[tuple[bytes, asyncio.Future[None]]] = []  # waiting to be written
        self._writing: asyncio.Future[list[OSError | None]] | None = None  # the last group
        self._drainer: asyncio.Future[None] | None = None  # writes the joined lines
        self._regular = False  # the file open is a regular one (known once it is open)
        self.reopened = 0

    def _prepare(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def _opened(self, fd: int) -> None:
        """Called under the lock once ``fd`` is (re)opened; raising closes it again."""

    def _lines(self, info: os.stat_result, data: bytes) -> bytes:
        """What to append for ``data`` to a file whose ``fstat`` is ``info``."""
        return data

    def _encode(self, data: bytes) -> bytes:
        """The bytes of ``data`` for the file open now (called under the lock, once the file is
        open: the CSV sink writes its record in the columns of the file's header)."""
        return data

    def _append_regular(self, fd: int, info: os.stat_result, data: bytes) -> None:
        """Append ``data`` to the regular file ``fd`` (``info``: its ``fstat``) whole, or
        nothing, under the lock."""
        append_whole(fd, self._lines(info, data), info)

    def _open(self) -> int:
        if self._fd is None:
            self._prepare()
            append = os.O_APPEND if self._APPEND else 0
            flags = self._MODE | append | os.O_CREAT | os.O_CLOEXEC
            fd = os.open(self.path, flags, 0o666)
            self._regular = stat.S_ISREG(os.fstat(fd).st_mode)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                try:
                    self._opened(fd)
                finally:
                    fcntl.flock(fd, fcntl.LOCK_UN)
            except BaseException:
                os.close(fd)
                raise
            self._fd = fd
        return self._fd

    def _append(self, data: bytes) -> None:
        for _ in range(_REOPENS):
            fd = self._open()
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                info = os.fstat(fd)
                if stat.S_ISREG(info.st_mode):
                    gone = self._gone(info)
                    if gone is None:
                        self._append_regular(fd, info, self._encode(data))
                        if os.fstat(fd).st_nlink > 0:
                            return
                        gone = "was deleted while a line was written to it"
                else:
                    append_whole(fd, self._encode(data), info)
                    return
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
            self._reopen(gone)
        raise OSError(errno.ESTALE, f"{self.path} was replaced {_REOPENS} times in one write")

    def _gone(self, info: os.stat_result) -> str | None:
        """Why the path no longer names the open file (``info``: its ``fstat``), or None."""
        try:
            named = os.stat(self.path)
        except FileNotFoundError:
            return "was deleted"
        except OSError as exc:  # the folder is gone, or not one: opening again says why
            return f"cannot be looked up ({exc.strerror})"
        if (named.st_ino, named.st_dev) != (info.st_ino, info.st_dev):
            return "was replaced (rotated?)"
        return None

    def _reopen(self, why: str) -> None:
        log.warning("results file %s %s: writing on to a new file at that path", self.path, why)
        fd, self._fd = self._fd, None
        self.reopened += 1
        if fd is not None:
            _sync_and_close(fd, self.path)

    async def append(self, data: bytes) -> None:
        """Append ``data`` (one or more whole lines) whole, or raise ``OSError``."""
        if not (self._JOIN and self._regular):  # a pipe: each line acknowledged once written
            async with self._lock:
                await asyncio.to_thread(self._append, data)
            return
        await self._join(data)

    def _join(self, data: bytes) -> asyncio.Future[None]:
        """Join ``data`` to the lines the drain writes next (``_JOIN``, a regular file: see
        :meth:`append`); answers the future its group's write ends."""
        written: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._joined.append((data, written))
        if self._drainer is None:  # the lines joined from now on are its next group
            self._drainer = asyncio.ensure_future(self._drain())
        return written

    async def _drain(self) -> None:
        """Write the joined lines, a group at a time, until none is waiting: one task for
        them all (not cancelled with any caller), so a line waits for its group's write
        alone, not for a turn of the lock per line before it."""
        try:
            while self._joined:
                async with self._lock:
                    if self._writing is not None:  # a write whose caller was cancelled
                        await asyncio.wait([self._writing])
                    batch, self._joined = self._joined, []
                    if not batch:
                        continue
                    self._writing = write = asyncio.ensure_future(
                        asyncio.to_thread(self._append_group, [line for line, _ in batch])
                    )
                    write.add_done_callback(functools.partial(_answer, batch))
                    await asyncio.wait([write])
                    self._writing = None
        finally:
            self._drainer = None

    def _append_group(self, lines: list[bytes]) -> list[OSError | None]:
        """Append joined lines; each line's error, or None. A regular file takes them as one
        write (all or none); anything else (a pipe, a device) one line a write, as appends
        not joined: the kernel may split a write of more than ``PIPE_BUF`` bytes to a pipe,
        never a line of at most that."""
        if len(lines) > 1 and stat.S_ISREG(os.fstat(self._open()).st_mode):
            try:
                self._append(b"".join(lines))
            except OSError as exc:
                return [exc] * len(lines)
            return [None] * len(lines)
        errors: list[OSError | None] = []
        for line in lines:
            try:
                self._append(line)
            except OSError as exc:
                errors.append(exc)
            else:
                errors.append(None)
        return errors

    async def close(self) -> None:
        if self._drainer is not None:  # the lines joined are written first
            await asyncio.wait([self._drainer])
        async with self._lock:
            if self._writing is not None:
                await asyncio.wait([self._writing])
            fd, self._fd = self._fd, None
            if fd is not None:
                await asyncio.to_thread(_sync_and_close, fd, self.path)


def _answer(
    batch: list[tuple[bytes, asyncio.Future[None]]], write: asyncio.Future[list[OSError | None]]
) -> None:
    """Each joined append learns how the write of its line ended."""
    failed: BaseException | None = (
        asyncio.CancelledError() if write.cancelled() else write.exception()
    )
    errors = write.result() if failed is None else [failed] * len(batch)
    for (_, written), exc in zip(batch, errors, strict=True):
        if written.done():  # its caller was cancelled
            continue
        if exc is None:
            written.set_result(None)
        else:
            written.set_exception(exc)


def append_whole(fd: int, data: bytes, info: os.stat_result | None = None) -> None:
    """Append ``data`` to ``fd`` (opened ``O_APPEND``, locked by the caller) whole, or not.

    A short write is continued (the rest lands right after it: the caller holds the lock);
    when a write fails, a regular file is cut back to its size before the first one
    (``info``: the caller's ``fstat`` of ``fd`` under the lock, else taken here).

    Raises:
        OSError: the write's error (``ENOSPC``, ``EFBIG``, ...), after the cut.
    """
    if info is None:
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
