"""The README's results example (``# results.py``) runs exactly as printed, against a local
site: a crawl into SQLite through ``sink_from_url``, one row per page with its parent's URL."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from aiohttp import web

from support.readme import snippet
from support.sites import threaded_site


def example_source() -> str:
    return snippet("# results.py")


async def pages(request: web.Request) -> web.StreamResponse:
    links = '<a href="/a">a</a><a href="/b">b</a>' if request.path == "/" else '<a href="/">h</a>'
    return web.Response(text=f"<html><body>{links}</body></html>", content_type="text/html")


def test_the_readme_results_example_runs_as_printed(redis_url: str, tmp_path: Path) -> None:
    (tmp_path / "results.py").write_text(example_source(), encoding="utf-8")
    env = {**os.environ, "SCRAPEQ_REDIS_URL": redis_url, "SCRAPEQ_ALLOW_PRIVATE": "true"}
    with threaded_site(pages) as site:
        done = subprocess.run(
            [sys.executable, "results.py", site.url("/")],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = sorted(done.stdout.splitlines())
    assert lines == sorted([
        f"200 {site.url('/')} from (seed)",
        f"200 {site.url('/a')} from {site.url('/')}",
        f"200 {site.url('/b')} from {site.url('/')}",
    ])  # fmt: skip
