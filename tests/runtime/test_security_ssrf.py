"""Attacks on the SSRF guard through a proxy's host name (issue 36, item 2).

A proxy usually lives on a private network, so the connection to it is exempt from the
private-address guard. The exemption must cover that connection only: a job, a followed
link, a redirect, robots.txt or a sitemap naming the proxy's host (any port of the proxy box)
is a target like any other and is refused when the name resolves to a private address.

Every server here is on loopback. ``proxy.test`` resolves (through our resolver) to
127.0.0.1, as an internal proxy's name does; ``public.example`` resolves to a public address
for us, and the proxy connects to the loopback site under that name.
"""

from __future__ import annotations

import io
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import pytest
from aiohttp import web

from scrapeq.engine.config.settings import Settings
from scrapeq.engine.model.exits import DIRECT, exit_id
from scrapeq.runtime.classify import BlockedAddress
from scrapeq.runtime.fetch import Fetcher, StaticResolver
from support.sites import Proxy, Site, proxy, sites

PUBLIC_IP = "93.184.216.34"  # never connected to: the proxy maps the name to loopback


async def _page(request: web.Request) -> web.StreamResponse:
    if request.path == "/redirect-to-proxy-box":
        raise web.HTTPFound(request.query["to"])
    return web.Response(text=f"internal {request.path}")


@dataclass
class Box:
    """The proxy, an internal service on the proxy's box, and a public site behind both."""

    fetcher: Fetcher
    proxy: Proxy
    internal: Site
    public: Site

    @property
    def proxy_exit(self) -> str:
        return exit_id(f"http://proxy.test:{self.proxy.port}")

    def internal_url(self, path: str = "/admin") -> str:
        return f"http://proxy.test:{self.internal.port}{path}"


@asynccontextmanager
async def proxy_box() -> AsyncIterator[Box]:
    async with (
        sites(_page, _page) as (internal, public),
        proxy(hosts={"public.example": "127.0.0.1"}) as forward,
    ):
        resolver = StaticResolver({"proxy.test": "127.0.0.1", "public.example": PUBLIC_IP})
        settings = Settings(
            request_timeout=5.0, proxy=(DIRECT, f"http://proxy.test:{forward.port}")
        )
        assert not settings.allow_private
        async with Fetcher(settings, resolver=resolver) as fetcher:
            yield Box(fetcher, forward, internal, public)


async def test_the_proxy_itself_is_reached_through_its_private_name() -> None:
    """Control: the exemption still covers the connection to the proxy."""
    async with proxy_box() as box:
        url = f"http://public.example:{box.public.port}/page"
        resp = await box.fetcher.fetch(url, exit=box.proxy_exit)
    assert (resp.status, resp.text()) == (200, "internal /page")
    assert sum(box.proxy.forwards.values()) == 1


async def test_a_job_for_the_proxy_host_through_direct_is_refused() -> None:
    async with proxy_box() as box:
        with pytest.raises(BlockedAddress):
            await box.fetcher.fetch(box.internal_url(), exit=DIRECT)
    assert box.internal.total == 0


async def test_a_job_for_the_proxy_host_is_refused_after_the_proxy_was_used() -> None:
    """The proxy's name resolved (and cached) for a proxied fetch is no pass for a direct
    connection to it."""
    async with proxy_box() as box:
        url = f"http://public.example:{box.public.port}/page"
        assert (await box.fetcher.fetch(url, exit=box.proxy_exit)).status == 200
        with pytest.raises(BlockedAddress):
            await box.fetcher.fetch(box.internal_url(), exit=DIRECT)
        with pytest.raises(BlockedAddress):  # and through the proxy: the target is checked
            await box.fetcher.fetch(box.internal_url(), exit=box.proxy_exit)
    assert box.internal.total == 0


async def test_a_job_for_the_proxy_host_is_refused_on_every_exit_in_turn() -> None:
    """A fetch without a claimed exit (robots.txt, a sitemap: ``download``) rotates over the
    pool: refused on each."""
    async with proxy_box() as box:
        for path in ("/robots.txt", "/sitemap.xml"):
            with pytest.raises(BlockedAddress):
                await box.fetcher.download(box.internal_url(path), io.BytesIO(), limit=1000)
            with pytest.raises(BlockedAddress):
                await box.fetcher.fetch(box.internal_url(path))
    assert box.internal.total == 0


async def test_a_redirect_to_the_proxy_host_is_refused() -> None:
    async with proxy_box() as box:
        start = (
            f"http://public.example:{box.public.port}/redirect-to-proxy-box?to={box.internal_url()}"
        )
        with pytest.raises(BlockedAddress):
            await box.fetcher.fetch(start, exit=box.proxy_exit)
    assert box.public.hits["/redirect-to-proxy-box"] == 1
    assert box.internal.total == 0
