"""The ``impersonate`` fetcher (issue 42): a browser's TLS handshake, the default fetcher's
guards.

The site (``support.tls_site``) reads each client's ClientHello before the handshake and
closes the connection of any client whose cipher suites and extensions are not a browser's
(no GREASE, no ALPS): what Python's ``ssl``, so aiohttp, sends. Every server is on loopback;
names are given addresses by a :class:`StaticResolver`, which curl cannot see: a name curl
connects to is the address the fetcher resolved, checked and pinned.
"""

from __future__ import annotations

import asyncio
import re
import socket
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import aiohttp.abc
import pytest

from scrapeq import AsyncQueue, ConfigError
from scrapeq.engine.config.settings import Settings
from scrapeq.engine.model.exits import DIRECT, exit_id
from scrapeq.engine.model.request import Request
from scrapeq.runtime.classify import (
    BlockedAddress,
    BodyTooLarge,
    Outcome,
    ProxyAnswered,
    ProxyDown,
    classify_exception,
)
from scrapeq.runtime.fetch import Fetcher, StaticResolver
from scrapeq.runtime.impersonate import ImpersonateFetcher
from scrapeq.runtime.sinks import CallableSink
from scrapeq.runtime.worker import Worker
from support.sites import proxy
from support.tls_site import FingerprintSite, fingerprint_site

pytest.importorskip("curl_cffi")

PUBLIC_IP = "93.184.216.34"  # never connected to: a proxy maps the name to loopback


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FingerprintSite]:
    with fingerprint_site(tmp_path) as running:
        monkeypatch.setenv("SSL_CERT_FILE", str(running.ca))  # the test CA, for curl
        yield running


def _settings(**changes: object) -> Settings:
    return Settings(**{"request_timeout": 5.0, "allow_private": True, **changes})  # type: ignore[arg-type]


async def test_the_site_refuses_aiohttp_and_serves_the_impersonate_fetcher(
    site: FingerprintSite,
) -> None:
    async with Fetcher(_settings()) as http:
        with pytest.raises(aiohttp.ClientError) as refused:
            await http.fetch(site.url("/product"))
    verdict = classify_exception(refused.value)
    assert verdict.outcome is Outcome.RETRY and verdict.counts_against_domain
    assert [h.browser for h in site.hellos] == [False] and site.served == []
    async with ImpersonateFetcher(_settings()) as browser:
        resp = await browser.fetch(site.url("/product"))
    assert resp.status == 200
    assert resp.css("title::text").get() == "browser only /product"
    assert [h.browser for h in site.hellos] == [False, True]
    assert site.served == ["GET /product HTTP/1.1"]


async def test_the_response_has_every_field_of_the_default_fetchers(
    site: FingerprintSite,
) -> None:
    async with ImpersonateFetcher(_settings()) as browser:
        resp = await browser.fetch(site.url("/redirect"))
        sent = await browser.fetch(
            site.url("/cookie"), request=Request(site.url("/cookie"), cookies={"sid": "s3"})
        )
    assert (resp.status, resp.url, resp.redirects) == (200, site.url("/page"), 1)
    assert resp.headers["content-type"] == resp.headers["Content-Type"] == "text/html"
    assert resp.set_cookies == ((site.url("/redirect"), "hop=1; Path=/"),)
    assert 0 < resp.elapsed < 5
    assert sent.text() == "sid=s3"  # the request's cookies, in its Cookie header


async def test_max_body_max_redirects_and_the_deadline(site: FingerprintSite) -> None:
    async with ImpersonateFetcher(_settings(max_body=1000)) as browser:
        with pytest.raises(BodyTooLarge):
            await browser.fetch(site.url("/big"))
    async with ImpersonateFetcher(_settings(max_redirects=0)) as browser:
        with pytest.raises(aiohttp.TooManyRedirects) as loop:
            await browser.fetch(site.url("/redirect"))
    assert classify_exception(loop.value).reason == "redirect_loop"
    with socket.create_server(("127.0.0.1", 0)) as silent:  # accepts, never answers
        port = silent.getsockname()[1]
        async with ImpersonateFetcher(_settings(request_timeout=0.5)) as browser:
            started = time.monotonic()
            with pytest.raises(TimeoutError) as late:
                await browser.fetch(f"https://127.0.0.1:{port}/")
    assert time.monotonic() - started < 3
    assert classify_exception(late.value).reason == "timeout"


