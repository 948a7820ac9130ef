"""The dashboard app and /metrics over real loopback sockets and a real redis-server."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from scrapeq import AsyncQueue, Job, Settings
from scrapeq.errors import ConfigError
from scrapeq.interfaces.web import (
    CSP,
    METRICS_CONTENT_TYPE,
    STATIC,
    create_app,
    render_metrics,
    serve,
    top_domains,
)
from scrapeq.runtime.metrics import WorkerMetrics
from scrapeq.runtime.worker import Worker
from support.browser import CHROMIUM, need_browser
from support.sites import ok, sites, status

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]

SHOP = "shop-{}.example.com"
PORTED = "shop-5.example.com:8443"


# --- a tiny parser of the Prometheus text format ------------------------------------------------

_SAMPLE = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"(?:,|$)')


def _unescape(value: str) -> str:
    return re.sub(r"\\(.)", lambda m: "\n" if m[1] == "n" else m[1], value)


def parse_labels(text: str) -> dict[str, str]:
    labels: dict[str, str] = {}
    pos = 0
    while pos < len(text):
        match = _LABEL.match(text, pos)
        assert match, f"bad labels at {text[pos:]!r}"
        labels[match[1]] = _unescape(match[2])
        pos = match.end()
    return labels


def parse_metrics(text: str) -> tuple[dict[str, str], Samples]:
    """Check every line of an exposition; answers (types by name, samples)."""
    assert text.endswith("\n")
    helps: dict[str, str] = {}
    types: dict[str, str] = {}
    samples: Samples = {}
    for line in text[:-1].split("\n"):
        if line.startswith("# HELP "):
            name, _, helps[name] = line[7:].partition(" ")
            assert helps[name], f"empty help for {name}"
        elif line.startswith("# TYPE "):
            name, kind = line[7:].split(" ")
            assert kind in ("counter", "gauge", "histogram"), line
            assert name in helps, f"TYPE before HELP for {name}"
            types[name] = kind
        else:
            match = _SAMPLE.fullmatch(line)
            assert match, f"not a sample line: {line!r}"
            family = re.sub(r"_(total|created|bucket|count|sum)$", "", match[1])
            assert match[1] in types or family in types, f"{match[1]} has no HELP/TYPE"
            assert match[1].startswith("scrapeq_"), line
            key = (match[1], frozenset(parse_labels(match[2] or "").items()))
            assert key not in samples, f"duplicate series {line!r}"
            samples[key] = float(match[3])
    return types, samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


# --- fixtures -----------------------------------------------------------------------------------


async def _claim_one(q: AsyncQueue) -> Job:
    for _ in range(5):
        jobs = (await q.claim(1)).jobs
        if jobs:
            return jobs[0]
    raise AssertionError("nothing to claim")


async def _retire(q: AsyncQueue, domain: str) -> None:
    """Two trips in a row (breaker_failures=1, breaker_max_trips=2) retire the domain."""
    await q.enqueue(f"https://{domain}/p/1")
    for _ in range(2):
        job = await _claim_one(q)
        assert job.domain == domain
        await q.retry(job, kind="timeout", delay=0, domain_failed=True)
        q.testing_clock_offset_ms += 7_200_000  # past any cooldown: the next claim probes


@pytest.fixture
async def queue(redis_url: str) -> AsyncIterator[AsyncQueue]:
    """shop-4 retired, shop-3 with a 404 dead letter, shop-2 tripped, shop-1 and shop-5 ok."""
    settings = Settings(allow_private=False, breaker_failures=1, breaker_max_trips=2)
    q = AsyncQueue.from_url(redis_url, settings=settings)
    await _retire(q, SHOP.format(4))
    await q.enqueue(f"https://{SHOP.format(3)}/p/1", lane="critical")
    job = await _claim_one(q)
    assert await q.fail(job, "http_404", "Not Found") == "dead"
    urls = [f"https://{SHOP.format(i)}/p/{n}" for i, n in ((1, 1), (1, 2), (1, 3), (2, 1), (2, 2))]
    await q.enqueue_many(urls)
    await q.enqueue(f"https://{SHOP.format(3)}/p/2", lane="bulk")
    await q.enqueue(f"https://{PORTED}/p/1")
    assert await q.breaker_trip(SHOP.format(2)) == "open"
    yield q
    await q.close()


Client = TestClient[web.Request, web.Application]


async def csrf(client: Client) -> str:
    token = (await get_json(client, "/api/session"))["csrf"]
    assert isinstance(token, str) and len(token) >= 32
    return token


async def post(client: Client, path: str, **kwargs: Any) -> aiohttp.ClientResponse:
    """A POST as the page sends it: with the session's CSRF token."""
    headers = {"X-CSRF-Token": await csrf(client), **kwargs.pop("headers", {})}
    return await client.post(path, headers=headers, **kwargs)


