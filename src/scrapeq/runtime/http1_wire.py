"""One connection of :mod:`.http1`'s pool: an :class:`asyncio.Protocol` that writes a
request and parses its answer as the bytes arrive (status line and headers, 1xx answers
skipped, ``Content-Length``, ``chunked`` and read-until-close bodies, ``gzip``/``deflate``
decoded within ``max_body``, a redirect's body dropped). The pool's module says what the
client does and why."""

from __future__ import annotations

import asyncio
import re
import zlib
from collections.abc import Callable
from typing import Any, Final

import aiohttp
from multidict import CIMultiDict, CIMultiDictProxy

from scrapeq.runtime.classify import BodyTooLarge

__all__ = ["Answer", "Connection", "DiscardDone"]

_HEAD_MAX: Final = 64 * 1024
_DISCARD_MAX: Final = 64 * 1024
_REDIRECTS: Final = frozenset({301, 302, 303, 307, 308})
_FOLDED: Final = re.compile(r"\r\n[ \t]+")
_EMPTY: Final[CIMultiDictProxy[str]] = CIMultiDictProxy(CIMultiDict())

#: An answer: status, headers, body (decoded).
Answer = tuple[int, CIMultiDictProxy[str], bytes]


class DiscardDone(Exception):
    """A redirect's body is over what is read of it: the answer ends at its head."""


def _decoder(coding: str) -> Any:
    """A decompressor for ``Content-Encoding: coding``; None for identity or an unknown one."""
    if coding in ("gzip", "x-gzip"):
        return zlib.decompressobj(16 + zlib.MAX_WBITS)
    if coding == "deflate":
        return zlib.decompressobj()  # zlib-wrapped; a raw stream is switched to at its start
    return None


