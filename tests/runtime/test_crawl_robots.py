"""``crawl`` obeys robots.txt by default, as Scrapy's project template does (issue 38, item
23); a setting from the environment or the config file still decides, and jobs enqueued one
by one keep the library's default (``respect_robots = false``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from support.cli_helpers import run, scrub_env
from support.sites import Site, threaded_site

ROBOTS = "User-agent: *\nDisallow: /private\n"


async def _site(request: web.Request) -> web.StreamResponse:
    if request.path == "/robots.txt":
        return web.Response(text=ROBOTS)
    links = '<a href="/private/1">p</a><a href="/public/1">q</a>' if request.path == "/" else ""
    return web.Response(text=f"<html><body>{links}</body></html>", content_type="text/html")


def _crawl(capsys: Any, redis_url: str, site: Site) -> None:
    code, _, err = run(capsys, "--redis", redis_url, "crawl", site.url("/"), "--allow-private")
    assert code == 0, err


def test_a_crawl_obeys_robots_txt_by_default(
    capsys: Any, redis_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    scrub_env(monkeypatch, tmp_path)
    with threaded_site(_site) as site:
        _crawl(capsys, redis_url, site)
    assert site.hits["/robots.txt"] == 1
    assert site.hits["/public/1"] == 1
    assert site.hits["/private/1"] == 0


def test_a_crawl_told_to_ignore_robots_txt_does(
    capsys: Any, redis_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    scrub_env(monkeypatch, tmp_path)
    monkeypatch.setenv("SCRAPEQ_RESPECT_ROBOTS", "false")
    with threaded_site(_site) as site:
        _crawl(capsys, redis_url, site)
    assert site.hits["/robots.txt"] == 0
    assert site.hits["/private/1"] == 1


def test_a_config_file_decides_too(
    capsys: Any, redis_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    scrub_env(monkeypatch, tmp_path)
    (tmp_path / "scrapeq.toml").write_text("respect_robots = false\n")
    monkeypatch.chdir(tmp_path)
    with threaded_site(_site) as site:
        _crawl(capsys, redis_url, site)
    assert site.hits["/private/1"] == 1


def test_jobs_enqueued_one_by_one_keep_the_library_default(
    capsys: Any, redis_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    scrub_env(monkeypatch, tmp_path)
    with threaded_site(_site) as site:
        code, _, err = run(
            capsys, "--redis", redis_url, "enqueue", site.url("/private/2"), "--allow-private"
        )
        assert code == 0, err
        code, _, err = run(capsys, "--redis", redis_url, "worker", "--burst", "--allow-private")
        assert code == 0, err
    assert site.hits["/robots.txt"] == 0
    assert site.hits["/private/2"] == 1
