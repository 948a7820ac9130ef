"""Issue 36 item 6: a redirect to another origin drops every secret header, not only
``Authorization`` and ``Cookie``. Two real loopback sites on different ports (two origins):
site A redirects to site B, and B records the headers it was sent.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from urllib.parse import quote

import pytest
from aiohttp import web

from scrapeq import Request, Settings
from scrapeq.engine.model.request import SECRET_HEADERS
from scrapeq.runtime.fetch import Fetcher
from scrapeq.runtime.outgoing import Outgoing, after_redirect
from support.sites import echo, sites

SETTINGS = Settings(allow_private=True, request_timeout=5.0, user_agent="scrapeq-test")

#: Credentials a job may send, as their usual spellings (the check is case-insensitive).
SECRETS = {
    "Authorization": "Bearer s1",
    "Proxy-Authorization": "Basic czI6cA==",
    "X-Api-Key": "k1",
    "X-Auth-Token": "t1",
    "api-KEY": "k2",
}


class Recorder:
    """Site B: records the headers of each request it gets, answers 200."""

    def __init__(self) -> None:
        self.got: list[dict[str, str]] = []

    async def __call__(self, request: web.Request) -> web.StreamResponse:
        self.got.append({k.lower(): v for k, v in request.headers.items()})
        return web.Response(text="ok")


@pytest.fixture
async def fetcher() -> AsyncIterator[Fetcher]:
    async with Fetcher(SETTINGS) as f:
        yield f


@pytest.mark.parametrize("code", [301, 302, 303, 307, 308])
async def test_no_secret_header_reaches_another_origin(fetcher: Fetcher, code: int) -> None:
    b = Recorder()
    async with sites(echo, b) as (site_a, site_b):
        assert site_a.port != site_b.port
        to = quote(site_b.url("/landing"), safe="")
        request = Request(
            site_a.url(f"/redirect/{code}?to={to}"),
            headers=[*SECRETS.items(), ("X-Keep", "1")],
            cookies={"sid": "c1"},
        )
        response = await fetcher.fetch(request.url, request=request)
    assert response.status == 200 and response.redirects == 1
    (got,) = b.got
    leaked = sorted(name for name in got if name in SECRET_HEADERS | {"api-key"})
    assert leaked == [], f"secret headers reached the other origin: {leaked}"
    assert got["x-keep"] == "1", "a header that is no secret still follows the redirect"
    assert not {"k1", "k2", "t1"} & set(got.values())


async def test_every_secret_header_is_dropped_on_a_cross_origin_redirect(
    fetcher: Fetcher,
) -> None:
    """Whatever SECRET_HEADERS holds (one home for the list) is dropped, by any spelling."""
    b = Recorder()
    names = sorted(SECRET_HEADERS - {"cookie"})  # a Cookie header is folded from the jar
    async with sites(echo, b) as (site_a, site_b):
        to = quote(site_b.url("/landing"), safe="")
        request = Request(
            site_a.url(f"/redirect/307?to={to}"),
            headers=[(name.upper(), f"v{i}") for i, name in enumerate(names)],
            cookies={"sid": "c1"},
        )
        await fetcher.fetch(request.url, request=request)
    (got,) = b.got
    assert {"api-key", "x-api-key", "x-auth-token", "proxy-authorization"} <= SECRET_HEADERS
    assert sorted(set(got) & SECRET_HEADERS) == []


async def test_a_same_origin_redirect_keeps_the_secret_headers(fetcher: Fetcher) -> None:
    async with sites(echo) as (site,):
        request = Request(site.url("/redirect/307"), headers=SECRETS)
        got = (await fetcher.fetch(request.url, request=request)).json()
    names = {n.lower() for n in SECRETS}
    sent = sorted((k.lower(), v) for k, v in got["headers"] if k.lower() in names)
    assert sent == sorted((k.lower(), v) for k, v in SECRETS.items()), "all of them, as given"


def test_after_redirect_drops_the_secret_headers_only_across_origins() -> None:
    out = Outgoing("GET", (("Api-Key", "k"), ("X-Auth-Token", "t"), ("X-Keep", "1")), b"")
    assert after_redirect(out, 302, same=False).headers == (("X-Keep", "1"),)
    assert after_redirect(out, 302, same=True) == out
