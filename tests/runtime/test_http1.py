"""The fetcher's own HTTP/1.1 client (runtime/http1.py) against servers that write exact bytes.

Each server here is a real TCP server on 127.0.0.1 whose answers are scripted byte for byte,
so the framings a site may send (chunked in pieces, 1xx first, read until close, folded
headers, bodies cut short) and the connection's life (kept, reused, closed by the server
as we write) are each checked as the client reads them off a socket.
"""

from __future__ import annotations

import asyncio
import base64
import gzip
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import aiohttp
import pytest
from multidict import CIMultiDictProxy

from scrapeq.engine.config.settings import Settings
from scrapeq.runtime import http1
from scrapeq.runtime.classify import BodyTooLarge, classify_exception
from scrapeq.runtime.fetch import Fetcher
from scrapeq.runtime.http1 import Http1Pool, public_url

Script = Callable[[asyncio.StreamReader, asyncio.StreamWriter, int], Awaitable[None]]


class Server:
    def __init__(self, port: int) -> None:
        self.port = port
        self.connections = 0
        self.requests: list[bytes] = []

    def url(self, path: str = "/") -> str:
        return f"http://127.0.0.1:{self.port}{path}"


@asynccontextmanager
async def scripted(script: Script) -> AsyncIterator[Server]:
    """A server running ``script(reader, writer, n)`` on its n-th connection (from 1)."""
    state = Server(0)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        state.connections += 1
        try:
            await script(reader, writer, state.connections)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    state.port = server.sockets[0].getsockname()[1]
    async with server:
        yield state


async def read_request(reader: asyncio.StreamReader, state: Server | None = None) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    body = await reader.readexactly(length) if length else b""
    if state is not None:
        state.requests.append(head + body)
    return head + body


def answers(*raw: bytes, pieces: int = 0) -> Script:
    """Answer each request of a connection with the next of ``raw`` (in ``pieces``-byte
    writes when set), then keep the connection open until the client closes it."""

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        for answer in raw:
            await read_request(reader)
            if pieces:
                for i in range(0, len(answer), pieces):
                    writer.write(answer[i : i + pieces])
                    await writer.drain()
                    await asyncio.sleep(0)
            else:
                writer.write(answer)
            await writer.drain()
        await reader.read()

    return script


def pool(limit: int = 100) -> Http1Pool:
    return Http1Pool(aiohttp.DefaultResolver(), user_agent="t/1", accept="*/*", limit=limit)


async def get(
    p: Http1Pool, url: str, method: str = "GET", body: bytes | None = None
) -> tuple[int, CIMultiDictProxy[str], bytes]:
    return await p.request(method, url, None, body, 1 << 20)


OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


async def test_a_chunked_body_in_one_byte_pieces_with_extensions_and_trailers() -> None:
    raw = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"5;ext=1\r\nhello\r\n1\r\n \r\n5\r\nworld\r\n0\r\nX-Trailer: t\r\n\r\n"
    )
    async with scripted(answers(raw, OK, pieces=1)) as site:
        p = pool()
        status, _, body = await get(p, site.url("/a"))
        assert (status, body) == (200, b"hello world")
        assert (await get(p, site.url("/b")))[2] == b"ok"
        assert site.connections == 1, "the connection was not kept after a chunked body"
        await p.close()


@pytest.mark.parametrize("coding", ["gzip", "deflate", "raw-deflate"])
async def test_gzip_and_both_deflates_are_decoded(coding: str) -> None:
    page = b"<html>" + b"x" * 5000 + b"</html>"
    if coding == "gzip":
        packed = gzip.compress(page)
    elif coding == "deflate":
        packed = zlib.compress(page)
    else:
        c = zlib.compressobj(wbits=-zlib.MAX_WBITS)
        packed = c.compress(page) + c.flush()
    name = b"gzip" if coding == "gzip" else b"deflate"
    raw = b"HTTP/1.1 200 OK\r\nContent-Encoding: %s\r\nContent-Length: %d\r\n\r\n" % (
        name,
        len(packed),
    )
    async with scripted(answers(raw + packed, pieces=100)) as site:
        p = pool()
        assert (await get(p, site.url()))[2] == page
        await p.close()


