"""The fetch layer against real loopback HTTP servers (aiohttp.web); the client is never mocked."""

from __future__ import annotations

import asyncio
import gzip
import socket
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import aiohttp
import aiohttp.abc
import pytest
import redis.asyncio
from aiohttp import web

from scrapeq.engine.config.settings import Settings
from scrapeq.engine.server.launcher import free_port
from scrapeq.errors import ConfigError, InvalidURL
from scrapeq.runtime.classify import (
    BlockedAddress,
    BodyTooLarge,
    Outcome,
    RobotsDisallowed,
    classify_exception,
)
from scrapeq.runtime.fetch import Fetcher, GuardedResolver, Response, Robots, StaticResolver
from support.sites import proxy

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

# A public address (not loopback/private/reserved) that the tests never connect to.
PUBLIC_IP = "93.184.216.34"


@asynccontextmanager
async def serve(routes: dict[str, Handler] | web.Application) -> AsyncIterator[str]:
    """Run an aiohttp.web app on 127.0.0.1, a free port; yield ``http://127.0.0.1:PORT``."""
    if isinstance(routes, web.Application):
        app = routes
    else:
        app = web.Application()
        for path, handler in routes.items():
            app.router.add_get(path, handler)
    # handler_cancellation: a hanging handler ends when its client goes away;
    # shutdown_timeout: cleanup does not wait a minute for handlers still running.
    runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=0.1, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


def loopback(**changes: object) -> Settings:
    base: dict[str, object] = {"allow_private": True, "request_timeout": 5.0}
    base.update(changes)
    return Settings().replace(**base)


@asynccontextmanager
async def fetcher(
    settings: Settings, resolver: aiohttp.abc.AbstractResolver | None = None
) -> AsyncIterator[Fetcher]:
    async with Fetcher(settings, resolver=resolver) as f:
        yield f


# --- plain responses ---------------------------------------------------------------------------


async def test_200_body_and_headers() -> None:
    seen: dict[str, str] = {}

    async def hello(request: web.Request) -> web.Response:
        seen.update(request.headers)
        return web.Response(
            text="héllo", content_type="text/plain", charset="latin-1", headers={"X-Test": "1"}
        )

    settings = loopback(user_agent="scrapeq-test/1.0")
    async with serve({"/": hello}) as base, fetcher(settings) as f:
        started = time.monotonic()
        resp = await f.fetch(base + "/")
        took = time.monotonic() - started
    assert isinstance(resp, Response)
    assert resp.status == 200
    assert resp.url == base + "/"
    assert resp.redirects == 0
    assert resp.body == "héllo".encode("latin-1")
    assert resp.text() == "héllo"
    assert resp.headers["x-test"] == "1"  # case-insensitive
    assert 0 < resp.elapsed <= took
    assert seen["User-Agent"] == "scrapeq-test/1.0"
    assert "gzip" in seen["Accept-Encoding"]
    assert "text/html" in seen["Accept"]


async def test_gzip_body_is_decompressed_and_json() -> None:
    payload = b'{"items": [1, 2, 3], "name": "\xc3\xa9"}'
    packed = gzip.compress(payload)

    async def zipped(request: web.Request) -> web.Response:
        return web.Response(
            body=packed,
            headers={"Content-Encoding": "gzip", "Content-Type": "application/json"},
        )

    async with serve({"/": zipped}) as base, fetcher(loopback()) as f:
        resp = await f.fetch(base + "/")
    assert resp.body == payload
    assert resp.json() == {"items": [1, 2, 3], "name": "é"}
    assert resp.text() == payload.decode("utf-8")


def test_text_falls_back_to_utf8_with_replacement() -> None:
    resp = Response("http://x/", 200, {"Content-Type": "text/html"}, b"ok \xff", 0.1, 0)
    assert resp.text() == "ok \ufffd"
    odd = Response("http://x/", 200, {"Content-Type": "text/html; charset=bogus"}, b"a", 0.1, 0)
    assert odd.text() == "a"
    assert odd.text("latin-1") == "a"


# --- deadlines ---------------------------------------------------------------------------------


