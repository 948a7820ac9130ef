"""Fetcher ``auto`` (issue 42): the claim hands each auto job the fetcher its domain's level
says (lua/includes/auto.lua), the worker reports what its fetch showed, the settle moves the
domain for the whole fleet. Real parts: the HTTPS site that reads the raw ClientHello
(support.tls_site), curl_cffi, tinyproxy exits in tiers."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import ssl
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import pytest

from scrapeq import AsyncQueue, ConfigError
from scrapeq.engine.config.settings import Settings
from scrapeq.interfaces import views
from scrapeq.interfaces.web.metrics import render_metrics
from scrapeq.runtime.auto_fetch import fingerprint_refused
from scrapeq.runtime.sinks import CallableSink
from scrapeq.runtime.worker import Worker
from support.cli_helpers import run, scrub_env
from support.proxy_proc import TinyproxySet
from support.tls_site import FingerprintSite, fingerprint_site


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FingerprintSite]:
    pytest.importorskip("curl_cffi")
    with fingerprint_site(tmp_path) as running:
        monkeypatch.setenv("SSL_CERT_FILE", str(running.ca))  # the test CA, for curl
        yield running


async def _burst(q: AsyncQueue) -> dict[str, dict[str, Any]]:
    """Run a worker until every job is done or dead: each job's URL path -> its record."""
    records: list[dict[str, Any]] = []
    await asyncio.wait_for(Worker(q, burst=True, sink=CallableSink(records.append)).run_async(), 60)
    return {urlsplit(r["url"]).path: r for r in records}


async def _level(q: AsyncQueue, domain: str) -> Any:
    return await q.client.hget(q.keys.domain(domain), "afl")


async def test_auto_is_a_fetcher_name_everywhere_and_a_bad_name_is_refused_as_before(
    make_async_queue: Callable[..., AsyncQueue],
) -> None:
    assert Settings(fetcher="auto").fetcher == "auto"
    with pytest.raises(ConfigError) as bad:
        Settings(fetcher="chrome")
    assert str(bad.value) == (
        "setting 'fetcher': expected http or impersonate or browser or auto, got 'chrome'"
    )
    q = make_async_queue()
    with pytest.raises(ConfigError):
        await q.enqueue("https://a.example/x", fetcher="curl")
    await q.enqueue("https://a.example/own", fetcher="auto")
    await q.enqueue("https://b.example/by-domain")
    await q.enqueue("https://c.example/plain")
    await q.domain_set("b.example", fetcher="auto")
    got = {j.domain: j for j in (await q.claim(10)).jobs}
    for d in ("a.example", "b.example"):  # a domain starts at http
        assert (got[d].auto_fetcher, got[d].auto_level) == ("http", "http"), got[d]
    assert got["c.example"].auto_fetcher is None  # not auto: no auto code, no field


async def test_the_setting_makes_a_jobs_fetcher_auto_and_its_own_still_wins(
    make_async_queue: Callable[..., AsyncQueue],
) -> None:
    q = make_async_queue(fetcher="auto")
    await q.enqueue("https://a.example/x")
    await q.enqueue("https://b.example/x", fetcher="impersonate")
    got = {j.domain: j for j in (await q.claim(10)).jobs}
    assert got["a.example"].auto_fetcher == "http"
    assert got["b.example"].auto_fetcher is None


async def test_a_share_of_an_auto_domains_pages_rechecks_the_cheaper_fetcher(
    make_async_queue: Callable[..., AsyncQueue],
) -> None:
    q = make_async_queue(fetcher="auto", auto_recheck=0.25, domain_concurrency=100)
    await q.client.hset(q.keys.domain("a.example"), "afl", "browser")
    await q.enqueue_many([f"https://a.example/{i}" for i in range(12)])
    jobs = (await q.claim(12)).jobs
    used = [j.auto_fetcher for j in jobs]
    assert used.count("impersonate") == 3 and used.count("browser") == 9, used
    assert {j.auto_level for j in jobs} == {"browser"}