async def test_a_body_that_does_not_decode_is_a_payload_error() -> None:
    raw = b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 9\r\n\r\nnot gzip!"
    async with scripted(answers(raw)) as site:
        p = pool()
        with pytest.raises(aiohttp.ClientPayloadError) as caught:
            await get(p, site.url())
        assert classify_exception(caught.value).reason == "payload_error"
        await p.close()


async def test_1xx_answers_are_skipped_and_head_204_304_have_no_body() -> None:
    cont = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </s.css>\r\n\r\n"
    head = b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n"
    empty = b"HTTP/1.1 204 No Content\r\n\r\n"
    same = b"HTTP/1.1 304 Not Modified\r\nContent-Length: 50\r\n\r\n"
    async with scripted(answers(cont + OK, head, empty, same, OK)) as site:
        p = pool()
        assert (await get(p, site.url()))[:3:2] == (200, b"ok")
        status, headers, body = await get(p, site.url(), "HEAD")
        assert (status, headers["Content-Length"], body) == (200, "1000", b"")
        assert (await get(p, site.url()))[::2] == (204, b"")
        assert (await get(p, site.url()))[::2] == (304, b"")
        assert (await get(p, site.url()))[2] == b"ok"
        assert site.connections == 1
        await p.close()


async def test_a_body_without_length_is_read_until_close_and_not_reused() -> None:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nall of ")
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.write(b"it")
        await writer.drain()

    async with scripted(script) as site:
        p = pool()
        assert (await get(p, site.url()))[2] == b"all of it"
        assert (await get(p, site.url()))[2] == b"all of it"
        assert site.connections == 2
        await p.close()


async def test_connection_close_and_bytes_beyond_the_answer_end_the_connection() -> None:
    close = b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok"
    extra = OK + b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nstale"
    async with scripted(answers(close, OK)) as site:
        p = pool()
        await get(p, site.url())
        await get(p, site.url())
        assert site.connections == 2
        await p.close()
    async with scripted(answers(extra, OK)) as site:
        p = pool()
        assert (await get(p, site.url()))[2] == b"ok"
        assert (await get(p, site.url()))[2] == b"ok", "a stale answer was read as the next"
        assert site.connections == 2
        await p.close()


async def test_a_reused_connection_the_server_closed_is_retried_once_for_get_only() -> None:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await read_request(reader)
        writer.write(OK)
        await writer.drain()
        if n == 1:  # read the next request, then close without answering it
            await read_request(reader)
            return
        await reader.read()

    async with scripted(script) as site:
        p = pool()
        await get(p, site.url())
        assert (await get(p, site.url()))[2] == b"ok"
        assert site.connections == 2
        await p.close()
    async with scripted(script) as site:
        p = pool()
        await get(p, site.url())
        with pytest.raises(aiohttp.ServerDisconnectedError):
            await get(p, site.url(), "POST", b"x=1")
        assert site.connections == 1, "a POST was sent twice"
        await p.close()


