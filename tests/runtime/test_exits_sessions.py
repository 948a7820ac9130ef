"""Sticky sessions (issue 23, ``session = sticky``): a domain's jobs go through one exit with
one cookie jar kept in Redis (any worker continues it); a ban of that exit starts a new session
on another exit with an empty jar. The scripts against a real Redis, then a worker through
real tinyproxy exits to a site that hands out session cookies and bans by source address."""

from __future__ import annotations

import dataclasses
import itertools
import json
from collections.abc import Callable
from typing import Any

import redis
from aiohttp import web

from scrapeq import AsyncQueue, Queue
from scrapeq.engine.model.exits import ExitPool
from scrapeq.engine.model.request import Request
from scrapeq.runtime.session_jar import absorb, jar_request
from support.proxy_proc import TinyproxySet
from support.sites import Site
from support.workers import run_until_done

POOL = tuple(f"http://127.0.0.1:{p}" for p in (9001, 9002, 9003))


def test_a_sticky_domain_keeps_one_exit_and_its_jar_until_banned(
    make_queue: Callable[..., Queue], redis_client: redis.Redis
) -> None:
    q = make_queue(proxy=POOL, session="sticky", domain_concurrency=8)
    q.enqueue_many([f"https://a.example/{i}" for i in range(6)])
    jobs = q.claim(3).jobs
    assert len({j.exit for j in jobs}) == 1, "one exit per domain"
    assert all(j.jar is None for j in jobs), "a new session starts with no jar"
    session = jobs[0].exit
    sid = ["sid", "s1", "a.example", "/", None, 1]
    changes = {"set": [sid]}
    q.settle_many([dataclasses.replace(q.done(jobs[0]), exit_result="ok", jar=changes)])
    (nxt,) = q.claim(1).jobs
    assert nxt.exit == session, "the next claim continues the session"
    assert json.loads(nxt.jar or "null") == [sid], "with its jar"
    # a ban of the session's exit rotates: another exit, an empty jar
    ban = dataclasses.replace(q.releasing(nxt, delay=0, kind="banned"), exit_result="ban")
    q.settle_many([ban])
    for j in jobs[1:]:
        q.settle_many(
            [
                dataclasses.replace(
                    q.done(j),
                    exit_result="ok",
                    jar={"set": [["x", "1", "a.example", "/", None, 1]]},
                )
            ]
        )
    fresh = q.claim(3).jobs
    assert fresh and {j.exit for j in fresh} != {session}
    assert len({j.exit for j in fresh}) == 1 and all(j.jar is None for j in fresh)
    # a jar sent back through the old exit (a straggler) does not overwrite the new session's
    assert redis_client.hget(q.keys.domain_exits("a.example"), "sj") is None


def test_without_sticky_no_jar_travels(make_queue: Callable[..., Queue]) -> None:
    q = make_queue(proxy=POOL, domain_concurrency=8)
    q.enqueue_many([f"https://a.example/{i}" for i in range(3)])
    jobs = q.claim(3).jobs
    assert len({j.exit for j in jobs}) == 3 and all(j.jar is None for j in jobs)


def test_jar_takes_cookies_of_the_jobs_host_and_sends_them_on_matching_paths() -> None:
    url = "http://shop.example/cart/view"
    changes = absorb((
        ("http://shop.example/login", "sid=abc; Path=/"),
        ("http://shop.example/login", "cart=1; Path=/cart"),
        ("http://shop.example/login", "gone=1; Max-Age=0"),
        ("http://tracker.example/", "track=1"),
    ), url, domain="shop.example", politeness="host")  # fmt: skip
    assert changes is not None
    names = {c[0] for c in changes["set"]}
    assert names == {"sid", "cart"}
    assert changes["del"] == [["gone", "shop.example", "/"]]
    jar = json.dumps(changes["set"])  # the stored jar after them (includes/jar.lua merges)
    sent = dict(jar_request(Request(url), jar, url).cookies)
    assert sent == {"sid": "abc", "cart": "1"}
    assert dict(
        jar_request(Request("http://shop.example/"), jar, "http://shop.example/").cookies
    ) == {"sid": "abc"}
    # the request's own cookie wins its name
    own = jar_request(Request(url, cookies={"sid": "mine"}), jar, url)
    assert dict(own.cookies)["sid"] == "mine"
    # deleting a cookie
    deleted = absorb((("http://shop.example/", "sid=; Max-Age=0; Path=/"),), url,
                     domain="shop.example", politeness="host")  # fmt: skip
    assert deleted == {"set": [], "del": [["sid", "shop.example", "/"]]}


class SessionSite:
    """Hands a new ``sid`` cookie to a request without one; logs (source, sid) per request;
    bans (403) the sources in ``banned``."""

    def __init__(self) -> None:
        self.log: list[tuple[str, str | None]] = []
        self.banned: set[str] = set()
        self.ids = itertools.count(1)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        source = request.remote or ""
        sid = request.cookies.get("sid")
        self.log.append((source, sid))
        if source in self.banned:
            return web.Response(status=403, text="banned")
        resp = web.Response(text="<html><title>ok</title></html>", content_type="text/html")
        if sid is None:
            resp.set_cookie("sid", f"s{next(self.ids)}", path="/")
        return resp


async def run(q: AsyncQueue, total: int) -> dict[str, Any]:
    return await run_until_done(q, total, concurrency=1)


async def test_a_session_continues_through_one_exit_and_rotates_when_it_is_banned(
    tinyproxies: TinyproxySet, make_async_queue: Callable[..., AsyncQueue]
) -> None:
    a, b = tinyproxies("127.0.0.2"), tinyproxies("127.0.0.3")
    site_app = SessionSite()
    site = Site(site_app.handle)
    await site.start()
    try:
        q = make_async_queue(
            proxy=(a.url, b.url), session="sticky", allow_private=True, domain_concurrency=1,
            request_timeout=2.0,
        )  # fmt: skip
        await q.enqueue_many([site.url(f"/p/{i}") for i in range(5)])
        assert (await run(q, 5))["done"] == 5
        first = site_app.log[:]
        sources = {s for s, _ in first}
        assert len(sources) == 1, first
        assert first[0][1] is None and {sid for _, sid in first[1:]} == {"s1"}, first
        # the site bans the session's exit: the next jobs start a session on the other one
        site_app.banned = set(sources)
        await q.enqueue_many([site.url(f"/q/{i}") for i in range(4)])
        assert (await run(q, 9))["done"] == 9
        later = site_app.log[len(first) :]
        old = sources.pop()
        assert later[0] == (old, "s1"), "one request through the old session, banned"
        new = later[1:]
        assert {s for s, _ in new} == {b.exit_ip if old == a.exit_ip else a.exit_ip}
        assert new[0][1] is None and {sid for _, sid in new[1:]} == {"s2"}, later
        pool = ExitPool.from_settings(q.settings)
        assert len(pool) == 2
    finally:
        await site.stop()