class Connection(asyncio.Protocol):
    """One connection: writes a request, parses its answer as the bytes arrive."""

    def __init__(self, key: tuple[bool, str, int], on_lost: Callable[[Connection], None]) -> None:
        self.key = key
        self._on_lost = on_lost
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.idle_since = 0.0
        self.used = False  # an answer was read on it before
        self._waiter: asyncio.Future[Answer] | None = None
        self._head_request = False
        self._limit = 0
        self._reset()

    def _reset(self) -> None:
        self._buf = bytearray()
        self._head = False  # the head is read
        self._got = False  # any byte of this answer arrived
        self._status = 0
        self._headers: CIMultiDictProxy[str] = _EMPTY
        self._body = bytearray()
        self._left = 0  # Content-Length bytes still due; -1: chunked; -2: until close
        self._chunk = -1  # chunked: bytes left of this chunk (-1: a size line is due)
        self._trailers = False
        self._decoder: Any = None
        self._deflate_checked = True
        self._discard = False
        self._dropped = 0
        self._keep = True

    # -- the pool's side -------------------------------------------------------------------

    def send(self, data: bytes, waiter: asyncio.Future[Answer], head: bool, limit: int) -> None:
        self._reset()
        self._waiter = waiter
        self._head_request = head
        self._limit = limit
        assert self.transport is not None
        self.transport.write(data)

    @property
    def reusable(self) -> bool:
        """Whether another request may go on this connection after its answer."""
        return self._keep and not self.closed

    def head_only(self) -> Answer:
        """The answer whose body was dropped unread (:class:`DiscardDone`)."""
        return self._status, self._headers, b""

    def abort(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.abort()
        self.closed = True

    # -- asyncio's side --------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            if self._head and self._left == -2:
                try:
                    self._finish_body(waiter)
                except Exception as err:  # the waiter carries it
                    waiter.set_exception(err)
            elif not self._got:
                waiter.set_exception(aiohttp.ServerDisconnectedError())
            else:
                waiter.set_exception(
                    aiohttp.ClientPayloadError("Response payload is not completed")
                )
        self._on_lost(self)

    def data_received(self, data: bytes) -> None:
        waiter = self._waiter
        if waiter is None or waiter.done():  # bytes nobody asked for: not reusable
            self._waiter = None
            self.abort()
            return
        self._got = True
        try:
            self._feed(data, waiter)
        except Exception as exc:  # the waiter carries it
            self._waiter = None
            self.abort()
            if not waiter.done():
                waiter.set_exception(exc)

    def eof_received(self) -> bool | None:
        return None  # close: connection_lost ends a read-until-close body

    # -- parsing ---------------------------------------------------------------------------

    def _feed(self, data: bytes, waiter: asyncio.Future[Answer]) -> None:
        if not self._head:
            self._buf += data
            while True:
                end = self._buf.find(b"\r\n\r\n")
                if end < 0:
                    if len(self._buf) > _HEAD_MAX:
                        raise aiohttp.ClientPayloadError(f"response head is over {_HEAD_MAX} bytes")
                    return
                head = bytes(self._buf[:end])
                del self._buf[: end + 4]
                if self._parse_head(head):  # a final answer, not a 1xx
                    break
            data = bytes(self._buf)
            self._buf = bytearray()
            if self._left == 0:
                self._done(waiter)
                return
        if self._left > 0:
            if len(data) > self._left:
                data = data[: self._left]
                self._keep = False  # bytes beyond the answer: the connection is not reusable
            self._left -= len(data)
            self._take(data)
            if self._left == 0:
                self._finish_body(waiter)
        elif self._left == -1:
            self._buf += data
            if self._chunks():
                self._finish_body(waiter)
        else:
            self._take(data)

    def _parse_head(self, head: bytes) -> bool:
        """Read a head; False for a 1xx answer (the final one follows)."""
        text = head.decode("utf-8", "surrogateescape")
        line, _, rest = text.partition("\r\n")
        version, _, after = line.partition(" ")
        code = after[:3]
        if (
            not version.startswith("HTTP/1.")
            or not (code.isascii() and code.isdigit())
            or after[3:4] not in ("", " ")
        ):
            raise aiohttp.ClientPayloadError(f"invalid status line {line[:100]!r}")
        status = int(code)
        if status < 100:
            raise aiohttp.ClientPayloadError(f"invalid status {status}")
        if status < 200:
            return False
        if "\r\n " in rest or "\r\n\t" in rest:  # obsolete folded lines continue the last
            rest = _FOLDED.sub(" ", rest)
        headers: CIMultiDict[str] = CIMultiDict()
        add = headers.add
        for field in rest.split("\r\n") if rest else ():
            name, sep, value = field.partition(":")
            if not sep or not name or name.strip() != name:
                raise aiohttp.ClientPayloadError(f"invalid header line {field[:100]!r}")
            add(name, value.strip())
        self._status = status
        self._headers = CIMultiDictProxy(headers)
        self._head = True
        http10 = version == "HTTP/1.0"
        connection = headers.get("Connection", "").lower()
        self._keep = "keep-alive" in connection if http10 else "close" not in connection
        self._frame(headers)
        return True

    def _frame(self, headers: CIMultiDict[str]) -> None:
        """How the body ends (``_left``), and how it is kept (decoded, dropped)."""
        status = self._status
        if self._head_request or status in (204, 304):
            self._left = 0
            return
        self._discard = status in _REDIRECTS and "Location" in headers
        coding = headers.get("Transfer-Encoding", "").lower()
        lengths = headers.getall("Content-Length", ())
        if coding:
            if coding.rsplit(",", 1)[-1].strip() != "chunked":
                self._left, self._keep = -2, False
            else:
                self._left = -1
        elif lengths:
            if len(set(lengths)) != 1 or not lengths[0].isdigit():
                raise aiohttp.ClientPayloadError(f"invalid Content-Length {lengths!r}")
            self._left = int(lengths[0])
            if self._left > self._limit and not self._discard:
                raise BodyTooLarge(
                    f"Content-Length {self._left} is over max_body {self._limit} bytes"
                )
        else:
            self._left, self._keep = -2, False
        if not self._discard:
            encoding = headers.get("Content-Encoding", "").strip().lower()
            self._decoder = _decoder(encoding) if encoding else None
            self._deflate_checked = encoding != "deflate"

    def _chunks(self) -> bool:
        """Read what ``_buf`` holds of a chunked body; True at its end."""
        buf = self._buf
        while True:
            if self._trailers:
                return self._read_trailers()
            if self._chunk < 0 and not self._size_line():
                return False
            if self._trailers:
                continue
            if len(buf) < self._chunk + 2:
                take = min(len(buf), self._chunk)  # hand over what is here; the CRLF is due
                if take:
                    self._take(bytes(buf[:take]))
                    del buf[:take]
                    self._chunk -= take
                return False
            if buf[self._chunk : self._chunk + 2] != b"\r\n":
                raise aiohttp.ClientPayloadError("chunk not followed by CRLF")
            if self._chunk:
                self._take(bytes(buf[: self._chunk]))
            del buf[: self._chunk + 2]
            self._chunk = -1

    def _size_line(self) -> bool:
        """Read a chunk's size line; False while it has not all arrived."""
        buf = self._buf
        end = buf.find(b"\r\n")
        if end < 0:
            if len(buf) > 1024:
                raise aiohttp.ClientPayloadError("invalid chunk size line")
            return False
        size = bytes(buf[:end]).split(b";", 1)[0].strip()
        del buf[: end + 2]
        if not size or size.lstrip(b"0123456789abcdefABCDEF"):
            raise aiohttp.ClientPayloadError(f"invalid chunk size {size[:20]!r}")
        self._chunk = int(size, 16)
        self._trailers = self._chunk == 0
        return True

    def _read_trailers(self) -> bool:
        """Skip the trailer lines after the last chunk; True at the empty line ending them."""
        buf = self._buf
        while True:
            end = buf.find(b"\r\n")
            if end < 0:
                if len(buf) > _HEAD_MAX:
                    raise aiohttp.ClientPayloadError("chunked trailers are too long")
                return False
            del buf[: end + 2]
            if end == 0:
                return True

    def _take(self, data: bytes) -> None:
        """Keep a piece of the body (decoded; within ``max_body``)."""
        if self._discard:
            self._dropped += len(data)
            if self._dropped > _DISCARD_MAX:  # end the answer here: the rest is never read
                self._left, self._keep = 0, False
                raise DiscardDone
            return
        if self._decoder is not None:
            if not self._deflate_checked and data:
                self._deflate_checked = True
                if data[0] & 0x0F != 8:  # a raw deflate stream, without zlib's header
                    self._decoder = zlib.decompressobj(-zlib.MAX_WBITS)
            room = self._limit - len(self._body)
            try:
                data = self._decoder.decompress(data, room + 1)
            except zlib.error as exc:
                raise aiohttp.ClientPayloadError(f"cannot decode the body: {exc}") from exc
        self._body += data
        if len(self._body) > self._limit:
            raise BodyTooLarge(f"body is over max_body {self._limit} bytes")

    def _finish_body(self, waiter: asyncio.Future[Answer]) -> None:
        if self._decoder is not None:
            try:
                self._body += self._decoder.flush()
            except zlib.error as exc:
                raise aiohttp.ClientPayloadError(f"cannot decode the body: {exc}") from exc
            if len(self._body) > self._limit:
                raise BodyTooLarge(f"body is over max_body {self._limit} bytes")
        self._done(waiter)

    def _done(self, waiter: asyncio.Future[Answer]) -> None:
        self._waiter = None
        if self._buf:  # bytes beyond the answer: the connection is not reusable
            self._keep = False
        if not waiter.done():
            waiter.set_result((self._status, self._headers, bytes(self._body)))
        self._body = bytearray()