async def test_a_body_cut_short_and_a_malformed_answer_are_payload_errors() -> None:
    async def cut(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await read_request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly this")
        await writer.drain()

    bad = (
        b"SPDY/9 200 OK\r\n\r\n",
        b"HTTP/1.1 2000 OK\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nok",
        b"HTTP/1.1 200 OK\r\nBad Header\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    )
    async with scripted(cut) as site:
        p = pool()
        with pytest.raises(aiohttp.ClientPayloadError, match="not completed"):
            await get(p, site.url())
        await p.close()
    for raw in bad:
        async with scripted(answers(raw)) as site:
            p = pool()
            with pytest.raises(aiohttp.ClientPayloadError) as caught:
                await get(p, site.url())
            assert classify_exception(caught.value).reason == "payload_error", raw
            await p.close()


async def test_a_folded_header_is_joined_and_repeated_headers_are_all_kept() -> None:
    raw = (
        b"HTTP/1.1 200 OK\r\nX-Long: one\r\n  two\r\nSet-Cookie: a=1\r\nSet-Cookie: b=2\r\n"
        b"Content-Length: 2\r\n\r\nok"
    )
    async with scripted(answers(raw)) as site:
        p = pool()
        _, headers, _ = await get(p, site.url())
        assert headers["x-long"] == "one two"
        assert headers.getall("Set-Cookie") == ["a=1", "b=2"]
        await p.close()


async def test_max_body_is_checked_from_the_length_and_on_decoded_bytes() -> None:
    bomb = gzip.compress(b"\0" * 200_000)
    raw = b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n"
    raw += b"%x\r\n%s\r\n0\r\n\r\n" % (len(bomb), bomb)
    big = b"HTTP/1.1 200 OK\r\nContent-Length: 5000\r\n\r\n"
    async with scripted(answers(raw)) as site:
        p = pool()
        with pytest.raises(BodyTooLarge):
            await p.request("GET", site.url(), None, None, 10_000)
        await p.close()
    async with scripted(answers(big)) as site:
        p = pool()
        with pytest.raises(BodyTooLarge, match="Content-Length 5000"):
            await p.request("GET", site.url(), None, None, 4999)
        await p.close()


async def test_a_redirects_body_is_dropped_and_a_long_one_not_read() -> None:
    hops: list[str] = []

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        while True:
            request = await read_request(reader)
            path = request.split(b" ")[1].decode()
            hops.append(path)
            if path == "/long":
                size = 10 << 20  # more than max_body: never read
                writer.write(
                    b"HTTP/1.1 302 Found\r\nLocation: /short\r\nContent-Length: %d\r\n\r\n" % size
                )
                writer.write(b"x" * (256 * 1024))
                await writer.drain()
                await reader.read()
                return
            if path == "/short":
                writer.write(
                    b"HTTP/1.1 301 Moved\r\nLocation: /end\r\nContent-Length: 5\r\n\r\nmoved"
                )
            else:
                writer.write(OK)
            await writer.drain()

    settings = Settings(allow_private=True, max_body=1000)
    async with scripted(script) as site, Fetcher(settings) as f:
        response = await asyncio.wait_for(f.fetch(site.url("/long")), 10)
    assert (response.status, response.body, response.redirects) == (200, b"ok", 2)
    assert hops == ["/long", "/short", "/end"]
    assert site.connections == 2, "the long redirect's connection was kept, or the short one's not"


async def test_at_the_limit_the_oldest_idle_connection_closes_then_callers_wait() -> None:
    async with scripted(answers(*[OK] * 10)) as a, scripted(answers(*[OK] * 10)) as b:
        p = pool(limit=1)
        assert (await get(p, a.url()))[2] == b"ok"
        assert (await get(p, b.url()))[2] == b"ok"  # a's idle connection made room
        both = await asyncio.gather(*(get(p, a.url(f"/{i}")) for i in range(4)))
        assert [r[2] for r in both] == [b"ok"] * 4
        assert (a.connections, b.connections) == (2, 1)
        await p.close()


async def test_credentials_in_the_url_go_as_basic_auth_not_in_the_answer_url() -> None:
    seen: list[bytes] = []

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        seen.append(await read_request(reader))
        writer.write(OK)
        await writer.drain()

    async with scripted(script) as site:
        url = site.url("/p").replace("http://", "http://us%40er:pa%3Ass@")
        async with Fetcher(Settings(allow_private=True)) as f:
            response = await f.fetch(url)
    token = base64.b64encode(b"us@er:pa:ss").decode()
    assert f"Authorization: Basic {token}".encode() in seen[0]
    assert b"pa%3Ass" not in seen[0] and b"Host: 127.0.0.1:" in seen[0]
    assert response.url == site.url("/p")
    assert public_url("https://u:p@h.test:8443/a?b#c") == "https://h.test:8443/a?b#c"


async def test_a_request_sends_its_method_headers_body_over_the_defaults() -> None:
    got: list[bytes] = []

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        for _ in range(2):
            got.append(await read_request(reader))
            writer.write(OK)
            await writer.drain()

    async with scripted(script) as site:
        p = pool()
        await p.request("POST", site.url("/f?q=1"), [("Accept", "a/b"), ("X-A", "1")], b"k=v", 100)
        await p.request(
            "DELETE", site.url("/ü x"), [("Accept-Encoding", "br, gzip;q=0.5")], None, 100
        )
        await p.close()
    first, second = got
    assert first.startswith(b"POST /f?q=1 HTTP/1.1\r\n")
    assert b"Accept: a/b\r\n" in first and b"*/*" not in first and b"User-Agent: t/1" in first
    assert first.endswith(b"Content-Length: 3\r\n\r\nk=v")
    assert second.startswith(b"DELETE /%C3%BC%20x HTTP/1.1\r\n")
    assert b"Content-Length: 0\r\n" in second
    # only codings the client decodes are asked for: a br body would reach the handler raw
    assert b"Accept-Encoding: gzip;q=0.5\r\n" in second and b"br" not in second


async def test_a_hop_cancelled_mid_body_closes_its_connection() -> None:
    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await read_request(reader)
        if n == 1:
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc")
            await writer.drain()
            await reader.read()
            return
        writer.write(OK)
        await writer.drain()
        await reader.read()

    async with scripted(script) as site:
        p = pool()
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(get(p, site.url()), 0.2)
        assert (await get(p, site.url()))[2] == b"ok"
        assert site.connections == 2
        await p.close()


async def test_a_name_that_does_not_resolve_is_a_dns_error() -> None:
    async with Fetcher(Settings(allow_private=True)) as f:
        with pytest.raises(aiohttp.ClientConnectorDNSError) as caught:
            await f.fetch("http://no-such-host.invalid/")
    assert classify_exception(caught.value).reason == "dns_error"


async def test_connections_idle_past_the_keepalive_are_closed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = [1000.0]
    monkeypatch.setattr(http1, "_clock", lambda: clock[0])
    async with scripted(answers(OK, OK)) as a, scripted(answers(OK, OK)) as b:
        p = pool()
        await get(p, a.url())
        clock[0] += 16  # a's connection is now idle past the keep-alive
        await get(p, b.url())  # a release sweeps: a's connection closes
        await asyncio.sleep(0.05)
        assert (await get(p, a.url()))[2] == b"ok"
        assert (a.connections, b.connections) == (2, 1)
        await p.close()


async def test_the_retry_after_a_stale_connection_opens_a_new_one() -> None:
    """A server that restarted closed every idle connection: the retry does not take another
    of them (it would be refused the same way), it opens one."""

    async def script(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
        await read_request(reader)
        await asyncio.sleep(0.05)  # both first requests are in flight at once: two connections
        writer.write(OK)
        await writer.drain()
        if n <= 2:  # read the next request, then close without answering it
            await read_request(reader)
            return
        await reader.read()

    async with scripted(script) as site:
        p = pool()
        await asyncio.gather(get(p, site.url("/1")), get(p, site.url("/2")))
        assert site.connections == 2
        assert (await get(p, site.url("/3")))[2] == b"ok"
        assert site.connections == 3
        await p.close()


async def test_an_ipv6_literal_host_connects_and_names_itself_in_brackets() -> None:
    got: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        got.append(await read_request(reader))
        writer.write(OK)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "::1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server, Fetcher(Settings(allow_private=True)) as f:
        response = await f.fetch(f"http://[::1]:{port}/six")
    assert (response.status, response.body) == (200, b"ok")
    assert got[0].startswith(b"GET /six HTTP/1.1\r\nHost: [::1]:%d\r\n" % port)
