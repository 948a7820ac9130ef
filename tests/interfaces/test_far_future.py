"""A time far in the future (issue 21, item 4): refused where it is typed, shown where it is read.

``breaker trip D --cooldown 1e12`` was taken, and from then on ``status``, ``breakers``,
``/api/status``, ``/api/domains``, ``/api/domain/D`` and ``/metrics`` failed (``year 33715 is
out of range``) until ``breaker reset``. Now the CLI, the dashboard's API and the library
refuse a duration past :data:`~scrapeq.engine.config.limits.MAX_DURATION_S`; and a time past what a
date can hold (written by an older version, or by hand) is shown as the latest date there is,
never a crash: the readers below are driven with one stored in Redis.
"""

from __future__ import annotations

import json
import math
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import redis
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from scrapeq import AsyncQueue, Queue, Settings
from scrapeq.engine.config.limits import MAX_DURATION_S
from scrapeq.engine.model.job import ms_to_datetime, ms_to_iso
from scrapeq.errors import ConfigError
from scrapeq.interfaces.render import human_until
from scrapeq.interfaces.web import create_app
from support.cli_helpers import run, scrub_env

D = "far.example.com"
#: 10^15 ms after the epoch: the year 33658, past datetime's year 9999.
FAR_MS = 10**15


def _store_far_future(url: str) -> None:
    """D's breaker open until FAR_MS, and dispatch paused until then, as Redis holds them."""
    q = Queue.from_url(url, settings=Settings(allow_private=False))
    try:
        q.enqueue(f"https://{D}/p/1")
        assert q.breaker_trip(D, cooldown=60) == "open"
        r = redis.Redis.from_url(url)
        r.hset(q.keys.domain(D), "open_until", FAR_MS)
        r.hset(q.keys.meta, "paused_until", FAR_MS)
        r.close()
    finally:
        q.close()


@pytest.fixture
def far(redis_url: str) -> str:
    _store_far_future(redis_url)
    return redis_url


# --- the conversion every reader uses -----------------------------------------------------------


def test_a_time_past_the_last_date_is_the_last_date() -> None:
    last = datetime.max.replace(tzinfo=UTC)
    assert ms_to_datetime(FAR_MS) == last.replace(microsecond=999_000)
    assert ms_to_datetime(math.inf) == ms_to_datetime(FAR_MS)
    assert ms_to_datetime(-FAR_MS) == datetime.min.replace(tzinfo=UTC)
    assert ms_to_iso(FAR_MS) == "9999-12-31T23:59:59.999000+00:00"
    assert ms_to_iso(1_700_000_000_123) == "2023-11-14T22:13:20.123000+00:00"  # as before
    assert human_until(ms_to_iso(FAR_MS)).startswith("in ")


# --- the readers: CLI -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["status"],
        ["status", "--json"],
        ["breakers"],
        ["breakers", "--json"],
        ["domains"],
        ["domains", "--json"],
    ],
    ids=" ".join,
)
def test_cli_readers_show_a_far_future_breaker(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    far: str,
    argv: list[str],
) -> None:
    scrub_env(monkeypatch, tmp_path, columns=200)
    code, out, err = run(capsys, "--redis", far, *argv)
    assert code == 0, err
    assert "Traceback" not in out + err
    assert D in out


def test_status_json_shows_the_far_future_as_the_last_date(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path, far: str
) -> None:
    scrub_env(monkeypatch, tmp_path)
    code, out, err = run(capsys, "--redis", far, "status", "--json")
    assert code == 0, err
    doc = json.loads(out)
    (domain,) = [d for d in doc["domains"] if d["domain"] == D]
    assert domain["open_until"].startswith("9999-12-31T23:59:59")
    assert doc["paused_until"].startswith("9999-12-31T23:59:59")
    code, out, err = run(capsys, "--redis", far, "breakers", "--json")
    (breaker,) = json.loads(out)
    assert breaker["open_until_ms"] == FAR_MS  # the stored value, exactly


# --- the readers: the dashboard -----------------------------------------------------------------

Client = TestClient[web.Request, web.Application]


@pytest.fixture
async def client(far: str) -> AsyncIterator[Client]:
    q = AsyncQueue.from_url(far, settings=Settings(allow_private=False))
    async with TestClient(TestServer(create_app(q))) as c:
        yield c
    await q.close()