async def get_json(client: Client, path: str, status: int = 200) -> Any:
    resp = await client.get(path)
    assert resp.status == status, await resp.text()
    assert resp.content_type == "application/json"
    return await resp.json()


def without_ages(status: dict[str, Any]) -> dict[str, Any]:
    """The status document without the lane ages, which grow between two reads."""
    lanes = {
        n: {k: v for k, v in lane.items() if k != "oldest_ready_age"}
        for n, lane in status["lanes"].items()
    }
    return {**status, "lanes": lanes}


def states(status: dict[str, Any]) -> dict[str, str]:
    return {d["domain"]: d["state"] for d in status["domains"]}


# --- JSON endpoints -----------------------------------------------------------------------------


async def test_api_status_is_the_status_document(client: Client, queue: AsyncQueue) -> None:
    doc = await get_json(client, "/api/status")
    assert set(doc) == {
        "queue", "counts", "lanes", "domains", "breakers", "paused_until", "alarms", "owed_lines",
    }  # fmt: skip
    assert without_ages(doc) == without_ages(await queue.status())
    assert doc["counts"]["enqueued"] == 9
    assert doc["counts"]["dead"] == 2
    assert set(doc["lanes"]) == {"critical", "normal", "bulk"}
    assert states(doc) == {
        SHOP.format(1): "closed",
        SHOP.format(2): "open",
        SHOP.format(3): "closed",
        SHOP.format(4): "retired",
        PORTED: "closed",
    }
    assert [(a["kind"], a["domain"]) for a in doc["alarms"]] == [("domain_retired", SHOP.format(4))]


async def test_api_domains_has_the_full_figures(client: Client) -> None:
    doc = await get_json(client, "/api/domains")
    assert isinstance(doc, list)
    by_name = {d["domain"]: d for d in doc}
    assert set(by_name) == {SHOP.format(i) for i in range(1, 5)} | {PORTED}
    assert by_name[SHOP.format(1)]["ready"] == 3
    assert by_name[SHOP.format(2)]["trips"] == 1
    assert {"concurrency", "delay_ms", "open_until", "consecutive_failures"} <= set(doc[0])


async def test_api_events_newest_first_with_a_count(client: Client) -> None:
    events = await get_json(client, "/api/events")
    assert events
    assert all(set(e) == {"id", "kind", "domain", "message", "at"} for e in events)
    assert events[0]["domain"] == SHOP.format(2)  # the hand trip came last
    assert len(await get_json(client, "/api/events?count=1")) == 1


async def test_api_dead_lists_dead_letters(client: Client) -> None:
    dead = await get_json(client, "/api/dead")
    assert {d["domain"] for d in dead} == {SHOP.format(3), SHOP.format(4)}
    (d3,) = await get_json(client, f"/api/dead?domain={SHOP.format(3)}&limit=5")
    assert d3["dead_reason"] == "http_404"
    assert d3["last_error"]["message"] == "Not Found"
    assert {"id", "url", "lane", "attempts", "died_at", "errors"} <= set(d3)
    assert len(await get_json(client, "/api/dead?limit=1")) == 1
    assert await get_json(client, "/api/dead?domain=nowhere.example.com") == []


async def test_api_history_has_the_fixtures_outcomes(client: Client) -> None:
    doc = await get_json(client, "/api/history?minutes=1440")  # the fixture moved 4 h on
    assert doc["minutes"] == 1440 and doc["step"] == 60
    assert sum(doc["outcomes"]["retried"]) == 2  # shop-4's two failed attempts
    assert sum(doc["outcomes"]["dead"]) == 2  # shop-3's 404, shop-4's job when retired
    assert sum(doc["events"]["retired"]) == 1
    assert sum(doc["events"]["trip"]) == 2  # shop-4's first trip, shop-2's by hand
    assert len((await get_json(client, "/api/history"))["outcomes"]["done"]) == 60


@pytest.mark.parametrize(
    "path",
    [
        "/api/events?count=0",
        "/api/events?count=x",
        "/api/dead?limit=1001",
        "/api/history?minutes=0",
        "/api/history?minutes=1441",
        "/api/history?minutes=soon",
    ],
)
async def test_bad_parameters_are_400_json(client: Client, path: str) -> None:
    doc = await get_json(client, path, status=400)
    assert "error" in doc


async def test_redis_down_is_503_json(unused_tcp_port: int) -> None:
    q = AsyncQueue.from_url(f"redis://127.0.0.1:{unused_tcp_port}/0")
    try:
        async with TestClient(TestServer(create_app(q))) as c:
            doc = await get_json(c, "/api/status", status=503)
            assert "Redis" in doc["error"]
    finally:
        await q.close()