async def test_hanging_server_times_out_at_the_deadline() -> None:
    async def hang(request: web.Request) -> web.Response:
        await asyncio.sleep(3600)
        raise AssertionError("unreachable")

    async with serve({"/": hang}) as base, fetcher(loopback(request_timeout=0.5)) as f:
        started = time.monotonic()
        with pytest.raises(TimeoutError) as info:
            await f.fetch(base + "/")
        took = time.monotonic() - started
    assert 0.45 <= took < 1.5
    verdict = classify_exception(info.value)
    assert (verdict.outcome, verdict.reason, verdict.counts_against_domain) == (
        Outcome.RETRY,
        "timeout",
        True,
    )


async def test_slow_drip_is_cut_at_the_total_deadline() -> None:
    async def drip(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Length": "100"})
        await resp.prepare(request)
        for _ in range(100):  # 10 s in all; each read is fast
            await resp.write(b"x")
            await asyncio.sleep(0.1)
        return resp

    async with serve({"/": drip}) as base, fetcher(loopback(request_timeout=1.0)) as f:
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            await f.fetch(base + "/")
        took = time.monotonic() - started
    assert 0.95 <= took < 2.0


# --- body size ---------------------------------------------------------------------------------


async def test_body_too_large_by_content_length() -> None:
    async def big(request: web.Request) -> web.Response:
        return web.Response(body=b"x" * 5000)

    async with serve({"/": big}) as base, fetcher(loopback(max_body=1000)) as f:
        with pytest.raises(BodyTooLarge) as info:
            await f.fetch(base + "/")
        assert "Content-Length" in str(info.value)
        # at the limit is fine
        async with fetcher(loopback(max_body=5000)) as exact:
            assert len((await exact.fetch(base + "/")).body) == 5000
    verdict = classify_exception(info.value)
    assert (verdict.outcome, verdict.reason) == (Outcome.FAIL, "body_too_large")


async def test_body_too_large_while_streaming_chunked() -> None:
    sent = 0

    async def chunked(request: web.Request) -> web.StreamResponse:
        nonlocal sent
        resp = web.StreamResponse()
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        for _ in range(200):
            await resp.write(b"y" * 100)
            sent += 100
            await asyncio.sleep(0.005)
        await resp.write_eof()
        return resp

    async with serve({"/": chunked}) as base, fetcher(loopback(max_body=1000)) as f:
        with pytest.raises(BodyTooLarge):
            await f.fetch(base + "/")
    assert sent < 200 * 100  # aborted before the server finished


async def test_gzip_bomb_is_limited_on_decompressed_bytes() -> None:
    packed = gzip.compress(b"\0" * 2_000_000)

    async def bomb(request: web.Request) -> web.Response:
        return web.Response(body=packed, headers={"Content-Encoding": "gzip"})

    assert len(packed) < 100_000
    async with serve({"/": bomb}) as base, fetcher(loopback(max_body=100_000)) as f:
        with pytest.raises(BodyTooLarge):
            await f.fetch(base + "/")


# --- redirects ---------------------------------------------------------------------------------


async def test_redirect_chain_is_followed() -> None:
    async def hop(request: web.Request) -> web.Response:
        n = int(request.match_info["n"])
        if n == 0:
            return web.Response(text="arrived")
        if n == 2:  # an absolute Location
            raise web.HTTPFound(f"http://{request.host}/r/1")
        raise web.HTTPMovedPermanently(f"/r/{n - 1}")  # a relative one

    app = web.Application()
    app.router.add_get("/r/{n}", hop)
    async with serve(app) as base, fetcher(loopback()) as f:
        resp = await f.fetch(base + "/r/3")
    assert resp.status == 200
    assert resp.text() == "arrived"
    assert resp.redirects == 3
    assert resp.url == base + "/r/0"


async def test_redirect_loop_is_too_many_redirects() -> None:
    hits = 0

    async def loop(request: web.Request) -> web.Response:
        nonlocal hits
        hits += 1
        raise web.HTTPTemporaryRedirect("/loop")

    async with serve({"/loop": loop}) as base, fetcher(loopback(max_redirects=3)) as f:
        with pytest.raises(aiohttp.TooManyRedirects) as info:
            await f.fetch(base + "/loop")
    assert hits == 4  # the first request and 3 redirects followed
    verdict = classify_exception(info.value)
    assert (verdict.outcome, verdict.reason, verdict.counts_against_domain) == (
        Outcome.FAIL,
        "redirect_loop",
        False,
    )


async def test_redirect_to_another_scheme_is_invalid_url() -> None:
    async def ftp(request: web.Request) -> web.Response:
        raise web.HTTPFound("ftp://files.example/x")

    async with serve({"/": ftp}) as base, fetcher(loopback()) as f:
        with pytest.raises(InvalidURL) as info:
            await f.fetch(base + "/")
    verdict = classify_exception(info.value)
    assert (verdict.outcome, verdict.reason) == (Outcome.FAIL, "invalid_url")


async def test_redirect_without_location_is_the_final_response() -> None:
    async def bare(request: web.Request) -> web.Response:
        return web.Response(status=302, text="nowhere")

    async with serve({"/": bare}) as base, fetcher(loopback()) as f:
        resp = await f.fetch(base + "/")
    assert (resp.status, resp.redirects, resp.text()) == (302, 0, "nowhere")


# --- transport failures ------------------------------------------------------------------------


async def test_connection_refused_is_retry_counting_against_domain() -> None:
    port = free_port()
    async with fetcher(loopback()) as f:
        with pytest.raises(aiohttp.ClientConnectorError) as info:
            await f.fetch(f"http://127.0.0.1:{port}/")
    verdict = classify_exception(info.value)
    assert verdict.outcome is Outcome.RETRY
    assert verdict.counts_against_domain


async def test_proxy_down_is_ours() -> None:
    dead_proxy = f"http://127.0.0.1:{free_port()}"

    async def ok(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async with serve({"/": ok}) as base, fetcher(loopback(proxy=dead_proxy)) as f:
        with pytest.raises(aiohttp.ClientProxyConnectionError) as info:
            await f.fetch(base + "/")
    verdict = classify_exception(info.value)
    assert (verdict.outcome, verdict.reason, verdict.counts_against_domain) == (
        Outcome.OURS,
        "proxy_error",
        False,
    )


@pytest.mark.parametrize(
    ("status", "outcome", "reason", "counts"),
    [
        (502, Outcome.RETRY, "proxy_http_502", True),
        (503, Outcome.RETRY, "proxy_http_503", True),
        (403, Outcome.RETRY, "proxy_http_403", True),
        (407, Outcome.OURS, "proxy_error", False),
        (401, Outcome.OURS, "proxy_error", False),  # tinyproxy 1.11, wrong credentials
    ],
)
async def test_proxy_refusing_connect_for_one_target(
    status: int, outcome: Outcome, reason: str, counts: bool
) -> None:
    """A proxy that answers CONNECT for one target with a 5xx or 403 says that target cannot
    be reached: the target's failure. A 407 (our credentials) is ours: every target fails."""
    refused = f"127.0.0.1:{free_port()}"

    async def ok(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async with (
        serve({"/": ok}) as base,
        proxy({refused: status}) as p,
        fetcher(loopback(proxy=p.url)) as f,
    ):
        with pytest.raises(aiohttp.ClientHttpProxyError) as info:
            await f.fetch(f"https://{refused}/p/1")
        other = await f.fetch(base + "/")  # the same proxy still serves other targets
    assert info.value.status == status and other.status == 200
    assert p.connects == {refused: 1} and sum(p.forwards.values()) == 1
    verdict = classify_exception(info.value)
    assert (verdict.outcome, verdict.reason, verdict.counts_against_domain) == (
        outcome,
        reason,
        counts,
    )


class _Unresolvable(aiohttp.abc.AbstractResolver):
    """Every name fails to resolve (our DNS is down)."""

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[aiohttp.abc.ResolveResult]:
        raise socket.gaierror(socket.EAI_NONAME, f"{host}: Name or service not known")

    async def close(self) -> None:
        return None


async def test_proxy_whose_name_does_not_resolve_is_ours() -> None:
    # Through a proxy only the proxy's name is resolved here: its failure is not the target's.
    settings = loopback(proxy="http://user:secret@proxy.invalid:3128")
    async with fetcher(settings, resolver=_Unresolvable()) as f:
        with pytest.raises(Exception) as info:
            await f.fetch("http://shop.example.com/p/1")
    verdict = classify_exception(info.value)
    assert (verdict.outcome, verdict.counts_against_domain) == (Outcome.OURS, False)
    assert "proxy.invalid" in str(info.value) and "secret" not in str(info.value)


async def test_the_test_proxy_tunnels_the_targets_it_does_not_refuse() -> None:
    async def ok(request: web.Request) -> web.Response:
        return web.Response(text="through the tunnel")

    async with serve({"/": ok}) as base, proxy({"127.0.0.1:1": 502}) as p:
        target = base.removeprefix("http://")
        reader, writer = await asyncio.open_connection("127.0.0.1", p.port)
        writer.write(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
        assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 200")
        writer.write(f"GET / HTTP/1.1\r\nHost: {target}\r\nConnection: close\r\n\r\n".encode())
        answer = await reader.read()
        writer.close()
        await writer.wait_closed()
    assert answer.startswith(b"HTTP/1.1 200") and answer.endswith(b"through the tunnel")
    assert p.connects == {target: 1}


def test_socks_proxy_is_refused() -> None:
    with pytest.raises(ConfigError):
        Fetcher(loopback(proxy="socks5://127.0.0.1:1080"))


# --- proxies -----------------------------------------------------------------------------------


def forward_proxy(
    name: str, log: list[str], resolver_map: dict[str, str] | None = None
) -> web.Application:
    """A tiny forward HTTP proxy: absolute-form GETs re-sent with a ClientSession."""
    app = web.Application()
    resolver = StaticResolver(resolver_map or {})
    sessions: list[aiohttp.ClientSession] = []

    async def start(app: web.Application) -> None:
        connector = aiohttp.TCPConnector(resolver=resolver)
        sessions.append(aiohttp.ClientSession(connector=connector, auto_decompress=False))

    async def stop(app: web.Application) -> None:
        for session in sessions:
            await session.close()
        await resolver.close()  # a resolver given to a connector is not closed by it

    async def forward(request: web.Request) -> web.Response:
        log.append(name)
        target = f"http://{request.headers['Host']}{request.rel_url.path_qs}"
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_HEADERS}
        async with sessions[0].get(target, headers=headers, allow_redirects=False) as upstream:
            body = await upstream.read()
            out = {k: v for k, v in upstream.headers.items() if k.lower() not in _HOP_HEADERS}
            return web.Response(status=upstream.status, body=body, headers=out)

    app.on_startup.append(start)
    app.on_cleanup.append(stop)
    app.router.add_route("GET", "/{tail:.*}", forward)
    return app


_HOP_HEADERS = frozenset(
    {"connection", "proxy-connection", "keep-alive", "transfer-encoding", "content-length", "host"}
)


async def test_fetch_through_a_working_proxy() -> None:
    log: list[str] = []

    async def ok(request: web.Request) -> web.Response:
        return web.Response(text=f"via {request.headers.get('User-Agent')}")

    async with (
        serve({"/": ok}) as base,
        serve(forward_proxy("p1", log)) as proxy,
        fetcher(loopback(proxy=proxy)) as f,
    ):
        resp = await f.fetch(base + "/")
    assert resp.status == 200
    assert resp.text().startswith("via scrapeq/")
    assert log == ["p1"]


async def test_proxies_rotate_per_request() -> None:
    log: list[str] = []

    async def ok(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async with (
        serve({"/": ok}) as base,
        serve(forward_proxy("a", log)) as proxy_a,
        serve(forward_proxy("b", log)) as proxy_b,
        fetcher(loopback(proxy=f"{proxy_a},{proxy_b}")) as f,
    ):
        for _ in range(4):
            assert (await f.fetch(base + "/")).status == 200
    assert log == ["a", "b", "a", "b"]
    assert Counter(log) == {"a": 2, "b": 2}


# --- SSRF guard --------------------------------------------------------------------------------


async def test_public_looking_name_resolving_to_loopback_is_blocked() -> None:
    hits = 0

    async def ok(request: web.Request) -> web.Response:
        nonlocal hits
        hits += 1
        return web.Response(text="secret")

    resolver = StaticResolver({"public-looking.example": "127.0.0.1"})
    settings = Settings(request_timeout=5.0)  # allow_private False
    async with serve({"/": ok}) as base, fetcher(settings, resolver=resolver) as f:
        port = base.rsplit(":", 1)[1]
        with pytest.raises(BlockedAddress) as info:
            await f.fetch(f"http://public-looking.example:{port}/")
        with pytest.raises(BlockedAddress):  # again: nothing unchecked was cached
            await f.fetch(f"http://public-looking.example:{port}/")
    assert hits == 0
    verdict = classify_exception(info.value)
    assert (verdict.outcome, verdict.reason, verdict.counts_against_domain) == (
        Outcome.FAIL,
        "blocked_address",
        False,
    )


@pytest.mark.parametrize(
    "url",
    ["http://127.0.0.1:9/", "http://[::1]:9/", "http://localhost:9/", "http://10.1.2.3/"],
)
async def test_literal_private_hosts_are_blocked_before_connecting(url: str) -> None:
    async with fetcher(Settings(request_timeout=5.0)) as f:
        with pytest.raises(BlockedAddress):
            await f.fetch(url)


async def test_guarded_resolver_refuses_any_private_answer() -> None:
    guard = GuardedResolver(StaticResolver({"a.example": "192.168.1.1", "b.example": PUBLIC_IP}))
    with pytest.raises(BlockedAddress):
        await guard.resolve("a.example", 80, socket.AF_UNSPEC)
    assert [r["host"] for r in await guard.resolve("b.example", 80, socket.AF_UNSPEC)] == [
        PUBLIC_IP
    ]
    exempt = GuardedResolver(
        StaticResolver({"proxy.internal": "10.0.0.5"}), exempt=frozenset({"proxy.internal"})
    )
    assert (await exempt.resolve("proxy.internal", 3128))[0]["host"] == "10.0.0.5"
    await guard.close()
    await exempt.close()


async def test_redirects_to_private_targets_are_refused() -> None:
    """The first hop must be allowed, yet every server here is on loopback. So the site is
    reached through a proxy (as in production): the fetcher checks the *target* name, which
    its resolver maps to a public address, and the proxy (ours, exempt from the guard)
    connects to the loopback server under that name. No bypass hook is involved."""
    log: list[str] = []
    hits: Counter[str] = Counter()

    async def page(request: web.Request) -> web.Response:
        hits[request.path] += 1
        port = request.host.rsplit(":", 1)[1]
        where = {
            "/to-literal": f"http://127.0.0.1:{port}/secret",
            "/to-internal-name": f"http://internal.example:{port}/secret",
            "/to-public": f"http://public.example:{port}/secret",
        }.get(request.path)
        if where is not None:
            raise web.HTTPFound(where)
        return web.Response(text="secret")

    app = web.Application()
    app.router.add_get("/{tail:.*}", page)
    ours = StaticResolver({"public.example": PUBLIC_IP, "internal.example": "10.0.0.1"})
    proxy_map = {"public.example": "127.0.0.1", "internal.example": "127.0.0.1"}
    async with (
        serve(app) as base,
        serve(forward_proxy("p", log, proxy_map)) as proxy,
        fetcher(Settings(request_timeout=5.0, proxy=(proxy,)), resolver=ours) as f,
    ):
        port = base.rsplit(":", 1)[1]
        site = f"http://public.example:{port}"
        # control: a redirect to an allowed name is followed through the proxy
        resp = await f.fetch(site + "/to-public")
        assert (resp.status, resp.redirects, resp.text()) == (200, 1, "secret")
        with pytest.raises(BlockedAddress):
            await f.fetch(site + "/to-literal")
        with pytest.raises(BlockedAddress) as info:
            await f.fetch(site + "/to-internal-name")
        with pytest.raises(BlockedAddress):  # a private target name is refused up front
            await f.fetch(f"http://internal.example:{port}/secret")
    assert hits["/secret"] == 1  # only the allowed redirect reached it
    assert classify_exception(info.value).reason == "blocked_address"


# --- robots.txt --------------------------------------------------------------------------------

ROBOTS = """\
User-agent: scrapeq
Disallow: /private
Crawl-delay: 2.5

User-agent: *
Disallow: /
"""


def robots_app(hits: Counter[str], status: int = 200, text: str = ROBOTS) -> web.Application:
    async def robots(request: web.Request) -> web.Response:
        hits["robots"] += 1
        return web.Response(status=status, text=text)

    app = web.Application()
    app.router.add_get("/robots.txt", robots)
    return app


@pytest.fixture
async def aredis(redis_url: str) -> AsyncIterator[redis.asyncio.Redis]:
    client = redis.asyncio.Redis.from_url(redis_url)
    yield client
    await client.aclose()


PREFIX = "sq:{test}:robots:"


async def test_robots_rules_delay_and_shared_cache(aredis: redis.asyncio.Redis) -> None:
    hits: Counter[str] = Counter()
    async with serve(robots_app(hits)) as base, fetcher(loopback()) as f:
        robots = Robots(f, aredis, PREFIX)
        assert await robots.allowed(base + "/private/page") == (False, 2.5)
        assert await robots.allowed(base + "/public/page") == (True, 2.5)
        # concurrent questions share the cached answer
        answers = await asyncio.gather(*(robots.allowed(base + f"/p{i}") for i in range(5)))
        assert all(ok for ok, _ in answers)
        with pytest.raises(RobotsDisallowed):
            await robots.check(base + "/private")
        assert hits["robots"] == 1
        stored = await aredis.get(PREFIX + base)
        assert stored is not None and b"Crawl-delay" in stored
        assert 3500 < await aredis.ttl(PREFIX + base) <= 3600
        # another worker (a fresh instance) reads Redis, not the site
        other = Robots(f, aredis, PREFIX)
        assert await other.allowed(base + "/private/x") == (False, 2.5)
        assert hits["robots"] == 1


async def test_robots_matches_the_configured_user_agent(aredis: redis.asyncio.Redis) -> None:
    hits: Counter[str] = Counter()
    async with serve(robots_app(hits)) as base, fetcher(loopback(user_agent="otherbot/2")) as f:
        robots = Robots(f, aredis, PREFIX)
        assert await robots.allowed(base + "/public") == (False, None)  # the "*" group


async def test_robots_404_allows_all(aredis: redis.asyncio.Redis) -> None:
    hits: Counter[str] = Counter()
    async with serve(robots_app(hits, status=404, text="nope")) as base, fetcher(loopback()) as f:
        robots = Robots(f, aredis, PREFIX)
        assert await robots.allowed(base + "/anything") == (True, None)
        assert await robots.allowed(base + "/else") == (True, None)
    assert hits["robots"] == 1
    assert await aredis.get(PREFIX + base) == b""


async def test_robots_5xx_allows_for_now_without_caching_in_redis(
    aredis: redis.asyncio.Redis,
) -> None:
    hits: Counter[str] = Counter()
    async with serve(robots_app(hits, status=503)) as base, fetcher(loopback()) as f:
        robots = Robots(f, aredis, PREFIX, unreachable_ttl=0.2)
        assert await robots.allowed(base + "/private") == (True, None)
        assert await robots.allowed(base + "/private") == (True, None)
        assert hits["robots"] == 1  # remembered in-process for a short while
        assert await aredis.get(PREFIX + base) is None
        await asyncio.sleep(0.25)
        await robots.allowed(base + "/private")
        assert hits["robots"] == 2


async def test_robots_unreachable_site_allows_for_now() -> None:
    port = free_port()
    async with fetcher(loopback()) as f:
        robots = Robots(f, None, PREFIX)
        assert await robots.allowed(f"http://127.0.0.1:{port}/x") == (True, None)
