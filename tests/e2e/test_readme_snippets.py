"""Every Python snippet of the README and of the guides (docs/guide/*.md) runs as printed
(issue 21, item 15; issue 39 moved most of them into the guides).

Each ```python block opens with a ``# name`` line naming the test that runs it: the crawler
(tests/e2e/test_readme_crawler.py), the Scrapy settings (tests/e2e/test_readme_scrapy.py)
and the quick start here. A new snippet fails this file until a test runs it.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from pathlib import Path

from aiohttp import web

from support.proc_helpers import communicate
from support.readme import DOCUMENTS, README, blocks, snippets
from support.sites import echo, sites

#: The first line of each snippet -> the test that runs it as printed.
RUNNERS = {
    "# crawler.py": "tests/e2e/test_readme_crawler.py",
    "# settings.py (Scrapy)": "tests/e2e/test_readme_scrapy.py",
    "# quickstart.py": "tests/e2e/test_readme_snippets.py",
    "# api.py: POST a search, then its page 2 (python api.py URL)": (
        "tests/e2e/test_readme_snippets.py"
    ),
    "# results.py": "tests/e2e/test_readme_results.py",
    "# crawlee_setup.py": "tests/contrib/test_contrib_crawlee.py",
    "# shop.py: the handler of `scrapeq worker --handler shop:parse` (revisit = on)": (
        "tests/runtime/test_revisit_lines.py"
    ),
}


def test_every_python_snippet_is_run_by_a_test() -> None:
    found = snippets()
    opened = sum(len(re.findall(r"```python\n", d.read_text(encoding="utf-8"))) for d in DOCUMENTS)
    assert len(found) == opened == len(blocks()), "two snippets share a first line"
    assert set(found) == set(RUNNERS), "a snippet no test runs (or a runner lost it)"
    assert all((README.parent / runner).is_file() for runner in RUNNERS.values())
    assert "# quickstart.py" in README.read_text(encoding="utf-8"), "the front door's quick start"


def test_every_python_snippet_is_a_valid_program() -> None:
    for first, source in snippets().items():
        compile(source, first, "exec")  # e.g. no `await` outside a function


async def page(request: web.Request) -> web.StreamResponse:
    sku = request.path.rsplit("/", 1)[-1]
    if sku == "0":
        return web.Response(text="no title here", content_type="text/html")
    return web.Response(text=f"<title>Product {sku}</title>", content_type="text/html")


async def test_the_quick_start_runs_as_printed(redis_url: str, tmp_path: Path) -> None:
    source = snippets()["# quickstart.py"]
    (tmp_path / "quickstart.py").write_text(source, encoding="utf-8")
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("SCRAPEQ_")},
        "SCRAPEQ_REDIS_URL": redis_url,
        "SCRAPEQ_ALLOW_PRIVATE": "true",
    }
    async with sites(page) as (site,):
        for sku in ("7", "0"):
            proc = await _run(tmp_path, env, site.url(f"/p/{sku}"))
            assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert [(r["outcome"], r["result"], r["error"]) for r in rows] == [
        ("done", {"title": "Product 7"}, None),
        ("dead", None, rows[1]["error"]),
    ]
    assert "no_title" in str(rows[1]["error"])


async def test_the_requests_example_runs_as_printed(redis_url: str, tmp_path: Path) -> None:
    (first,) = [k for k in snippets() if k.startswith("# api.py")]
    (tmp_path / "api.py").write_text(snippets()[first], encoding="utf-8")
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("SCRAPEQ_")},
        "SCRAPEQ_REDIS_URL": redis_url,
        "SCRAPEQ_ALLOW_PRIVATE": "true",
    }
    async with sites(echo) as (site,):
        proc = await _run(tmp_path, env, site.url("/search"), "api.py")
        assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in (tmp_path / "api.jsonl").read_text().splitlines()]
    sent = sorted((r["meta"]["page"], r["result"]) for r in rows)  # the handler's result
    assert [(page, got["method"], got["path"], json.loads(got["body"])) for page, got in sent] == [
        (1, "POST", "/search", {"q": "shoes"}),
        (2, "POST", "/search?page=2", {"q": "shoes"}),
    ]


async def _run(
    cwd: Path, env: dict[str, str], url: str, program: str = "quickstart.py"
) -> subprocess.CompletedProcess[str]:
    """The snippet in its own process (the site answers from this one's event loop)."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, program, url, cwd=cwd, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await communicate(proc, 60)
    return subprocess.CompletedProcess([], proc.returncode or 0, out.decode(), err.decode())
