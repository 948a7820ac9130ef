"""A job's fetcher (issue 42): its own (enqueued), its domain's (``domain set --fetcher``,
handed to each job by its claim), checked by the scripts."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
import redis

from scrapeq import ConfigError
from scrapeq.engine.queue import Queue

MakeQueue = Callable[..., Queue]
URL = "https://shop.example.com/p/1"
DOMAIN = "shop.example.com"


def test_a_job_keeps_its_own_fetcher_stored_compact(
    make_queue: MakeQueue, redis_client: redis.Redis
) -> None:
    q = make_queue()
    own = q.enqueue(URL, fetcher="impersonate").id
    plain = q.enqueue(URL + "?plain").id
    text = redis_client.get(q.keys.job(own))
    assert isinstance(text, str) and json.loads(text)["fe"] == "impersonate"
    assert "fe" not in json.loads(str(redis_client.get(q.keys.job(plain))))
    jobs = {j.id: j for j in q.claim(2).jobs}
    assert (jobs[own].fetcher, jobs[own].domain_fetcher) == ("impersonate", None)
    assert (jobs[plain].fetcher, jobs[plain].domain_fetcher) == (None, None)


def test_the_claim_hands_each_job_its_domains_fetcher_as_it_is_then(
    make_queue: MakeQueue,
) -> None:
    q = make_queue()
    set_answer = q.domain_set(DOMAIN, fetcher="impersonate")
    assert set_answer["fetcher"] == "impersonate"
    q.enqueue(URL)
    (job,) = q.claim(1).jobs
    assert (job.fetcher, job.domain_fetcher) == (None, "impersonate")
    # the domain's choice is read again at each claim: a retry sees the change
    q.retry(job, kind="timeout", delay=0)
    assert q.domain_set(DOMAIN, fetcher="default")["fetcher"] is None
    (again,) = q.claim(1).jobs
    assert again.id == job.id and again.domain_fetcher is None
    # another override leaves the fetcher alone
    q.domain_set(DOMAIN, fetcher="http")
    assert q.domain_set(DOMAIN, delay=1.0)["fetcher"] == "http"


def test_unknown_fetchers_are_refused(make_queue: MakeQueue) -> None:
    q = make_queue()
    with pytest.raises(ConfigError, match="fetcher"):
        q.enqueue(URL, fetcher="chrome")
    with pytest.raises(ConfigError, match="fetcher"):
        q.domain_set(DOMAIN, fetcher="lynx")
    assert q.status()["counts"]["ready"] == 0


def test_the_claim_hands_each_job_its_domains_selector_to_wait_for(
    make_queue: MakeQueue,
) -> None:
    """``domain set --browser-wait-for`` (the browser fetcher): stored on the domain, handed
    to each job by its claim, removed with ``""``."""
    q = make_queue()
    got = q.domain_set(DOMAIN, fetcher="browser", browser_wait_for="#grid .item")
    assert (got["fetcher"], got["browser_wait_for"]) == ("browser", "#grid .item")
    job_id = q.enqueue(URL).id
    (job,) = q.claim(1).jobs
    assert (job.domain_fetcher, job.domain_wait_for) == ("browser", "#grid .item")
    assert q.domains_info([DOMAIN])[0]["browser_wait_for"] == "#grid .item"
    q.retry(job, kind="timeout", delay=0)
    assert q.domain_set(DOMAIN, delay=1.0)["browser_wait_for"] == "#grid .item"
    assert q.domain_set(DOMAIN, browser_wait_for="")["browser_wait_for"] is None
    (again,) = q.claim(1).jobs
    assert again.id == job_id and again.domain_wait_for is None
    assert "browser_wait_for" not in q.domains_info([DOMAIN])[0]
    with pytest.raises(ConfigError, match="browser_wait_for"):
        q.domain_set(DOMAIN, browser_wait_for="x" * 501)
    assert q.domain_set(DOMAIN, delay=1.0)["browser_wait_for"] is None
