"""What the settle script decides of a done page, it answers (issue 25): whether the page
changed (revisit = on), follow-ups cut at a per-domain budget, a next visit not scheduled;
the worker writes the page's results line from that answer (``Settled``), and ``domains``
shows the budgets' cuts."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import pytest

from scrapeq.engine.lua.scripts import Settled
from scrapeq.engine.model.job import Job
from scrapeq.engine.queue import Queue

pytestmark = pytest.mark.backends

URL = "http://site.test/page"
SIG_A, SIG_B = "0123456789abcdef", "fedcba9876543210"
DAY_MS = 86_400_000


def claim_one(q: Queue) -> Job:
    jobs = q.claim(1).jobs
    assert len(jobs) == 1
    return jobs[0]


def settle(q: Queue, job: Job, **fields: Any) -> Settled:
    return q.settle_many([dataclasses.replace(q.done(job), **fields)])[0]


def revisit(q: Queue) -> Job:
    q.testing_clock_offset_ms += 40 * DAY_MS  # past the longest interval: due
    return claim_one(q)


def test_the_answer_says_whether_the_page_changed(make_queue: Callable[..., Queue]) -> None:
    q = make_queue(revisit="on", revisit_min_interval=1)
    q.enqueue(URL)
    first = settle(q, claim_one(q), signature=SIG_A)
    assert first == "done" and first.changed is True  # a first visit is a change
    same = settle(q, revisit(q), signature=SIG_A)
    assert (same.changed, same.not_modified) == (False, False)
    new = settle(q, revisit(q), signature=SIG_B)
    assert new.changed is True
    not_modified = settle(q, revisit(q), not_modified=True)
    assert (not_modified.changed, not_modified.not_modified) == (False, True)
    # the handler's verdict stands over the signatures, either way
    said_unchanged = settle(q, revisit(q), signature=SIG_A, changed=False)
    assert said_unchanged.changed is False
    said_changed = settle(q, revisit(q), signature=SIG_A, changed=True)
    assert said_changed.changed is True
    assert not said_changed.over_budget


def test_an_overtaken_revisit_is_judged_against_the_stored_signature(
    make_queue: Callable[..., Queue],
) -> None:
    q = make_queue(revisit="on", revisit_min_interval=1)
    q.enqueue(URL)
    settle(q, claim_one(q), signature=SIG_A)  # its revisit is scheduled
    q.enqueue(URL)  # a second job of the URL, now: it sees the page changed
    assert settle(q, claim_one(q), signature=SIG_B).changed is True
    q.testing_clock_offset_ms += 40 * DAY_MS
    jobs = q.claim(10).jobs
    assert len(jobs) == 2  # the overtaken chain's revisit, and the new chain's
    # both fetched the content the second job stored: unchanged, for both
    assert [settle(q, job, signature=SIG_B).changed for job in jobs] == [False, False]


def test_follow_ups_cut_at_max_pages_are_answered_and_counted_per_domain(
    make_queue: Callable[..., Queue],
) -> None:
    q = make_queue(max_pages=3)
    q.enqueue("http://trap.test/cal?d=0")
    answers = []
    for day in range(1, 10):  # a calendar: each page links the next day, for ever
        jobs = q.claim(1).jobs
        if not jobs:
            break
        nxt = q.prepare(f"http://trap.test/cal?d={day}").child_of(jobs[0].id, day, jobs[0].url)
        answers.append(settle(q, jobs[0], follow=(nxt,)))
    assert len(answers) == 3  # max_pages jobs for the domain
    assert [a.cut for a in answers] == [{}, {}, {"max_pages": 1}]
    assert answers[-1].over_budget and answers[-1].changed is None
    (info,) = q.domains_info(["trap.test"])
    assert info["max_pages_skipped"] == 1


def test_max_bytes_cuts_are_answered_with_the_revisit_not_scheduled(
    make_queue: Callable[..., Queue],
) -> None:
    q = make_queue(revisit="on", max_bytes=1000, revisit_min_interval=1)
    q.enqueue("http://trap.test/cal?d=0")
    answers = []
    for day in range(1, 10):
        jobs = q.claim(1).jobs
        if not jobs:
            break
        nxt = q.prepare(f"http://trap.test/cal?d={day}").child_of(jobs[0].id, day, jobs[0].url)
        answers.append(settle(q, jobs[0], bytes_in=400, signature=SIG_A, follow=(nxt,)))
    assert len(answers) == 3
    assert [(a.cut, a.revisit_skipped) for a in answers] == [
        ({}, False), ({}, False), ({"max_bytes": 1}, True)
    ]  # fmt: skip
    (info,) = q.domains_info(["trap.test"])
    assert (info["skipped"], info["revisits_skipped"]) == (1, 1)
    assert "max_pages_skipped" not in info  # max_pages is not set, nothing it cut
