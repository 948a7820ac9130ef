"""``--fetcher auto`` of ``enqueue``, ``worker`` and ``domain set`` (issue 42): the CLI takes
it where it takes a fetcher, and a worker run with it gets the fingerprint-checking site
served after one refused ``http`` fetch."""

from __future__ import annotations

import json
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


def test_worker_fetcher_auto_serves_a_browser_only_site(
    capsys: Any,
    redis_url: str,
    site: FingerprintSite,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SCRAPEQ_DOMAIN_CONCURRENCY", "1")
    base = ["--redis", redis_url]
    urls = [site.url(f"/{n}") for n in ("one", "two", "three")]
    assert run(capsys, *base, "enqueue", "--allow-private", *urls)[0] == 0
    results = tmp_path / "r.jsonl"
    code, _, err = run(capsys, *base, "worker", "--burst", "--allow-private", "--fetcher", "auto",
                       "--results", str(results))  # fmt: skip
    assert code == 0, err
    lines = [json.loads(line) for line in results.read_text().splitlines()]
    assert sorted((r["url"].rsplit("/", 1)[1], r["outcome"]) for r in lines) == [
        ("one", "done"), ("three", "done"), ("two", "done")
    ]  # fmt: skip
    assert site.refused == 1
    code, out, err = run(capsys, *base, "domains", "--json")
    assert code == 0, err
    assert [d.get("auto_fetcher") for d in json.loads(out)] == ["impersonate"]


def test_enqueue_and_domain_set_take_auto(capsys: Any, redis_url: str) -> None:
    base = ["--redis", redis_url]
    code, out, _ = run(capsys, *base, "domain", "set", "shop.example.com", "--fetcher", "auto")
    assert code == 0 and out.strip().endswith(", fetcher auto")
    code, _, err = run(capsys, *base, "enqueue", "https://own.example.com/p", "--fetcher", "auto")
    assert code == 0, err
    q = Queue.from_url(redis_url)
    q.enqueue("https://shop.example.com/p")
    jobs = {j.domain: j for j in q.claim(2).jobs}
    assert jobs["shop.example.com"].auto_fetcher == "http"
    assert jobs["own.example.com"].fetcher == "auto" and jobs["own.example.com"].auto_fetcher
    code, _, err = run(capsys, *base, "enqueue", "https://own.example.com/q", "--fetcher", "autom")
    assert code == 2 and err.strip() == (
        "scrapeq: error: --fetcher takes http or impersonate or browser or auto, got 'autom'"
    ), err
    q.close()
