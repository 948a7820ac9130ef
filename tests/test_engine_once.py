"""The queue's once-per-queue flags (``once-1.lua``): one winner among concurrent callers."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from scrapeq.engine.queue import Queue
from scrapeq.errors import ConfigError


def test_first_caller_wins_and_later_ones_learn_who(make_queue: Callable[..., Queue]) -> None:
    q = make_queue(queue="crawl")
    assert q.once("start", "host:1") == (True, "host:1")
    assert q.once("start", "host:2") == (False, "host:1")
    assert q.once("other", "host:2") == (True, "host:2")  # flags are per name
    assert make_queue(queue="crawl2").once("start", "h") == (True, "h")  # and per queue


def test_clear_removes_the_flag(make_queue: Callable[..., Queue]) -> None:
    q = make_queue(queue="crawl")
    q.once("start", "a")
    q.clear()
    assert q.once("start", "b") == (True, "b")


def test_exactly_one_of_many_concurrent_callers_wins(make_queue: Callable[..., Queue]) -> None:
    queues = [make_queue(queue="crawl") for _ in range(8)]
    wins: list[bool] = []
    barrier = threading.Barrier(len(queues))

    def ask(q: Queue, i: int) -> None:
        barrier.wait()
        wins.append(q.once("start", f"p{i}")[0])

    threads = [threading.Thread(target=ask, args=(q, i)) for i, q in enumerate(queues)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(wins) == [False] * 7 + [True]


@pytest.mark.parametrize("name", ["", "a b", "x" * 201, "*"])
def test_a_bad_name_is_refused_before_redis(make_queue: Callable[..., Queue], name: str) -> None:
    with pytest.raises(ConfigError, match="once"):
        make_queue().once(name)
