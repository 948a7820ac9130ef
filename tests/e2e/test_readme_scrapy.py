"""The README's Scrapy settings work as printed: a project made of them crawls a local site."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import textwrap
from pathlib import Path

import pytest
from aiohttp import web

from support.proc_helpers import communicate
from support.readme import snippet
from support.sites import sites

pytest.importorskip("scrapy")

SRC = Path(__file__).resolve().parents[2] / "src"


def settings_source() -> str:
    return snippet("# settings.py (Scrapy)")


async def page(request: web.Request) -> web.StreamResponse:
    n = int(request.path.strip("/") or 0)
    links = "".join(f'<a href="/{m}">x</a>' for m in (n + 1, n + 2) if m < 10)
    return web.Response(text=f"<title>{n}</title>{links}", content_type="text/html")


SPIDER = textwrap.dedent(
    """
    import scrapy

    class Pages(scrapy.Spider):
        name = "pages"

        def __init__(self, start="", **kwargs):
            super().__init__(**kwargs)
            self.start_urls = [start]

        def parse(self, response):
            yield {"url": response.url}
            yield from response.follow_all(css="a", callback=self.parse)
    """
)


async def test_the_readme_scrapy_settings_crawl_as_printed(redis_url: str, tmp_path: Path) -> None:
    project = tmp_path / "proj"
    (project / "spiders").mkdir(parents=True)
    (project / "__init__.py").write_text("")
    (project / "spiders" / "__init__.py").write_text("")
    (project / "spiders" / "pages.py").write_text(SPIDER)
    settings = settings_source() + '\nSPIDER_MODULES = ["proj.spiders"]\n'
    (project / "settings.py").write_text(settings)
    (tmp_path / "scrapy.cfg").write_text("[settings]\ndefault = proj.settings\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), str(tmp_path)])}
    out = tmp_path / "items.json"
    async with sites(page) as (site,):
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "scrapy", "crawl", "pages", "-a", f"start={site.url('/0')}",
            "-O", str(out), "-s", f"SCRAPEQ_REDIS_URL={redis_url}",
            "-s", 'SCRAPEQ_SETTINGS={"allow_private": true}',
            cwd=tmp_path, env=env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
        log, _ = await communicate(proc, 60)
    assert proc.returncode == 0, log.decode()[-3000:]
    urls = sorted(item["url"] for item in json.loads(out.read_text()))
    assert urls == sorted(site.url(f"/{n}") for n in range(10))
    assert site.total == 10  # each page once: the seen-set dropped the repeated links
