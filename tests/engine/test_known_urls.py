"""The engine's two operations for the URLFrontier service (issue 43): a known URL's import
(``EnqueueSpec.at_ms``: the seen-set, and a job due at a given time or none) and a claim of
one domain's jobs (``claim(domain=)``), on one partition and on several."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

import pytest

from scrapeq import Queue

pytestmark = pytest.mark.backends


def known(q: Queue, url: str, at_s: float) -> str:
    spec = dataclasses.replace(q.prepare(url, unique="seen"), at_ms=int(at_s * 1000))
    (result,) = q.enqueue_many([spec])
    return result.status


@pytest.mark.parametrize("partitions", [1, 3])
def test_a_known_url_due_never_is_only_seen(
    make_queue: Callable[..., Queue], partitions: int
) -> None:
    q = make_queue(partitions=partitions)
    assert known(q, "http://k.example/a", 0) == "known"
    assert q.counts()["ready"] == 0
    assert q.enqueue("http://k.example/a", unique="seen").status == "seen"
    assert q.claim(5).jobs == []


@pytest.mark.parametrize("partitions", [1, 3])
def test_known_urls_come_in_the_order_of_their_dates(
    make_queue: Callable[..., Queue], partitions: int
) -> None:
    q = make_queue(partitions=partitions, domain_concurrency=10)
    now = time.time()
    assert known(q, "http://k.example/now", now) == "added"
    assert known(q, "http://k.example/long-ago", now - 10_000) == "added"
    assert known(q, "http://k.example/later", now + 3600) == "added"
    jobs = q.claim(5).jobs
    assert [j.url for j in jobs] == ["http://k.example/long-ago", "http://k.example/now"]
    assert q.counts()["delayed"] == 1


def test_a_known_url_held_by_a_pending_job_is_refused(make_queue: Callable[..., Queue]) -> None:
    q = make_queue()
    held = q.enqueue("http://k.example/a", unique="seen").id
    spec = dataclasses.replace(q.prepare("http://k.example/a", unique="seen"), at_ms=0)
    (result,) = q.enqueue_many([spec])
    assert (result.status, result.id) == ("duplicate", held)


@pytest.mark.parametrize("partitions", [1, 3])
def test_a_claim_of_one_domain_takes_only_its_jobs(
    make_queue: Callable[..., Queue], partitions: int
) -> None:
    q = make_queue(partitions=partitions, domain_concurrency=10)
    q.enqueue_many([f"http://a.example/{i}" for i in range(3)])
    q.enqueue_many([f"http://b.example/{i}" for i in range(3)], lane="critical")
    jobs = q.claim(10, domain="a.example").jobs
    assert sorted(j.url for j in jobs) == [f"http://a.example/{i}" for i in range(3)]
    assert q.claim(10, domain="c.example").jobs == []
    assert {j.domain for j in q.claim(10).jobs} == {"b.example"}


def test_a_claim_of_one_domain_keeps_its_politeness(make_queue: Callable[..., Queue]) -> None:
    q = make_queue(domain_delay=60)
    q.enqueue_many([f"http://a.example/{i}" for i in range(3)])
    assert len(q.claim(10, domain="a.example").jobs) == 1
    assert q.claim(10, domain="a.example").jobs == []  # its next slot is a minute away


@pytest.mark.parametrize("partitions", [1, 3])
def test_a_domains_own_max_pages_caps_capped_specs(
    make_queue: Callable[..., Queue], partitions: int
) -> None:
    q = make_queue(partitions=partitions)
    q.domain_set("c.example", max_pages=2)
    specs = [
        dataclasses.replace(q.prepare(f"http://c.example/{i}", unique="seen"), capped=True)
        for i in range(4)
    ]
    assert [r.status for r in q.enqueue_many(specs)] == ["added", "added", "limit", "limit"]
    assert q.enqueue("http://c.example/plain").status == "added"  # not capped: not cut
    q.domain_set("c.example", max_pages=-1)
    spec = dataclasses.replace(q.prepare("http://c.example/9", unique="seen"), capped=True)
    assert q.enqueue_many([spec])[0].status == "added"


def test_a_domain_blocked_until_a_time_waits_then_is_lifted(
    make_queue: Callable[..., Queue],
) -> None:
    q = make_queue()
    q.enqueue("http://w.example/1")
    q.domain_set("w.example", blocked_until=time.time() + 3600)
    assert q.claim(5).jobs == []
    q.domain_set("w.example", blocked_until=0)
    assert [j.url for j in q.claim(5).jobs] == ["http://w.example/1"]


def test_a_block_time_out_of_range_is_refused(make_queue: Callable[..., Queue]) -> None:
    from scrapeq.errors import ConfigError

    q = make_queue()
    for bad in (-1, float("nan"), 1e12):
        with pytest.raises(ConfigError, match="blocked_until"):
            q.domain_set("w.example", blocked_until=bad)


@pytest.mark.parametrize("partitions", [1, 3])
def test_a_domains_crawl_limit_counts_its_jobs_done(
    make_queue: Callable[..., Queue], partitions: int
) -> None:
    q = make_queue(
        partitions=partitions,
        domain_concurrency=10,
        lease=0.2,
        backoff_base=0.001,
        backoff_cap=0.001,
    )
    for i in range(6):
        q.enqueue(f"http://cl.example/{i}")
    q.enqueue("http://free.example/1")
    q.domain_set("cl.example", crawl_limit=3)
    claimed = q.claim(10).jobs
    jobs = [j for j in claimed if j.domain == "cl.example"]
    assert len(jobs) == 3 and len(claimed) == 4  # done and in flight count against it
    q.ack(jobs[0])
    q.ack(next(j for j in claimed if j.domain == "free.example"))
    assert q.claim(10).jobs == []  # 1 done + 2 in flight
    time.sleep(0.3)  # two leases expire: their slots of the limit come back
    q.reap()
    assert len(q.claim(10).jobs) == 2
    counts = q.counts()
    assert counts["ready"] + counts["delayed"] == 3  # queued, not dropped
    q.domain_set("cl.example", crawl_limit=-1)
    time.sleep(0.01)  # the backoff of the jobs reaped
    assert len(q.claim(10).jobs) == 3


def test_a_crawl_limit_out_of_range_is_refused(make_queue: Callable[..., Queue]) -> None:
    from scrapeq.errors import ConfigError

    q = make_queue()
    for bad in (0, -2, "3"):
        with pytest.raises(ConfigError, match="crawl_limit"):
            q.domain_set("w.example", crawl_limit=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("partitions", [1, 3])
def test_a_walk_meets_every_pending_job_once(
    make_queue: Callable[..., Queue], partitions: int
) -> None:
    q = make_queue(partitions=partitions, domain_concurrency=10)
    for i in range(7):
        q.enqueue(f"http://w{i % 3}.example/{i}")
    q.enqueue("http://w0.example/later", delay=3600)
    leased = q.claim(2).jobs
    met: dict[str, str] = {}
    for domain in ("w0.example", "w1.example", "w2.example"):
        start = 0
        while True:
            jobs, read = q.walk_page("ready", domain=domain, start=start, count=2)
            met.update((info.job.url, info.state) for info in jobs)
            start += read
            if read < 2:
                break
    for state in ("delayed", "inflight"):
        for part in range(partitions):
            jobs, _ = q.walk_page(state, part=part, start=0, count=100)
            met.update((info.job.url, info.state) for info in jobs)
    assert len(met) == 8
    assert met["http://w0.example/later"] == "delayed"
    assert {met[j.url] for j in leased} == {"inflight"}
    jobs, _ = q.walk_page("delayed", domain="w1.example", count=100)
    assert jobs == []  # kept to the domain's
    from scrapeq.errors import ConfigError

    with pytest.raises(ConfigError):
        q.walk_page("ready")  # a ready walk is a domain's


@pytest.mark.parametrize("partitions", [1, 3])
def test_url_seen_tells_a_url_done_from_one_never_seen(
    make_queue: Callable[..., Queue], partitions: int
) -> None:
    q = make_queue(partitions=partitions)
    q.enqueue("http://u.example/x")  # not unique: no seen-set yet
    assert not q.url_seen("http://u.example/x")  # and reading records none
    q.enqueue("http://u.example/a", unique="seen")
    for job in q.claim(2).jobs:
        q.ack(job)
    assert not q.url_seen("http://u.example/x")
    assert q.url_job("http://u.example/a") is None
    assert q.url_seen("http://u.example/a")
    assert not q.url_seen("http://u.example/b")


def test_a_domain_parked_at_its_crawl_limit_is_not_stranded(
    make_queue: Callable[..., Queue],
) -> None:
    q = make_queue(domain_concurrency=10)
    for i in range(3):
        q.enqueue(f"http://audit.example/{i}")
    q.domain_set("audit.example", crawl_limit=1)
    (job,) = q.claim(10).jobs
    q.ack(job)
    assert q.claim(10).jobs == []
    report = q.audit()
    assert report.problems == [], report.problems
