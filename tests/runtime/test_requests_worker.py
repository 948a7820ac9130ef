"""Jobs carry a request (issue 23): the fetcher sends it, redirects follow RFC 9110, the
handler sees it and its meta reaches the results line. Real loopback sites
(tests/support/sites.py)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from scrapeq import AsyncQueue, Follow, Job, Request, Response, Settings
from scrapeq.runtime.fetch import Fetcher
from scrapeq.runtime.sinks import JsonlSink
from scrapeq.runtime.worker import Worker
from support.sites import echo, sites

pytestmark = pytest.mark.backends
SETTINGS = Settings(allow_private=True, request_timeout=5.0, user_agent="scrapeq-test")


@pytest.fixture
async def fetcher() -> AsyncIterator[Fetcher]:
    async with Fetcher(SETTINGS) as f:
        yield f


def _header(seen: dict[str, Any], name: str) -> list[str]:
    return [v for k, v in seen["headers"] if k.lower() == name.lower()]


async def test_the_fetcher_sends_method_headers_body_and_cookies(fetcher: Fetcher) -> None:
    async with sites(echo) as (site,):
        request = Request(
            site.url("/api?x=1"),
            method="POST",
            headers=[("X-Token", "t1"), ("X-Multi", "a"), ("X-Multi", "b"), ("Accept", "a/b")],
            json={"q": "shoes"},
            cookies={"session": "abc", "lang": "en"},
        )
        got = (await fetcher.fetch(request.url, request=request)).json()
    assert (got["method"], got["path"], got["body"]) == ("POST", "/api?x=1", '{"q":"shoes"}')
    assert _header(got, "X-Token") == ["t1"] and _header(got, "X-Multi") == ["a", "b"]
    assert _header(got, "Accept") == ["a/b"]  # replaces the worker's default
    assert _header(got, "User-Agent") == ["scrapeq-test"]  # the defaults stay otherwise
    assert _header(got, "Content-Type") == ["application/json"]
    assert got["cookies"] == {"session": "abc", "lang": "en"}


@pytest.mark.parametrize(
    ("code", "method", "body"),
    [
        (303, "GET", ""),
        (302, "GET", ""),
        (301, "GET", ""),
        (307, "POST", "a=1"),
        (308, "POST", "a=1"),
    ],
)
async def test_redirects_of_a_post_follow_rfc_9110(
    fetcher: Fetcher, code: int, method: str, body: str
) -> None:
    async with sites(echo) as (site,):
        request = Request(site.url(f"/redirect/{code}"), method="POST", form={"a": "1"})
        response = await fetcher.fetch(request.url, request=request)
    got = response.json()
    assert (response.redirects, got["method"], got["body"]) == (1, method, body)
    assert bool(_header(got, "Content-Type")) == (method == "POST")


async def test_a_put_keeps_its_method_on_302_and_becomes_get_on_303(fetcher: Fetcher) -> None:
    async with sites(echo) as (site,):
        for code, method in ((302, "PUT"), (303, "GET")):
            request = Request(site.url(f"/redirect/{code}"), method="PUT", body="x")
            assert (await fetcher.fetch(request.url, request=request)).json()["method"] == method


async def test_credentials_do_not_follow_a_redirect_to_another_origin(fetcher: Fetcher) -> None:
    async with sites(echo, echo) as (first, other):
        to = quote(other.url("/echo"), safe="")
        request = Request(
            first.url(f"/redirect/307?to={to}"),
            method="POST",
            body="b",
            headers={"Authorization": "Bearer s", "X-Keep": "1"},
            cookies={"sid": "1"},
        )
        got = (await fetcher.fetch(request.url, request=request)).json()
        same = Request(first.url("/redirect/307"), headers={"Authorization": "Bearer s"})
        kept = (await fetcher.fetch(same.url, request=same)).json()
    assert (got["method"], got["body"], _header(got, "X-Keep")) == ("POST", "b", ["1"])
    assert _header(got, "Authorization") == [] and got["cookies"] == {}
    assert _header(kept, "Authorization") == ["Bearer s"]


async def test_the_worker_sends_the_request_the_handler_sees_it_and_meta_is_in_the_results(
    make_async_queue: Callable[..., AsyncQueue], tmp_path: Path
) -> None:
    q = make_async_queue(allow_private=True, request_timeout=5.0)
    results = tmp_path / "results.jsonl"
    seen: list[tuple[str, Any, Any]] = []

    def handler(job: Job, response: Response) -> Any:
        seen.append((job.request.method, job.meta, response.json()["body"]))
        return response.json()["method"]

    async with sites(echo) as (site,):
        await q.enqueue(Request(site.url("/api"), method="PATCH", body="b1", meta={"k": [1, 2]}))
        await q.enqueue(site.url("/plain"))
        worker = Worker(q, handler=handler, sink=JsonlSink(results), burst=True)
        await asyncio.wait_for(worker.run_async(), 30)
    rows = {
        r["url"].rsplit("/", 1)[1]: r for r in map(json.loads, results.read_text().splitlines())
    }
    assert (rows["api"]["result"], rows["api"]["meta"]) == ("PATCH", {"k": [1, 2]})
    assert (rows["plain"]["result"], rows["plain"]["meta"]) == ("GET", None)
    assert sorted(seen, key=str) == sorted(
        [("PATCH", {"k": [1, 2]}, "b1"), ("GET", None, "")], key=str
    )


async def test_a_follow_up_may_carry_a_request(
    make_async_queue: Callable[..., AsyncQueue], tmp_path: Path
) -> None:
    q = make_async_queue(allow_private=True, request_timeout=5.0)
    results = tmp_path / "results.jsonl"

    def handler(job: Job, response: Response) -> Any:
        got = response.json()
        if job.depth == 0:
            nxt = Request("next?p=2", method="POST", json={"page": 2}, meta={"from": job.id})
            return [got["method"], Follow(nxt)]
        return [got["method"], got["path"], got["body"]]

    async with sites(echo) as (site,):
        await q.enqueue(site.url("/list"))
        worker = Worker(q, handler=handler, sink=JsonlSink(results), burst=True)
        await asyncio.wait_for(worker.run_async(), 30)
    rows = [json.loads(line) for line in results.read_text().splitlines()]
    child = next(r for r in rows if r["depth"] == 1)
    assert child["result"] == ["POST", "/next?p=2", '{"page":2}']
    assert child["meta"] == {"from": child["parent"]}


def test_outgoing_folds_cookies_and_redirects_by_the_table() -> None:
    """The pure rules of runtime/outgoing.py (the loopback tests above exercise them)."""
    from scrapeq.runtime.outgoing import Outgoing, after_redirect

    first = Outgoing.of(
        Request("https://a/", method="HEAD", headers={"Cookie": "x=1"}, cookies={"y": "2"})
    )
    assert first.headers == (("Cookie", "x=1; y=2"),)
    assert after_redirect(first, 303, same=True).method == "HEAD"  # HEAD stays HEAD
    put = Outgoing.of(Request("https://a/", method="PUT", body="b", headers={"X": "1"}))
    assert after_redirect(put, 301, same=True) == put  # only a POST turns into GET on 301/302
    assert after_redirect(put, 303, same=False) == Outgoing("GET", (("X", "1"),), b"")
