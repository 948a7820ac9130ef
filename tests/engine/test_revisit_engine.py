"""Revisits in the queue (revisit = on): settle schedules the next visit in the same call
(includes/revisit.lua), with the validators, past the seen-set, one chain per URL; budgets."""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable
from typing import Any

import pytest
import redis

from scrapeq.engine.model.job import Job
from scrapeq.engine.queue import Queue
from scrapeq.errors import ScriptError

pytestmark = pytest.mark.backends

URL = "http://site.test/page"
SIG_A, SIG_B = "0123456789abcdef", "fedcba9876543210"


def claim_one(q: Queue) -> Job:
    jobs = q.claim(1).jobs
    assert len(jobs) == 1
    return jobs[0]


def settle(q: Queue, job: Job, **fields: Any) -> str:
    return q.settle_many([dataclasses.replace(q.done(job), **fields)])[0]


def due_now(q: Queue, seconds: float) -> None:
    q.testing_clock_offset_ms += round(seconds * 1000)


def revisit_state(redis_url: str, backend: str) -> list[bytes]:
    """The packed states (raw bytes: a client that decodes nothing)."""
    client: Any = (redis.RedisCluster if backend == "cluster" else redis.Redis).from_url(redis_url)
    values: list[bytes] = []
    for key in client.scan_iter("sq:{default}:rv:*"):
        values.extend(client.hvals(key))
    client.close()
    return values


def test_a_done_page_comes_back_with_its_validators(
    make_queue: Callable[..., Queue], redis_client: redis.Redis, redis_url: str, backend: str
) -> None:
    q = make_queue(revisit="on", unique="seen", revisit_min_interval=1)
    q.enqueue(URL)
    first = claim_one(q)
    assert settle(q, first, signature=SIG_A, etag='"v1"', last_modified="Wed, 01 Jan 2025 "
                  "00:00:00 GMT") == "done"  # fmt: skip
    # the revisit is a delayed job of the same URL, though the seen-set has it
    assert q.enqueue(URL).status == "duplicate"
    assert q.claim(1).jobs == []
    [state] = revisit_state(redis_url, backend)
    assert len(state) == 28
    due_now(q, 3 * 86400)
    again = claim_one(q)
    assert again.url == URL and again.id != first.id
    assert (again.etag, again.last_modified) == ('"v1"', "Wed, 01 Jan 2025 00:00:00 GMT")
    assert again.rv_due is not None
    # a 304: done, the validators carried on, the page counted unchanged
    assert settle(q, again, not_modified=True) == "done"
    due_now(q, 40 * 86400)
    third = claim_one(q)
    assert third.etag == '"v1"'
    assert settle(q, third, signature=SIG_B) == "done"
    dom = redis_client.hgetall("sq:{default}:domain:site.test")
    assert int(dom["rvn"]) == 1 and float(dom["rvl"]) > 0
    assert int(redis_client.hget("sq:{default}:stats", "revisits") or 0) == 3
    # `domains` shows its revisit load and estimated freshness
    (info,) = q.domains_info(["site.test"])
    assert info["revisit_pages"] == 1 and abs(info["revisit_load"] - float(dom["rvl"])) < 1e-9
    assert 0 <= info["freshness"] <= 1


def test_a_second_job_of_the_url_takes_the_chain_over(
    make_queue: Callable[..., Queue], redis_client: redis.Redis
) -> None:
    q = make_queue(revisit="on", revisit_min_interval=1)
    q.enqueue(URL)
    settle(q, claim_one(q), signature=SIG_A)
    q.enqueue(URL)  # no de-duplication: a second job of the URL, now
    settle(q, claim_one(q), signature=SIG_A)
    due_now(q, 40 * 86400)
    jobs = q.claim(10).jobs
    assert len(jobs) == 2  # the first chain's revisit and the second's
    for job in jobs:
        settle(q, job, signature=SIG_A)
    due_now(q, 80 * 86400)
    # the overtaken chain ended: one revisit of the URL left
    assert len(q.claim(10).jobs) == 1


