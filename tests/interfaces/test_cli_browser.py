"""``--fetcher browser`` end to end through the CLI (issue 42): ``enqueue``, ``domain set
--browser-wait-for``, ``worker --burst --results --extract`` on a local JS shop, and the
one-line refusal without the ``browser`` extra."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from scrapeq import Queue
from scrapeq.engine.config.settings import Settings
from support.browser import ONE_CHROMIUM_AT_A_TIME, need_browser
from support.cli_helpers import run
from support.js_shop import price, shop
from support.processes import alive, children, descendants, wait_until
from support.sites import Site, threaded_site

pytestmark = [
    pytest.mark.usefixtures("clean_env"),
    pytest.mark.timeout(180),
    ONE_CHROMIUM_AT_A_TIME,
]


#: The domain's selector: what its listing and its product pages each end up with.
WAIT_FOR = "#grid .product, .price:not(:empty)"


@pytest.fixture
def site() -> Iterator[Site]:
    need_browser()
    with threaded_site(shop) as running:
        yield running


def test_enqueue_fetcher_browser_then_a_worker_extracts_the_rendered_shop(
    capsys: Any, redis_url: str, site: Site, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SCRAPEQ_REQUEST_TIMEOUT", "10")
    base = ["--redis", redis_url]
    enqueue = [*base, "enqueue", "--allow-private"]
    rendered = [site.url("/"), site.url("/p/1"), site.url("/p/2?delay=1200")]
    assert run(capsys, *enqueue, "--fetcher", "browser", *rendered)[0] == 0
    assert run(capsys, *enqueue, site.url("/p/3"))[0] == 0  # the setting's: http
    code, out, err = run(capsys, *base, "domain", "set", site.domain,
                         "--browser-wait-for", WAIT_FOR)  # fmt: skip
    assert code == 0, err
    assert out.strip().endswith(f", browser waits for {WAIT_FOR}")
    code, out, _ = run(capsys, *base, "domains", "--json")
    assert code == 0 and [d.get("browser_wait_for") for d in json.loads(out)] == [WAIT_FOR]
    results = tmp_path / "out.jsonl"
    code, _, err = run(capsys, *base, "worker", "--burst", "--allow-private", "--results",
                       str(results), "--extract", "name=.name::text", "--extract",
                       "price=.price::text", "--extract", "items[]=#grid .product a::text",
                       )  # fmt: skip
    assert code == 0, err
    lines = [json.loads(line) for line in results.read_text().splitlines()]
    got = {r["url"].split(str(site.port), 1)[1]: r for r in lines}
    assert len(lines) == 4 and {r["outcome"] for r in lines} == {"done"}
    assert got["/"]["result"]["items"] == [f"Product {n}" for n in range(1, 13)]
    assert got["/p/1"]["result"] == {"name": "Product 1", "price": price(1), "items": []}
    # content written 1.2 s after load: there because the domain's selector was waited for
    assert got["/p/2?delay=1200"]["result"]["price"] == price(2)
    assert got["/p/3"]["result"]["name"] is None  # http: the container as sent, empty
    code, out, err = run(capsys, *base, "domain", "set", site.domain, "--browser-wait-for", "")
    assert code == 0 and "waits for" not in out


_WITHOUT_PLAYWRIGHT = (
    "import sys; sys.modules['playwright.async_api'] = None\n"  # its import: ImportError
    "from scrapeq.interfaces.cli import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)


@pytest.mark.parametrize("command", [["worker", "--burst"], ["crawl", "https://example.com/"]])
def test_without_playwright_fetcher_browser_is_one_line_naming_the_extra(
    command: list[str], redis_url: str
) -> None:
    argv = [sys.executable, "-c", _WITHOUT_PLAYWRIGHT, "--redis", redis_url, *command,
            "--fetcher", "browser"]  # fmt: skip
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == (
        "scrapeq: error: setting 'fetcher': browser needs Playwright: "
        "pip install 'scrapeq[browser]'\n"
    )
    assert Queue.from_url(redis_url).status()["counts"]["ready"] == 0  # nothing seeded


def test_a_worker_killed_with_9_leaves_no_browser_behind(
    redis_url: str, site: Site, tmp_path: Path
) -> None:
    """The browsers run in sessions of their own (their process groups are the watchdog's
    to kill), yet die with their worker: none is left when it is killed with -9."""
    q = Queue.from_url(redis_url, settings=Settings(allow_private=True))
    q.enqueue_many([site.url(f"/p/{n}?delay=3000") for n in range(1, 5)], fetcher="browser")
    argv = [sys.executable, "-m", "scrapeq", "--redis", redis_url, "worker", "--burst",
            "--allow-private"]  # fmt: skip
    worker = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        browsers = wait_until(
            lambda: [p for p in children(worker.pid) if "chrom" in _name(p)], 60, "a browser"
        )
        tree = [p for b in browsers for p in descendants(b)] + browsers
        worker.kill()
        worker.wait(10)
        wait_until(lambda: not [p for p in tree if alive(p)], 15, "the browsers to end")
    finally:
        if worker.poll() is None:
            worker.kill()
    q.close()


def _name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text()
    except OSError:
        return ""
