"""Crawlee on scrapeq when sites fail: a watched crawler's failed navigations charge their
domain's breaker and are retried by scrapeq (scrapeq.contrib.crawlee._navigation), and the
queue's counts stay right through reclaims and several clients (issue 41)."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from typing import Any

import pytest

pytest.importorskip("crawlee")
pytest.importorskip("bs4")

from aiohttp import web
from crawlee import Request
from crawlee.crawlers import BasicCrawler, BasicCrawlingContext, BeautifulSoupCrawler
from crawlee.crawlers import BeautifulSoupCrawlingContext as Context

from scrapeq.contrib.crawlee import ScrapeqStorageClient
from scrapeq.engine.config.settings import Settings
from scrapeq.engine.queue import AsyncQueue
from support.sites import hang, sites

PAGES = 20


def tree(pages: int) -> Any:
    """Page /p/N links /p/2N+1 and /p/2N+2 (under ``pages``); ``/`` is /p/0."""

    async def page(request: web.Request) -> web.StreamResponse:
        n = int(request.path.rsplit("/", 1)[-1]) if request.path.startswith("/p/") else 0
        body = "".join(f'<a href="/p/{k}">x</a>' for k in (2 * n + 1, 2 * n + 2) if k < pages)
        return web.Response(text=f"<html><body>{body}</body></html>", content_type="text/html")

    return page


def status(code: int, **headers: str) -> Any:
    async def answer(request: web.Request) -> web.StreamResponse:
        return web.Response(status=code, text="no", headers=headers)

    return answer


def every_page(base: str, pages: int) -> set[str]:
    return {f"{base}/"} | {f"{base}/p/{n}" for n in range(1, pages)}


def settings(**overrides: Any) -> Settings:
    base: dict[str, Any] = {"allow_private": True, "queue": "crawlee-fail", "slow_call": 1.0}
    return Settings(**(base | overrides))


async def _queue(redis_url: str, what: str, *args: Any) -> Any:
    queue = AsyncQueue.from_url(redis_url, "crawlee-fail", settings=settings())
    try:
        return await getattr(queue, what)(*args)
    finally:
        await queue.close()


async def _until_open(redis_url: str, domain: str, within: float) -> None:
    """Until ``domain``'s breaker is open, or ``within`` seconds passed (the test's assertion
    then says what it is)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        (info,) = await _queue(redis_url, "domains_info", [domain])
        if info["state"] == "open":
            return
        await asyncio.sleep(0.1)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("failing", ["hang", "503", "403"])
async def test_a_failing_domain_parks_and_the_good_domain_finishes(
    redis_url: str, failing: str
) -> None:
    """One site hangs (crawlee's navigation timeout ends each try), answers 503, or bans
    (403); the other is healthy. The failing domain's breaker opens after its 3rd failure,
    its requests park in the queue (none lost, none dead), and every healthy page is handled
    once meanwhile."""
    bad_site = {"hang": hang, "503": status(503), "403": status(403)}[failing]
    bad_pages = 10
    async with sites(tree(PAGES), bad_site) as (good, bad):
        storage = ScrapeqStorageClient(
            redis_url,
            settings=settings(breaker_failures=3, breaker_cooldown=60, domain_concurrency=2,
                              backoff_base=0.2, backoff_cap=0.4),
        )  # fmt: skip
        crawler = storage.watch(
            BeautifulSoupCrawler(
                storage_client=storage,
                configure_logging=False,
                navigation_timeout=timedelta(seconds=1.5),
                max_request_retries=8,
            )
        )
        handled: list[str] = []

        @crawler.router.default_handler
        async def handle(context: Context) -> None:
            handled.append(context.request.url)
            await context.enqueue_links()
            if every_page(good.base, PAGES) <= set(handled):
                # The healthy site may be done before the bad one's 3rd failure is settled
                # (a timeout takes 1.5 s): stopping then released it, and the breaker stayed
                # closed. Wait (bounded) for the breaker, then stop.
                await _until_open(redis_url, bad.domain, 30)
                crawler.stop("the healthy site is done")

        bad_urls = [bad.url(f"/h/{i}") for i in range(bad_pages)]
        await asyncio.wait_for(crawler.run([good.url("/"), *bad_urls]), 90)
    assert sorted(handled) == sorted(every_page(good.base, PAGES))
    (info,) = await _queue(redis_url, "domains_info", [bad.domain])
    assert info["state"] == "open", info
    # 2 at once fail; the slot the first failure frees may be taken before the 3rd opens
    # the breaker: then nothing more goes there.
    assert bad.total <= 5, bad.hits
    reason = {"hang": "timeout", "503": "http_503", "403": "http_403"}[failing]
    figures = await _queue(redis_url, "figures")
    assert figures["dead"] == 0, figures
    assert figures["retried"] == bad.total  # scrapeq's retries, not crawlee's reclaims
    assert figures["ready"] + figures["delayed"] + figures["inflight"] == bad_pages
    errors = await _queue(redis_url, "recent_errors", bad.domain)
    assert errors and {error["kind"] for error in errors} == {reason}, errors
    (good_info,) = await _queue(redis_url, "domains_info", [good.domain])
    assert good_info["state"] == "closed" and good_info["done"] == PAGES