def test_max_bytes_stops_follow_ups_and_revisits(
    make_queue: Callable[..., Queue], redis_client: redis.Redis
) -> None:
    q = make_queue(revisit="on", max_bytes=1000, revisit_min_interval=1)
    q.enqueue("http://trap.test/cal?d=0")
    fetched = 0
    for day in range(1, 10):  # a calendar: each page links the next day
        jobs = q.claim(1).jobs
        if not jobs:
            break
        nxt = q.prepare(f"http://trap.test/cal?d={day}").child_of(jobs[0].id, day, jobs[0].url)
        settle(q, jobs[0], bytes_in=400, signature=SIG_A, follow=(nxt,))
        fetched += 1
    assert fetched == 3
    dom = redis_client.hgetall("sq:{default}:domain:trap.test")
    assert int(dom["bytes"]) == 1200  # three pages of 400: the third reached the cap
    assert int(dom["skipped"]) == 1 and int(dom["rvskip"]) == 1
    (info,) = q.domains_info(["trap.test"])
    assert (info["bytes"], info["skipped"], info["revisits_skipped"]) == (1200, 1, 1)
    figures = redis_client.hgetall("sq:{default}:stats")
    assert int(figures["links:max_bytes"]) == 1


def test_a_sitemap_lastmod_newer_than_the_last_visit_is_due_now(
    make_queue: Callable[..., Queue],
) -> None:
    q = make_queue(revisit="on", unique="seen", revisit_min_interval=1)
    q.enqueue(URL)
    settle(q, claim_one(q), signature=SIG_A)
    now_s = q.server_time() if hasattr(q, "server_time") else None
    old = dataclasses.replace(q.prepare(URL, unique="seen"), lastmod=1)
    assert q.enqueue_many([old])[0].status in ("duplicate", "seen")
    new = dataclasses.replace(q.prepare(URL, unique="seen"), lastmod=4_000_000_000)
    # issue 38, item 10: the pending revisit is made due now (was: a second job "added")
    revisit = q.enqueue_many([new])[0]
    assert revisit.status == "duplicate", now_s
    assert claim_one(q).id == revisit.id


#: 2100-01-01, a sitemap's lastmod newer than any visit (issue 38, item 10).
FAR = 4_102_444_800


def pending(q: Queue) -> int:
    counts = q.counts()
    return counts["ready"] + counts["delayed"] + counts["inflight"]


def test_a_fresher_lastmod_moves_the_pending_revisit_and_adds_no_job(
    make_queue: Callable[..., Queue],
) -> None:
    """Issue 38, item 10: one page listed 2,000 times with a far-future lastmod gave 2,000
    jobs per read. A fresher lastmod makes the URL's pending job due now; it never adds a
    second one, in one call or across calls, before or after the next visit."""
    q = make_queue(revisit="on", unique="seen", revisit_min_interval=1)
    q.enqueue(URL)
    settle(q, claim_one(q), signature=SIG_A, etag='"v1"')
    revisit = q.enqueue(URL)  # the revisit, due in days, holds the URL
    assert revisit.status == "duplicate" and pending(q) == 1 and q.claim(1).jobs == []
    spec = dataclasses.replace(q.prepare(URL, unique="seen"), lastmod=FAR)
    for calls in ([spec] * 2000, [spec] * 50, [spec]):
        answers = q.enqueue_many(calls)
        assert {(a.status, a.id) for a in answers} == {("duplicate", revisit.id)}
        assert pending(q) == 1
    due = claim_one(q)  # moved: due now, the revisit itself (its validators kept)
    assert (due.id, due.etag, due.url) == (revisit.id, '"v1"', URL)
    assert q.claim(10).jobs == [] and pending(q) == 1
    assert q.enqueue_many([spec] * 10)[0].status == "duplicate" and pending(q) == 1  # in flight
    settle(q, due, signature=SIG_A)
    # the next read: the lastmod is newer than this visit too; the next revisit moves
    nxt = q.enqueue_many([spec] * 100)
    assert len({(a.status, a.id) for a in nxt}) == 1 and nxt[0].status == "duplicate"
    assert pending(q) == 1
    again = claim_one(q)
    assert again.id == nxt[0].id and again.rv_due is not None and q.claim(10).jobs == []
    assert q.counts()["enqueued"] == 1  # the first job's: revisits are not enqueues
    assert q.audit().problems == []


