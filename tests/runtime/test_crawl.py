"""Crawls: follow-ups enqueued with their parent's settlement, the seen-set, scope and depth.

A local site graph with cycles, relative and absolute links, one page under several
spellings (query order, fragments, dot segments), off-site links, ``mailto:``, a 404, a
redirect chain, ``<base href>`` and a page linking 5,000 others is crawled to completion:
every in-scope page is fetched exactly once, nothing out of scope, and the crawl ends.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from scrapeq import Follow
from scrapeq.engine.queue import AsyncQueue
from scrapeq.runtime.follow import HandlerContext
from scrapeq.runtime.sinks import JsonlSink
from scrapeq.runtime.worker import Worker
from support.sites import Site, sites

BIG = 5000


def graph(other: Callable[[], str]) -> Callable[[web.Request], Any]:
    """The site's pages; ``other()`` is the base URL of an off-site host."""

    def page(*links: str, base: str | None = None) -> web.Response:
        head = f'<base href="{base}">' if base else ""
        body = "".join(f'<a href="{href}">x</a>' for href in links)
        return web.Response(text=f"<html><head>{head}</head><body>{body}</body></html>",
                            content_type="text/html")  # fmt: skip

    async def handle(request: web.Request) -> web.StreamResponse:
        path = request.path
        if path == "/":
            return page("/a", "/b?x=1&y=2", "/b?y=2&x=1", "c#top", "/c", "mailto:me@example.com",
                        "javascript:void(0)", other() + "/off", "/missing", "/redir1", "/big",
                        "/d")  # fmt: skip
        if path == "/a":
            return page("/", "/./a/../b?x=1&y=2", "b?x=1&y=2#frag", "HTTP://127.0.0.1:"
                        + str(request.url.port) + "/c")  # fmt: skip
        if path in ("/b", "/c", "/sub/e") or path.startswith("/p/"):
            return page("/")
        if path == "/d":
            return page("e", "/a", base="/sub/")
        if path == "/big":
            return page(*(f"/p/{i}" for i in range(BIG)))
        if path == "/redir1":
            raise web.HTTPFound("/redir2")
        if path == "/redir2":
            raise web.HTTPFound("/final")
        if path == "/final":
            return page("/", "/c")
        return web.Response(status=404, text="<a href='/never'>gone</a>", content_type="text/html")

    return handle


EXPECTED = {
    "/", "/a", "/b", "/c", "/missing", "/redir1", "/redir2", "/final", "/big", "/d", "/sub/e",
}  # fmt: skip


async def test_a_crawl_fetches_every_page_in_scope_once_and_ends(
    redis_url: str, tmp_path: Path
) -> None:
    holder: list[Site] = []
    async with sites(graph(lambda: holder[0].base), graph(lambda: "http://0.0.0.0")) as (
        home,
        off,
    ):
        holder.append(off)
        q = AsyncQueue.from_url(redis_url, settings=_settings(domain_concurrency=20))
        try:
            seeds = await q.enqueue_many([home.url("/")], unique="seen")
            assert seeds[0].added
            results = tmp_path / "r.jsonl"
            w = Worker(q, burst=True, follow_links=True, sink=JsonlSink(results), concurrency=50)
            await w.run_async()
            status = await q.status()
            assert await _audit_clean(q)
        finally:
            await q.close()

    fetched = dict(home.hits)
    assert off.total == 0, "nothing out of scope is fetched"
    expected = EXPECTED | {f"/p/{i}" for i in range(BIG)}
    assert set(fetched) == expected
    assert all(n == 1 for n in fetched.values()), {p: n for p, n in fetched.items() if n > 1}
    c = status["counts"]
    assert (c["ready"], c["delayed"], c["inflight"], c["dead"]) == (0, 0, 0, 1)  # /missing
    assert c["done"] == len(expected) - 3  # /redir2 and /final: /redir1 job; /missing died
    rows = [json.loads(line) for line in results.read_text().splitlines()]
    root = next(r for r in rows if r["url"] == home.url("/"))
    assert root["depth"] == 0 and root["parent"] is None
    assert root["links"]["skipped"] == {"scheme": 2, "out_of_scope": 1}  # mailto:, javascript:
    assert root["links"]["offered"] == 9  # /b and /c twice each: the seen-set drops repeats
    assert root["links"]["queued"] == 9  # the earlier name of "offered", kept
    leaf = next(r for r in rows if r["url"] == home.url("/sub/e"))
    assert leaf["depth"] == 2 and leaf["parent"] is not None


def _settings(**changes: Any) -> Any:
    from scrapeq.engine.config.settings import Settings

    return Settings(allow_private=True, **changes)


async def _audit_clean(q: AsyncQueue) -> bool:
    report = await q.audit()
    return report.ok and not report.problems


async def test_max_depth_stops_following(redis_url: str) -> None:
    async with sites(graph(lambda: "http://0.0.0.0"), graph(lambda: "http://0.0.0.0")) as (
        home,
        _,
    ):
        q = AsyncQueue.from_url(redis_url, settings=_settings(max_depth=1))
        try:
            await q.enqueue_many([home.url("/")], unique="seen")
            await Worker(q, burst=True, follow_links=True).run_async()
        finally:
            await q.close()
    assert "/big" in home.hits and "/p/1" not in home.hits, "depth 2 is not followed"
    assert "/sub/e" not in home.hits


