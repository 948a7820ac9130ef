"""Results lines written from the settle script's answer (issue 25), through a real worker and
loopback sites: ``changed`` is the script's decision (never a prediction of the worker's), a
handler's content signature keeps a rotating timestamp from being a change, and a calendar
spider trap crawled under ``max_pages`` or ``max_bytes`` stops with ``skipped: budget`` in
its results and the cut in ``domains``."""

from __future__ import annotations

import asyncio
import json
import re
import time
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from scrapeq import AsyncQueue, Content, HandlerContext, Job, Response, Settings
from scrapeq.runtime.sinks import JsonlSink
from scrapeq.runtime.worker import Worker
from support.cli_helpers import run, scrub_env
from support.sites import sites

DAY_MS = 86_400_000


class Shop:
    """/item: a price and a rotating timestamp (every answer's body differs)."""

    def __init__(self) -> None:
        self.price = 10

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = f"<p>price {self.price}</p><p>generated at {time.time_ns()}</p>"
        return web.Response(text=body, content_type="text/html")


def price_of(response: Response) -> str:
    found = re.search(rb"price (\d+)", response.body)
    assert found is not None
    return found.group(1).decode()


def lines(results: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in results.read_text().splitlines()] if results.exists() else []


async def visit(q: AsyncQueue, results: Path, want: int, handler: Any, **kw: Any) -> None:
    """Run a worker until the results hold ``want`` lines (revisits stay delayed: a burst
    worker would wait for them), then stop it."""
    worker = Worker(q, handler=handler, sink=JsonlSink(results), **kw)
    task = asyncio.create_task(worker.run_async())
    for _ in range(300):
        if len(lines(results)) >= want:
            break
        await asyncio.sleep(0.05)
    worker.stop()
    await asyncio.wait_for(task, 30)


def revisit_queue(redis_url: str) -> AsyncQueue:
    settings = Settings(allow_private=True, request_timeout=5.0, revisit="on",
                        revisit_budget=1, revisit_min_interval=1)  # fmt: skip
    return AsyncQueue.from_url(redis_url, settings=settings)


async def test_an_overtaken_revisits_line_says_what_the_settle_decided(
    redis_url: str, tmp_path: Path
) -> None:
    results = tmp_path / "r.jsonl"
    shop = Shop()

    def by_price(job: Job, response: Response, ctx: HandlerContext) -> Any:
        ctx.content(signature=price_of(response))
        return price_of(response)

    q = revisit_queue(redis_url)
    try:
        async with sites(shop.handle) as (site,):
            await q.enqueue(site.url("/item"))
            await visit(q, results, 1, by_price)  # price 10 stored; its revisit scheduled
            shop.price = 20
            await q.enqueue(site.url("/item"))  # a second job of the URL: its chain wins
            await visit(q, results, 2, by_price)  # price 20 stored
            q.testing_clock_offset_ms += 40 * DAY_MS  # both revisits due, both see 20
            await visit(q, results, 4, by_price)
    finally:
        await q.close()
    rows = lines(results)
    assert [r["result"] for r in rows] == ["10", "20", "20", "20"]
    # the overtaken revisit carried the first visit's content; the page it fetched is the
    # one stored last: unchanged, as includes/revisit.lua decided it
    assert [r["changed"] for r in rows] == [True, True, False, False]


@pytest.mark.parametrize("how", ["context", "returned", "none"])
async def test_a_handlers_signature_keeps_a_rotating_timestamp_from_being_a_change(
    redis_url: str, tmp_path: Path, how: str
) -> None:
    results = tmp_path / "r.jsonl"
    shop = Shop()

    def parse(job: Job, response: Response, ctx: HandlerContext) -> Any:
        price = price_of(response)
        if how == "context":
            ctx.content(signature=price)
        elif how == "returned":
            return {"price": price}, Content(signature=price.encode())
        return {"price": price}

    q = revisit_queue(redis_url)
    try:
        async with sites(shop.handle) as (site,):
            await q.enqueue(site.url("/item"))
            await visit(q, results, 1, parse)
            for want, price in ((2, 10), (3, 10), (4, 12)):
                shop.price = price
                q.testing_clock_offset_ms += 40 * DAY_MS
                await visit(q, results, want, parse)
    finally:
        await q.close()
    rows = lines(results)
    assert [r["result"] for r in rows] == [{"price": p} for p in ("10", "10", "10", "12")]
    # `changed` is the settle script's observation, the one the page's schedule learns from
    if how == "none":  # the body's signature: the timestamp changes every time
        assert [r["changed"] for r in rows] == [True, True, True, True]
    else:
        assert [r["changed"] for r in rows] == [True, False, False, True]


async def test_a_handler_can_say_unchanged(redis_url: str, tmp_path: Path) -> None:
    results = tmp_path / "r.jsonl"
    shop = Shop()

    def parse(job: Job, response: Response) -> Any:
        return Content(changed=False)

    q = revisit_queue(redis_url)
    try:
        async with sites(shop.handle) as (site,):
            await q.enqueue(site.url("/item"))
            await visit(q, results, 1, parse)
            q.testing_clock_offset_ms += 40 * DAY_MS
            await visit(q, results, 2, parse)
    finally:
        await q.close()
    rows = lines(results)
    assert [(r["result"], r["changed"]) for r in rows] == [(None, True), (None, False)]


