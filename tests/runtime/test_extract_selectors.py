"""``--extract`` with named selectors, as a Scrapy user writes them (issue 38, item 19):
``price=.price::text`` (CSS), ``sku=//@data-sku`` (XPath), ``tags[]=...`` (every match)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from scrapeq import Response
from scrapeq.errors import ConfigError
from scrapeq.runtime.extract import extract_fields, extractor, parse_fields
from support.cli_helpers import run, scrub_env
from support.sites import threaded_site

PRODUCT = """<!doctype html><html><head><title>Blue widget</title></head><body>
<div class="product" data-sku="BW-1"><h1> Blue widget </h1>
<span class="price"> 12.50 </span><a class="tag">blue</a><a class="tag">widget</a></div>
</body></html>"""


def _response(body: str = PRODUCT, content_type: str = "text/html") -> Response:
    return Response("http://shop.test/p/1", 200, {"Content-Type": content_type},
                    body.encode(), 0.01, 0)  # fmt: skip


def test_named_css_and_xpath_fields_beside_the_common_ones() -> None:
    fields = parse_fields(
        ["title", "price=.price::text", "sku=//@data-sku", "tags[]=.tag::text", "none=.nope"]
    )
    assert extract_fields(_response(), fields) == {
        "title": "Blue widget",
        "price": "12.50",
        "sku": "BW-1",
        "tags": ["blue", "widget"],
        "none": None,
    }
    handler = extractor(fields)
    assert handler(None, _response("{}", "application/json")) == {  # type: ignore[arg-type]
        "title": None, "price": None, "sku": None, "tags": [], "none": None,
    }  # fmt: skip


@pytest.mark.parametrize(
    ("spec", "said"),
    [
        (["price=.price::txt"], "price: not a CSS selector"),
        (["sku=//div[@"], "sku: not an XPath selector"),
        (["price="], "price=: no selector"),
        (["title", "title=h1::text"], "field 'title' given twice"),
        (["cost"], "name a selector: price=.price::text"),
    ],
)
def test_a_bad_selector_is_one_line(spec: list[str], said: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_fields(spec)
    assert said in str(info.value) and "\n" not in str(info.value)


async def _shop(request: web.Request) -> web.StreamResponse:
    return web.Response(text=PRODUCT, content_type="text/html")


def test_cli_extract_with_named_selectors(
    capsys: Any, redis_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    scrub_env(monkeypatch, tmp_path)
    with threaded_site(_shop) as site:
        code, _, err = run(
            capsys, "--redis", redis_url, "crawl", site.url("/p/1"), "--allow-private",
            "--extract", "price=.price::text", "--extract", "sku=//@data-sku",
            "--extract", "tags[]=.tag::text", "--extract", "title", "--results", "r.jsonl",
        )  # fmt: skip
    assert code == 0, err
    [row] = [json.loads(line) for line in Path("r.jsonl").read_text().splitlines()]
    assert row["result"] == {
        "price": "12.50", "sku": "BW-1", "tags": ["blue", "widget"], "title": "Blue widget",
    }  # fmt: skip


def test_cli_refuses_a_bad_selector_before_any_claim(
    capsys: Any, redis_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    scrub_env(monkeypatch, tmp_path)
    code, _, err = run(
        capsys, "--redis", redis_url, "worker", "--burst", "--extract", "price=.price::txt"
    )
    assert code == 2, err
    assert "--extract price=.price::txt: price: not a CSS selector" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
