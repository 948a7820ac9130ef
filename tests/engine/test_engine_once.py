"""The queue's once-per-queue flags (``once-1.lua``): one winner among concurrent callers."""

from __future__ import annotations

import dataclasses
import json
import math
import threading
import time
from collections.abc import Callable

import pytest

from scrapeq.engine.lua import scripts
from scrapeq.engine.queue import Queue
from scrapeq.errors import ConfigError, ScriptError


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


def test_a_leased_flag_is_renewed_kept_or_released_by_its_holder_only(
    make_queue: Callable[..., Queue],
) -> None:
    q = make_queue(queue="crawl")
    taken = q.once_flag("start", "a", lease=60)
    assert (taken.won, taken.holder, taken.leased) == (True, "a", True)
    assert 59_000 < taken.ttl_ms <= 60_000
    assert q.once_flag("start", "b").won is False  # taken, leased or not
    assert q.once_flag("start", "b", op="renew", lease=0).won is False  # not b's
    assert q.once_flag("start", "b", op="release").holder == "a"  # nor is releasing it
    peek = q.once_flag("start", op="peek")
    assert (peek.won, peek.holder, peek.leased) == (False, "a", True)
    kept = q.once_flag("start", "a", op="renew", lease=0)  # the work is complete
    assert (kept.won, kept.kept) == (True, True)
    assert q.once("start", "c") == (False, "a")
    other = q.once_flag("other", "a", lease=60)
    released = q.once_flag("other", "a", op="release")
    assert (other.won, released.won, released.holder, released.ttl_ms) == (True, True, "", -2)
    assert q.once_flag("other", "b").won is True  # free again


def test_a_lease_that_runs_out_lets_the_next_caller_win(
    make_queue: Callable[..., Queue],
) -> None:
    q = make_queue(queue="crawl")
    assert q.once_flag("start", "a", lease=0.2).won is True
    assert q.once_flag("start", "a", op="renew", lease=0.2).won is True
    time.sleep(0.3)  # a holder that died renews nothing
    assert q.once_flag("start", op="peek").ttl_ms == -2
    assert q.once_flag("start", "b", lease=0.2).holder == "b"


@pytest.mark.parametrize(
    ("op", "lease"), [("steal", 0.0), ("take", -1.0), ("take", 4e9), ("renew", math.inf)]
)
def test_a_bad_op_or_lease_is_refused_and_changes_nothing(
    make_queue: Callable[..., Queue], op: str, lease: float
) -> None:
    q = make_queue(queue="crawl")
    with pytest.raises(ConfigError):
        q.once_flag("start", "a", op=op, lease=lease)
    assert q.once_flag("start", op="peek").ttl_ms == -2


@pytest.mark.parametrize(
    "args", [{"op": "steal"}, {"lease_ms": -1}, {"lease_ms": 1.5}, {"lease_ms": 1e13}]
)
def test_the_script_refuses_bad_arguments_before_writing(
    make_queue: Callable[..., Queue], args: dict[str, object]
) -> None:
    q = make_queue(queue="crawl")
    call = scripts.once("start", "a")
    bad = dataclasses.replace(call, args=json.dumps({"name": "start", "holder": "a", **args}))
    with pytest.raises(ScriptError, match="once refused its arguments"):
        q._drive(_one(bad))
    assert q.once_flag("start", op="peek").ttl_ms == -2


def _one(call: scripts.Call[scripts.OnceFlag]) -> scripts.Op[scripts.OnceFlag]:
    answer: scripts.OnceFlag = yield call
    return answer
