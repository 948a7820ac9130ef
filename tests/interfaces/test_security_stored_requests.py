"""Issue 36 item 5: a request's secrets are never shown, Scrapy's stored requests included.

Scrapy on scrapeq stores a request's ``to_dict`` as the job's payload (``contrib/scrapy/_store``).
Its ``Authorization``, ``Proxy-Authorization``, ``Cookie`` and ``Set-Cookie`` headers, its
cookies and the credentials of ``meta["proxy"]`` are shown as ``***`` by every listing
(``dead list --json``, ``job show``, the dashboard), as scrapeq's own requests' are; the stored
payload keeps them, for Scrapy to send the request again.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import scrapy
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from scrapeq import AsyncQueue, Queue, Request, Settings
from scrapeq.contrib.scrapy._store import decode_request, encode_request
from scrapeq.interfaces.web import create_app
from support.cli_helpers import run, scrub_env

SITE = "shop-36.example.com"
TOKEN = "tok-" + "y" * 28


class Spider(scrapy.Spider):
    name = "sec"

    def parse(self, response: Any) -> None:  # pragma: no cover - never called
        return None


def _secrets() -> dict[str, str]:
    tag = uuid.uuid4().hex[:8]
    return {
        k: f"{k.upper()}{tag}"
        for k in ("bearer", "proxyauth", "cookieheader", "setcookie", "jar", "jar2", "proxypw",
                  "apikey", "proxytoken")
    }  # fmt: skip


def _scrapy_request(s: dict[str, str], proxy_form: str) -> scrapy.Request:
    proxy = {
        "user_password": f"http://alice:{s['proxypw']}@proxy.example:8011",
        "token_as_user": f"http://{s['proxytoken']}@proxy.example:8011",
    }[proxy_form]
    return scrapy.Request(
        f"https://{SITE}/account",
        headers={
            "Authorization": f"Bearer {s['bearer']}",
            "Proxy-Authorization": f"Basic {s['proxyauth']}",
            "Cookie": f"sid={s['cookieheader']}",
            "Set-Cookie": f"x={s['setcookie']}",
            "X-Api-Key": s["apikey"],
            "Accept": "text/html",
        },
        cookies={"session": s["jar"], "other": s["jar2"]},
        meta={"proxy": proxy, "depth": 2},
        callback=Spider().parse,
    )


def _store_dead(redis_url: str, queue_name: str, payload: Any, request: Request | None) -> str:
    q = Queue.from_url(redis_url, settings=Settings(queue=queue_name))
    try:
        if request is not None:
            q.enqueue(request)
        else:
            q.enqueue(f"https://{SITE}/account", payload=payload)
        (job,) = q.claim(1).jobs
        q.fail(job, "http_401", "denied")
        return job.id
    finally:
        q.close()


@pytest.fixture
def cli_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    scrub_env(monkeypatch, tmp_path, columns=400)


@pytest.fixture(params=["user_password", "token_as_user"])
def scrapy_dead(request: pytest.FixtureRequest, redis_url: str) -> tuple[str, str, dict[str, str]]:
    """A dead letter whose payload is a Scrapy request as Scrapy on scrapeq stores it."""
    s = _secrets()
    spider = Spider()
    payload = encode_request(_scrapy_request(s, request.param), spider)
    name = f"sr-{uuid.uuid4().hex[:8]}"
    job_id = _store_dead(redis_url, name, payload, None)
    return name, job_id, s


def _assert_no_secret(text: str, s: dict[str, str]) -> None:
    leaked = [k for k, v in s.items() if v in text]
    assert not leaked, f"shown in clear: {leaked}"


def test_the_stored_payload_keeps_what_scrapy_needs(
    redis_url: str, scrapy_dead: tuple[str, str, dict[str, str]]
) -> None:
    name, job_id, s = scrapy_dead
    q = Queue.from_url(redis_url, settings=Settings(queue=name))
    try:
        info = q.job_info(job_id)
    finally:
        q.close()
    assert info is not None
    again = decode_request(info.job.payload, Spider())
    assert again.headers.get("Authorization") == f"Bearer {s['bearer']}".encode()
    assert again.cookies == {"session": s["jar"], "other": s["jar2"]}
    assert s["proxypw"] in again.meta["proxy"] or s["proxytoken"] in again.meta["proxy"]


@pytest.mark.usefixtures("cli_env")
@pytest.mark.parametrize(
    "argv", [["dead", "list", "--json"], ["dead", "list"], ["job", "show", "{id}", "--json"],
             ["job", "show", "{id}"], ["job", "list", "--state", "dead", "--json"]],
)  # fmt: skip
def test_cli_listings_show_no_secret_of_a_scrapy_request(
    capsys: pytest.CaptureFixture[str], redis_url: str,
    scrapy_dead: tuple[str, str, dict[str, str]], argv: list[str],
) -> None:  # fmt: skip
    name, job_id, s = scrapy_dead
    args = [a.format(id=job_id) for a in argv]
    code, out, err = run(capsys, "--redis", redis_url, "--queue", name, *args)
    assert code == 0, err
    _assert_no_secret(out + err, s)
    if "--json" in argv:
        doc = json.loads(out)
        row = doc[0] if isinstance(doc, list) else doc
        shown = row["payload"]["request"]
        assert shown["headers"]["Authorization"] == ["***"]
        assert shown["headers"]["Accept"] == ["text/html"], "other headers are shown"
        assert shown["cookies"] == {"session": "***", "other": "***"}
        assert shown["meta"]["proxy"].startswith("http://***") and shown["meta"]["depth"] == 2
        assert shown["url"] == f"https://{SITE}/account"


@pytest.fixture
async def dashboard(
    redis_url: str, scrapy_dead: tuple[str, str, dict[str, str]]
) -> AsyncIterator[TestClient[web.Request, web.Application]]:
    name = scrapy_dead[0]
    q = AsyncQueue.from_url(redis_url, settings=Settings(queue=name))
    async with TestClient(TestServer(create_app(q, token=TOKEN))) as c:
        yield c
    await q.close()


@pytest.mark.parametrize("path", ["/api/dead", f"/api/domain/{SITE}", "/api/events"])
async def test_the_dashboard_shows_no_secret_of_a_scrapy_request(
    dashboard: TestClient[web.Request, web.Application],
    scrapy_dead: tuple[str, str, dict[str, str]], path: str,
) -> None:  # fmt: skip
    resp = await dashboard.get(path, headers={"Authorization": f"Bearer {TOKEN}"})
    text = await resp.text()
    assert resp.status == 200, text
    _assert_no_secret(text, scrapy_dead[2])
    if path == "/api/dead":
        (row,) = json.loads(text)
        assert row["payload"]["request"]["headers"]["Proxy-Authorization"] == ["***"]


@pytest.mark.usefixtures("cli_env")
def test_scrapeqs_own_request_hides_meta_proxy_credentials(
    capsys: pytest.CaptureFixture[str], redis_url: str
) -> None:
    s = _secrets()
    name = f"sr-{uuid.uuid4().hex[:8]}"
    request = Request(
        f"https://{SITE}/own",
        headers={"Set-Cookie": f"a={s['setcookie']}", "Authorization": s["bearer"]},
        meta={"proxy": f"http://{s['proxytoken']}@proxy.example:8011",
              "note": f"via http://bob:{s['proxypw']}@proxy.example:8011"},
    )  # fmt: skip
    job_id = _store_dead(redis_url, name, None, request)
    for argv in (["job", "show", job_id, "--json"], ["job", "show", job_id],
                 ["dead", "list", "--json"]):  # fmt: skip
        code, out, err = run(capsys, "--redis", redis_url, "--queue", name, *argv)
        assert code == 0, err
        _assert_no_secret(out + err, s)
    code, out, err = run(capsys, "--redis", redis_url, "--queue", name, "job", "show", job_id,
                         "--json")  # fmt: skip
    shown = json.loads(out)["request"]
    assert ["Set-Cookie", "***"] in shown["headers"]
    assert shown["meta"]["proxy"] == "http://***@proxy.example:8011"