async def test_a_fingerprint_block_moves_the_domain_to_impersonate_and_every_page_is_served(
    site: FingerprintSite, make_async_queue: Callable[..., AsyncQueue]
) -> None:
    fixed = {"request_timeout": 5.0, "domain_concurrency": 1, "max_attempts": 2}
    http = make_async_queue(allow_private=True, **fixed)
    await http.enqueue(site.url("/plain"))
    assert (await _burst(http))["/plain"]["outcome"] == "dead"  # http is refused
    assert site.refused == 2 and site.served == []  # each attempt refused
    q = make_async_queue(allow_private=True, fetcher="auto", **fixed)
    await q.enqueue_many([site.url(f"/p{i}") for i in range(4)])
    records = await _burst(q)
    assert {p: r["outcome"] for p, r in records.items()} == {f"/p{i}": "done" for i in range(4)}
    assert site.refused == 3, "http refused once more: then the whole fleet impersonates"
    assert sorted(site.served) == sorted(f"GET /p{i} HTTP/1.1" for i in range(4))
    assert await _level(q, site.domain) == "impersonate"
    info = {d["domain"]: d for d in await q.domains_info()}[site.domain]
    assert info.get("state", "closed") == "closed" and not info.get("errors")
    for r in records.values():  # the refusal spent no attempt: the page was given back
        assert r.get("attempts", 1) == 1, r


async def test_through_a_tier_of_exits_the_block_moves_before_the_tier_climbs(
    site: FingerprintSite,
    tinyproxies: TinyproxySet,
    make_async_queue: Callable[..., AsyncQueue],
) -> None:
    dc = [tinyproxies(f"127.0.0.{n}") for n in (2, 3)]
    res = tinyproxies("127.0.0.6")
    pool = (*(f"{p.url} tier=datacenter" for p in dc), f"{res.url} tier=residential")
    q = make_async_queue(
        proxy=pool, allow_private=True, fetcher="auto", request_timeout=5.0,
        domain_concurrency=1, backoff_base=0.05, backoff_cap=0.2,
    )  # fmt: skip
    await q.enqueue_many([site.url(f"/p{i}") for i in range(6)])
    records = await _burst(q)
    assert {p: r["outcome"] for p, r in records.items()} == {f"/p{i}": "done" for i in range(6)}
    assert await _level(q, site.domain) == "impersonate"
    info = {d["domain"]: d for d in await q.domains_info()}[site.domain]
    assert info["tier"] == 0, info
    exits = {e["name"]: e for e in await q.exits_info()}
    assert exits[res.url]["requests"] == 0, "no request through the dearer tier"
    assert sum(exits[p.url]["requests"] for p in dc) >= 6
    assert site.refused <= 2, "each datacenter exit refused once at most"


