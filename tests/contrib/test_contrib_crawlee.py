"""Crawlee for Python on scrapeq (scrapeq.contrib.crawlee): real BeautifulSoupCrawler runs
against loopback sites, in this process and as processes (one killed with SIGKILL)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

pytest.importorskip("crawlee")
pytest.importorskip("bs4")

from aiohttp import web
from crawlee import Request
from crawlee.crawlers import BasicCrawlingContext, BeautifulSoupCrawler
from crawlee.crawlers import BeautifulSoupCrawlingContext as Context
from crawlee.storages import RequestQueue

from scrapeq.contrib.crawlee import ScrapeqStorageClient
from scrapeq.engine.config.settings import Settings
from scrapeq.engine.queue import AsyncQueue
from support.browser import CHROMIUM, need_browser
from support.readme import snippet
from support.sites import Handler, sites

PAGES = 20
TESTS = Path(__file__).resolve().parents[1]
SRC = TESTS.parent / "src"


def binary_tree(pages: int, delay: float = 0.0) -> Handler:
    """Page /p/N links /p/2N+1 and /p/2N+2 (under ``pages``) and home; ``/`` is /p/0."""

    async def page(request: web.Request) -> web.StreamResponse:
        n = int(request.path.rsplit("/", 1)[-1]) if request.path.startswith("/p/") else 0
        if delay:
            await asyncio.sleep(delay)
        links = [f"/p/{k}" for k in (2 * n + 1, 2 * n + 2) if k < pages] + ["/"]
        body = "".join(f'<a href="{href}">x</a>' for href in links)
        return web.Response(text=f"<html><body>{body}</body></html>", content_type="text/html")

    return page


def every_page(base: str, pages: int) -> set[str]:
    return {f"{base}/"} | {f"{base}/p/{n}" for n in range(1, pages)}


def client(redis_url: str) -> ScrapeqStorageClient:
    return ScrapeqStorageClient(redis_url, settings=Settings(allow_private=True, queue="crawlee"))


async def test_a_beautifulsoup_crawler_handles_every_page_once(redis_url: str) -> None:
    handled: list[str] = []
    async with sites(binary_tree(PAGES)) as (site,):
        crawler = BeautifulSoupCrawler(storage_client=client(redis_url), configure_logging=False)

        @crawler.router.default_handler
        async def handle(context: Context) -> None:
            handled.append(context.request.url)
            await context.enqueue_links()

        stats = await crawler.run([site.url("/")])
        assert sorted(handled) == sorted(every_page(site.base, PAGES))
        assert all(hits == 1 for hits in site.hits.values()), site.hits
        assert stats.requests_finished == PAGES
    counts = await _counts(redis_url)
    assert counts["done"] == PAGES
    assert counts["ready"] + counts["delayed"] + counts["inflight"] == 0


async def test_the_guides_crawlee_setup_crawls_as_printed(redis_url: str) -> None:
    """docs/guide/crawlee.md's two lines, with this test's Redis: a watched crawl of a site."""
    source = snippet("# crawlee_setup.py").replace("redis://localhost:6379/0", redis_url)
    source = source.replace('Settings(queue="shop")', 'Settings(queue="shop", allow_private=True)')
    scope: dict[str, object] = {}
    exec(compile(source, "crawlee_setup.py", "exec"), scope)
    crawler = scope["crawler"]
    assert isinstance(crawler, BeautifulSoupCrawler)
    handled: list[str] = []

    @crawler.router.default_handler
    async def handle(context: Context) -> None:
        handled.append(context.request.url)
        await context.enqueue_links()

    async with sites(binary_tree(PAGES)) as (site,):
        await crawler.run([site.url("/")])
        assert sorted(handled) == sorted(every_page(site.base, PAGES))


async def _counts(redis_url: str) -> dict[str, int]:
    queue = AsyncQueue.from_url(redis_url, "crawlee", settings=Settings(allow_private=True))
    try:
        return await queue.counts()
    finally:
        await queue.close()


async def test_a_failing_handler_is_retried_by_crawlee_then_given_up(redis_url: str) -> None:
    """A reclaim carries crawlee's retry_count into the job enqueued again: crawlee's
    max_request_retries bounds the attempts, and its failed-request handler runs once."""
    tries: list[int] = []
    failed: list[str] = []
    async with sites(binary_tree(1)) as (site,):
        crawler = BeautifulSoupCrawler(
            storage_client=client(redis_url), configure_logging=False, max_request_retries=2
        )

        @crawler.router.default_handler
        async def handle(context: Context) -> None:
            tries.append(context.request.retry_count)
            raise RuntimeError("the handler's bug")

        @crawler.failed_request_handler
        async def on_failed(context: BasicCrawlingContext, error: Exception) -> None:
            failed.append(context.request.url)

        await crawler.run([site.url("/")])
    assert tries == [0, 1, 2]
    assert failed == [site.url("/")]
    counts = await _counts(redis_url)
    assert counts["ready"] + counts["delayed"] + counts["inflight"] == 0
    # Given up: a dead letter (it used to be acked done, a success for the breaker).
    queue = AsyncQueue.from_url(redis_url, "crawlee", settings=Settings(allow_private=True))
    try:
        (dead,) = await queue.dead_letters()
    finally:
        await queue.close()
    assert (dead.url, dead.dead_reason) == (site.url("/"), "handler_error")


async def test_forefront_requests_come_first_and_unique_keys_dedupe(redis_url: str) -> None:
    storage = client(redis_url)
    rq = await RequestQueue.open(storage_client=storage)
    base = "http://127.0.0.1:9"
    await rq.add_requests([f"{base}/a", f"{base}/b"])
    await rq.add_request(Request.from_url(f"{base}/urgent"), forefront=True)
    again = await rq.add_request(Request.from_url(f"{base}/a"))
    assert again.was_already_present
    first = await rq.fetch_next_request()
    assert first is not None and first.url == f"{base}/urgent"
    assert not await rq.is_finished()
    await rq.mark_request_as_handled(first)
    # Handled: the same unique_key is still known (the seen-set), across clients too.
    other = await RequestQueue.open(storage_client=client(redis_url), name="crawlee")
    assert (await other.add_request(f"{base}/urgent")).was_already_present
    await rq.drop()


async def test_a_reclaimed_request_keeps_what_crawlee_changed(redis_url: str) -> None:
    storage = client(redis_url)
    rq_client = await storage.create_rq_client()
    await rq_client.add_batch_of_requests([Request.from_url("http://127.0.0.1:9/x")])
    fetched = await rq_client.fetch_next_request()
    assert fetched is not None
    fetched.retry_count = 3
    fetched.user_data["note"] = "kept"
    assert await rq_client.reclaim_request(fetched, forefront=True) is not None
    assert await rq_client.reclaim_request(fetched) is None  # not in progress any more
    again = await rq_client.fetch_next_request()
    assert again is not None and again.retry_count == 3 and again.user_data["note"] == "kept"
    assert await rq_client.mark_request_as_handled(again) is not None
    assert await rq_client.is_finished()
    metadata = await rq_client.get_metadata()
    assert metadata.pending_request_count == 0
    await rq_client.drop()


def _crawler_process(
    redis_url: str, start: str, out: Path, lease: float, pause: float
) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "PYTHONPATH": f"{SRC}{os.pathsep}{TESTS}",
        "SCRAPEQ_TEST_HANDLER_PAUSE": str(pause),
    }
    with open(out.with_suffix(".log"), "wb") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "support.crawlee_crawler", redis_url, "crawlee", start,
             str(out), str(lease)],
            env=env, cwd=out.parent, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip


def _lines(path: Path, what: str = "done") -> list[str]:
    """The URLs of the ``what`` lines a crawler process wrote."""
    text = path.read_text() if path.exists() else ""
    return [url for kind, url in (line.split() for line in text.splitlines()) if kind == what]


def _working_on(path: Path) -> set[str]:
    return set(_lines(path, "begin")) - set(_lines(path, "done"))


@pytest.mark.timeout(120)
async def test_two_processes_share_the_crawl_and_survive_a_kill(
    redis_url: str, tmp_path: Path
) -> None:
    """Two crawler processes on one queue; one is killed with SIGKILL in the middle of a
    handler. The other handles the rest, the killed one's claimed requests included once
    their leases run out, and finishes only then: every page handled, none lost."""
    pages, lease, pause = 40, 2.0, 0.5
    async with sites(binary_tree(pages, delay=0.05)) as (site,):
        out_a, out_b = tmp_path / "a.txt", tmp_path / "b.txt"
        procs = {
            out: _crawler_process(redis_url, site.url("/"), out, lease, pause)
            for out in (out_a, out_b)
        }
        try:
            # The first process seen in the middle of a handler, having handled a page, is
            # killed (which of the two starts first is the system's choice).
            deadline = time.monotonic() + 30
            victim: Path | None = None
            while victim is None and time.monotonic() < deadline:
                victim = next((o for o in procs if _lines(o) and _working_on(o)), None)
                await asyncio.sleep(0.01)
            assert victim is not None, [o.with_suffix(".log").read_text()[-2000:] for o in procs]
            survivor = out_b if victim == out_a else out_a
            killed = procs[victim]
            assert killed.poll() is None, victim.with_suffix(".log").read_text()[-3000:]
            os.kill(killed.pid, signal.SIGKILL)
            killed.wait()
            killed_at = time.monotonic()
            lost = _working_on(victim)
            deadline = time.monotonic() + 60
            while procs[survivor].poll() is None and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            assert procs[survivor].returncode == 0, survivor.with_suffix(".log").read_text()[-3000:]
        finally:
            for proc in procs.values():
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        done_killed, done_survivor = _lines(victim), _lines(survivor)
        assert set(done_killed) | set(done_survivor) == every_page(site.base, pages)
        # What the killed process was handling came back to the other one (after the lease).
        assert lost <= set(done_survivor)
        assert time.monotonic() - killed_at >= lease * 0.9
        # A page is handled twice only when the killed process was working on it (or had
        # just finished its handler, not yet marked it handled).
        handled = Counter(done_killed + done_survivor)
        assert len({url for url, n in handled.items() if n > 1} - lost) <= 1
    counts = await _counts(redis_url)
    assert counts["ready"] + counts["delayed"] + counts["inflight"] == 0


async def test_a_refused_url_is_unprocessed_not_raised(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A URL scrapeq refuses (a private address without ``allow_private``) comes back as
    crawlee's unprocessed request with one warning line; the batch's others are added."""
    storage = ScrapeqStorageClient(redis_url, settings=Settings(queue="crawlee"))
    rq_client = await storage.create_rq_client()
    answer = await rq_client.add_batch_of_requests(
        [Request.from_url("http://127.0.0.1:9/private"), Request.from_url("https://example.com/")]
    )
    assert [r.url for r in answer.unprocessed_requests] == ["http://127.0.0.1:9/private"]
    assert [r.was_already_present for r in answer.processed_requests] == [False]
    refused = [r for r in caplog.records if r.name == "scrapeq.crawlee"]
    assert len(refused) == 1 and refused[0].exc_info is None
    assert "127.0.0.1:9/private" in refused[0].getMessage()
    await rq_client.drop()