async def test_handler_follow_ups_are_atomic_with_the_parent(redis_url: str) -> None:
    """Follow-ups from ctx.follow and from returned Follow items; an invalid link never fails
    its parent; a stale settle enqueues nothing."""
    seen_ctx: list[int] = []

    def handler(job: Any, response: Any, ctx: HandlerContext) -> Any:
        seen_ctx.append(job.depth)
        if job.depth == 0:
            ctx.follow("/b")
            ctx.follow("mailto:nobody@example.com")
            return [{"title": "root"}, Follow("/c", payload={"k": 1})]
        return {"title": "leaf"}

    async with sites(graph(lambda: "http://0.0.0.0"), graph(lambda: "http://0.0.0.0")) as (
        home,
        _,
    ):
        q = AsyncQueue.from_url(redis_url, settings=_settings())
        try:
            await q.enqueue_many([home.url("/")], unique="seen")
            await Worker(q, handler=handler, burst=True).run_async()
            status = await q.status()
        finally:
            await q.close()
    assert sorted(home.hits) == ["/", "/b", "/c"]
    assert sorted(seen_ctx) == [0, 1, 1]
    assert status["counts"]["done"] == 3 and status["counts"]["dead"] == 0


@pytest.mark.slow
def test_scrapeq_crawl_command(redis_url: str, tmp_path: Path, capsys: Any) -> None:
    import asyncio
    import threading

    from scrapeq.interfaces.cli import main

    started = threading.Event()
    stop = threading.Event()
    box: dict[str, Any] = {}

    def serve() -> None:
        async def run() -> None:
            async with sites(graph(lambda: "http://0.0.0.0")) as (home,):
                box["home"] = home
                started.set()
                while not stop.is_set():
                    await asyncio.sleep(0.05)

        asyncio.run(run())

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        assert started.wait(10)
        home: Site = box["home"]
        results = tmp_path / "pages.jsonl"
        code = main(["--redis", redis_url, "crawl", home.url("/d"), "--allow-private",
                     "--results", str(results)])  # fmt: skip
    finally:
        stop.set()
        thread.join()
    assert code == 0, capsys.readouterr().err
    assert set(home.hits) >= {"/d", "/sub/e", "/a", "/"}
    assert all(n == 1 for n in home.hits.values())


def test_follow_ups_commit_with_their_parent_only(make_queue: Any) -> None:
    """A done settle adds its children in the same call; a stale one adds none; a retried
    parent's repeated children are dropped by the seen-set."""
    q = make_queue(domain_concurrency=10)
    (seed,) = q.enqueue_many(["https://shop-1.example.com/"], unique="seen")
    (parent,) = q.claim().jobs
    children = [
        q.prepare(f"https://shop-1.example.com/p/{i}", unique="seen").child_of(parent.id, 1)
        for i in range(3)
    ]
    assert q.settle_many([q.retrying(parent, delay=0, domain_failed=None)]) == ["retried"]
    assert q.status()["counts"]["enqueued"] == 1, "a retried parent enqueues nothing"
    (again,) = q.claim().jobs
    assert q.settle_many([q.done(parent, follow=children)]) == ["stale"]
    assert q.status()["counts"]["enqueued"] == 1, "a stale settle enqueues nothing"
    assert q.settle_many([q.done(again, follow=children + children[:1])]) == ["done"]
    jobs = q.claim(10).jobs
    assert sorted(j.url for j in jobs) == [c.url for c in children]
    assert {(j.depth, j.parent) for j in jobs} == {(1, seed.id)}
    assert q.settle_many([q.done(j, follow=children) for j in jobs]) == ["done"] * 3
    assert q.claim(10).jobs == [], "the seen-set drops every repeat"


def test_max_pages_caps_follow_ups_per_domain(make_queue: Any) -> None:
    q = make_queue(max_pages=3)
    q.enqueue_many(["https://shop-1.example.com/"], unique="seen")
    (parent,) = q.claim().jobs
    children = [
        q.prepare(f"https://shop-1.example.com/p/{i}", unique="seen").child_of(parent.id, 1)
        for i in range(5)
    ]
    assert q.settle_many([q.done(parent, follow=children)]) == ["done"]
    assert q.status()["counts"]["enqueued"] == 3  # the seed and two children


TREE = 300  # pages of the tree site: page n links to 2n+1 and 2n+2, and back to /


async def tree(request: web.Request) -> web.StreamResponse:
    import asyncio

    n = int(request.path.strip("/") or 0)
    await asyncio.sleep(0.2)  # slow enough that a kill catches pages in flight
    links = [f"/{m}" for m in (2 * n + 1, 2 * n + 2) if m < TREE] + ["/"]
    body = "".join(f'<a href="{href}">x</a>' for href in links)
    return web.Response(text=f"<html><body>{body}</body></html>", content_type="text/html")