async def test_the_decision_shows_in_domains_the_dashboard_and_metrics(
    make_async_queue: Callable[..., AsyncQueue],
    redis_url: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    q = make_async_queue()
    await q.enqueue_many(
        ["https://a.example/x", "https://b.example/p/1", "https://c.example/", "https://d.example/"]
    )
    await q.domain_set("a.example", fetcher="auto")  # auto, nothing decided yet: http
    # what the settle script writes (tests above): a block's level, a render's pattern
    await q.client.hset(q.keys.domain("b.example"), mapping={"afl": "impersonate",
                                                              "ap:/p/": "browser"})  # fmt: skip
    # a crawl run with --fetcher auto moved one pattern of d.example; this queue's setting is
    # http and the domain has no level of its own: the pattern's level still shows
    await q.client.hset(q.keys.domain("d.example"), "ap:/b.html", "browser")
    infos = {d["domain"]: d for d in await q.domains_info()}
    assert infos["d.example"]["auto_patterns"] == {"/b.html": "browser"}
    assert infos["d.example"]["auto_fetcher"] == "http"
    assert (infos["a.example"]["auto_fetcher"], infos["a.example"]["auto_patterns"]) == ("http", {})
    assert infos["b.example"]["auto_patterns"] == {"/p/": "browser"}
    assert "auto_fetcher" not in infos["c.example"]  # not auto: nothing shown
    assert views.domain_row(infos["b.example"], 0)["fetcher"] == "auto: impersonate; /p/ browser"
    scrub_env(monkeypatch, tmp_path, columns=200)
    code, out, err = run(capsys, "--redis", redis_url, "domains", "--json")
    assert code == 0, err
    rows = {r["domain"]: r for r in json.loads(out)}
    assert rows["b.example"]["auto_fetcher"] == "impersonate"
    assert rows["b.example"]["auto_patterns"] == {"/p/": "browser"}
    code, out, err = run(capsys, "--redis", redis_url, "domains")
    assert code == 0 and "auto: impersonate; /p/ browser" in out, out
    text = render_metrics(await q.status(), top=10).decode()
    for series in ('domain="b.example",fetcher="impersonate",pattern="*"',
                   'domain="b.example",fetcher="browser",pattern="/p/"',
                   'domain="a.example",fetcher="http",pattern="*"'):  # fmt: skip
        assert f"scrapeq_domain_auto_fetcher{{{series}," in text, text
    assert 'scrapeq_domain_auto_fetcher{domain="c.example"' not in text


def test_only_a_handshake_refused_over_https_is_a_fingerprint_block() -> None:
    wrapped = aiohttp.ClientConnectorError(
        aiohttp.client_reqrep.ConnectionKey("h", 443, True, True, None, None, None),
        ConnectionResetError(104, "Connection reset by peer"),
    )
    assert fingerprint_refused("https://h/", wrapped)
    assert fingerprint_refused("https://h/", ssl.SSLError(1, "tlsv1 alert handshake failure"))
    assert not fingerprint_refused("http://h/", wrapped), "no TLS: a reset is no fingerprint"
    assert not fingerprint_refused("https://h/", ConnectionRefusedError(111, "refused"))
    assert not fingerprint_refused("https://h/", TimeoutError())
    assert not fingerprint_refused("https://h/", ssl.SSLCertVerificationError(1, "bad cert"))


async def test_a_block_settled_below_the_domains_level_gives_the_page_back(
    make_async_queue: Callable[..., AsyncQueue],
) -> None:
    q = make_async_queue(fetcher="auto", max_attempts=1)
    await q.enqueue_many(["https://a.example/1", "https://a.example/2"])
    first, second = (await q.claim(2)).jobs
    assert first.auto_fetcher == second.auto_fetcher == "http"
    # the first moves the domain; the second, claimed before the move, is given back too
    refused = [
        dataclasses.replace(
            q.retrying(j, kind="http_403", message="403", domain_failed=True), auto_evidence="block"
        )
        for j in (first, second)
    ]
    assert [str(a) for a in await q.settle_many(refused)] == ["released", "released"]
    assert await _level(q, "a.example") == "impersonate"
    again = (await q.claim(2)).jobs
    assert [j.auto_fetcher for j in again] == ["impersonate", "impersonate"]
    assert [j.attempts for j in again] == [1, 1] and [j.releases for j in again] == [0, 0]
    info = {d["domain"]: d for d in await q.domains_info()}["a.example"]
    assert info["consecutive_failures"] == 0, "a fingerprint block is not charged"
    # a block of impersonate itself is an ordinary failure: no move, the attempt spent
    late = q.retrying(again[0], kind="http_403", message="403", domain_failed=True)
    (answer,) = await q.settle_many([dataclasses.replace(late, auto_evidence="block")])
    assert str(answer).startswith("dead") and await _level(q, "a.example") == "impersonate"


async def test_the_settle_refuses_any_other_evidence_before_writing(
    make_async_queue: Callable[..., AsyncQueue],
) -> None:
    q = make_async_queue(fetcher="auto")
    await q.enqueue("https://a.example/1")
    (job,) = (await q.claim(1)).jobs
    timeout = q.retrying(job, kind="timeout", message="late", domain_failed=True)
    with pytest.raises(Exception, match="auto") as refused:
        await q.settle_many([dataclasses.replace(timeout, auto_evidence="timeout")])
    assert "expected one of block, render, same" in str(refused.value)
    assert await _level(q, "a.example") is None
