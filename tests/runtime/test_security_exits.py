"""Issue 36 item 4: proxy credentials are never stored, logged or shown in clear.

A proxy answering ``407`` to ``CONNECT`` raises aiohttp's ``ClientHttpProxyError``, whose text
holds the proxy URL; that text becomes the job's error (history, dead letter) in Redis. Keys in
the user part (``http://KEY:@host``, ``http://TOKEN@host``) are credentials as much as a
password. A proxy URL whose user info hides a ``#``, ``/``, ``?`` or a second ``@`` does not
parse to one host: it is refused with a one-line error that does not echo it.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio

from scrapeq import AsyncQueue, Queue, Settings
from scrapeq.engine.model.exits import ExitPool, exit_id
from scrapeq.engine.server.launcher import free_port
from scrapeq.errors import ConfigError
from scrapeq.runtime.classify import classify_exception
from scrapeq.runtime.worker import Worker
from support.cli_helpers import run, scrub_env
from support.proxy_proc import TinyproxySet
from support.sites import ok, proxy, sites


def _secret() -> str:
    return "S3CRET" + uuid.uuid4().hex[:10]


def _forms(secret: str, hostport: str) -> dict[str, str]:
    """The ways a proxy URL carries a credential, each holding ``secret``."""
    return {
        "user_password": f"http://bob:{secret}@{hostport}",
        "key_as_user": f"http://{secret}:@{hostport}",  # a large vendor's documented form
        "token_as_user": f"http://{secret}@{hostport}",
        "escaped_hash": f"http://carol:12%23{secret}@{hostport}",
    }


FORMS = ("user_password", "key_as_user", "token_as_user", "escaped_hash")


async def _dump_redis(redis_url: str) -> str:
    """Every key and value of the server, as one text."""
    client = redis.asyncio.Redis.from_url(redis_url, decode_responses=False)
    out: list[str] = []
    try:
        async for key in client.scan_iter(count=1000):
            kind = (await client.type(key)).decode()
            value: Any
            if kind == "string":
                value = await client.get(key)
            elif kind == "hash":
                value = await client.hgetall(key)
            elif kind == "list":
                value = await client.lrange(key, 0, -1)
            elif kind == "set":
                value = await client.smembers(key)
            elif kind == "zset":
                value = await client.zrange(key, 0, -1, withscores=True)
            elif kind == "stream":
                value = await client.xrange(key)
            else:
                value = kind
            out.append(f"{key!r} {value!r}")
    finally:
        await client.aclose()
    return "\n".join(out)


@pytest.mark.parametrize("form", FORMS)
async def test_a_407_to_connect_stores_no_credential_in_redis(
    make_async_queue: Callable[..., AsyncQueue], redis_url: str, form: str
) -> None:
    secret = _secret()
    target = f"127.0.0.1:{free_port()}"
    async with proxy({target: 407}) as p:
        proxy_url = _forms(secret, f"127.0.0.1:{p.port}")[form]
        q = make_async_queue(
            queue=f"sec-{uuid.uuid4().hex[:8]}", proxy=(proxy_url,), allow_private=True,
            max_releases=1, backoff_base=0.01, backoff_cap=0.05, request_timeout=2.0,
            proxy_cooldown=0.05,
        )  # fmt: skip
        await q.enqueue(f"https://{target}/p/1")
        worker = Worker(q, concurrency=2)
        task = asyncio.create_task(worker.run_async())
        deadline = time.monotonic() + 10
        try:
            while time.monotonic() < deadline:
                dead = await q.dead_letters(None, 10)
                if dead:
                    break
                await asyncio.sleep(0.05)
        finally:
            worker.stop()
            await asyncio.wait_for(task, 30)
    assert p.connects[target] >= 1, "the proxy was asked to CONNECT"
    (job,) = dead
    assert job.errors and "407" in job.errors[-1].message, job.errors
    stored = await _dump_redis(redis_url)
    assert "127.0.0.1:" + str(p.port) in stored, "the error names the proxy's host"
    assert secret not in stored, "the proxy's credential is stored in clear"


@pytest.mark.parametrize("form", FORMS)
def test_the_error_text_of_a_407_holds_no_credential(form: str) -> None:
    """The one place an exception becomes a job's error text redacts it."""
    import aiohttp
    from multidict import CIMultiDict, CIMultiDictProxy
    from yarl import URL

    secret = _secret()
    url = _forms(secret, "127.0.0.1:8011")[form]
    info = aiohttp.RequestInfo(URL(url), "CONNECT", CIMultiDictProxy(CIMultiDict()), URL(url))
    exc = aiohttp.ClientHttpProxyError(info, (), status=407, message="Proxy Authentication")
    assert secret in str(exc) or secret.lower() in str(exc).lower(), "the premise"
    verdict = classify_exception(exc)
    assert secret not in verdict.message and "127.0.0.1:8011" in verdict.message


