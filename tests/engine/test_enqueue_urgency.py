"""Urgency as the enqueue script decides it (issue 39): ``EnqueueResult.urgent`` is the
script's ``is_urgent`` for each job, so a client keeping slots for urgent work (Scrapy on
scrapeq) reads it instead of guessing from lane names."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from scrapeq import Queue

pytestmark = pytest.mark.backends

SITE = "http://urgency.example"


@pytest.mark.parametrize("partitions", [1, 3])
def test_only_a_job_of_the_most_urgent_lane_ready_now_is_urgent(
    make_queue: Callable[..., Queue], partitions: int
) -> None:
    q = make_queue(partitions=partitions)
    normal = q.enqueue_many([f"{SITE}/n/{i}" for i in range(3)])
    bulk = q.enqueue_many([f"{SITE}/b/{i}" for i in range(3)], lane="bulk")
    later = q.enqueue_many([f"{SITE}/d/{i}" for i in range(3)], lane="critical", delay=60)
    assert not any(r.urgent for r in [*normal, *bulk, *later])
    urls = [f"http://u{i}.example/c" for i in range(6)]  # over the partitions
    critical = q.enqueue_many(urls, lane="critical")
    assert [r.status for r in critical] == ["added"] * 6
    assert all(r.urgent for r in critical)
    mixed = q.enqueue_many([f"{SITE}/m/1", f"{SITE}/m/2"], lane="critical", delay=30)
    mixed += q.enqueue_many([f"{SITE}/m/3"], lane="critical")
    assert [r.urgent for r in mixed] == [False, False, True]


def test_one_lane_makes_nothing_urgent(make_queue: Callable[..., Queue]) -> None:
    """With one lane no job is urgent (the script's ``urgent_ms`` is null): the frontier no
    longer keeps slots for urgent work that nothing can fill."""
    q = make_queue(lanes={"normal": 0})
    assert not any(r.urgent for r in q.enqueue_many([f"{SITE}/o/{i}" for i in range(5)]))


def test_a_duplicate_is_not_urgent_and_compares_as_before(make_queue: Callable[..., Queue]) -> None:
    q = make_queue()
    first = q.enqueue(f"{SITE}/x", lane="critical", unique=True)
    again = q.enqueue(f"{SITE}/x", lane="critical", unique=True)
    assert first.urgent and first.status == "added"
    assert again.status == "duplicate" and not again.urgent
    assert again == type(again)(first.id, "duplicate", urgent=True)  # not part of equality
