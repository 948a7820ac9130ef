"""domain_ttl (issue 13): a domain with nothing queued or in flight and a closed breaker is
forgotten after domain_ttl by the bounded housekeeping of claims and reaps."""

from __future__ import annotations

from collections.abc import Callable

import redis

from scrapeq.engine.queue import Queue

MakeQueue = Callable[..., Queue]


def url(shop: int, page: int = 1) -> str:
    return f"https://shop-{shop}.example.com/p/{page}"


def dom(shop: int) -> str:
    return f"shop-{shop}.example.com"


def advance(q: Queue, seconds: float) -> None:
    q.testing_clock_offset_ms += round(seconds * 1000)


def test_idle_domains_are_forgotten_after_domain_ttl(
    make_queue: MakeQueue, redis_client: redis.Redis
) -> None:
    q = make_queue(domain_ttl=60, domain_concurrency=10)
    q.enqueue_many([url(i) for i in range(1, 6)])
    q.enqueue(url(6), delay=300)  # only a delayed job: not idle
    jobs = {j.domain: j for j in q.claim(10).jobs}
    assert set(jobs) == {dom(i) for i in range(1, 6)}
    for d in (dom(1), dom(2), dom(3)):
        assert q.ack(jobs[d]) == "done"
    assert q.fail(jobs[dom(4)], "http_404") == "dead"  # kept while it has dead letters
    q.domain_set(dom(3), delay=2.0)  # kept: an override set by hand
    # dom(5) stays in flight
    assert len(q.domain_names()) == 6

    advance(q, 30)
    q.reap()
    assert len(q.domain_names()) == 6, "not idle long enough yet"

    advance(q, 31)
    q.reap()
    assert set(q.domain_names()) == {dom(i) for i in range(3, 7)}
    assert redis_client.exists(q.keys.domain(dom(1)), q.keys.domain(dom(2))) == 0
    assert int(redis_client.hget(q.keys.stats, "domains_forgotten") or 0) == 2
    assert {d["domain"] for d in q.domains_info()} == {dom(i) for i in range(3, 7)}
    assert q.audit().problems == []

    # a forgotten domain comes back as new on its next job
    assert q.enqueue(url(1, 2)).status == "added"
    (again,) = q.claim(10).jobs
    assert again.domain == dom(1)
    assert q.ack(again) == "done"
    info = {d["domain"]: d for d in q.domains_info()}
    assert (info[dom(1)]["enqueued"], info[dom(1)]["done"]) == (1, 1)

    # once its dead letters are purged, the last one goes too (with the claims' housekeeping)
    assert q.purge(domain=dom(4)) == 1
    advance(q, 61)
    q.claim(1)
    assert dom(4) not in set(q.domain_names())
    assert dom(1) not in set(q.domain_names())


def test_a_domain_busy_again_is_not_forgotten(
    make_queue: MakeQueue, redis_client: redis.Redis
) -> None:
    q = make_queue(domain_ttl=60)
    q.enqueue(url(1))
    (job,) = q.claim(1).jobs
    q.ack(job)
    advance(q, 50)
    q.enqueue(url(1, 2))  # busy again before its ttl is over
    advance(q, 20)
    q.reap()
    assert dom(1) in set(q.domain_names())
    assert q.status()["counts"]["ready"] == 1
    (job,) = q.claim(1).jobs
    assert job.url == url(1, 2)


def test_domain_ttl_0_never_forgets(make_queue: MakeQueue, redis_client: redis.Redis) -> None:
    q = make_queue(domain_ttl=0)
    q.enqueue(url(1))
    (job,) = q.claim(1).jobs
    q.ack(job)
    advance(q, 10 * 86400)
    q.reap()
    assert set(q.domain_names()) == {dom(1)}
    assert redis_client.zcard(q.keys.prefix + "idle") == 0


def test_a_domain_whose_job_is_in_its_callback_is_not_forgotten(
    make_queue: MakeQueue, redis_client: redis.Redis
) -> None:
    """A job whose slot was given back at its download's end (``Queue.downloaded``) still
    holds its domain: with nothing else queued, its domain is not noted idle, so a callback
    longer than domain_ttl does not lose the domain's breaker, limit and counts."""
    q = make_queue(domain_ttl=60, domain_concurrency=10)
    q.enqueue(url(1))
    (job,) = q.claim(10).jobs
    assert q.downloaded([job]) == [True]
    assert redis_client.zscore(q.keys.prefix + "idle", dom(1)) is None
    advance(q, 61)
    assert q.heartbeat([job], lease=600) == [True]
    q.reap()
    assert q.domain_names() == [dom(1)]
    assert q.ack(job) == "done"
    assert redis_client.zscore(q.keys.prefix + "idle", dom(1)) is not None, "idle from its settle"
    assert q.audit().problems == []
