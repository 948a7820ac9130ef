"""The README's Python crawler runs exactly as printed, against a local site."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from aiohttp import web

from support.readme import snippet
from support.sites import sites


def crawler_source() -> str:
    return snippet("# crawler.py")


async def pages(request: web.Request) -> web.StreamResponse:
    n = int(request.path.strip("/") or 0)
    links = "".join(f'<a href="/{m}">{m}</a>' for m in (2 * n + 1, 2 * n + 2))
    links += '<a href="/">home</a>'  # a cycle
    html = f"<html><head><title>page {n}</title></head><body>{links}</body></html>"
    return web.Response(text=html, content_type="text/html")


def serve(box: dict[str, Any], started: threading.Event, stop: threading.Event) -> None:
    import asyncio

    async def run() -> None:
        async with sites(pages) as (site,):
            box["site"] = site
            started.set()
            while not stop.is_set():
                await asyncio.sleep(0.05)

    asyncio.run(run())


def test_the_readme_crawler_runs_as_printed(redis_url: str, tmp_path: Path) -> None:
    source = crawler_source()
    assert 20 <= len(source.strip().splitlines()) <= 35
    (tmp_path / "crawler.py").write_text(source, encoding="utf-8")
    box: dict[str, Any] = {}
    started, stop = threading.Event(), threading.Event()
    thread = threading.Thread(target=serve, args=(box, started, stop))
    thread.start()
    try:
        assert started.wait(10)
        site = box["site"]
        env = {**os.environ, "SCRAPEQ_REDIS_URL": redis_url, "SCRAPEQ_ALLOW_PRIVATE": "true"}
        done = subprocess.run(
            [sys.executable, "crawler.py", site.url("/")],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    finally:
        stop.set()
        thread.join()
    assert done.returncode == 0, done.stderr
    # max_depth 2 from "/": pages 0, 1-2, 3-6: seven pages, each fetched once
    assert "7 pages done, 0 dead" in done.stdout
    assert sorted(site.hits) == ["/", "/1", "/2", "/3", "/4", "/5", "/6"]
    assert all(n == 1 for n in site.hits.values())
    rows = [json.loads(line) for line in (tmp_path / "pages.jsonl").read_text().splitlines()]
    assert sorted(r["result"] for r in rows) == sorted(f"page {n}" for n in range(7))