async def test_a_refused_connection_is_classified_as_the_default_fetchers() -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
    url = f"https://127.0.0.1:{port}/"  # closed again: nothing listens
    verdicts = []
    for kind in (Fetcher, ImpersonateFetcher):
        async with kind(_settings()) as fetcher:
            with pytest.raises(OSError) as refused:
                await fetcher.fetch(url)
        verdicts.append(classify_exception(refused.value))
    assert [(v.outcome, v.reason, v.counts_against_domain) for v in verdicts] == [
        (Outcome.RETRY, "connection_error", True)
    ] * 2


# --- the SSRF guard ----------------------------------------------------------------------------


async def test_a_name_resolving_to_a_private_address_is_refused_before_connecting(
    site: FingerprintSite,
) -> None:
    resolver = StaticResolver({"shop.test": "127.0.0.1"})
    async with ImpersonateFetcher(_settings(allow_private=False), resolver=resolver) as browser:
        with pytest.raises(BlockedAddress, match=re.escape("shop.test resolves to 127.0.0.1")):
            await browser.fetch(site.url("/", host="shop.test"))
        with pytest.raises(BlockedAddress, match=re.escape("127.0.0.1 is a private address")):
            await browser.fetch(site.url("/"))
    assert site.hellos == []  # nothing reached the site


async def test_curl_connects_to_the_address_the_fetcher_resolved_and_checked(
    site: FingerprintSite,
) -> None:
    # curl cannot resolve shop.test itself: it connects where our resolver said, pinned
    good = StaticResolver({"shop.test": "127.0.0.1"})
    async with ImpersonateFetcher(_settings(), resolver=good) as browser:
        resp = await browser.fetch(site.url("/pinned", host="shop.test"))
    assert resp.status == 200 and resp.url == site.url("/pinned", host="shop.test")
    # the site listens on 127.0.0.1 only: an answer of 127.0.0.2 is where curl goes, refused
    other = StaticResolver({"shop.test": "127.0.0.2"})
    async with ImpersonateFetcher(_settings(), resolver=other) as browser:
        with pytest.raises(ConnectionRefusedError):
            await browser.fetch(site.url("/", host="shop.test"))
    assert site.served == ["GET /pinned HTTP/1.1"]


class _Answers(aiohttp.abc.AbstractResolver):
    """A name's several addresses, in order (a round-robin DNS answer)."""

    def __init__(self, *addresses: str) -> None:
        self.addresses = addresses

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[aiohttp.abc.ResolveResult]:
        return [
            aiohttp.abc.ResolveResult(
                hostname=host, host=a, port=port, family=socket.AF_INET, proto=0, flags=0
            )
            for a in self.addresses
        ]

    async def close(self) -> None:
        pass


async def test_every_checked_address_of_a_name_is_pinned_in_its_order(
    site: FingerprintSite,
) -> None:
    # 127.0.0.2 refuses (the site listens on 127.0.0.1): curl goes on to the next answer
    async with ImpersonateFetcher(_settings(), resolver=_Answers("127.0.0.2", "127.0.0.1")) as b:
        resp = await b.fetch(site.url("/second", host="shop.test"))
    assert resp.status == 200 and site.served == ["GET /second HTTP/1.1"]
    # one private answer among public ones refuses the name (allow_private off)
    guarded = _settings(allow_private=False)
    async with ImpersonateFetcher(guarded, resolver=_Answers(PUBLIC_IP, "10.1.2.3")) as b:
        with pytest.raises(BlockedAddress, match=re.escape("resolves to 10.1.2.3")):
            await b.fetch(site.url("/", host="shop.test"))
    assert len(site.hellos) == 1


# --- exits -------------------------------------------------------------------------------------


async def test_through_a_proxy_exit_the_target_is_prechecked_and_tunnelled(
    site: FingerprintSite,
) -> None:
    async with proxy(hosts={"public.example": "127.0.0.1"}) as forward:
        exit_url = f"http://proxy.test:{forward.port}"  # a private name: the proxy is exempt
        settings = Settings(request_timeout=5.0, proxy=(DIRECT, exit_url))
        resolver = StaticResolver(
            {"proxy.test": "127.0.0.1", "public.example": PUBLIC_IP, "internal.test": "10.0.0.7"}
        )
        async with ImpersonateFetcher(settings, resolver=resolver) as browser:
            resp = await browser.fetch(
                f"https://public.example:{site.port}/via", exit=exit_id(exit_url)
            )
            with pytest.raises(BlockedAddress):
                await browser.fetch(f"https://internal.test:{site.port}/", exit=exit_id(exit_url))
    assert resp.status == 200 and site.served == ["GET /via HTTP/1.1"]
    assert dict(forward.connects) == {f"public.example:{site.port}": 1}