# --- admin actions ------------------------------------------------------------------------------


async def test_reset_closes_and_trip_opens(client: Client, queue: AsyncQueue) -> None:
    resp = await post(client, f"/api/breaker/{SHOP.format(2)}/reset")
    assert resp.status == 200
    assert await resp.json() == {"domain": SHOP.format(2), "state": "closed"}
    resp = await post(client, f"/api/breaker/{SHOP.format(1)}/trip?cooldown=60")
    assert await resp.json() == {"domain": SHOP.format(1), "state": "open"}
    doc = await queue.status()
    assert states(doc)[SHOP.format(2)] == "closed"
    assert states(doc)[SHOP.format(1)] == "open"
    assert next(d for d in doc["domains"] if d["domain"] == SHOP.format(1))["open_until"]


async def test_reset_un_retires_and_clears_the_alarm(client: Client, queue: AsyncQueue) -> None:
    resp = await post(client, f"/api/breaker/{SHOP.format(4)}/reset")
    assert resp.status == 200
    doc = await queue.status()
    assert states(doc)[SHOP.format(4)] == "closed"
    assert doc["alarms"] == []


async def test_a_domain_with_a_port_is_routed_url_encoded(
    client: Client, queue: AsyncQueue
) -> None:
    resp = await post(client, "/api/breaker/shop-5.example.com%3A8443/trip")
    assert (await resp.json())["domain"] == PORTED
    assert states(await queue.status())[PORTED] == "open"


@pytest.mark.parametrize("action", ["reset", "trip"])
async def test_unknown_domain_is_404_json(client: Client, action: str) -> None:
    resp = await post(client, f"/api/breaker/nowhere.example.com/{action}")
    assert resp.status == 404
    assert resp.content_type == "application/json"
    assert "nowhere.example.com" in (await resp.json())["error"]


async def test_bad_cooldown_is_400(client: Client) -> None:
    resp = await post(client, f"/api/breaker/{SHOP.format(1)}/trip?cooldown=soon")
    assert resp.status == 400


async def test_cross_site_post_is_refused(client: Client, queue: AsyncQueue) -> None:
    path = f"/api/breaker/{SHOP.format(2)}/reset"
    resp = await post(client, path, headers={"Origin": "http://evil.example"})
    assert resp.status == 403
    assert states(await queue.status())[SHOP.format(2)] == "open"
    own = f"http://{client.host}:{client.port}"
    resp = await post(client, path, headers={"Origin": own})
    assert resp.status == 200


async def test_admin_actions_need_post(client: Client) -> None:
    assert (await client.get(f"/api/breaker/{SHOP.format(2)}/reset")).status == 405
    assert (await post(client, f"/api/breaker/{SHOP.format(2)}/explode")).status == 404


# --- /metrics -----------------------------------------------------------------------------------


async def scrape(client: Client) -> tuple[dict[str, str], Samples]:
    resp = await client.get("/metrics")
    assert resp.status == 200
    assert resp.headers["Content-Type"] == METRICS_CONTENT_TYPE
    return parse_metrics(await resp.text())


async def test_metrics_parse_and_match_the_status(client: Client, queue: AsyncQueue) -> None:
    types, samples = await scrape(client)
    assert all(dict(labels).get("queue") == "default" for _, labels in samples), "queue label"
    doc = await queue.status()
    for state in ("ready", "delayed", "inflight", "dead"):
        assert value(samples, "scrapeq_jobs", queue="default", state=state) == doc["counts"][state]
    assert value(samples, "scrapeq_jobs_enqueued_total", queue="default") == 9
    assert value(samples, "scrapeq_jobs_done_total", queue="default") == 0
    assert types["scrapeq_jobs_enqueued_total"] == types["scrapeq_jobs_settled_total"] == "counter"
    for lane, info in doc["lanes"].items():
        for state in ("ready", "delayed"):
            got = value(samples, "scrapeq_lane_jobs", queue="default", lane=lane, state=state)
            assert got == info[state]
        age = value(samples, "scrapeq_lane_oldest_ready_age_seconds", queue="default", lane=lane)
        assert 0 <= age <= info["oldest_ready_age"]  # scraped just before
    assert value(samples, "scrapeq_paused", queue="default") == 0
    assert value(samples, "scrapeq_alarms", queue="default", kind="domain_retired") == 1
    assert value(samples, "scrapeq_alarms", queue="default", kind="global_pause") == 0
    domains = {"closed": 3, "open": 1, "half_open": 0, "retired": 1}
    for state, n in domains.items():
        assert value(samples, "scrapeq_domains", queue="default", state=state) == n