@pytest.fixture
def cli_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    scrub_env(monkeypatch, tmp_path, columns=300)
    return tmp_path


@pytest.mark.parametrize("form", FORMS)
def test_proxies_cli_shows_no_credential(
    capsys: pytest.CaptureFixture[str], redis_url: str, cli_env: Path,
    monkeypatch: pytest.MonkeyPatch, form: str,
) -> None:  # fmt: skip
    secret = _secret()
    proxy_url = _forms(secret, "127.0.0.1:8011")[form]
    name = f"px-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("SCRAPEQ_PROXY", proxy_url)
    Queue.from_url(redis_url, settings=Settings(queue=name, proxy=(proxy_url,))).close()
    code, out, err = run(capsys, "--redis", redis_url, "--queue", name, "proxies", "--json")
    assert code == 0, err
    (row,) = json.loads(out)["exits"]
    assert secret not in out + err
    assert row["name"].startswith("http://***") and row["name"].endswith("@127.0.0.1:8011")
    code, out, err = run(capsys, "--redis", redis_url, "--queue", name, "proxies")
    assert code == 0, err
    assert secret not in out + err


@pytest.mark.parametrize("form", FORMS)
def test_an_exit_id_and_name_are_not_the_credential(form: str) -> None:
    secret = _secret()
    (exit_,) = ExitPool.build([(_forms(secret, "127.0.0.1:8011")[form], "")]).exits
    assert secret not in exit_.id and secret not in exit_.name
    assert secret not in repr(Settings(proxy=(exit_.url or "",)))
    assert exit_.url is not None and secret in exit_.url, "the fetcher gets the real URL"
    assert exit_.id == exit_id(exit_.url)


AMBIGUOUS = {
    "hash": "http://carol:12#{s}@127.0.0.1:8011",
    "slash": "http://carol:ab/{s}@127.0.0.1:8011",
    "question": "http://carol:ab?{s}@127.0.0.1:8011",
    "two_ats": "http://carol:{s}@evil.example@127.0.0.1:8011",
    "at_in_password": "http://carol:pa@{s}@127.0.0.1:8011",
    "backslash": "http://carol:{s}\\@127.0.0.1:8011",
}


@pytest.mark.parametrize("case", sorted(AMBIGUOUS))
def test_a_proxy_url_that_is_not_one_host_is_refused(case: str) -> None:
    secret = _secret()
    url = AMBIGUOUS[case].format(s=secret)
    with pytest.raises(ConfigError) as info:
        Settings(proxy=(url,))
    text = str(info.value)
    assert info.value.name == "proxy"
    assert "\n" not in text and secret not in text, text


@pytest.mark.parametrize("case", sorted(AMBIGUOUS))
def test_the_cli_refuses_an_ambiguous_proxy_in_one_line(
    capsys: pytest.CaptureFixture[str], redis_url: str, cli_env: Path,
    monkeypatch: pytest.MonkeyPatch, case: str,
) -> None:  # fmt: skip
    secret = _secret()
    pool = cli_env / "pool.txt"
    pool.write_text("http://127.0.0.1:9001\n" + AMBIGUOUS[case].format(s=secret) + " tier=b\n")
    code, out, err = run(capsys, "--redis", redis_url, "proxies", "--json")
    assert code == 0  # the premise: no pool, no error
    monkeypatch.setenv("SCRAPEQ_PROXY_FILE", str(pool))
    code, out, err = run(capsys, "--redis", redis_url, "proxies")
    assert code == 2, (code, out, err)
    assert secret not in out + err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err
    assert "pool.txt:2" in err