@pytest.mark.slow
def test_a_crawl_killed_and_restarted_fetches_the_same_pages(
    redis_url: str, tmp_path: Path
) -> None:
    import signal
    import subprocess
    import threading
    import time

    from scrapeq.engine.queue import Queue
    from support.workers import SCRAPEQ, clean_env

    box: dict[str, Any] = {}
    started, stop = threading.Event(), threading.Event()

    def serve() -> None:
        import asyncio

        async def run() -> None:
            async with sites(tree) as (site,):
                box["site"] = site
                started.set()
                while not stop.is_set():
                    await asyncio.sleep(0.05)

        asyncio.run(run())

    thread = threading.Thread(target=serve)
    thread.start()
    q = Queue.from_url(redis_url)
    try:
        assert started.wait(10)
        site: Site = box["site"]
        env = clean_env(
            redis_url=redis_url, allow_private="true", lease=2, domain_concurrency=10,
            respect_robots="false",  # the pages alone are counted
        )  # fmt: skip
        argv = [SCRAPEQ, "crawl", site.url("/"), "--concurrency", "10"]
        first = subprocess.Popen(
            [*argv, "--results", str(tmp_path / "a.jsonl")], env=env,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 30
        while site.total < 60 and time.monotonic() < deadline:
            time.sleep(0.05)
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        caught = q.status()["counts"]["inflight"]
        assert 0 < caught <= 10, "the kill caught pages in flight"
        second = subprocess.run(
            [*argv, "--results", str(tmp_path / "b.jsonl")], env=env, capture_output=True,
            text=True, timeout=90,
        )  # fmt: skip
        assert second.returncode == 0, second.stderr
        assert "0 seeds enqueued (1 seen before)" in second.stderr
        counts = q.status()["counts"]
        report = q.audit()
    finally:
        stop.set()
        thread.join()
        q.close()
    pages = {"/", *(f"/{n}" for n in range(1, TREE))}
    assert set(site.hits) == pages, "the same final set of pages"
    extra = site.total - len(pages)
    assert 0 <= extra <= caught, f"{extra} pages fetched again, {caught} were in flight"
    assert (counts["ready"], counts["delayed"], counts["inflight"], counts["dead"]) == (0, 0, 0, 0)
    assert report.ok and not report.problems


async def test_save_bodies_and_url_patterns(redis_url: str, tmp_path: Path) -> None:
    """--save-bodies keeps each body content-addressed; deny patterns skip links (counted)."""
    import hashlib

    bodies = tmp_path / "bodies"
    bodies.mkdir()
    async with sites(graph(lambda: "http://0.0.0.0"), graph(lambda: "http://0.0.0.0")) as (
        home,
        _,
    ):
        q = AsyncQueue.from_url(redis_url, settings=_settings(deny=(r"/big$", r"/p/")))
        try:
            await q.enqueue_many([home.url("/d")], unique="seen")
            results = tmp_path / "r.jsonl"
            await Worker(
                q, burst=True, follow_links=True, save_bodies=bodies, sink=JsonlSink(results)
            ).run_async()
        finally:
            await q.close()
    assert "/big" not in home.hits and not any(p.startswith("/p/") for p in home.hits)
    lines = results.read_text().splitlines()
    rows = {json.loads(line)["url"]: json.loads(line) for line in lines}
    root = rows[home.url("/")]
    assert root["links"]["skipped"]["filtered"] == 1  # /big
    done = [row for row in rows.values() if row["outcome"] == "done"]
    assert len(done) == len(rows) - 1  # /missing died: a 404 keeps no body
    for row in done:
        path = Path(row["body_path"])
        assert path.parent.parent == bodies and path.name[:2] == path.parent.name
        assert hashlib.sha256(path.read_bytes()).hexdigest() == path.name


async def test_adapted_handlers_of_every_shape() -> None:
    """Sync, async, generators (sync and async) and a sync callable returning a coroutine all
    give their result and their follow-ups."""
    import functools

    from scrapeq.runtime.follow import Handled, adapt_handler

    def finish(job: Any, response: Any, result: Any, follows: list[Follow]) -> Handled:
        return Handled(result, [], None, ",".join(f.url for f in follows))

    async def coro(job: Any, response: Any) -> Any:
        return ["r", Follow("/a")]

    def gen(job: Any, response: Any, ctx: HandlerContext) -> Any:
        ctx.follow("/a")
        yield {"k": 1}
        yield Follow("/b")

    async def agen(job: Any, response: Any) -> Any:
        yield Follow("/a")

    def returns_coro(job: Any, response: Any) -> Any:
        return coro(job, response)

    cases = {
        "sync": (lambda job, response: Follow("/a"), (None, "/a")),
        "async": (coro, ("r", "/a")),
        "gen": (gen, ({"k": 1}, "/a,/b")),
        "agen": (agen, (None, "/a")),
        "partial": (functools.partial(coro), ("r", "/a")),
        "returns_coro": (returns_coro, ("r", "/a")),
    }
    for name, (handler, expected) in cases.items():
        out = adapt_handler(handler, finish)(None, None)
        if not isinstance(out, Handled):
            out = await out
        assert (out.result, out.body_path) == expected, name