async def test_metrics_counters_after_a_known_sequence(client: Client) -> None:
    """The fixture: shop-4 tripped twice and retired (its job dead), shop-3 one 404 dead
    letter, shop-2 tripped by hand; two retries (shop-4's failed attempts)."""
    _, samples = await scrape(client)
    q = {"queue": "default"}
    assert value(samples, "scrapeq_breaker_trips_total", **q) == 2
    assert value(samples, "scrapeq_domain_retirements_total", **q) == 1
    assert value(samples, "scrapeq_global_pauses_total", **q) == 0
    settled = {"done": 0, "retried": 2, "throttled": 0, "released": 0, "dead": 2}
    for outcome, n in settled.items():
        got = value(samples, "scrapeq_jobs_settled_total", outcome=outcome, **q)
        assert got == n, outcome


async def test_metrics_per_domain(client: Client) -> None:
    _, samples = await scrape(client)
    expected = {SHOP.format(2): "open", SHOP.format(4): "retired", SHOP.format(1): "closed"}
    for domain, current in expected.items():
        for state in ("closed", "half_open", "open", "retired"):
            got = value(
                samples, "scrapeq_domain_breaker_state", queue="default", domain=domain, state=state
            )
            assert got == (1 if state == current else 0), (domain, state)
    dead = value(
        samples, "scrapeq_domain_jobs", queue="default", domain=SHOP.format(3), state="dead"
    )
    assert dead == 1
    ready = value(
        samples, "scrapeq_domain_jobs", queue="default", domain=SHOP.format(1), state="ready"
    )
    assert ready == 3
    fails = value(samples, "scrapeq_domain_consecutive_failures", queue="default", domain=PORTED)
    assert fails == 0


async def test_metrics_follow_admin_actions(client: Client) -> None:
    await post(client, f"/api/breaker/{SHOP.format(2)}/reset")
    _, samples = await scrape(client)
    got = value(
        samples, "scrapeq_domain_breaker_state", queue="default", domain=SHOP.format(2),
        state="closed",
    )  # fmt: skip
    assert got == 1
    assert value(samples, "scrapeq_domains", queue="default", state="open") == 0


async def test_metrics_show_each_domains_politeness(redis_url: str) -> None:
    """Issue 14: the learned limit, interval and latencies of an adaptive domain, and the
    fixed limit of one that is not."""
    q = AsyncQueue.from_url(redis_url, settings=Settings(queue="polite"))
    try:
        await q.enqueue_many([f"https://fast.example.com/p/{i}" for i in range(40)])
        await q.enqueue("https://fixed.example.com/")
        await q.domain_set("fixed.example.com", concurrency=5)
        for _ in range(4):  # answered in 200 ms each: the limit rises from 2
            jobs = [j for j in (await q.claim(50)).jobs if j.domain == "fast.example.com"]
            await q.settle_many([dataclasses.replace(q.done(j), latency_ms=200) for j in jobs])
        (fast,) = await q.domains_info(["fast.example.com"])
        async with TestClient(TestServer(create_app(q))) as c:
            types, samples = await scrape(c)
    finally:
        await q.close()
    at = {"queue": "polite", "domain": "fast.example.com"}
    assert fast["adaptive"] and fast["limit"] > 2
    assert value(samples, "scrapeq_domain_concurrency_limit", **at) == pytest.approx(fast["limit"])
    fixed = {"queue": "polite", "domain": "fixed.example.com"}
    assert value(samples, "scrapeq_domain_concurrency_limit", **fixed) == 5
    assert value(samples, "scrapeq_domain_latency_seconds", kind="baseline", **at) == 0.2
    assert value(samples, "scrapeq_domain_latency_seconds", kind="current", **at) == 0.2
    assert value(samples, "scrapeq_domain_request_interval_seconds", **at) == 0
    assert not any(
        name == "scrapeq_domain_latency_seconds" and dict(labels)["domain"] == "fixed.example.com"
        for name, labels in samples
    ), "a fixed domain has no learned latency"
    assert types["scrapeq_domain_concurrency_limit"] == "gauge"


def test_top_domains_puts_the_worst_first() -> None:
    def d(name: str, state: str = "closed", dead: int = 0, inflight: int = 0) -> dict[str, Any]:
        return {"domain": name, "state": state, "dead": dead, "inflight": inflight, "ready": 0}

    domains = [d("a"), d("b", dead=5), d("c", "open"), d("d", "retired"), d("e", inflight=9)]
    assert [x["domain"] for x in top_domains(domains, 4)] == ["d", "c", "b", "e"]
    assert top_domains(domains, 0) == []