def test_a_fresher_lastmod_with_nothing_pending_adds_one_job(
    make_queue: Callable[..., Queue],
) -> None:
    """With no pending job for the URL (its revisit cut by max_bytes), a fresher lastmod
    adds one job, which then holds the URL for the rest of the call and later calls."""
    q = make_queue(revisit="on", unique="seen", max_bytes=10, revisit_min_interval=1)
    q.enqueue(URL)
    settle(q, claim_one(q), bytes_in=100, signature=SIG_A)  # over max_bytes: no revisit
    assert pending(q) == 0
    spec = dataclasses.replace(q.prepare(URL, unique="seen"), lastmod=FAR)
    answers = q.enqueue_many([spec] * 2000)
    assert answers[0].status == "added"
    assert {(a.status, a.id) for a in answers[1:]} == {("duplicate", answers[0].id)}
    assert {a.status for a in q.enqueue_many([spec] * 20)} == {"duplicate"}
    assert pending(q) == 1 and len(q.claim(10).jobs) == 1
    assert q.audit().problems == []


def test_a_fresher_lastmod_keeps_the_spec_delay(make_queue: Callable[..., Queue]) -> None:
    """The moved job is due when a job of the spec would have been (its delay), never later
    than it already was."""
    q = make_queue(revisit="on", unique="seen", revisit_min_interval=86_400)
    q.enqueue(URL)
    settle(q, claim_one(q), signature=SIG_A)  # the revisit: in a day at least
    spec = dataclasses.replace(q.prepare(URL, unique="seen", delay=3600), lastmod=FAR)
    assert q.enqueue_many([spec])[0].status == "duplicate"
    due_now(q, 1800)
    assert q.claim(1).jobs == []
    due_now(q, 1801)
    assert claim_one(q).url == URL and pending(q) == 1


def test_bad_revisit_fields_are_refused_before_any_write(
    make_queue: Callable[..., Queue],
) -> None:
    q = make_queue(revisit="on")
    q.enqueue(URL)
    job = claim_one(q)
    for bad in ({"signature": "xyz"}, {"etag": "x" * 101}, {"last_modified": "a\nb"}):
        with pytest.raises(ScriptError):
            settle(q, job, **bad)
    assert settle(q, job) == "done"


def test_the_state_is_filed_under_the_urls_sha1_with_the_signatures_bytes(
    make_queue: Callable[..., Queue], redis_url: str, backend: str
) -> None:
    """The packed state's place and its signature's bytes, from hex digits (RV.unhex): the
    hash rv:<first 4 hex digits of the URL's SHA-1, as a number>, the field the next 16 as 8
    bytes, the value's last 8 bytes the signature's; as earlier versions filed them."""
    q = make_queue(revisit="on", unique="seen", domain_concurrency=20)
    urls = [f"http://site.test/page/{i}" for i in range(20)]
    q.enqueue_many(urls)
    jobs = q.claim(20).jobs
    assert sorted(j.url for j in jobs) == sorted(urls)
    sigs = {j.url: hashlib.sha1(j.url.encode()).hexdigest()[:16] for j in jobs}
    q.settle_many([dataclasses.replace(q.done(j), signature=sigs[j.url]) for j in jobs])
    client: Any = (redis.RedisCluster if backend == "cluster" else redis.Redis).from_url(redis_url)
    for url in urls:
        h = hashlib.sha1(url.encode()).hexdigest()
        value = client.hget(f"sq:{{default}}:rv:{int(h[:4], 16)}", bytes.fromhex(h[4:20]))
        assert value is not None and len(value) == 28, url
        assert value[20:] == bytes.fromhex(sigs[url])
    client.close()