async def test_a_proxy_refusing_connect_and_a_proxy_down_are_classified_as_aiohttps() -> None:
    target = f"public.example:{4443}"
    async with proxy(refuse={target: 502}) as refusing, proxy(refuse={target: 407}) as auth:
        with socket.create_server(("127.0.0.1", 0)) as taken:
            down = taken.getsockname()[1]
        exits = [refusing.url, auth.url, f"http://127.0.0.1:{down}"]
        settings = Settings(request_timeout=5.0, proxy=tuple(exits))
        resolver = StaticResolver({"public.example": PUBLIC_IP})
        errors: list[BaseException] = []
        async with ImpersonateFetcher(settings, resolver=resolver) as browser:
            for url in exits:
                with pytest.raises((ProxyAnswered, ProxyDown)) as failed:
                    await browser.fetch(f"https://{target}/", exit=exit_id(url))
                errors.append(failed.value)
    verdicts = [classify_exception(e) for e in errors]
    assert [(v.outcome, v.reason) for v in verdicts] == [
        (Outcome.RETRY, "proxy_http_502"),
        (Outcome.OURS, "proxy_error"),
        (Outcome.OURS, "proxy_error"),
    ]


# --- a worker: the job's fetcher, its domain's, the setting's -----------------------------------


async def _burst(q: AsyncQueue) -> dict[str, str]:
    """Run a worker until every job is done or dead: each job's URL path -> its outcome."""
    records: list[dict[str, Any]] = []
    await asyncio.wait_for(Worker(q, burst=True, sink=CallableSink(records.append)).run_async(), 30)
    return {urlsplit(r["url"]).path: r["outcome"] for r in records}


async def test_a_worker_takes_the_jobs_fetcher_else_its_domains_else_the_setting(
    site: FingerprintSite, make_async_queue: Callable[..., AsyncQueue]
) -> None:
    # a fixed concurrency: an adaptive one would excuse a refused connection (an overload)
    fixed = {"max_attempts": 1, "request_timeout": 5.0, "domain_concurrency": 4}
    q = make_async_queue(allow_private=True, **fixed)
    await q.enqueue(site.url("/own"), fetcher="impersonate")
    await q.enqueue(site.url("/plain"))  # the setting's: http, refused by the site
    assert await _burst(q) == {"/own": "done", "/plain": "dead"}
    await q.domain_set(site.domain, fetcher="impersonate")
    await q.enqueue(site.url("/by-domain"))
    await q.enqueue(site.url("/own-http"), fetcher="http")  # the job's own wins
    assert await _burst(q) == {"/by-domain": "done", "/own-http": "dead"}
    await q.domain_set(site.domain, fetcher="default")
    by_setting = make_async_queue(allow_private=True, fetcher="impersonate", **fixed)
    await by_setting.enqueue(site.url("/by-setting"))
    assert await _burst(by_setting) == {"/by-setting": "done"}
    assert site.served == [f"GET /{p} HTTP/1.1" for p in ("own", "by-domain", "by-setting")]
    assert site.refused == 2


async def test_without_curl_cffi_a_worker_refuses_at_start_and_its_jobs_are_ours(
    site: FingerprintSite,
    make_async_queue: Callable[..., AsyncQueue],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "curl_cffi", None)  # import curl_cffi: ImportError
    refusing = make_async_queue(allow_private=True, fetcher="impersonate")
    with pytest.raises(ConfigError) as refused:
        await Worker(refusing, burst=True).run_async()
    assert str(refused.value) == (
        "setting 'fetcher': impersonate needs curl_cffi: pip install 'scrapeq[impersonate]'"
    )
    # a job that names it, on a worker without it: our fault, no attempt spent
    q = make_async_queue(allow_private=True, max_releases=1)
    job_id = (await q.enqueue(site.url("/needs-curl"), fetcher="impersonate")).id
    assert await _burst(q) == {"/needs-curl": "dead"}
    job = await q.get_job(job_id)
    assert job is not None and job.last_error is not None
    assert job.attempts == 0 and job.releases > 0  # released, never attempted
    assert "scrapeq[impersonate]" in job.last_error.message
    assert site.hellos == []