async def test_metrics_cardinality_stays_bounded_at_10000_domains(redis_url: str) -> None:
    settings = Settings(metrics_top_domains=7)
    q = AsyncQueue.from_url(redis_url, settings=settings)
    try:
        urls = [f"https://site-{i}.example.com/" for i in range(10_000)]
        for start in range(0, len(urls), 1000):
            await q.enqueue_many(urls[start : start + 1000])
        async with TestClient(TestServer(create_app(q))) as c:
            _, samples = await scrape(c)
    finally:
        await q.close()
    per_domain = [key for key in samples if any(k == "domain" for k, _ in key[1])]
    assert {dict(labels)["domain"] for _, labels in per_domain} <= {
        f"site-{i}.example.com" for i in range(10_000)
    }
    assert len({dict(labels)["domain"] for _, labels in per_domain}) == 7
    # breaker states, jobs by state, failures, limit, interval (no latency learned yet)
    assert len(per_domain) == 7 * (4 + 4 + 1 + 1 + 1)
    assert len(samples) < 200, "no series grows with the number of domains"
    assert value(samples, "scrapeq_domains", queue="default", state="closed") == 10_000


def test_render_metrics_of_an_empty_queue_is_well_formed() -> None:
    empty = {
        "queue": "q",
        "counts": dict.fromkeys(("enqueued", "ready", "delayed", "inflight", "done", "dead"), 0),
        "lanes": {},
        "domains": [],
        "paused_until": "2030-01-01T00:00:00+00:00",
        "alarms": [],
    }
    types, samples = parse_metrics(render_metrics(empty).decode())
    assert value(samples, "scrapeq_paused", queue="q") == 1
    assert value(samples, "scrapeq_breaker_trips_total", queue="q") == 0
    assert "scrapeq_domain_breaker_state" in types


async def test_worker_metrics_after_a_known_sequence(redis_url: str) -> None:
    """A worker's own /metrics: 3 done in normal, 1 dead (404) in bulk, 1 retried (503)."""
    settings = Settings(allow_private=True, max_attempts=2, backoff_base=0.05, backoff_cap=0.1)
    q = AsyncQueue.from_url(redis_url, settings=settings)
    metrics = WorkerMetrics("default")
    port = metrics.serve(0)
    try:
        async with sites(ok, status(404), status(503)) as (good, gone, down):
            await q.enqueue_many([good.url(f"/p/{i}") for i in range(3)])
            await q.enqueue(gone.url("/x"), lane="bulk")
            await q.enqueue(down.url("/y"), lane="critical")
            worker = Worker(q, concurrency=4, burst=True, metrics=metrics)
            await asyncio.wait_for(worker.run_async(), 60)
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://127.0.0.1:{port}/metrics") as resp,
        ):
            text = await resp.text()
    finally:
        metrics.close()
        await q.close()
    types, samples = parse_metrics(text)
    assert all(dict(labels).get("queue") == "default" for _, labels in samples)
    name = "scrapeq_worker_settled_total"
    assert value(samples, name, queue="default", lane="normal", outcome="done") == 3
    assert value(samples, name, queue="default", lane="bulk", outcome="dead") == 1
    assert value(samples, name, queue="default", lane="critical", outcome="retried") == 1
    assert value(samples, name, queue="default", lane="critical", outcome="dead") == 1
    assert types["scrapeq_worker_fetch_duration_seconds"] == "histogram"
    fetches = value(samples, "scrapeq_worker_fetch_duration_seconds_count", queue="default",
                    lane="normal")  # fmt: skip
    assert fetches == 3
    inf = {"queue": "default", "le": "+Inf"}
    claims = value(samples, "scrapeq_worker_claim_batch_size_count", queue="default")
    assert claims >= 2
    assert value(samples, "scrapeq_worker_claim_batch_size_sum", queue="default") == 6
    assert value(samples, "scrapeq_worker_claim_duration_seconds_bucket", **inf) == claims
    # CPU-seconds: the worker process's own (http fetches run in it); no browser ran
    assert types["scrapeq_worker_process_cpu_seconds_total"] == "counter"
    assert value(samples, "scrapeq_worker_process_cpu_seconds_total", queue="default") > 0
    assert "scrapeq_worker_fetcher_cpu_seconds_total" not in {name for name, _ in samples}


# --- the page -----------------------------------------------------------------------------------


async def test_index_and_static_files_are_the_packaged_page(client: Client) -> None:
    resp = await client.get("/")
    assert resp.status == 200
    assert resp.content_type == "text/html"
    assert resp.headers["Content-Security-Policy"] == CSP
    html = await resp.text()
    assert html.startswith("<!doctype html>")
    assert re.findall(r'\b(?:src|href)="([^"#]*)"', html) == ["static/app.css", "static/app.js"]
    for name, kind in (("app.js", "text/javascript"), ("app.css", "text/css")):
        resp = await client.get(f"/static/{name}")
        assert resp.status == 200 and resp.content_type == kind
        assert await resp.read() == (STATIC / name).read_bytes()
    script = await (await client.get("/static/app.js")).text()
    assert "innerHTML" not in script and "insertAdjacentHTML" not in script
    assert "http://" not in script.replace("http://www.w3.org/2000/svg", ""), "no network"
    for bad in ("../web.py", ".hidden.js", "app.py", "nothing.js"):
        assert (await client.get(f"/static/{bad}")).status == 404, bad


