"""What the dashboard says about a failing domain (issue 21, item 14): the failure rate is the
breaker's window (a tripped 429 site is not 0.0 %, a 404-only site not 100 %), a tripped
domain shows the errors that tripped it, and the spike alarm counts failures, not 404s."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from scrapeq import AsyncQueue, Job, Queue, Settings
from support.cli_helpers import run, scrub_env

THROTTLED = "throttled.example.com"  # 429s: tripped by 5 consecutive failures
MISSING = "missing.example.com"  # 404s only: a permanent page fault says nothing of the site
MIXED = "mixed.example.com"  # 3 successes, 1 timeout

Client = TestClient[web.Request, web.Application]


async def claim(q: AsyncQueue, domain: str) -> Job:
    for _ in range(5):
        jobs = (await q.claim(1)).jobs
        if jobs:
            assert jobs[0].domain == domain
            return jobs[0]
    raise AssertionError("nothing to claim")


@pytest.fixture
async def queue(redis_url: str) -> AsyncIterator[AsyncQueue]:
    q = AsyncQueue.from_url(redis_url, settings=Settings(domain_concurrency=1))
    await q.enqueue_many([f"https://{THROTTLED}/p/{i}" for i in range(5)])
    for i in range(5):
        job = await claim(q, THROTTLED)
        await q.throttle(job, None, message=f"429 Too Many Requests (page {i})")
    await q.enqueue_many([f"https://{MISSING}/p/{i}" for i in range(3)])
    for _ in range(3):
        await q.fail(await claim(q, MISSING), "http_404", "Not Found")
    await q.enqueue_many([f"https://{MIXED}/p/{i}" for i in range(4)])
    for i in range(4):
        job = await claim(q, MIXED)
        if i == 2:
            await q.retry(job, kind="timeout", message="no answer in 30 s", delay=3600)
        else:
            await q.ack(job)
    yield q
    await q.close()


async def get_json(client: Client, path: str) -> Any:
    resp = await client.get(path)
    assert resp.status == 200, await resp.text()
    return await resp.json()


async def test_failure_rate_is_the_breaker_window(client: Client) -> None:
    doc = await get_json(client, "/api/domains?page=1&sort=domain")
    rows = {r["domain"]: r for r in doc["items"]}
    tripped = rows[THROTTLED]
    assert tripped["state"] == "open"
    assert (tripped["window_failures"], tripped["window_calls"]) == (5, 5)
    assert tripped["failure_rate"] == 1.0
    assert (rows[MISSING]["window_failures"], rows[MISSING]["window_calls"]) == (0, 0)
    assert rows[MISSING]["failure_rate"] == 0.0
    assert rows[MISSING]["dead"] == 3
    assert rows[MIXED]["failure_rate"] == 0.25
    # sorted by it on the server, the worst first
    doc = await get_json(client, "/api/domains?page=1&sort=failure_rate&order=desc")
    assert [r["domain"] for r in doc["items"]] == [THROTTLED, MIXED, MISSING]


async def test_a_tripped_429_domain_shows_the_errors_that_tripped_it(client: Client) -> None:
    doc = await get_json(client, f"/api/domain/{THROTTLED}")
    assert doc["domain"]["state"] == "open"
    errors = doc["errors"]
    assert [e["kind"] for e in errors] == ["http_429"] * 5
    assert errors[0]["message"] == "429 Too Many Requests (page 4)"  # newest first
    assert all(e["at"].endswith("+00:00") and isinstance(e["at_ms"], int) for e in errors)
    assert all(e["id"] for e in errors)
    # a dead letter's error is still there, once (the dead letters' and the domain's merged)
    doc = await get_json(client, f"/api/domain/{MISSING}")
    assert [e["kind"] for e in doc["errors"]] == ["http_404"] * 3
    doc = await get_json(client, f"/api/domain/{MIXED}")
    assert [(e["kind"], e["message"]) for e in doc["errors"]] == [("timeout", "no answer in 30 s")]


async def test_recent_errors_of_the_queue_api(queue: AsyncQueue) -> None:
    errors = await queue.recent_errors(THROTTLED)
    assert [e["kind"] for e in errors] == ["http_429"] * 5
    assert await queue.recent_errors(MISSING) == []  # 404s charge nothing
    assert await queue.recent_errors("never.example.com") == []


def test_recent_errors_are_bounded(make_queue: Any) -> None:
    q: Queue = make_queue(domain_concurrency=50)
    d = "busy.example.com"
    q.enqueue_many([f"https://{d}/p/{i}" for i in range(30)])
    for i, job in enumerate(q.claim(30).jobs):
        q.retry(job, kind="http_503", message="x" * 1000 + str(i), delay=3600)
    errors = q.recent_errors(d)
    assert len(errors) == 10
    assert errors[0]["message"].endswith("...") and len(errors[0]["message"]) <= 200
    assert [e["id"] for e in errors] == [e["id"] for e in sorted(errors, key=lambda e: -e["at_ms"])]


def test_spike_alarm_counts_failures_not_404s(make_queue: Any) -> None:
    q: Queue = make_queue(domain_concurrency=100)  # trips at 5; every failure counts
    q.enqueue_many([f"https://{MISSING}/p/{i}" for i in range(30)])
    q.enqueue_many([f"https://{THROTTLED}/p/{i}" for i in range(12)])
    for job in q.claim(100).jobs:
        if job.domain == MISSING:
            assert q.fail(job, "http_404", "Not Found") == "dead"
        else:
            assert q.retry(job, kind="http_503", delay=3600) == "retried"
    alarms = q.status()["alarms"]
    assert [(a["kind"], a["domain"]) for a in alarms] == [("dead_letter_spike", THROTTLED)]
    assert "12 failures in the last hour" in alarms[0]["message"]


def test_status_and_domains_json_carry_the_window(
    redis_url: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    scrub_env(monkeypatch, tmp_path)
    q = Queue.from_url(redis_url, settings=Settings(domain_concurrency=1))
    q.enqueue_many([f"https://{MIXED}/p/{i}" for i in range(2)])
    q.ack(q.claim(1).jobs[0])
    q.retry(q.claim(1).jobs[0], kind="timeout", delay=3600)
    q.close()
    code, out, err = run(capsys, "--redis", redis_url, "status", "--json")
    assert code == 0, err
    (row,) = json.loads(out)["domains"]
    assert (row["window_failures"], row["window_calls"]) == (1, 2)
    code, out, err = run(capsys, "--redis", redis_url, "domains", "--json")
    assert code == 0, err
    (row,) = json.loads(out)
    assert (row["window_failures"], row["window_calls"]) == (1, 2)