async def test_retries_spent_dead_letter_the_request_with_its_reason(redis_url: str) -> None:
    """A 503 site's request is retried by scrapeq; crawlee's retry_count follows the job's
    attempts, so crawlee's max_request_retries ends it: its failed-request handler runs once,
    and the job is a dead letter ``http_503``, its domain charged each time."""
    failed: list[int] = []
    async with sites(status(503)) as (bad,):
        storage = ScrapeqStorageClient(
            redis_url, settings=settings(breaker_failures=10, backoff_base=0.05, backoff_cap=0.1)
        )
        crawler = storage.watch(
            BeautifulSoupCrawler(storage_client=storage, configure_logging=False,
                                 max_request_retries=2)
        )  # fmt: skip

        @crawler.router.default_handler
        async def handle(context: Context) -> None:
            raise AssertionError("a 503 never reaches the handler")

        @crawler.failed_request_handler
        async def on_failed(context: BasicCrawlingContext, error: Exception) -> None:
            failed.append(context.request.retry_count)

        await asyncio.wait_for(crawler.run([bad.url("/x")]), 60)
    assert failed == [2]
    assert bad.total == 3
    dead = await _queue(redis_url, "dead_letters")
    assert [job.url for job in dead] == [bad.url("/x")], dead
    assert dead[0].dead_reason == "http_503", dead[0]
    figures = await _queue(redis_url, "figures")
    assert figures["retried"] == 2 and figures["done"] == 0


async def test_a_crawler_without_navigation_hooks_is_refused(redis_url: str) -> None:
    storage = ScrapeqStorageClient(redis_url, settings=settings())
    with pytest.raises(TypeError, match="BasicCrawler has no navigation hooks"):
        storage.watch(BasicCrawler(storage_client=storage, configure_logging=False))


async def test_counts_do_not_take_a_reclaim_for_a_new_request(redis_url: str) -> None:
    """Two clients (two processes' worth: each its own connection) on one queue: a request
    reclaimed twice is one request, pending until handled; ``is_finished`` is false on both
    while either holds a request, true on both once every request is handled."""
    base = "http://127.0.0.1:9"
    one = await ScrapeqStorageClient(redis_url, settings=settings()).create_rq_client()
    two = await ScrapeqStorageClient(redis_url, settings=settings()).create_rq_client()
    try:
        await one.add_batch_of_requests(
            [Request.from_url(f"{base}/a"), Request.from_url(f"{base}/b")]
        )
        for _ in range(2):  # fetched by one, reclaimed (a handler's failure), twice
            fetched = await one.fetch_next_request()
            assert fetched is not None
            assert not await two.is_finished()  # one holds it
            await one.reclaim_request(fetched)
        for client in (one, two):
            metadata = await client.get_metadata()
            assert (metadata.total_request_count, metadata.handled_request_count,
                    metadata.pending_request_count) == (2, 0, 2)  # fmt: skip
        while (request := await two.fetch_next_request()) is not None:
            assert not await one.is_finished()  # two holds it
            await two.mark_request_as_handled(request)
        for client in (one, two):
            metadata = await client.get_metadata()
            assert (metadata.total_request_count, metadata.handled_request_count,
                    metadata.pending_request_count) == (2, 2, 0)  # fmt: skip
            assert await client.is_finished()
    finally:
        await one.drop()
        await two.close()


class _Context:
    """A post-navigation context's shape: the request, and an HTTP crawler's answer."""

    def __init__(self, key: str, status: int | None = None, **headers: str) -> None:
        self.request = Request.from_url(f"http://127.0.0.1:9/{key}")
        if status is not None:
            self.http_response = type("R", (), {"status_code": status, "headers": headers})()


@pytest.mark.parametrize(
    ("status", "headers", "outcome", "reason", "charged"),
    [
        (200, {}, "ok", "ok", False),
        (503, {}, "retry", "http_503", True),
        (503, {"retry-after": "7"}, "throttled", "http_503", True),
        (429, {}, "throttled", "http_429", True),
        (403, {}, "retry", "http_403", True),
        (404, {}, "fail", "http_404", False),
    ],
)
async def test_an_answered_navigation_is_classified_as_the_worker_classifies_a_fetch(
    status: int, headers: dict[str, str], outcome: str, reason: str, charged: bool
) -> None:
    from scrapeq.contrib.crawlee._navigation import Navigations

    navigations = Navigations(slow_call=10.0)
    context = _Context("a", status, **headers)
    await navigations.before(context)
    await navigations.after(context)
    seen = navigations.verdict(context.request.unique_key)
    assert seen is not None
    verdict, seconds = seen
    assert (verdict.outcome.value, verdict.reason, verdict.counts_against_domain) == (
        outcome, reason, charged
    )  # fmt: skip
    assert seconds < 1.0
    assert navigations.verdict(context.request.unique_key) is None  # forgotten once read


async def test_a_navigation_never_answered_is_a_timeout_past_slow_call_else_refused() -> None:
    from scrapeq.contrib.crawlee._navigation import Navigations

    navigations = Navigations(slow_call=0.05)
    quick, slow = _Context("quick"), _Context("slow")
    await navigations.before(quick)
    await navigations.before(slow)
    seen = navigations.verdict(quick.request.unique_key)
    assert (
        seen is not None and seen[0].reason == "connection_error" and seen[0].counts_against_domain
    )
    await asyncio.sleep(0.06)
    seen = navigations.verdict(slow.request.unique_key)
    assert seen is not None and seen[0].reason == "timeout" and seen[0].counts_against_domain
    assert navigations.verdict("never navigated") is None