def test_content_refuses_what_cannot_be_a_signature() -> None:
    with pytest.raises(TypeError, match="text or bytes"):
        Content(signature=12)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="True, False or None"):
        Content(changed="no")  # type: ignore[arg-type]


async def calendar(request: web.Request) -> web.StreamResponse:
    """A spider trap: every day links the next one, for ever."""
    day = int(request.query.get("d", "0"))
    body = f"<h1>day {day}</h1>{'.' * 300}<a href='/cal?d={day + 1}'>next</a>"
    return web.Response(text=body, content_type="text/html")


@pytest.mark.parametrize(
    ("budget", "value", "pages"), [("max_pages", 5, 5), ("max_bytes", 1200, 4)]
)
async def test_a_calendar_trap_stops_at_its_budget_and_says_why(
    redis_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch, budget: str, value: int, pages: int,
) -> None:  # fmt: skip
    results = tmp_path / "r.jsonl"
    async with sites(calendar) as (site,):
        settings = Settings(allow_private=True, request_timeout=5.0, **{budget: value})
        q = AsyncQueue.from_url(redis_url, settings=settings)
        try:
            await q.enqueue_many([site.url("/cal?d=0")], unique="seen")
            worker = Worker(q, burst=True, follow_links=True, sink=JsonlSink(results))
            await asyncio.wait_for(worker.run_async(), 60)  # the crawl ends by itself
        finally:
            await q.close()
    rows = sorted(lines(results), key=lambda r: r["depth"])
    assert len(rows) == pages  # max_bytes: pages of 341 bytes, the cap met by the fourth
    assert [r["outcome"] for r in rows] == ["done"] * pages
    *before, last = rows
    assert all("skipped" not in r for r in before)
    assert last["skipped"] == "budget"  # its next day was cut
    assert last["links"]["skipped"] == {budget: 1}
    # `domains` says why too: the cut counted for the domain (the CLI without the crawl's
    # settings still shows it)
    scrub_env(monkeypatch, tmp_path, columns=200)
    code, out, err = run(capsys, "--redis", redis_url, "domains", "--json")
    assert code == 0, err
    (row,) = json.loads(out)
    assert row[{"max_pages": "max_pages_skipped", "max_bytes": "skipped"}[budget]] == 1
    code, out, err = run(capsys, "--redis", redis_url, "domains")
    assert code == 0, err
    assert f"{budget}: 1 links" in out


async def test_a_done_line_the_sink_refused_after_the_settle_is_written_again(
    redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from scrapeq.runtime import lines as lines_module

    monkeypatch.setattr(lines_module, "SINK_PAUSE_MIN", 0.05)
    written: list[dict[str, Any]] = []
    refusals = [2]

    class Flaky:
        async def write(self, record: dict[str, Any]) -> None:
            if refusals[0]:
                refusals[0] -= 1
                raise OSError("disk full")
            written.append(record)

        async def close(self) -> None:
            return None

    q = revisit_queue(redis_url)
    try:
        async with sites(Shop().handle) as (site,):
            await q.enqueue(site.url("/item"))
            worker = Worker(q, handler=lambda job, response: 1, sink=Flaky())
            task = asyncio.create_task(worker.run_async())
            for _ in range(200):
                if written:
                    break
                await asyncio.sleep(0.05)
            worker.stop()
            await asyncio.wait_for(task, 30)
            counts = (await q.status())["counts"]
    finally:
        await q.close()
    # fetched and settled once (the job is done, its revisit delayed): the line waited for
    # the settle's answer, and was written again after the sink's failures, once
    assert site.total == 1
    assert counts["done"] == 1 and counts["delayed"] == 1
    assert [(r["outcome"], r["changed"]) for r in written] == [("done", True)]


async def test_the_readme_handler_runs_as_printed(
    redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from scrapeq.runtime.handlers import import_handler
    from support.readme import snippets

    first = "# shop.py: the handler of `scrapeq worker --handler shop:parse` (revisit = on)"
    (tmp_path / "shop.py").write_text(snippets()[first], encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    parse = import_handler("shop:parse")
    price = ["10"]

    async def page(request: web.Request) -> web.StreamResponse:
        body = f"<p class='price'>{price[0]}</p><p>ad {time.time_ns()}</p>"
        return web.Response(text=body, content_type="text/html")

    results = tmp_path / "r.jsonl"
    q = revisit_queue(redis_url)
    try:
        async with sites(page) as (site,):
            await q.enqueue(site.url("/item"))
            await visit(q, results, 1, parse)
            for want, now in ((2, "10"), (3, "11")):
                price[0] = now
                q.testing_clock_offset_ms += 40 * DAY_MS
                await visit(q, results, want, parse)
    finally:
        await q.close()
    rows = lines(results)
    assert [(r["result"], r["changed"]) for r in rows] == [
        ({"price": "10"}, True), ({"price": "10"}, False), ({"price": "11"}, True)
    ]  # fmt: skip