async def test_a_proxy_with_credentials_still_works(
    tinyproxies: TinyproxySet, make_async_queue: Callable[..., AsyncQueue]
) -> None:
    """Redaction is for display: the fetch goes through the proxy with the real credentials
    (tinyproxy answers 407 without them)."""
    locked = tinyproxies("127.0.0.2", auth=("bob", "hunter2"))
    async with sites(ok) as (site,):
        q = make_async_queue(
            queue=f"sec-{uuid.uuid4().hex[:8]}", proxy=(locked.url,), allow_private=True,
            request_timeout=5.0,
        )  # fmt: skip
        await q.enqueue(site.url("/p/1"))
        worker = Worker(q, concurrency=2)
        task = asyncio.create_task(worker.run_async())
        deadline = time.monotonic() + 10
        try:
            while time.monotonic() < deadline:
                if (await q.status())["counts"]["done"] >= 1:
                    break
                await asyncio.sleep(0.05)
        finally:
            worker.stop()
            await asyncio.wait_for(task, 30)
        counts = (await q.status())["counts"]
        (row,) = await q.exits_info()
    assert counts["done"] == 1, counts
    assert row["ok"] == 1 and "hun" not in row["name"] and "bob" not in row["name"]


@pytest.mark.parametrize("form", FORMS)
async def test_listings_redact_a_proxy_credential_stored_before_the_fix(
    redis_url: str, capsys: pytest.CaptureFixture[str], cli_env: Path, form: str
) -> None:
    """An error text written in clear (by an earlier version, or by a handler's own call) is
    shown redacted by every listing: ``dead list --json``, ``job show --json``, the
    dashboard's ``/api/dead``, ``/api/domain/...`` and ``/api/exits``."""
    from aiohttp.test_utils import TestClient, TestServer

    from scrapeq.interfaces.web import create_app

    secret = _secret()
    proxy_url = _forms(secret, "127.0.0.1:8011")[form]
    name = f"sec-{uuid.uuid4().hex[:8]}"
    settings = Settings(queue=name, proxy=(proxy_url,), allow_private=True)
    q = AsyncQueue.from_url(redis_url, settings=settings)
    try:
        await q.enqueue("https://shop-36.example.com/p/1")
        (job,) = (await q.claim(1)).jobs
        said = f"ClientHttpProxyError: 407, message='Proxy Authentication', url='{proxy_url}'"
        await q.fail(job, "proxy_error", said)
        async with TestClient(TestServer(create_app(q))) as client:
            for path in ("/api/dead", "/api/domain/shop-36.example.com", "/api/exits"):
                resp = await client.get(path)
                text = await resp.text()
                assert resp.status == 200, text
                assert secret not in text, path
    finally:
        await q.close()
    for argv in (["dead", "list", "--json"], ["dead", "list"], ["job", "show", job.id, "--json"],
                 ["job", "show", job.id]):  # fmt: skip
        code, out, err = run(capsys, "--redis", redis_url, "--queue", name, *argv)
        assert code == 0, err
        assert secret not in out + err, argv
        assert "127.0.0.1:8011" in out, "the proxy's host is still shown"


@pytest.mark.parametrize("form", FORMS)
async def test_a_results_line_shows_no_meta_proxy_credential(
    make_async_queue: Callable[..., AsyncQueue], tmp_path: Path, form: str
) -> None:
    """A request's ``meta`` reaches its results line: a ``meta["proxy"]`` URL's credentials
    are written as ``***`` there."""
    from scrapeq import Request
    from scrapeq.runtime.sinks import JsonlSink

    secret = _secret()
    meta = {"proxy": _forms(secret, "127.0.0.1:8011")[form], "page": 1}
    results = tmp_path / "results.jsonl"
    q = make_async_queue(queue=f"sec-{uuid.uuid4().hex[:8]}", allow_private=True)
    async with sites(ok) as (site,):
        await q.enqueue(Request(site.url("/p/1"), meta=meta))
        worker = Worker(q, concurrency=1, sink=JsonlSink(results), burst=True)
        await asyncio.wait_for(worker.run_async(), 30)
    (row,) = [json.loads(line) for line in results.read_text().splitlines()]
    assert row["outcome"] == "done" and row["meta"]["page"] == 1
    assert secret not in results.read_text()
    assert (
        row["meta"]["proxy"].startswith("http://***") and "@127.0.0.1:8011" in row["meta"]["proxy"]
    )