@pytest.mark.parametrize(
    "path",
    ["/api/status", "/api/domains", "/api/domains?page=1&sort=open_until", f"/api/domain/{D}",
     "/metrics", "/api/events"],
)  # fmt: skip
async def test_dashboard_readers_show_a_far_future_breaker(client: Client, path: str) -> None:
    resp = await client.get(path)
    assert resp.status == 200, await resp.text()


async def _post(client: Client, path: str) -> Any:
    token = (await (await client.get("/api/session")).json())["csrf"]
    return await client.post(path, headers={"X-CSRF-Token": token})


@pytest.fixture
async def plain_client(redis_url: str) -> AsyncIterator[tuple[Client, AsyncQueue]]:
    q = AsyncQueue.from_url(redis_url, settings=Settings(allow_private=False))
    await q.enqueue(f"https://{D}/p/1")
    async with TestClient(TestServer(create_app(q))) as c:
        yield c, q
    await q.close()


@pytest.mark.parametrize("cooldown", ["1e20", "1e308", "inf", "nan", str(MAX_DURATION_S + 1)])
async def test_the_api_refuses_a_cooldown_past_the_bound(
    plain_client: tuple[Client, AsyncQueue], cooldown: str
) -> None:
    client, q = plain_client
    resp = await _post(client, f"/api/breaker/{D}/trip?cooldown={cooldown}")
    assert resp.status == 400, await resp.text()
    assert "cooldown" in (await resp.json())["error"]
    assert [d["state"] for d in await q.domains_info()] == ["closed"]


async def test_the_api_takes_the_longest_cooldown(plain_client: tuple[Client, AsyncQueue]) -> None:
    client, q = plain_client
    resp = await _post(client, f"/api/breaker/{D}/trip?cooldown={MAX_DURATION_S}")
    assert resp.status == 200, await resp.text()
    assert [d["state"] for d in await q.domains_info()] == ["open"]
    assert (await client.get("/api/status")).status == 200


async def test_the_api_refuses_a_purge_age_past_the_bound(
    plain_client: tuple[Client, AsyncQueue],
) -> None:
    client, _ = plain_client
    token = (await (await client.get("/api/session")).json())["csrf"]
    resp = await client.post(
        "/api/dead/purge", json={"older_than": 1e308}, headers={"X-CSRF-Token": token}
    )
    assert resp.status == 400, await resp.text()


async def test_a_json_body_nested_too_deeply_is_400(
    plain_client: tuple[Client, AsyncQueue],
) -> None:
    client, _ = plain_client
    token = (await (await client.get("/api/session")).json())["csrf"]
    body = '{"ids":' + "[" * 5000 + "]" * 5000 + "}"
    resp = await client.post(
        "/api/dead/replay",
        data=body,
        headers={"X-CSRF-Token": token, "Content-Type": "application/json"},
    )
    assert resp.status == 400, await resp.text()


# --- the library ------------------------------------------------------------------------------


@pytest.fixture
def queue(redis_url: str) -> Iterator[Queue]:
    q = Queue.from_url(redis_url, settings=Settings(allow_private=False))
    q.enqueue(f"https://{D}/p/1")
    yield q
    q.close()


@pytest.mark.parametrize("seconds", [1e12, 1e308, MAX_DURATION_S + 1])
def test_the_library_refuses_a_duration_past_the_bound(queue: Queue, seconds: float) -> None:
    with pytest.raises(ConfigError, match="cooldown"):
        queue.breaker_trip(D, cooldown=seconds)
    with pytest.raises(ConfigError, match="delay"):
        queue.domain_set(D, delay=seconds)
    with pytest.raises(ConfigError, match="delay"):
        queue.enqueue(f"https://{D}/p/2", delay=seconds)
    with pytest.raises(ConfigError, match="older_than"):
        queue.purge(older_than=seconds)
    assert [d["state"] for d in queue.domains_info()] == ["closed"]
    assert queue.status()["counts"]["enqueued"] == 1


def test_the_library_refuses_a_concurrency_past_the_bound(queue: Queue) -> None:
    with pytest.raises(ConfigError, match="concurrency"):
        queue.domain_set(D, concurrency=10**20)
    assert queue.domain_set(D, concurrency=3)["concurrency"] == 3
