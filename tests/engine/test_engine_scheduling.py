"""The core engine against a real Redis: lanes with aging, per-domain politeness, claims.

Every test drives the sync :class:`Queue` and moves time with ``testing_clock_offset_ms``
instead of sleeping. Domains are named so that a tie broken by domain name would give the
wrong answer (``shop-1`` sorts first, so it holds the least urgent work).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
import redis

from scrapeq import Queue
from scrapeq.engine.model.job import Job
from scrapeq.engine.model.lanes import Lanes
from scrapeq.engine.queue import EnqueueResult
from scrapeq.errors import ConfigError, InvalidURL

pytestmark = pytest.mark.backends

MakeQueue = Callable[..., Queue]

SECOND = 1000


def url(shop: int, page: int | str = 1) -> str:
    return f"https://shop-{shop}.example.com/p/{page}"


def dom(shop: int) -> str:
    return f"shop-{shop}.example.com"


def advance(q: Queue, seconds: float) -> None:
    q.testing_clock_offset_ms += round(seconds * SECOND)


def claim_all(q: Queue, n: int = 100) -> list[Job]:
    return q.claim(n).jobs


# --- 1. lanes ------------------------------------------------------------------------------


def test_lanes_order_within_one_domain(make_queue: MakeQueue) -> None:
    q = make_queue(domain_concurrency=10)
    q.enqueue(url(1, "bulk"), lane="bulk")
    q.enqueue(url(1, "normal"), lane="normal")
    q.enqueue(url(1, "critical"), lane="critical")

    jobs = q.claim(3).jobs

    assert [j.lane for j in jobs] == ["critical", "normal", "bulk"]
    assert [j.url for j in jobs] == [url(1, "critical"), url(1, "normal"), url(1, "bulk")]


def test_lanes_order_across_domains(make_queue: MakeQueue) -> None:
    q = make_queue()
    q.enqueue(url(1), lane="bulk")
    q.enqueue(url(2), lane="normal")
    q.enqueue(url(3), lane="critical")

    jobs = q.claim(3).jobs

    assert [(j.domain, j.lane) for j in jobs] == [
        (dom(3), "critical"),
        (dom(2), "normal"),
        (dom(1), "bulk"),
    ]


def test_lane_order_one_claim_at_a_time(make_queue: MakeQueue) -> None:
    q = make_queue()
    for shop, lane in ((1, "bulk"), (2, "normal"), (3, "critical"), (4, "bulk"), (5, "normal")):
        q.enqueue(url(shop), lane=lane)

    lanes = []
    for _ in range(5):
        (job,) = q.claim(1).jobs
        lanes.append(job.lane)
        q.ack(job)

    assert lanes == ["critical", "normal", "normal", "bulk", "bulk"]


def test_within_a_lane_fifo_by_eligibility_one_domain(make_queue: MakeQueue) -> None:
    q = make_queue(domain_concurrency=10)
    for page in range(5):
        q.enqueue(url(1, page))
        advance(q, 1)

    assert [j.url for j in q.claim(10).jobs] == [url(1, p) for p in range(5)]


def test_within_a_lane_fifo_by_eligibility_across_domains(make_queue: MakeQueue) -> None:
    q = make_queue()
    order = [5, 3, 1, 4, 2]
    for shop in order:
        q.enqueue(url(shop), lane="bulk")
        advance(q, 1)

    assert [j.domain for j in q.claim(10).jobs] == [dom(s) for s in order]


def test_fifo_follows_eligibility_not_enqueue_order(make_queue: MakeQueue) -> None:
    q = make_queue(domain_concurrency=10)
    q.enqueue(url(1, "late"), delay=5)
    q.enqueue(url(2, "early"), delay=2)
    q.enqueue(url(1, "earliest"), delay=1)
    advance(q, 6)

    assert [j.url for j in q.claim(10).jobs] == [
        url(1, "earliest"),
        url(2, "early"),
        url(1, "late"),
    ]


def test_strict_lanes_never_interleave(make_queue: MakeQueue) -> None:
    q = make_queue(lanes=Lanes.parse("strict"))
    q.enqueue(url(1), lane="bulk")
    advance(q, 365 * 86_400)
    q.enqueue(url(2), lane="normal")
    advance(q, 365 * 86_400)
    q.enqueue(url(3), lane="critical")

    assert [j.lane for j in q.claim(3).jobs] == ["critical", "normal", "bulk"]


def test_fifo_ties_keep_enqueue_order(make_queue: MakeQueue) -> None:
    q = make_queue(domain_concurrency=100)
    urls = [url(1, page) for page in range(20)]
    q.enqueue_many(urls)

    assert [j.url for j in q.claim(20).jobs] == urls


# --- 2. aging ------------------------------------------------------------------------------


def test_bulk_job_older_than_its_offset_beats_fresh_normal(make_queue: MakeQueue) -> None:
    q = make_queue()
    q.enqueue(url(2), lane="bulk")
    advance(q, 21_601)
    q.enqueue(url(1), lane="normal")

    (job,) = q.claim(1).jobs

    assert (job.domain, job.lane) == (dom(2), "bulk")


def test_bulk_job_older_than_its_offset_beats_fresh_normal_same_domain(
    make_queue: MakeQueue,
) -> None:
    q = make_queue()
    q.enqueue(url(1, "bulk"), lane="bulk")
    advance(q, 21_601)
    q.enqueue(url(1, "normal"), lane="normal")

    assert [j.lane for j in q.claim(2).jobs] == ["bulk", "normal"]


def test_bulk_job_younger_than_its_offset_loses_to_fresh_normal(make_queue: MakeQueue) -> None:
    q = make_queue()
    q.enqueue(url(2), lane="bulk")
    advance(q, 21_599)
    q.enqueue(url(1), lane="normal")

    (job,) = q.claim(1).jobs

    assert (job.domain, job.lane) == (dom(1), "normal")


def test_bulk_job_eligible_now_is_claimable(make_queue: MakeQueue) -> None:
    q = make_queue()
    added = q.enqueue(url(1), lane="bulk")

    claimed = q.claim(1)

    assert [(j.id, j.lane) for j in claimed.jobs] == [(added.id, "bulk")]


def test_delayed_bulk_job_is_claimable_once_due(make_queue: MakeQueue) -> None:
    q = make_queue()
    added = q.enqueue(url(1), lane="bulk", delay=5)
    advance(q, 4)
    assert q.claim(1).jobs == []
    advance(q, 1.1)

    assert [j.id for j in q.claim(1).jobs] == [added.id]


def test_critical_lane_does_not_skip_its_delay(make_queue: MakeQueue) -> None:
    q = make_queue()
    q.enqueue(url(1), lane="critical", delay=30)

    claimed = q.claim(1)

    assert claimed.jobs == []
    assert claimed.next_due == pytest.approx(30, abs=0.5)


# --- 3. retries keep their lane and really wait ------------------------------------------


def test_delayed_critical_retry_really_waits(make_queue: MakeQueue) -> None:
    q = make_queue()
    critical = q.enqueue(url(1, "critical"), lane="critical")
    (job,) = q.claim(1).jobs
    assert job.id == critical.id

    assert q.retry(job, delay=30) == "retried"

    advance(q, 10)
    fresh = q.enqueue(url(1, "fresh"), lane="normal")
    assert [j.id for j in q.claim(10).jobs] == [fresh.id]

    advance(q, 21)  # +31 s after the retry
    later = q.enqueue(url(1, "later"), lane="normal")
    got = q.claim(1).jobs
    assert [(j.id, j.lane, j.attempts) for j in got] == [(critical.id, "critical", 2)]
    assert later.id not in {j.id for j in got}


def test_retried_bulk_job_keeps_its_lane_and_priority(make_queue: MakeQueue) -> None:
    q = make_queue()
    bulk = q.enqueue(url(1), lane="bulk")
    (job,) = q.claim(1).jobs
    assert q.retry(job, delay=1) == "retried"
    assert q.status()["lanes"]["bulk"]["delayed"] == 1
    advance(q, 2)
    normal = q.enqueue(url(2), lane="normal")

    first, second = q.claim(2).jobs

    assert (first.id, first.lane) == (normal.id, "normal")
    assert (second.id, second.lane, second.attempts) == (bulk.id, "bulk", 2)


def test_retried_critical_job_keeps_its_lane_priority(make_queue: MakeQueue) -> None:
    q = make_queue()
    critical = q.enqueue(url(1), lane="critical")
    (job,) = q.claim(1).jobs
    q.retry(job, delay=100)
    advance(q, 1)
    older = q.enqueue(url(2), lane="normal")  # eligible 99 s before the retry
    advance(q, 100)
    fresh = q.enqueue(url(3), lane="normal")

    assert [j.id for j in q.claim(3).jobs] == [critical.id, older.id, fresh.id]


# --- 4. politeness: the concurrency cap --------------------------------------------------


def test_domain_concurrency_cap(make_queue: MakeQueue) -> None:
    q = make_queue(domain_concurrency=2)
    q.enqueue_many([url(1, p) for p in range(10)])

    first = q.claim(10).jobs
    assert len(first) == 2
    assert q.claim(10).jobs == []

    q.ack(first[0])
    assert len(q.claim(10).jobs) == 1
    assert q.claim(10).jobs == []

    assert q.domain_set(dom(1), concurrency=5) == {
        "domain": dom(1),
        "delay": 0.0,
        "concurrency": 5,
        "adaptive": False,
        "fetcher": None,  # the domain's own (issue 42): none set
        "browser_wait_for": None,  # its browser pages wait for no selector
    }
    assert len(q.claim(10).jobs) == 3
    assert q.claim(10).jobs == []
    (info,) = q.domains_info([dom(1)])
    assert (info["inflight"], info["ready"], info["done"]) == (5, 4, 1)


def test_capped_domain_does_not_block_other_domains(make_queue: MakeQueue) -> None:
    q = make_queue(domain_concurrency=2)
    q.enqueue_many([url(1, p) for p in range(10)], lane="critical")
    advance(q, 1)
    others = q.enqueue_many([url(2, p) for p in range(2)] + [url(3, p) for p in range(2)])

    jobs = q.claim(10).jobs

    assert Counter(j.domain for j in jobs) == {dom(1): 2, dom(2): 2, dom(3): 2}
    assert {r.id for r in others} <= {j.id for j in jobs}
    assert q.claim(10).jobs == []


def test_capped_domain_admits_other_domains_later(make_queue: MakeQueue) -> None:
    q = make_queue(domain_concurrency=2)
    q.enqueue_many([url(1, p) for p in range(10)])
    assert len(q.claim(10).jobs) == 2
    late = q.enqueue(url(2), lane="bulk")

    assert [j.id for j in q.claim(10).jobs] == [late.id]


# --- 5. politeness: the delay between request starts ------------------------------------


def test_domain_delay_spaces_request_starts(make_queue: MakeQueue) -> None:
    q = make_queue(domain_delay=5)
    a, b = q.enqueue_many([url(1, "a"), url(1, "b")])

    assert [j.id for j in q.claim(10).jobs] == [a.id]
    waiting = q.claim(10)
    assert waiting.jobs == []
    assert waiting.next_due == pytest.approx(5, abs=0.3)

    advance(q, 4)
    waiting = q.claim(10)
    assert waiting.jobs == []
    assert waiting.next_due == pytest.approx(1, abs=0.3)

    advance(q, 1.1)
    assert [j.id for j in q.claim(10).jobs] == [b.id]


def test_domain_delay_does_not_hold_other_domains(make_queue: MakeQueue) -> None:
    q = make_queue(domain_delay=5)
    q.enqueue_many([url(1, "a"), url(1, "b"), url(2, "a"), url(2, "b")])

    assert sorted(j.domain for j in q.claim(10).jobs) == [dom(1), dom(2)]
    assert q.claim(10).jobs == []


def test_domain_delay_override(make_queue: MakeQueue) -> None:
    q = make_queue(domain_delay=5)
    assert q.domain_set(dom(1), delay=0) == {
        "domain": dom(1),
        "delay": 0.0,
        "concurrency": 2,
        "adaptive": True,
        "fetcher": None,
        "browser_wait_for": None,
    }
    q.domain_set(dom(2), delay=10, concurrency=3)
    q.enqueue_many([url(s, p) for s in (1, 2, 3) for p in range(3)])

    assert Counter(j.domain for j in q.claim(20).jobs) == {dom(1): 2, dom(2): 1, dom(3): 1}

    info = {i["domain"]: i for i in q.domains_info([dom(1), dom(2), dom(3)])}
    assert (info[dom(1)]["delay_ms"], info[dom(1)]["concurrency"]) == (0, 2)
    assert (info[dom(2)]["delay_ms"], info[dom(2)]["concurrency"]) == (10_000, 3)
    assert (info[dom(3)]["delay_ms"], info[dom(3)]["concurrency"]) == (5_000, 2)

    advance(q, 5.5)
    assert Counter(j.domain for j in q.claim(20).jobs) == {dom(3): 1}
    advance(q, 5.5)  # shop-3 is now at its cap of 2; shop-2's 10 s slot has come
    assert Counter(j.domain for j in q.claim(20).jobs) == {dom(2): 1}


# --- 6. next_due ---------------------------------------------------------------------------


def test_next_due_none_when_queue_is_empty(make_queue: MakeQueue) -> None:
    q = make_queue()
    claimed = q.claim(10)
    assert claimed.jobs == []
    assert claimed.next_due is None


def test_next_due_zero_when_jobs_are_ready(make_queue: MakeQueue) -> None:
    q = make_queue()
    q.enqueue_many([url(1), url(2), url(3)])

    claimed = q.claim(1)

    assert len(claimed.jobs) == 1
    assert claimed.next_due == 0.0


def test_next_due_none_again_once_everything_is_done(make_queue: MakeQueue) -> None:
    q = make_queue()
    q.enqueue_many([url(1), url(2)])
    jobs = q.claim(10).jobs
    held = q.claim(10)
    assert held.jobs == []
    assert held.next_due == pytest.approx(60, abs=0.5)  # only the leases are scheduled

    assert q.settle_many([q.done(j) for j in jobs]) == ["done", "done"]
    claimed = q.claim(10)
    assert claimed.jobs == []
    assert claimed.next_due is None


def test_next_due_counts_down_to_a_delayed_job(make_queue: MakeQueue) -> None:
    q = make_queue()
    q.enqueue(url(1), delay=20)
    assert q.claim(1).next_due == pytest.approx(20, abs=0.3)
    advance(q, 15)
    assert q.claim(1).next_due == pytest.approx(5, abs=0.3)


# --- 7. no double claim under concurrency ------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_no_double_claim_with_concurrent_workers(
    make_queue: MakeQueue, redis_client: redis.Redis
) -> None:
    total, domains, workers = 10_000, 200, 8
    producer = make_queue(domain_concurrency=1000, status_top=domains)  # every domain shown
    added = producer.enqueue_many([url(i % domains, i) for i in range(total)])
    assert len({r.id for r in added}) == total
    assert all(r.status == "added" for r in added)

    queues = [make_queue(domain_concurrency=1000) for _ in range(workers)]
    claimed: list[list[tuple[str, int]]] = [[] for _ in range(workers)]
    outcomes: list[Counter[str]] = [Counter() for _ in range(workers)]
    errors: list[BaseException] = []
    start = threading.Barrier(workers)
    deadline = time.monotonic() + 40

    def work(k: int) -> None:
        q = queues[k]
        idle = 0
        try:
            start.wait()
            while time.monotonic() < deadline and idle < 20:
                got = q.claim(50)
                if not got.jobs:
                    idle += 1
                    time.sleep(0.005)
                    continue
                idle = 0
                claimed[k].extend((j.id, j.token) for j in got.jobs)
                outcomes[k].update(q.settle_many([q.done(j) for j in got.jobs]))
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(workers)]
    began = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=50)
    elapsed = time.monotonic() - began

    assert not errors, errors
    assert not any(t.is_alive() for t in threads)
    assert elapsed < 40
    ids = Counter(i for per in claimed for i, _ in per)
    assert set(ids) == {r.id for r in added}
    assert [i for i, n in ids.items() if n != 1] == []
    tokens = [tok for per in claimed for _, tok in per]
    assert len(set(tokens)) == total
    assert sum(outcomes, Counter()) == {"done": total}
    assert sum(1 for per in claimed if per) > 1, "the work was not shared between threads"

    status = producer.status()
    assert status["counts"] == {
        "enqueued": total,
        "ready": 0,
        "delayed": 0,
        "inflight": 0,
        "done": total,
        "dead": 0,
        "cancelled": 0,
    }
    assert len(status["domains"]) == domains
    assert all(d["done"] == total // domains for d in status["domains"])
    assert redis_client.keys("sq:{default}:job:*") == []


# --- 8. unique -----------------------------------------------------------------------------


def test_unique_enqueue_skips_a_pending_duplicate(make_queue: MakeQueue) -> None:
    q = make_queue()
    first = q.enqueue(url(1), unique=True)
    second = q.enqueue(url(1), unique=True)

    assert first.status == "added"
    assert (second.status, second.id, second.added) == ("duplicate", first.id, False)
    assert q.status()["counts"]["enqueued"] == 1


def test_unique_duplicate_while_claimed_then_free_after_done(make_queue: MakeQueue) -> None:
    q = make_queue()
    first = q.enqueue(url(1), unique=True)
    (job,) = q.claim(1).jobs
    assert q.enqueue(url(1), unique=True).status == "duplicate"

    q.ack(job)
    again = q.enqueue(url(1), unique=True)

    assert again.status == "added"
    assert again.id != first.id
    assert q.enqueue(url(1), unique=True) == EnqueueResult(again.id, "duplicate")


def test_unique_duplicate_while_retrying_then_free_after_dead(make_queue: MakeQueue) -> None:
    q = make_queue()
    q.enqueue(url(1), unique=True)
    (job,) = q.claim(1).jobs
    q.retry(job, delay=5)
    assert q.enqueue(url(1), unique=True).status == "duplicate"
    advance(q, 6)
    (job,) = q.claim(1).jobs
    assert q.fail(job, "http_404") == "dead"

    assert q.enqueue(url(1), unique=True).status == "added"


@pytest.mark.parametrize(
    "spelling",
    [
        "https://shop-1.example.com:443/p/1",
        "https://shop-1.example.com/p/1#reviews",
        "HTTPS://Shop-1.Example.COM:443/p/1#x",
        "https://shop-1.example.com./p/1",
    ],
)
def test_unique_treats_equivalent_spellings_as_duplicates(
    make_queue: MakeQueue, spelling: str
) -> None:
    q = make_queue()
    first = q.enqueue(url(1), unique=True)

    dup = q.enqueue(spelling, unique=True)

    assert (dup.status, dup.id) == ("duplicate", first.id)


def test_unique_distinguishes_different_urls(make_queue: MakeQueue) -> None:
    q = make_queue()
    results = q.enqueue_many(
        [
            url(1),
            url(1) + "?page=2",
            "http://shop-1.example.com/p/1",
            "https://shop-1.example.com:8443/p/1",
            url(1, 2),
            url(1),
        ],
        unique=True,
    )

    assert [r.status for r in results] == ["added"] * 5 + ["duplicate"]
    assert results[-1].id == results[0].id


def test_non_unique_enqueue_ignores_the_fingerprint(make_queue: MakeQueue) -> None:
    q = make_queue()
    first = q.enqueue(url(1), unique=True)
    plain = q.enqueue(url(1))

    assert plain.status == "added"
    assert plain.id != first.id


# --- 9. expires ----------------------------------------------------------------------------


def test_unclaimed_job_expires_at_claim(make_queue: MakeQueue) -> None:
    q = make_queue()
    job_id = q.enqueue(url(1), expires=10).id
    advance(q, 11)

    claimed = q.claim(10)

    assert claimed.jobs == []
    (dead,) = q.dead_letters()
    assert (dead.id, dead.dead_reason) == (job_id, "expired")
    assert dead.last_error is not None and dead.last_error.kind == "expired"
    status = q.status()
    assert status["counts"]["dead"] == 1
    assert status["counts"]["ready"] == 0
    assert status["lanes"]["normal"]["ready"] == 0
    assert status["domains"][0]["dead"] == 1
    assert status["domains"][0]["ready"] == 0


def test_job_claimed_before_it_expires_is_delivered(make_queue: MakeQueue) -> None:
    q = make_queue()
    job_id = q.enqueue(url(1), expires=10).id
    advance(q, 9)

    assert [j.id for j in q.claim(10).jobs] == [job_id]


def test_expired_job_lets_the_next_one_through(make_queue: MakeQueue) -> None:
    q = make_queue(domain_concurrency=10)
    q.enqueue(url(1, "short"), expires=10)
    keeper = q.enqueue(url(1, "long"), expires=100)
    advance(q, 11)

    assert [j.id for j in q.claim(10).jobs] == [keeper.id]
    assert [d.dead_reason for d in q.dead_letters()] == ["expired"]


def test_delayed_job_that_expires_before_due_is_dead_lettered(make_queue: MakeQueue) -> None:
    q = make_queue()
    q.enqueue(url(1), delay=20, expires=10, unique=True)
    advance(q, 21)

    assert q.claim(10).jobs == []
    assert [d.dead_reason for d in q.dead_letters()] == ["expired"]
    assert q.status()["counts"]["delayed"] == 0
    assert q.enqueue(url(1), unique=True).status == "added"


# --- 10. bad input changes nothing ----------------------------------------------------------

GOOD = url(1)

BAD_ENQUEUES = [
    pytest.param(("ftp://shop-1.example.com/x",), {}, InvalidURL, "scheme", id="ftp"),
    pytest.param(("https://127.0.0.1/x",), {}, InvalidURL, "private", id="loopback"),
    pytest.param(("http://localhost:8080/",), {}, InvalidURL, "private", id="localhost"),
    pytest.param(("",), {}, InvalidURL, "empty", id="empty"),
    pytest.param(("https:///nohost",), {}, InvalidURL, "host", id="no-host"),
    pytest.param((GOOD,), {"lane": "urgent"}, ConfigError, "lane", id="unknown-lane"),
    pytest.param((GOOD,), {"delay": -1}, ConfigError, "delay", id="negative-delay"),
    pytest.param((GOOD,), {"delay": float("nan")}, ConfigError, "delay", id="nan-delay"),
    pytest.param((GOOD,), {"max_attempts": 0}, ConfigError, "max_attempts", id="attempts-0"),
    pytest.param((GOOD,), {"max_attempts": 1.5}, ConfigError, "max_attempts", id="attempts-f"),
    pytest.param((GOOD,), {"payload": object()}, ConfigError, "payload", id="payload-object"),
    pytest.param((GOOD,), {"payload": {1, 2}}, ConfigError, "payload", id="payload-set"),
    pytest.param(
        (GOOD,), {"payload": {"x": float("nan")}}, ConfigError, "payload", id="payload-nan"
    ),
    pytest.param((GOOD,), {"expires": 0}, ConfigError, "expires", id="expires-0"),
]


@pytest.mark.parametrize(("args", "options", "error", "names"), BAD_ENQUEUES)
def test_bad_enqueue_raises_and_writes_nothing(
    make_queue: MakeQueue,
    redis_client: redis.Redis,
    args: tuple[str],
    options: dict[str, Any],
    error: type[Exception],
    names: str,
) -> None:
    q = make_queue()
    with pytest.raises(error, match=names):
        q.enqueue(*args, **options)
    with pytest.raises(error, match=names):
        q.enqueue_many([GOOD, *args, url(2)], **options)

    assert redis_client.keys("sq:*") == []


def test_enqueue_many_with_one_bad_url_writes_none(
    make_queue: MakeQueue, redis_client: redis.Redis
) -> None:
    q = make_queue()
    urls = [url(i) for i in range(600)]  # more than one script call's chunk of 500
    urls[550] = "https://10.0.0.1/internal"

    with pytest.raises(InvalidURL, match="private"):
        q.enqueue_many(urls)

    assert redis_client.keys("sq:*") == []
    assert q.claim(10).next_due is None


def test_bad_claim_size_raises_and_writes_nothing(
    make_queue: MakeQueue, redis_client: redis.Redis
) -> None:
    q = make_queue()
    for n in (0, -1, True, 1.0, 1001):
        with pytest.raises(ConfigError, match="claim size"):
            q.claim(n)  # type: ignore[arg-type]
    assert redis_client.keys("sq:*") == []


# --- 11. payload round trip ----------------------------------------------------------------

PAYLOADS = [
    pytest.param(
        {
            "big": 2**62,
            "bigger": 2**100,
            "negative": -(2**63) + 1,
            "float": 0.1,
            "nested": [[1, [2, [3, [4]]]], {"a": [{"b": []}]}],
            "empty_list": [],
            "empty_dict": {},
            "unicode": "héllo ☃ 日本語 😀",
            "escapes": 'a/b\\c"d\n\t\x00',
            "null": None,
            "flags": [True, False],
        },
        id="mixed",
    ),
    pytest.param([], id="empty-list"),
    pytest.param({}, id="empty-dict"),
    pytest.param(2**62, id="big-int"),
    pytest.param(-(2**62) - 1, id="negative-big-int"),
    pytest.param(0, id="zero"),
    pytest.param(False, id="false"),
    pytest.param("", id="empty-string"),
    pytest.param("😀", id="emoji"),
    pytest.param([[[[[[[[[[[]]]]]]]]]]], id="deep"),
    pytest.param({"k" * 300: "v" * 100_000}, id="large"),
]


@pytest.mark.parametrize("payload", PAYLOADS)
def test_payload_survives_claim_exactly(make_queue: MakeQueue, payload: Any) -> None:
    q = make_queue()
    q.enqueue(url(1), payload=payload)

    (job,) = q.claim(1).jobs

    assert job.payload == payload
    assert type(job.payload) is type(payload)


def test_payload_survives_retry_and_dead_letter(make_queue: MakeQueue) -> None:
    payload = {"big": 2**62, "list": [[], {}], "text": "ünïcödé 😀"}
    q = make_queue()
    q.enqueue(url(1), payload=payload)
    (job,) = q.claim(1).jobs
    q.retry(job, delay=1)
    advance(q, 2)
    (job,) = q.claim(1).jobs
    assert job.payload == payload
    q.fail(job, "http_404")

    (dead,) = q.dead_letters()
    assert dead.payload == payload
    assert q.get_job(dead.id) == dead


def test_no_payload_is_none(make_queue: MakeQueue) -> None:
    q = make_queue()
    q.enqueue(url(1))
    (job,) = q.claim(1).jobs
    assert job.payload is None


def test_unicode_url_round_trips(make_queue: MakeQueue) -> None:
    q = make_queue()
    q.enqueue("https://xn--bcher-kva.example/ä?q=日本")
    (job,) = q.claim(1).jobs
    assert job.url == "https://xn--bcher-kva.example/ä?q=日本"
    assert job.domain == "xn--bcher-kva.example"


# --- 12. the status schema -----------------------------------------------------------------

STATUS_KEYS = {
    "queue", "counts", "lanes", "domains", "breakers", "paused_until", "alarms", "owed_lines",
}  # fmt: skip
COUNT_KEYS = {"enqueued", "ready", "delayed", "inflight", "done", "dead", "cancelled"}
LANE_KEYS = {"ready", "delayed", "oldest_ready_age"}
DOMAIN_KEYS = {
    "domain",
    "state",
    "ready",
    "delayed",
    "inflight",
    "done",
    "dead",
    "consecutive_failures",
    "window_failures",
    "window_calls",
    "open_until",
    "concurrency",
    "adaptive",
    "limit",
    "interval",
    "interval_ms",
    "baseline",
    "baseline_ms",
    "latency",
    "latency_ms",
}


def test_status_schema_of_an_empty_queue(make_queue: MakeQueue) -> None:
    status = make_queue().status()

    assert status == {
        "queue": "default",
        "counts": dict.fromkeys(COUNT_KEYS, 0),
        "lanes": {
            lane: {"ready": 0, "delayed": 0, "oldest_ready_age": 0.0}
            for lane in ("critical", "normal", "bulk")
        },
        "domains": [],
        "breakers": {"closed": 0, "open": 0, "retired": 0},
        "paused_until": None,
        "alarms": [],
        "owed_lines": 0,
    }
    assert list(status["lanes"]) == ["critical", "normal", "bulk"]


def test_status_counts_lanes_and_domains(make_queue: MakeQueue) -> None:
    q = make_queue(lease=600, domain_concurrency=2)
    port_domain = "shop-4.example.com:8443"
    q.enqueue_many([url(1, "a"), url(1, "b")], lane="normal")
    q.enqueue(url(1, "c"), lane="normal", delay=60)
    q.enqueue_many([url(2, "a"), url(2, "b")], lane="critical")
    q.enqueue(url(2, "c"), lane="bulk", delay=120)
    q.enqueue(url(3, "a"), lane="bulk")
    q.enqueue(f"https://{port_domain}/x", lane="critical", delay=30)

    b1, b2 = q.claim(2).jobs  # both critical jobs of shop-2
    assert {b1.domain, b2.domain} == {dom(2)}
    assert q.ack(b1) == "done"
    assert q.fail(b2, "http_404") == "dead"
    (a1,) = q.claim(1).jobs  # the oldest normal job beats the bulk one
    assert (a1.url, a1.lane) == (url(1, "a"), "normal")

    advance(q, 10)
    status = q.status()

    assert set(status) == STATUS_KEYS
    assert status["queue"] == "default"
    assert status["counts"] == {
        "enqueued": 8,
        "ready": 2,
        "delayed": 3,
        "inflight": 1,
        "done": 1,
        "dead": 1,
        "cancelled": 0,
    }
    lanes = status["lanes"]
    assert list(lanes) == ["critical", "normal", "bulk"]
    assert all(set(v) == LANE_KEYS for v in lanes.values())
    assert {k: (v["ready"], v["delayed"]) for k, v in lanes.items()} == {
        "critical": (0, 1),
        "normal": (1, 1),
        "bulk": (1, 1),
    }
    assert lanes["critical"]["oldest_ready_age"] == 0.0
    assert lanes["normal"]["oldest_ready_age"] == pytest.approx(10, abs=0.5)
    assert lanes["bulk"]["oldest_ready_age"] == pytest.approx(10, abs=0.5)

    domains = {d["domain"]: d for d in status["domains"]}
    assert [d["domain"] for d in status["domains"]] == sorted(domains)
    assert set(domains) == {dom(1), dom(2), dom(3), port_domain}
    assert all(set(d) == DOMAIN_KEYS for d in status["domains"])

    def figures(d: str) -> tuple[int, ...]:
        info = domains[d]
        return tuple(info[k] for k in ("ready", "delayed", "inflight", "done", "dead"))

    assert figures(dom(1)) == (1, 1, 1, 0, 0)
    assert figures(dom(2)) == (0, 1, 0, 1, 1)
    assert figures(dom(3)) == (1, 0, 0, 0, 0)
    assert figures(port_domain) == (0, 1, 0, 0, 0)
    assert all(d["state"] == "closed" for d in status["domains"])
    assert all(d["consecutive_failures"] == 0 for d in status["domains"])
    assert all(d["open_until"] is None for d in status["domains"])
    assert status["paused_until"] is None
    assert status["alarms"] == []

    advance(q, 20)
    lanes = q.status()["lanes"]
    assert lanes["normal"]["oldest_ready_age"] == pytest.approx(30, abs=0.5)
    assert lanes["bulk"]["oldest_ready_age"] == pytest.approx(30, abs=0.5)


def test_status_after_delayed_jobs_become_ready(make_queue: MakeQueue) -> None:
    q = make_queue(lease=600, domain_concurrency=10)
    q.enqueue(url(1, "now"), lane="normal")
    q.enqueue(url(1, "soon"), lane="normal", delay=60)
    q.enqueue(url(2, "soon"), lane="critical", delay=30)
    advance(q, 61)
    q.reap()  # promotes the due jobs (status itself is read-only)

    status = q.status()

    assert status["counts"]["ready"] == 3
    assert status["counts"]["delayed"] == 0
    lanes = status["lanes"]
    assert (lanes["normal"]["ready"], lanes["normal"]["delayed"]) == (2, 0)
    assert (lanes["critical"]["ready"], lanes["critical"]["delayed"]) == (1, 0)
    assert lanes["normal"]["oldest_ready_age"] == pytest.approx(61, abs=0.5)
    domains = {d["domain"]: d for d in status["domains"]}
    assert (domains[dom(1)]["ready"], domains[dom(1)]["delayed"]) == (2, 0)
    assert (domains[dom(2)]["ready"], domains[dom(2)]["delayed"]) == (1, 0)

    jobs = q.claim(10).jobs
    assert [j.url for j in jobs] == [url(2, "soon"), url(1, "now"), url(1, "soon")]
    status = q.status()
    assert status["counts"]["ready"] == 0
    assert status["counts"]["inflight"] == 3
    assert all(v["oldest_ready_age"] == 0.0 for v in status["lanes"].values())


# --- 13. status at many domains (issue 13) --------------------------------------------------


def test_status_details_at_most_status_top_domains_worth_showing(
    make_queue: MakeQueue, redis_client: redis.Redis
) -> None:
    """Past status_top domains, status details the unwell, the latest dead letters' and the
    most urgent ready domains, and counts the rest without reading them."""
    q = make_queue(status_top=3, domain_concurrency=10)
    q.enqueue_many([url(i) for i in range(10)])  # 10 domains, one ready job each
    q.enqueue(url(20), delay=600)  # a domain with only a delayed job
    (first,) = q.claim(1).jobs
    assert q.fail(first, "http_404") == "dead"
    q.breaker_trip(dom(5))

    calls: list[str] = []
    real_step = q._step

    def counting(step):  # type: ignore[no-untyped-def]
        calls.append(getattr(step, "script", None) or str(step.args[0]))
        return real_step(step)

    q._step = counting  # type: ignore[method-assign]
    status = q.status()
    assert calls == ["status", "domain_info", "INFO"]

    shown = [d["domain"] for d in status["domains"]]
    assert shown == sorted(shown) and len(shown) == 3
    # the tripped domain, the dead letter's domain, then the most urgent ready one
    assert set(shown) == {dom(5), first.domain, dom(1) if first.domain != dom(1) else dom(2)}
    assert status["counts"]["ready"] == 9 and status["counts"]["delayed"] == 1
    assert q.figures()["open_breakers"] == 1
    assert len(q.domains_info()) == 11


@pytest.mark.parametrize("partitions", [1, 3])
def test_an_urgent_only_claim_takes_the_most_urgent_lane_and_nothing_else(
    make_queue: MakeQueue, partitions: int
) -> None:
    """``claim(n, urgent_only=True)`` (a share of a client's slots kept for urgent work)
    takes critical jobs only: none of another lane, not even of a domain that also has
    critical work, and leases nothing when no critical job is ready."""
    q = make_queue(domain_concurrency=10, partitions=partitions)
    q.enqueue_many([url(1, p) for p in range(3)])  # normal work first in the queue
    q.enqueue_many([url(2, p) for p in range(3)], lane="bulk")
    assert q.claim(5, urgent_only=True).jobs == []
    assert q.counts()["inflight"] == 0

    q.enqueue_many([url(3, f"c{p}") for p in range(2)], lane="critical")
    q.enqueue(url(1, "c"), lane="critical")  # shop-1 holds normal and critical work
    taken = q.claim(10, urgent_only=True).jobs
    assert sorted(j.url for j in taken) == sorted([url(3, "c0"), url(3, "c1"), url(1, "c")])
    assert {j.lane for j in taken} == {"critical"}
    assert q.claim(10, urgent_only=True).jobs == []
    # the rest is still there for an ordinary claim, most urgent lane first
    rest = q.claim(10).jobs
    assert [j.lane for j in rest] == ["normal"] * 3 + ["bulk"] * 3
