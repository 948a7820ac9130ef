"""Attacks on the sticky session's cookie jar (issue 36 items 1 and 3, issue 38 item 7), each
through a real worker, a real Redis and real loopback sites whose host names a
:class:`StaticResolver` maps to 127.0.0.1 (``session = sticky`` through the ``direct`` exit):

- several hosts share one jar (``politeness = ip`` or ``domain``): a host-only cookie goes to
  its host only, a ``Domain`` cookie to that domain and its subdomains;
- a ``Secure`` cookie set over https is never sent over plain http;
- two attempts holding the same (stale) copy of the jar both keep the cookies they got.

The jar's rules themselves (RFC 6265 through ``http.cookiejar``) and the Lua merge are tested
without a worker below them."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import ssl
import subprocess
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp.connector
import pytest
import redis
from aiohttp import web

from scrapeq import AsyncQueue, Queue, Settings
from scrapeq.engine.lua.wire import JAR_COOKIE, JAR_FLAGS
from scrapeq.engine.model.request import Request
from scrapeq.runtime.fetch import Fetcher, StaticResolver
from scrapeq.runtime.session_jar import absorb, jar_request
from scrapeq.runtime.worker import Worker

HOSTS = ("bank.test", "blog.test", "login.shop.test", "ads.shop.test", "secure.test")

Seen = tuple[str, str, str, dict[str, str]]  # (host, scheme, path, cookies received)


class CookieSite:
    """One aiohttp server (plain or TLS) answering any of :data:`HOSTS`: logs each request's
    host, scheme, path and cookies; ``sets[path]`` are the ``Set-Cookie`` values it answers
    that path with; ``gate`` (when set) holds the paths in it until both have arrived."""

    def __init__(self, sets: dict[str, list[str]], *, tls: ssl.SSLContext | None = None) -> None:
        self.sets = sets
        self.tls = tls
        self.log: list[Seen] = []
        self.gate: dict[str, asyncio.Event] = {}
        self.redirects: dict[str, str] = {}  # path -> the URL it redirects to (302)
        self.runner: web.AppRunner | None = None
        self.port = 0

    async def handle(self, request: web.Request) -> web.StreamResponse:
        host = request.host.rsplit(":", 1)[0]
        self.log.append((host, request.scheme, request.path, dict(request.cookies)))
        if request.path in self.gate:  # both gated requests in flight at once
            self.gate[request.path].set()
            await asyncio.wait_for(asyncio.gather(*(e.wait() for e in self.gate.values())), 10)
        resp = web.Response(text="<html><title>ok</title></html>", content_type="text/html")
        if request.path in self.redirects:
            resp = web.Response(status=302, headers={"Location": self.redirects[request.path]})
        for value in self.sets.get(request.path, []):
            resp.headers.add("Set-Cookie", value)
        return resp

    def url(self, host: str, path: str) -> str:
        return f"{'https' if self.tls else 'http'}://{host}:{self.port}{path}"

    def sent(self, host: str, path: str, scheme: str = "http") -> dict[str, str]:
        """The cookies of the last request for (host, path, scheme)."""
        found = [c for h, s, p, c in self.log if (h, s, p) == (host, scheme, path)]
        assert found, (host, scheme, path, self.log)
        return found[-1]

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.handle)
        self.runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=0.1)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0, ssl_context=self.tls)
        await site.start()
        assert site._server is not None
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()


@pytest.fixture
async def cookie_sites() -> AsyncIterator[Callable[..., CookieSite]]:
    made: list[CookieSite] = []

    def make(sets: dict[str, list[str]], tls: ssl.SSLContext | None = None) -> CookieSite:
        site = CookieSite(sets, tls=tls)
        made.append(site)
        return site

    yield make
    for site in made:
        await site.stop()


@pytest.fixture
async def sticky(redis_url: str) -> AsyncIterator[Callable[..., AsyncQueue]]:
    made: list[AsyncQueue] = []

    def make(**overrides: Any) -> AsyncQueue:
        settings = Settings(
            allow_private=True, proxy="direct", session="sticky", request_timeout=5.0,
            **overrides,
        )  # fmt: skip
        q = AsyncQueue.from_url(redis_url, settings=settings)
        made.append(q)
        return q

    yield make
    for q in made:
        await q.close()


async def crawl(q: AsyncQueue, urls: list[str], *, concurrency: int = 1) -> None:
    """Enqueue ``urls`` and run a burst worker until they are all settled."""
    await q.enqueue_many(urls)
    fetcher = Fetcher(q.settings, resolver=StaticResolver(dict.fromkeys(HOSTS, "127.0.0.1")))
    worker = Worker(q, fetcher=fetcher, burst=True, report=False, concurrency=concurrency)
    try:
        await asyncio.wait_for(worker.run_async(), 30)
    finally:
        await fetcher.close()


# --- issue 36 item 1: one jar, several hosts ---------------------------------------------------


async def test_politeness_ip_a_host_only_cookie_goes_to_its_host_only(
    sticky: Callable[..., AsyncQueue], cookie_sites: Callable[..., CookieSite]
) -> None:
    site = cookie_sites({"/login": ["session=bank-secret; Path=/"]})
    await site.start()
    q = sticky(politeness="ip")
    # the first fetch of each host files it under ip:127.0.0.1: one group, one jar from then on
    await crawl(q, [site.url("bank.test", "/warm"), site.url("blog.test", "/warm")])
    await crawl(q, [site.url("bank.test", "/login")])
    await crawl(q, [site.url("bank.test", "/account"), site.url("blog.test", "/read")])
    assert {i["domain"] for i in await q.domains_info()} >= {"ip:127.0.0.1"}
    assert site.sent("bank.test", "/account") == {"session": "bank-secret"}, "the jar works"
    assert "session" not in site.sent("blog.test", "/read"), "bank.test's cookie went to blog"


async def test_politeness_domain_a_subdomains_cookie_stays_there_but_domain_cookies_travel(
    sticky: Callable[..., AsyncQueue], cookie_sites: Callable[..., CookieSite]
) -> None:
    site = cookie_sites(
        {
            "/login": [
                "session=login-secret; Path=/",  # host-only: login.shop.test alone
                "shared=1; Domain=shop.test; Path=/",  # shop.test and its subdomains
                "stolen=1; Domain=bank.test; Path=/",  # not login.shop.test's to set
                "suffix=1; Domain=test; Path=/",  # a public suffix: refused
            ]
        }
    )
    await site.start()
    q = sticky(politeness="domain")
    await crawl(q, [site.url("login.shop.test", "/login")])
    await crawl(q, [site.url("login.shop.test", "/cart"), site.url("ads.shop.test", "/pixel")])
    assert [i["domain"] for i in await q.domains_info()] == [f"shop.test:{site.port}"]
    assert site.sent("login.shop.test", "/cart") == {"session": "login-secret", "shared": "1"}
    assert site.sent("ads.shop.test", "/pixel") == {"shared": "1"}, "login's session went to ads"


async def test_a_redirect_hop_on_another_host_of_the_jar_sets_cookies_for_its_own_host(
    sticky: Callable[..., AsyncQueue], cookie_sites: Callable[..., CookieSite]
) -> None:
    site = cookie_sites({"/sso": ["sid=sso-secret; Path=/"], "/go": ["start=1; Path=/"]})
    await site.start()
    site.redirects = {"/go": site.url("login.shop.test", "/sso")}
    q = sticky(politeness="domain")
    await crawl(q, [site.url("ads.shop.test", "/go")])  # ads.shop.test -> login.shop.test
    await crawl(q, [site.url("login.shop.test", "/me"), site.url("ads.shop.test", "/next")])
    assert site.sent("login.shop.test", "/me") == {"sid": "sso-secret"}, "the hop's cookie kept"
    assert site.sent("ads.shop.test", "/next") == {"start": "1"}


# --- issue 36 item 3: Secure ------------------------------------------------------------------


@pytest.fixture
def trusted_tls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ssl.SSLContext]:
    """A server context for secure.test, with a self-signed certificate the fetcher trusts
    for this test: its direct hops' context reads ``SSL_CERT_FILE`` as OpenSSL does, and
    aiohttp's verifying client context (hops through a proxy) is replaced by one that trusts
    it."""
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "1",
         "-subj", "/CN=secure.test", "-addext", "subjectAltName=DNS:secure.test"],
        check=True, capture_output=True,
    )  # fmt: skip
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(cert, key)
    client = ssl.create_default_context(cafile=str(cert))
    monkeypatch.setattr(aiohttp.connector, "_SSL_CONTEXT_VERIFIED", client)
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    yield server


async def test_a_secure_cookie_set_over_https_is_never_sent_over_http(
    sticky: Callable[..., AsyncQueue],
    cookie_sites: Callable[..., CookieSite],
    trusted_tls: ssl.SSLContext,
) -> None:
    sets = {"/login": ["sid=secret; Path=/; Secure; HttpOnly", "lang=en; Path=/"]}
    tls, plain = cookie_sites(sets, tls=trusted_tls), cookie_sites(sets)
    await tls.start()
    await plain.start()
    q = sticky(politeness="ip")  # secure.test's two ports in one group: one jar
    await crawl(q, [tls.url("secure.test", "/warm"), plain.url("secure.test", "/warm")])
    await crawl(q, [tls.url("secure.test", "/login")])
    await crawl(q, [tls.url("secure.test", "/account"), plain.url("secure.test", "/page")])
    assert tls.sent("secure.test", "/account", "https") == {"sid": "secret", "lang": "en"}
    assert plain.sent("secure.test", "/page") == {"lang": "en"}, "a Secure cookie went in clear"


async def test_a_secure_cookie_set_over_plain_http_is_not_kept(
    sticky: Callable[..., AsyncQueue], cookie_sites: Callable[..., CookieSite]
) -> None:
    site = cookie_sites({"/login": ["sid=forged; Path=/; Secure", "lang=en; Path=/"]})
    await site.start()
    q = sticky()
    await crawl(q, [site.url("secure.test", "/login")])
    await crawl(q, [site.url("secure.test", "/next")])
    assert site.sent("secure.test", "/next") == {"lang": "en"}


# --- issue 38 item 7: concurrent attempts of one jar ----------------------------------------


async def test_two_attempts_with_one_stale_jar_both_keep_their_cookies(
    sticky: Callable[..., AsyncQueue], cookie_sites: Callable[..., CookieSite]
) -> None:
    site = cookie_sites({"/a": ["a=1; Path=/"], "/b": ["b=2; Path=/"]})
    site.gate = {"/a": asyncio.Event(), "/b": asyncio.Event()}
    await site.start()
    q = sticky(domain_concurrency=2)
    # both claimed with the same (empty) jar, answered at once, settled one after the other
    await crawl(q, [site.url("bank.test", "/a"), site.url("bank.test", "/b")], concurrency=2)
    site.gate = {}
    await crawl(q, [site.url("bank.test", "/c")])
    assert site.sent("bank.test", "/c") == {"a": "1", "b": "2"}, "last writer won"


async def test_a_login_then_the_next_job_at_concurrency_one_keeps_the_login(
    sticky: Callable[..., AsyncQueue], cookie_sites: Callable[..., CookieSite]
) -> None:
    site = cookie_sites({"/login": ["sid=s1; Path=/"], "/p/0": ["seen=1; Path=/"]})
    await site.start()
    q = sticky()
    urls = ["/login"] + [f"/p/{i}" for i in range(6)]
    await crawl(q, [site.url("bank.test", p) for p in urls])
    await crawl(q, [site.url("bank.test", "/last")])
    assert site.sent("bank.test", "/last") == {"sid": "s1", "seen": "1"}


# --- the jar's rules, no worker ---------------------------------------------------------------


def _jar(*changes: dict[str, Any] | None) -> str:
    """A stored jar made of the cookies the changes set (no merge: one cookie per key)."""
    out: dict[tuple[str, str, str], list[Any]] = {}
    for change in changes:
        for c in (change or {}).get("set", []):
            out[(c[0], c[2], c[3])] = c
    return json.dumps(list(out.values()))


def _sent(jar: str, url: str) -> dict[str, str]:
    return dict(jar_request(Request(url), jar, url).cookies)


def test_the_cookie_layout_has_the_key_fields_first_and_flags_last() -> None:
    assert JAR_COOKIE == ("name", "value", "domain", "path", "expires", "flags")
    assert JAR_FLAGS == {"host_only": 1, "secure": 2, "http_only": 4}


def test_host_only_and_domain_cookies_follow_rfc_6265() -> None:
    url = "http://login.shop.test/account/settings"
    changes = absorb(
        (
            (url, "host=1"),  # default path /account
            (url, "dom=2; Domain=.shop.test; Path=/"),
            (url, "other=3; Domain=ads.shop.test"),  # not a domain of the setting host
            (url, "psl=4; Domain=co.uk"),
            (url, "ip=5; Domain=0.0.1"),
        ),
        url,
        domain="shop.test",
        politeness="domain",
    )
    jar = _jar(changes)
    assert {c[0] for c in json.loads(jar)} == {"host", "dom"}
    assert _sent(jar, "http://login.shop.test/account/x") == {"host": "1", "dom": "2"}
    assert _sent(jar, "http://login.shop.test/accounts") == {"dom": "2"}, "path-match"
    assert _sent(jar, "http://ads.shop.test/account/x") == {"dom": "2"}
    assert _sent(jar, "http://shop.test/") == {"dom": "2"}
    assert _sent(jar, "http://evilshop.test/account/x") == {}
    assert _sent(jar, "http://sub.login.shop.test/account/x") == {"dom": "2"}


def test_a_public_suffix_host_may_set_a_host_only_cookie_for_itself_but_not_above() -> None:
    for url, header, kept in (
        ("http://a.shop.co.uk/", "x=1; Domain=co.uk", set()),
        ("http://a.shop.co.uk/", "x=1; Domain=shop.co.uk", {"x"}),
        ("http://a.github.io/", "x=1; Domain=github.io", set()),
        ("http://a.github.io/", "x=1; Domain=a.github.io", {"x"}),
        ("http://127.0.0.1/", "x=1; Domain=0.0.1", set()),
        ("http://127.0.0.1/", "x=1", {"x"}),
    ):
        changes = absorb(((url, header),), url, domain=url.split("/")[2], politeness="host")
        assert {c[0] for c in (changes or {}).get("set", [])} == kept, (url, header)


def test_expiry_and_deletion_are_changes_of_their_own() -> None:
    url = "http://bank.test/"
    changes = absorb(
        (
            (url, "a=1; Max-Age=3600"),
            (url, "b=1; Expires=Wed, 01 Jan 2020 00:00:00 GMT"),
            (url, "c=1; Max-Age=0"),
        ),
        url,
        domain="bank.test",
        politeness="host",
    )
    assert changes is not None
    assert [c[0] for c in changes["set"]] == ["a"]
    assert sorted(changes["del"]) == [["b", "bank.test", "/"], ["c", "bank.test", "/"]]
    assert absorb((), url, domain="bank.test", politeness="host") is None


def test_cookies_of_hops_outside_the_jars_scope_are_not_taken() -> None:
    url = "http://shop.test/cart"
    changes = absorb(
        (("http://tracker.test/", "t=1"), ("http://www.shop.test/", "w=1; Domain=shop.test")),
        url,
        domain="shop.test",
        politeness="host",
    )
    assert changes is None, "www.shop.test is another jar with politeness = host"
    changes = absorb(
        (("http://tracker.test/", "t=1"), ("http://www.shop.test/", "w=1; Domain=shop.test")),
        url,
        domain="shop.test",
        politeness="domain",
    )
    assert [c[0] for c in (changes or {})["set"]] == ["w"]


def test_secure_cookies_go_over_https_only() -> None:
    url = "https://bank.test/"
    jar = _jar(absorb(((url, "s=1; Secure; HttpOnly"), (url, "p=1")), url,
                      domain="bank.test", politeness="host"))  # fmt: skip
    assert _sent(jar, "https://bank.test/x") == {"s": "1", "p": "1"}
    assert _sent(jar, "http://bank.test/x") == {"p": "1"}
    (secure,) = [c for c in json.loads(jar) if c[0] == "s"]
    assert secure[5] == JAR_FLAGS["host_only"] | JAR_FLAGS["secure"] | JAR_FLAGS["http_only"]


def test_a_request_keeps_its_own_cookie_and_an_unreadable_jar_sends_nothing() -> None:
    url = "http://bank.test/"
    jar = _jar(absorb(((url, "sid=jar"),), url, domain="bank.test", politeness="host"))
    own = jar_request(Request(url, cookies={"sid": "mine"}), jar, url)
    assert dict(own.cookies) == {"sid": "mine"}
    assert _sent('[["sid","old","/",null]]', url) == {}, "a jar of the old layout is dropped"
    assert _sent("not json", url) == {}


# --- the merge in Redis (includes/jar.lua) ----------------------------------------------------


def _cookie(name: str, value: str = "v", domain: str = "a.example", **kw: Any) -> list[Any]:
    return [name, value, domain, kw.get("path", "/"), kw.get("expires"), kw.get("flags", 1)]


def test_settles_merge_per_key_and_the_jar_stays_bounded(
    make_queue: Callable[..., Queue], redis_client: redis.Redis
) -> None:
    q = make_queue(proxy="direct", session="sticky", domain_concurrency=8)
    q.enqueue_many([f"https://a.example/{i}" for i in range(8)])
    first, second, third = q.claim(3).jobs
    assert first.jar is None and second.jar is None

    def settle(job: Any, changes: dict[str, Any]) -> None:
        done = dataclasses.replace(q.done(job), exit_result="ok", jar=changes)
        assert q.settle_many([done]) == ["done"]

    settle(first, {"set": [_cookie("a", "1"), _cookie("gone", "x")], "del": []})
    settle(second, {"set": [_cookie("b", "2"), _cookie("old", "x", expires=1)], "del": []})
    settle(third, {"set": [_cookie("a", "3")], "del": [["gone", "a.example", "/"]]})
    key = q.keys.domain_exits("a.example")
    stored = json.loads(redis_client.hget(key, "sj") or "[]")
    assert [(c[0], c[1]) for c in stored] == [("b", "2"), ("a", "3")], "merged, expired dropped"
    (nxt,) = q.claim(1).jobs
    assert json.loads(nxt.jar or "[]") == stored
    many = {"set": [_cookie(f"k{i}", "x" * 300) for i in range(50)], "del": []}
    settle(nxt, many)
    stored = json.loads(redis_client.hget(key, "sj") or "[]")
    assert len(redis_client.hget(key, "sj") or b"") <= 16_384
    assert stored[-1][0] == "k49" and "b" not in {c[0] for c in stored}, "the oldest dropped"


def test_a_malformed_jar_change_is_refused_without_showing_the_value(
    make_queue: Callable[..., Queue],
) -> None:
    q = make_queue(proxy="direct", session="sticky")
    q.enqueue_many(["https://a.example/1"])
    (job,) = q.claim(1).jobs
    for bad in (
        {"set": [["a", "secret;value", "a.example", "/", None, 1]], "del": []},
        {"set": [["a", "secret", "a.example", "/", None]], "del": []},
        {"set": [], "del": [["a", "a.example"]]},
        {"set": [["a", "secret", "a.example", "/", "soon", 1]]},
        "[]",
    ):
        settlement = dataclasses.replace(q.done(job), exit_result="ok", jar=bad)
        with pytest.raises(Exception) as refused:
            q.settle_many([settlement])
        assert "items[0].jar" in str(refused.value) and "secret" not in str(refused.value)
        assert "\n" not in str(refused.value)
