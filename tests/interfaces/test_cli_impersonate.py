"""``--fetcher`` of ``enqueue``, ``worker`` and ``crawl``, ``domain set --fetcher`` (issue 42),
and the one-line refusal without the ``impersonate`` extra."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from scrapeq import Queue
from support.cli_helpers import run
from support.tls_site import FingerprintSite, fingerprint_site

pytestmark = pytest.mark.usefixtures("clean_env")


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FingerprintSite]:
    pytest.importorskip("curl_cffi")
    folder = tmp_path / "tls"
    folder.mkdir()
    with fingerprint_site(folder) as running:
        monkeypatch.setenv("SSL_CERT_FILE", str(running.ca))  # the test CA, for curl
        yield running


def _lines(path: Path) -> dict[str, dict[str, Any]]:
    found = (json.loads(line) for line in path.read_text().splitlines())
    return {r["url"].rsplit("/", 1)[1]: r for r in found}


def test_a_worker_with_fetcher_impersonate_fetches_a_browser_only_site(
    capsys: Any,
    redis_url: str,
    site: FingerprintSite,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the http job dies at its first refusal (a fixed concurrency: no overload excuse)
    monkeypatch.setenv("SCRAPEQ_MAX_ATTEMPTS", "1")
    monkeypatch.setenv("SCRAPEQ_DOMAIN_CONCURRENCY", "4")
    base = ["--redis", redis_url]
    enqueue = [*base, "enqueue", "--allow-private"]
    assert run(capsys, *enqueue, site.url("/one"), site.url("/two"))[0] == 0
    code, _, err = run(capsys, *enqueue, site.url("/plain"), "--fetcher", "http")
    assert code == 0, err
    results = tmp_path / "r.jsonl"
    code, _, err = run(capsys, *base, "worker", "--burst", "--allow-private", "--fetcher",
                       "impersonate", "--results", str(results))  # fmt: skip
    assert code == 0, err
    lines = _lines(results)
    assert {k: (r["outcome"], r.get("status")) for k, r in lines.items() if k != "plain"} == {
        "one": ("done", 200),
        "two": ("done", 200),
    }
    assert lines["plain"]["outcome"] != "done"  # its own fetcher: http, refused by the site
    assert sorted(site.served) == ["GET /one HTTP/1.1", "GET /two HTTP/1.1"]


def test_domain_set_fetcher_says_it_and_bad_names_are_one_line(capsys: Any, redis_url: str) -> None:
    base = ["--redis", redis_url]
    code, out, _ = run(capsys, *base, "domain", "set", "shop.example.com", "--fetcher",
                       "impersonate")  # fmt: skip
    assert code == 0 and out.strip().endswith(", fetcher impersonate")
    q = Queue.from_url(redis_url)
    q.enqueue("https://shop.example.com/p")
    (job,) = q.claim(1).jobs
    assert job.domain_fetcher == "impersonate"
    code, out, _ = run(capsys, *base, "domains", "--json")
    assert code == 0 and [d.get("fetcher") for d in json.loads(out)] == ["impersonate"]
    code, out, _ = run(capsys, *base, "domain", "set", "shop.example.com", "--fetcher", "default")
    assert code == 0 and "fetcher" not in out
    code, out, _ = run(capsys, *base, "domains", "--json")
    assert [d.get("fetcher") for d in json.loads(out)] == [None]
    for argv in (["domain", "set", "shop.example.com", "--fetcher", "chrome"],
                 ["enqueue", "https://shop.example.com/q", "--fetcher", "chrome"],
                 ["worker", "--burst", "--fetcher", "lynx"]):  # fmt: skip
        code, _, err = run(capsys, *base, *argv)
        assert code == 2 and "--fetcher takes" in err and len(err.strip().splitlines()) == 1
    assert q.status()["counts"]["ready"] == 0
    q.close()


_WITHOUT_CURL_CFFI = (
    "import sys; sys.modules['curl_cffi'] = None\n"  # import curl_cffi: ImportError
    "from scrapeq.interfaces.cli import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)


@pytest.mark.parametrize("command", [["worker", "--burst"], ["crawl", "https://example.com/"]])
def test_without_curl_cffi_fetcher_impersonate_is_one_line_naming_the_extra(
    command: list[str], redis_url: str
) -> None:
    argv = [sys.executable, "-c", _WITHOUT_CURL_CFFI, "--redis", redis_url, *command,
            "--fetcher", "impersonate"]  # fmt: skip
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == (
        "scrapeq: error: setting 'fetcher': impersonate needs curl_cffi: "
        "pip install 'scrapeq[impersonate]'\n"
    )
    assert Queue.from_url(redis_url).status()["counts"]["ready"] == 0  # nothing seeded