async def test_api_domains_pages_filters_and_sorts_on_the_server(client: Client) -> None:
    doc = await get_json(client, "/api/domains?page=1&per_page=2&sort=domain")
    assert doc["total"] == 5 and doc["page"] == 1 and doc["per_page"] == 2
    assert [d["domain"] for d in doc["items"]] == [SHOP.format(1), SHOP.format(2)]
    doc = await get_json(client, "/api/domains?page=3&per_page=2&sort=domain")
    assert [d["domain"] for d in doc["items"]] == [PORTED]
    doc = await get_json(client, "/api/domains?page=1&sort=state")
    assert [d["state"] for d in doc["items"]][:2] == ["retired", "open"]
    doc = await get_json(client, "/api/domains?page=1&state=open")
    (row,) = doc["items"]
    assert row["domain"] == SHOP.format(2) and 0 < row["open_for"] <= 3600
    doc = await get_json(client, "/api/domains?page=1&q=SHOP-3")
    (row,) = doc["items"]
    # a 404 dead letter is a page fault, not a failure of the site: not in the breaker's window
    assert row["dead"] == 1 and row["failure_rate"] == 0.0 and row["window_calls"] == 0
    doc = await get_json(client, "/api/domains?page=1&sort=ready&order=desc")
    assert doc["items"][0]["domain"] == SHOP.format(1)
    for bad in ("page=1&sort=evil", "page=1&state=weird", "page=1&per_page=0", "page=x"):
        assert "error" in await get_json(client, f"/api/domains?{bad}", status=400)


async def test_api_domain_has_errors_and_breaker_history(client: Client) -> None:
    doc = await get_json(client, f"/api/domain/{SHOP.format(4)}")
    assert doc["domain"]["state"] == "retired"
    assert {e["kind"] for e in doc["events"]} >= {"trip", "retired"}
    assert all(e["domain"] == SHOP.format(4) for e in doc["events"])
    doc = await get_json(client, f"/api/domain/{SHOP.format(3)}")
    assert [e["kind"] for e in doc["errors"]] == ["http_404"]
    assert (await client.get("/api/domain/nowhere.example.com")).status == 404


async def test_api_dead_filters_by_reason(client: Client) -> None:
    (row,) = await get_json(client, "/api/dead?reason=http_404")
    assert row["domain"] == SHOP.format(3)
    assert await get_json(client, "/api/dead?reason=nothing_like_it") == []


async def test_session_tells_the_queue_and_the_pause(client: Client) -> None:
    doc = await get_json(client, "/api/session")
    assert doc["queue"] == "default" and doc["paused_until"] is None


async def test_the_app_mounts_under_a_prefix(queue: AsyncQueue) -> None:
    parent = web.Application()
    parent.add_subapp("/scrapeq/", create_app(queue))
    async with TestClient(TestServer(parent)) as c:
        assert (await get_json(c, "/scrapeq/api/status"))["queue"] == "default"
        assert (await c.get("/scrapeq/metrics")).status == 200


# --- serve() ------------------------------------------------------------------------------------


def test_serve_raises_when_the_port_is_taken(redis_url: str) -> None:
    made: list[AsyncQueue] = []

    def factory() -> AsyncQueue:
        made.append(AsyncQueue.from_url(redis_url))
        return made[-1]

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with pytest.raises(OSError):
            serve(factory, port=taken.getsockname()[1])
    assert len(made) == 1, "the queue is made inside the running loop"


