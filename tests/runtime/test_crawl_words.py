"""Crawls (issue 21, items 7 and 9): a redirect's target is fetched once; what became of a
page's links is counted by the script that enqueues them (queued, already seen, over
``max_pages``); a failing seed says why at INFO; ``crawl`` takes ``--log-every``; a first
command that fails stops the embedded Redis it started; the private-address error names the
flag as well as the setting.
"""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from scrapeq.engine.config.settings import Settings
from scrapeq.engine.queue import AsyncQueue
from scrapeq.engine.server.embedded import server_info
from scrapeq.runtime.sinks import JsonlSink
from scrapeq.runtime.worker import Worker
from support.cli_helpers import run, scrub_env
from support.sites import sites, threaded_site


def _page(*links: str) -> web.Response:
    body = "".join(f'<a href="{href}">x</a>' for href in links)
    return web.Response(text=f"<html><body>{body}</body></html>", content_type="text/html")


async def redirecting(request: web.Request) -> web.StreamResponse:
    """``/sec`` redirects to ``/sec/``, which links itself; ``/late`` links ``/sec/`` once the
    redirect has been settled."""
    path = request.path
    if path == "/":
        return _page("/sec", "/late")
    if path == "/sec":
        raise web.HTTPMovedPermanently("/sec/")
    if path == "/sec/":
        return _page("/sec/", "/sec/a", "/")
    if path == "/late":
        await asyncio.sleep(0.5)
        return _page("/sec/", "/sec")
    return _page("/")


@pytest.mark.parametrize("partitions", [1, 3])
async def test_a_redirect_target_is_fetched_once(redis_url: str, partitions: int) -> None:
    async with sites(redirecting) as (site,):
        settings = Settings(allow_private=True, domain_concurrency=10, partitions=partitions)
        q = AsyncQueue.from_url(redis_url, settings=settings)
        try:
            await q.enqueue_many([site.url("/")], unique="seen")
            await Worker(q, burst=True, follow_links=True, concurrency=10).run_async()
            counts = (await q.status())["counts"]
        finally:
            await q.close()
    assert dict(site.hits) == {"/": 1, "/sec": 1, "/sec/": 1, "/sec/a": 1, "/late": 1}
    assert counts["enqueued"] == 4  # /, /sec, /late, /sec/a: /sec/ joined as /sec's target


async def test_a_queue_without_a_seen_set_gets_none_from_a_redirect(
    redis_url: str, redis_client: Any
) -> None:
    async with sites(redirecting) as (site,):
        q = AsyncQueue.from_url(redis_url, settings=Settings(allow_private=True))
        try:
            await q.enqueue_many([site.url("/sec")])
            await Worker(q, burst=True).run_async()
            assert (await q.status())["counts"]["done"] == 1
        finally:
            await q.close()
    assert site.hits["/sec/"] == 1
    assert redis_client.keys("sq:{default}:seen*") == []
    assert redis_client.hget("sq:{default}:meta", "seen") is None


async def shop(request: web.Request) -> web.StreamResponse:
    """``/`` links ``/1`` to ``/9``; each of those links ``/`` and ``/1`` to ``/3`` again."""
    if request.path == "/":
        return _page(*(f"/{i}" for i in range(1, 10)))
    return _page("/", "/1", "/2", "/3", "/1")


async def test_link_counts_come_from_the_script_that_enqueues_them(
    redis_url: str, tmp_path: Path
) -> None:
    results = tmp_path / "r.jsonl"
    async with sites(shop) as (site,):
        settings = Settings(allow_private=True, domain_concurrency=10, max_pages=6)
        q = AsyncQueue.from_url(redis_url, settings=settings)
        try:
            await q.enqueue_many([site.url("/")], unique="seen")
            sink = JsonlSink(results)
            await Worker(q, burst=True, follow_links=True, sink=sink).run_async()
            figures = await q.figures()
            enqueued = (await q.status())["counts"]["enqueued"]
        finally:
            await q.close()
    rows = [json.loads(line) for line in results.read_text().splitlines()]
    offered = sum(r["links"]["offered"] for r in rows)
    assert enqueued == 6  # the seed and five pages: max_pages
    assert figures["links_queued"] == 5, figures
    assert figures["links_over_max_pages"] == 4  # /6 to /9
    assert figures["links_seen"] == offered - 9, "every other link offered was seen before"
    assert offered == 9 + 5 * 4  # the seed's 9, each other page's 4 (a page lists a URL once)


async def test_a_failing_seed_says_why_at_info(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    seed = "http://127.0.0.1:9/"  # discard: nothing listens
    settings = Settings(allow_private=True, max_attempts=3, backoff_base=0.05, backoff_cap=0.1)
    q = AsyncQueue.from_url(redis_url, settings=settings)
    caplog.set_level(logging.INFO, logger="scrapeq")
    try:
        await q.enqueue_many([seed], unique="seen")
        await Worker(q, burst=True, follow_links=True).run_async()
    finally:
        await q.close()
    lines = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    seeds = [line for line in lines if line.startswith("seed ")]
    assert seeds, lines
    assert seed in seeds[0] and "connection" in seeds[0] and "attempt 1/3" in seeds[0], seeds


@pytest.fixture
def data_dir(data_dir: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """conftest's short data folder as SCRAPEQ_DATA_DIR, with a clean environment."""
    scrub_env(monkeypatch, tmp_path)
    monkeypatch.setenv("SCRAPEQ_DATA_DIR", str(data_dir))
    return data_dir


def test_a_failed_first_command_stops_the_embedded_redis_it_started(
    capsys: Any, data_dir: Path
) -> None:
    code, _, err = run(capsys, "crawl", "http://127.0.0.1:9/")
    assert code == 2
    assert "allow_private" in err and "--allow-private" in err, err
    assert not server_info(data_dir).running, "the failed command left its Redis running"
    code, _, err = run(capsys, "status")
    assert code == 0, err
    assert server_info(data_dir).running, "a command that went through leaves it for the next"
    code, _, err = run(capsys, "crawl", "ftp://x.example.com/")
    assert code == 2
    assert server_info(data_dir).running, "only what the failed command started is stopped"


def chain(delay: float) -> Any:
    async def handle(request: web.Request) -> web.StreamResponse:
        await asyncio.sleep(delay)
        n = int(request.path.strip("/") or 0)
        return _page(f"/{n + 1}") if n < 3 else _page("/")

    return handle


def test_crawl_takes_log_every(capsys: Any, redis_url: str, monkeypatch: pytest.MonkeyPatch,
                               tmp_path: Path) -> None:  # fmt: skip
    scrub_env(monkeypatch, tmp_path)
    with threaded_site(chain(0.7)) as site:
        code, _, err = run(capsys, "--redis", redis_url, "crawl", site.url("/"),
                           "--allow-private", "--log-every", "0.5")  # fmt: skip
    assert code == 0, err
    assert "progress done/s=" in err
    summary = next(line for line in err.splitlines() if " summary " in line)
    assert "links_queued=3" in summary and "links_seen=1" in summary, summary