async def test_a_playwright_crawler_handles_every_page_once(redis_url: str) -> None:
    """PlaywrightCrawler on the same queue, with Debian's chromium (never a downloaded one)."""
    need_browser()
    pytest.importorskip("browserforge")  # crawlee's playwright extra
    from crawlee.crawlers import PlaywrightCrawler, PlaywrightCrawlingContext

    handled: list[str] = []
    async with sites(binary_tree(8)) as (site,):
        crawler = PlaywrightCrawler(
            storage_client=client(redis_url),
            configure_logging=False,
            headless=True,
            browser_launch_options={"executable_path": str(CHROMIUM), "chromium_sandbox": False},
        )

        @crawler.router.default_handler
        async def handle(context: PlaywrightCrawlingContext) -> None:
            handled.append(context.request.url)
            await context.enqueue_links()

        await crawler.run([site.url("/")])
        assert sorted(handled) == sorted(every_page(site.base, 8))
        pages = {path: hits for path, hits in site.hits.items() if path != "/favicon.ico"}
        assert all(hits == 1 for hits in pages.values()), site.hits


async def test_a_job_that_holds_no_crawlee_request_is_dead_lettered(redis_url: str) -> None:
    """A job put on the queue by something else (a plain scrapeq enqueue) is not handed to
    crawlee: it fails as ``bad_payload``, one error line, and the fetch goes on."""
    queue = AsyncQueue.from_url(redis_url, "crawlee", settings=Settings(allow_private=True))
    try:
        await queue.enqueue("https://example.com/plain", payload={"not": "a request"})
        rq_client = await client(redis_url).create_rq_client()
        assert await rq_client.fetch_next_request() is None
        assert await queue.dead_count() == 1
        assert (await queue.dead_letters())[0].url == "https://example.com/plain"
        await rq_client.drop()
    finally:
        await queue.close()