_SERVE = """
import sys
from scrapeq import AsyncQueue
from scrapeq.interfaces.web import serve
serve(lambda: AsyncQueue.from_url(sys.argv[1]), port=0, on_ready=lambda u: print(u, flush=True))
print("stopped", flush=True)
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
async def test_serve_binds_loopback_and_stops_on_signal(
    redis_url: str, sig: signal.Signals
) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _SERVE, redis_url, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert proc.stdout is not None
    try:
        url = (await asyncio.wait_for(proc.stdout.readline(), 20)).decode().strip()
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+", url), url
        async with aiohttp.ClientSession() as session:
            async with session.get(f"{url}/api/status") as resp:
                assert resp.status == 200
                assert (await resp.json())["queue"] == "default"
            async with session.get(f"{url}/metrics") as resp:
                parse_metrics(await resp.text())
        proc.send_signal(sig)
        out, err = await asyncio.wait_for(proc.communicate(), 20)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 0, err.decode()
    assert out.decode().strip() == "stopped"


# --- safe by default ----------------------------------------------------------------------------

TOKEN = "tok-" + "x" * 28


@pytest.fixture
async def locked(queue: AsyncQueue) -> AsyncIterator[Client]:
    """A dashboard with a token."""
    async with TestClient(TestServer(create_app(queue, token=TOKEN))) as c:
        yield c


def bearer(token: str = TOKEN) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.mark.parametrize("method", ["GET", "POST"])
async def test_a_forged_host_is_refused_dns_rebinding(
    client: Client, queue: AsyncQueue, method: str
) -> None:
    """A rebinding page names its own host in both Host and Origin: both match, Host is foreign."""
    forged = {"Host": "evil.example:8000", "Origin": "http://evil.example:8000"}
    for path in ("/", "/api/status", "/api/dead", "/api/session", "/metrics"):
        resp = await client.get(path, headers=forged)
        assert resp.status == 421, path
        assert SHOP.format(3) not in await resp.text()
    csrf_token = await csrf(client)
    resp = await client.request(
        method,
        f"/api/breaker/{SHOP.format(2)}/reset",
        headers={**forged, "X-CSRF-Token": csrf_token},
    )
    assert resp.status == 421
    assert states(await queue.status())[SHOP.format(2)] == "open"
    # Loopback names, any port, are fine.
    for host in ("127.0.0.1:1", "localhost", "[::1]:8000"):
        assert (await client.get("/api/status", headers={"Host": host})).status == 200, host


async def test_extra_hosts_are_allowed_and_only_them(queue: AsyncQueue) -> None:
    app = create_app(queue, hosts=["dash.example.com"])
    async with TestClient(TestServer(app)) as c:
        ok = await c.get("/api/status", headers={"Host": "DASH.example.com:443"})
        assert ok.status == 200
        assert (await c.get("/api/status", headers={"Host": "127.0.0.1"})).status == 421


@pytest.mark.parametrize(
    "path", ["/api/status", "/api/domains", "/api/events", "/api/dead", "/metrics"]
)
async def test_with_a_token_every_endpoint_needs_it(locked: Client, path: str) -> None:
    assert (await locked.get(path)).status == 401
    assert (await locked.get(path, headers=bearer("tok-" + "y" * 28))).status == 401
    assert (await locked.get(path, headers=bearer())).status == 200


async def test_with_a_token_the_page_asks_for_it_and_login_sets_a_cookie(
    locked: Client, queue: AsyncQueue
) -> None:
    resp = await locked.get("/")
    assert resp.status == 401
    assert 'name="token"' in await resp.text()
    bad = await locked.post("/login", data={"token": "nope"}, allow_redirects=False)
    assert bad.status == 401
    resp = await locked.post("/login", data={"token": TOKEN}, allow_redirects=False)
    assert resp.status == 303
    cookie = resp.cookies["scrapeq_token"]
    assert cookie["httponly"] and cookie["samesite"] == "Strict"
    assert (await locked.get("/")).status == 200
    assert (await get_json(locked, "/api/session"))["token_holder"] is True
    # A cookie session is a browser's: its actions need the CSRF token.
    path = f"/api/breaker/{SHOP.format(2)}/reset"
    assert (await locked.post(path)).status == 403
    assert (await post(locked, path)).status == 200
    assert states(await queue.status())[SHOP.format(2)] == "closed"


async def test_a_bearer_token_acts_without_csrf(locked: Client, queue: AsyncQueue) -> None:
    resp = await locked.post(f"/api/breaker/{SHOP.format(2)}/reset", headers=bearer())
    assert resp.status == 200
    assert states(await queue.status())[SHOP.format(2)] == "closed"


@pytest.mark.parametrize("given", [None, "", "wrong"])
async def test_an_action_without_the_csrf_token_is_refused(
    client: Client, queue: AsyncQueue, given: str | None
) -> None:
    headers = {} if given is None else {"X-CSRF-Token": given}
    for path, body in (
        (f"/api/breaker/{SHOP.format(2)}/reset", None),
        ("/api/dead/replay", {"all": True}),
        ("/api/dead/purge", {"all": True}),
    ):
        resp = await client.post(path, headers=headers, json=body)
        assert resp.status == 403, path
        assert "X-CSRF-Token" in (await resp.json())["error"]
    doc = await queue.status()
    assert states(doc)[SHOP.format(2)] == "open"
    assert doc["counts"]["dead"] == 2


async def test_read_only_refuses_and_hides_actions(queue: AsyncQueue) -> None:
    async with TestClient(TestServer(create_app(queue, read_only=True))) as c:
        session = await get_json(c, "/api/session")
        assert session["read_only"] is True
        for path in (f"/api/breaker/{SHOP.format(2)}/reset", "/api/dead/replay"):
            resp = await post(c, path, json={"all": True})
            assert resp.status == 403
            assert "read-only" in (await resp.json())["error"]
        assert (await get_json(c, "/api/status"))["queue"] == "default"
    assert states(await queue.status())[SHOP.format(2)] == "open"
    assert (await queue.status())["counts"]["dead"] == 2


def test_a_short_token_is_refused(queue: AsyncQueue) -> None:
    with pytest.raises(ConfigError, match="16"):
        create_app(queue, token="short")


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.0.2.1", "dash.example.com"])
def test_serve_refuses_a_non_loopback_bind_without_a_token(redis_url: str, host: str) -> None:
    made: list[AsyncQueue] = []
    with pytest.raises(ConfigError, match="token is required"):
        serve(lambda: made.append(AsyncQueue.from_url(redis_url)) or made[-1], host=host)
    assert made == [], "refused before anything is made or bound"


async def test_security_headers_on_every_answer(client: Client) -> None:
    for path in ("/", "/api/status", "/metrics"):
        resp = await client.get(path)
        assert resp.headers["X-Frame-Options"] == "DENY"
        assert resp.headers["X-Content-Type-Options"] == "nosniff"


@pytest.fixture
async def secret_dead(queue: AsyncQueue) -> Job:
    """A dead letter whose URL holds credentials and whose payload holds an API key."""
    url = "https://bob:hunter2@vault.example.com/private"
    await queue.enqueue(url, payload={"api_key": "sk-live-123"}, lane="critical")
    job = await _claim_one(queue)
    assert job.url == url
    await queue.fail(job, "http_401", f"denied at {url}")
    return job


async def test_dead_letters_redact_credentials_and_hide_payloads(
    client: Client, locked: Client, secret_dead: Job
) -> None:
    for c, headers in ((client, {}), (locked, bearer())):
        resp = await c.get("/api/dead", headers=headers)
        text = await resp.text()
        assert "hunter2" not in text
        (row,) = [d for d in json.loads(text) if d["id"] == secret_dead.id]
        assert row["url"] == "https://***:***@vault.example.com/private"  # the user too
        assert row["last_error"]["message"] == f"denied at {row['url']}"
        if c is client:
            assert "sk-live-123" not in text
            assert row["payload"] is None and row["payload_hidden"] is True
        else:
            assert row["payload"] == {"api_key": "sk-live-123"}


async def test_dead_replay_and_purge_endpoints(client: Client, queue: AsyncQueue) -> None:
    dead = await get_json(client, "/api/dead")
    one = next(d for d in dead if d["domain"] == SHOP.format(3))
    resp = await post(client, "/api/dead/replay", json={"ids": [one["id"]]})
    assert await resp.json() == {"moved": 1, "missing": [], "duplicates": []}
    assert (await queue.job_info(one["id"])).state in ("ready", "delayed")  # type: ignore[union-attr]
    resp = await post(client, "/api/dead/replay", json={"ids": ["zz9"]})
    assert (await resp.json())["missing"] == ["zz9"]
    for bad in ({}, {"ids": "x"}, {"ids": ["a"], "all": True}, [1]):
        assert (await post(client, "/api/dead/replay", json=bad)).status == 400, bad
    assert (await post(client, "/api/dead/purge", json={})).status == 400
    resp = await post(client, "/api/dead/purge", json={"domain": SHOP.format(4)})
    assert await resp.json() == {"purged": 1}
    assert (await queue.status())["counts"]["dead"] == 0


HTML_ERROR = '<img src=x onerror="document.title=1"><b id="injected">bold</b>'


async def test_html_in_a_url_or_error_renders_as_text(client: Client, queue: AsyncQueue) -> None:
    api = need_browser()
    await queue.enqueue("https://html.example.com/q?<script>alert(1)</script>", lane="critical")
    job = await _claim_one(queue)
    assert job.domain == "html.example.com"
    await queue.fail(job, "http_500", HTML_ERROR)
    async with api.async_playwright() as p:
        browser = await p.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        try:
            page = await browser.new_page()
            await page.goto(f"http://{client.host}:{client.port}/#/dead")
            row = page.locator(f"tr[data-id='{job.id}']")
            await row.wait_for()
            text = await row.inner_text()
            assert HTML_ERROR in text, "the error is shown as text"
            assert "<script>alert(1)</script>" in text, "so is the URL"
            dom = await page.content()
            assert "&lt;img src=x onerror=" in dom
            assert '<b id="injected"' not in dom and "<img" not in dom
            assert await page.locator("#injected").count() == 0
            assert await page.title() == "scrapeq", "no onerror ran"
        finally:
            await browser.close()
