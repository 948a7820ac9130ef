"""Jobs carry a request (issue 23): the stored form, the fingerprint, the limits."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from scrapeq import ConfigError, PayloadTooLarge, Request
from scrapeq.engine.model import job as job_module
from scrapeq.engine.model.request import request_fingerprint64
from scrapeq.engine.model.urls import fingerprint, fingerprint64
from scrapeq.engine.queue import Queue

MakeQueue = Callable[..., Queue]
URL = "https://api.example.com/search?q=1"
CODEC_LUA = Path(job_module.__file__).parents[1] / "lua" / "includes" / "codec.lua"


def _stored(redis_client: redis.Redis, q: Queue, job_id: str) -> dict[str, object]:
    text = redis_client.get(q.keys.job(job_id))
    assert isinstance(text, str)
    return dict(json.loads(text))


def test_python_and_lua_agree_on_the_compact_names() -> None:
    """lua/includes/codec.lua's SHORT and engine/model/job.py's _LONG are one table."""
    lua = CODEC_LUA.read_text()
    body = re.search(r"local SHORT = \{(.*?)\}", lua, re.S)
    assert body is not None
    short = dict(re.findall(r"(\w+) = '(\w+)'", body.group(1)))
    assert {v: k for k, v in short.items()} == job_module._LONG
    assert short["request"] == "q"


def test_a_plain_get_request_is_stored_as_a_url_job(
    make_queue: MakeQueue, redis_client: redis.Redis
) -> None:
    q = make_queue()
    plain = _stored(redis_client, q, q.enqueue(URL).id)
    as_request = _stored(redis_client, q, q.enqueue(Request(URL)).id)
    assert set(plain) - {"c"} == set(as_request) - {"c"} == {"u"}
    (job, _) = q.claim(2).jobs
    assert job.request_text is None and job.request == Request(URL) and job.meta is None


def test_a_post_job_keeps_method_headers_body_cookies_and_meta(
    make_queue: MakeQueue, redis_client: redis.Redis
) -> None:
    q = make_queue()
    sent = Request(
        URL,
        method="post",
        headers={"Authorization": "Bearer s3cret", "X-Trace": "1"},
        json={"query": "shoes", "page": 2},
        cookies={"session": "abc"},
        meta={"category": "shoes"},
    )
    job_id = q.enqueue(sent).id
    stored = _stored(redis_client, q, job_id)
    assert set(stored) - {"c"} == {"u", "q"}
    (job,) = q.claim(1).jobs
    assert job.request == sent
    assert (job.request.method, job.request.body) == ("POST", b'{"query":"shoes","page":2}')
    assert ("Content-Type", "application/json") in job.request.headers
    assert job.meta == {"category": "shoes"}
    info = q.job_info(job_id)
    assert info is not None
    shown = info.as_dict()["request"]
    assert ["Authorization", "***"] in shown["headers"] and shown["cookies"] == [["session", "***"]]
    assert "s3cret" not in json.dumps(info.as_dict())


def test_binary_and_form_bodies_round_trip(make_queue: MakeQueue) -> None:
    q = make_queue()
    q.enqueue(Request(URL, method="PUT", body=b"\x00\xff\x10"), unique="off")
    q.enqueue(Request(URL, method="POST", form={"a": "1 2", "b": "é"}), unique="off")
    bodies = sorted(j.request.body for j in q.claim(2).jobs)
    assert bodies == [b"\x00\xff\x10", b"a=1+2&b=%C3%A9"]


def test_get_fingerprint_is_unchanged_and_method_and_body_count() -> None:
    # the value main computed before requests existed: held fingerprints and seen-sets match
    assert fingerprint64(URL) == -6321230136851095698
    assert request_fingerprint64(URL) == fingerprint64(URL)
    assert request_fingerprint64(URL, "GET", b"") == fingerprint64(URL)
    post_a = request_fingerprint64(URL, "POST", b"a")
    assert len({post_a, request_fingerprint64(URL, "POST", b"b"), fingerprint64(URL)}) == 3
    assert request_fingerprint64(URL, "PUT", b"a") != post_a
    # canonical: the same query in another order is the same request
    assert request_fingerprint64(URL + "&b=2", "POST", b"a") == request_fingerprint64(
        "https://api.example.com/search?b=2&q=1", "POST", b"a"
    )


@pytest.mark.parametrize("mode", ["pending", "seen"])
def test_two_posts_with_different_bodies_are_two_jobs(make_queue: MakeQueue, mode: str) -> None:
    q = make_queue()
    a = q.enqueue(Request(URL, method="POST", body="a"), unique=mode)
    b = q.enqueue(Request(URL, method="POST", body="b"), unique=mode)
    again = q.enqueue(Request(URL, method="POST", body="a"), unique=mode)
    get = q.enqueue(URL, unique=mode)
    assert (a.status, b.status, get.status) == ("added", "added", "added")
    assert again.status in ("duplicate", "seen")


def test_a_get_request_matches_the_urls_held_fingerprint_and_seen_set(
    make_queue: MakeQueue, redis_client: redis.Redis
) -> None:
    q = make_queue()
    first = q.enqueue(URL, unique="pending")
    assert redis_client.hget(q.keys.prefix + "unique", fingerprint(URL)) == first.id
    dup = q.enqueue(Request(URL, headers={"X-A": "1"}, meta=1), unique="pending")
    assert (dup.status, dup.id) == ("duplicate", first.id)
    q2 = make_queue(queue="other")
    assert q2.enqueue(URL, unique="seen").added
    (done,) = q2.claim(1).jobs
    assert q2.ack(done) == "done"  # its fingerprint is released: the seen-set alone remembers
    assert q2.enqueue(Request(URL), unique="seen").status == "seen"
    assert q2.enqueue(Request(URL, method="POST"), unique="seen").added


@pytest.mark.parametrize(
    ("make", "word"),
    [
        (lambda: Request(URL, headers={"X-A": "1\r\nX-Injected: 1"}), "CR, LF"),
        (lambda: Request(URL, headers={"Bad Name": "1"}), "token"),
        (lambda: Request(URL, headers={"Content-Length": "3"}), "set by the fetcher"),
        (lambda: Request(URL, method="PO ST"), "HTTP method"),
        (lambda: Request(URL, cookies={"a": "x;y"}), "cookie"),
        (lambda: Request(URL, body="x", json={"a": 1}), "one of"),
        (lambda: Request(URL, meta={1, 2}), "JSON"),
    ],
)
def test_bad_requests_are_refused_with_a_reason(make: Callable[[], Request], word: str) -> None:
    with pytest.raises(ConfigError, match=word):
        make()


def test_body_and_payload_together_within_max_payload(make_queue: MakeQueue) -> None:
    q = make_queue(max_payload=1000)
    q.enqueue(Request(URL, method="POST", body="x" * 900))
    with pytest.raises(PayloadTooLarge, match="payload and request"):
        q.enqueue_many(
            [URL + "&n=1", Request(URL, method="POST", body="x" * 600)], payload={"p": "y" * 500}
        )
    assert q.counts()["enqueued"] == 1  # nothing of the refused batch
