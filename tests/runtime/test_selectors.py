"""Issue 24: selectors in handlers and page fields without one. ``response.css()``,
``response.xpath()`` (parsel, built on first use) and ``response.json()``; ``--extract
title,description,canonical,text`` gives the common fields without writing a handler.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from scrapeq import Response
from scrapeq.engine.config.settings import Settings
from scrapeq.engine.queue import AsyncQueue
from scrapeq.runtime.extract import extract_fields
from scrapeq.runtime.sinks import CallableSink
from scrapeq.runtime.worker import Worker
from support.cli_helpers import run, scrub_env
from support.sites import sites, threaded_site

PAGE = """<!doctype html><html><head><title>  Blue
  widget </title><meta name="Description" content="A widget, blue.">
<link rel="alternate canonical" href="/p/1"><style>p {color: red}</style></head>
<body><h1>Blue widget</h1><p class="price">12.50</p><script>var x = 1;</script>
<ul><li>a</li><li>b</li></ul></body></html>"""


def _response(body: str = PAGE, content_type: str = "text/html; charset=utf-8") -> Response:
    return Response("http://shop.test/p/1?ref=x", 200, {"Content-Type": content_type},
                    body.encode(), 0.01, 0)  # fmt: skip


def test_css_xpath_and_json_as_in_scrapy() -> None:
    r = _response()
    assert r.css("h1::text").get() == "Blue widget"
    assert r.css("p.price::text").get() == "12.50"
    assert r.xpath("//li/text()").getall() == ["a", "b"]
    assert r.xpath("//p[@class=$c]/text()", c="price").get() == "12.50"
    assert r.css("h1").xpath("string()").get() == "Blue widget"
    assert r.selector is r.selector, "built once"
    assert _response('{"a": [1, 2]}', "application/json").json() == {"a": [1, 2]}


def test_a_worker_that_never_selects_never_imports_parsel() -> None:
    code = ("import sys, scrapeq, scrapeq.runtime.worker, scrapeq.interfaces.cli;"
            "print('parsel' in sys.modules)")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False", out.stderr


def test_extract_fields() -> None:
    assert extract_fields(_response()) == {
        "title": "Blue widget",
        "description": "A widget, blue.",
        "canonical": "http://shop.test/p/1",
        "text": "Blue widget 12.50 a b",
    }
    assert extract_fields(_response("<p>x</p>", "application/json"), ("title",)) == {"title": None}
    assert extract_fields(_response("<html><body>x</body></html>"), ("title", "canonical")) == {
        "title": None,
        "canonical": None,
    }


async def test_a_handler_selects_in_a_real_worker(redis_url: str) -> None:
    async def page(request: web.Request) -> web.StreamResponse:
        return web.Response(text=PAGE, content_type="text/html")

    def handler(job: Any, response: Response) -> dict[str, Any]:
        return {
            "h1": response.css("h1::text").get(),
            "items": response.xpath("//li/text()").getall(),
        }

    records: list[dict[str, Any]] = []
    async with sites(page) as (site,):
        q = AsyncQueue.from_url(redis_url, settings=Settings(allow_private=True))
        try:
            await q.enqueue(site.url("/p/1"))
            sink = CallableSink(records.append)
            await Worker(q, handler=handler, burst=True, sink=sink).run_async()
        finally:
            await q.close()
    assert [r["result"] for r in records] == [{"h1": "Blue widget", "items": ["a", "b"]}]


async def shop(request: web.Request) -> web.StreamResponse:
    if request.path == "/":
        return web.Response(
            text='<title>Home</title><a href="/p/1">p</a>', content_type="text/html"
        )
    return web.Response(text=PAGE, content_type="text/html")


def test_cli_extract_without_a_handler(
    capsys: Any, redis_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    scrub_env(monkeypatch, tmp_path)
    with threaded_site(shop) as site:
        code, _, err = run(capsys, "--redis", redis_url, "crawl", site.url("/"), "--allow-private",
                           "--extract", "title,canonical", "--results", "r.jsonl")  # fmt: skip
    assert code == 0, err
    rows = {
        r["url"]: r["result"] for r in map(json.loads, Path("r.jsonl").read_text().splitlines())
    }
    assert rows == {
        site.url("/"): {"title": "Home", "canonical": None},
        site.url("/p/1"): {"title": "Blue widget", "canonical": site.url("/p/1")},
    }


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--extract", "title,price"], "--extract title,price: unknown field 'price': choose"),
        (["--extract", "title", "--handler", "json:dumps"], "--extract and --handler: choose one"),
    ],
)
def test_cli_refuses_a_bad_extract(
    capsys: Any, redis_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
    args: list[str], said: str,
) -> None:  # fmt: skip
    scrub_env(monkeypatch, tmp_path)
    code, _, err = run(capsys, "--redis", redis_url, "worker", "--burst", *args)
    assert code == 2 and said in err and "Traceback" not in err, err
