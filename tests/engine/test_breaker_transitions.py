"""The domain breaker's transitions, table-driven, end to end against a real Redis.

Written before the breaker became one pure rule (issue 39: ``RULE.breaker_step`` in
lua/includes/breaker_rule.lua) and kept unchanged after it: each case is a run of queue calls
(claims, acks, failures, moves of the clock past the cooldown) and, after each, the breaker's
stored fields. Time moves with ``Queue.testing_clock_offset_ms``, never slept. A cooldown is
checked within its jitter band: ``open_until`` minus the NOW of the domain's latest ``trip``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import redis

from scrapeq import Job, Queue

pytestmark = pytest.mark.backends

D = "brk-table.example.com"
FIELDS = ("state", "fails", "win", "trips", "probe")

#: name, settings, steps. A step is (action, want): action "fail"/"ok" claims one job and
#: fails it (a timeout charged to the domain) or acks it; "cool" moves the clock 1 s past
#: ``open_until``; ("claim", n) claims up to 10 jobs and wants n, kept as "held" (if any);
#: "held fail"/"held ok" settles the held jobs. ``want``: stored fields after the step
#: ("held" for the held job's id), and "cool": the cooldown's band in seconds.
CASES: list[tuple[str, dict[str, Any], list[tuple[Any, dict[str, Any]]]]] = [
    (
        "consecutive failures trip at the threshold",
        {},
        [
            ("fail", {"state": None, "fails": "1", "win": "1"}),
            ("fail", {"fails": "2", "win": "11"}),
            ("fail", {"fails": "3", "win": "111"}),
            ("fail", {"fails": "4", "win": "1111", "trips": None}),
            (
                "fail",
                {
                    "state": "open",
                    "fails": "0",
                    "win": "11111",
                    "trips": "1",
                    "probe": "",
                    "cool": (96, 144),
                },
            ),
        ],
    ),
    (
        "a success resets the consecutive count, not the window",
        {},
        [
            ("fail", {"fails": "1", "win": "1"}),
            ("fail", {"fails": "2", "win": "11"}),
            ("ok", {"state": None, "fails": "0", "win": "110"}),
            ("fail", {"fails": "1", "win": "1101"}),
        ],
    ),
    (
        "the failure rate trips at min_calls",
        {"breaker_failures": 100},
        [
            *[(a, {"state": None}) for a in ("ok", "fail") * 4],
            ("ok", {"state": None, "win": "010101010"}),
            ("fail", {"state": "open", "trips": "1", "win": "0101010101", "cool": (96, 144)}),
        ],
    ),
    (
        "open parks the domain until the cooldown, then one probe",
        {},
        [
            *[("fail", {}) for _ in range(5)],
            (("claim", 0), {"state": "open"}),
            ("cool", {"state": "open"}),
            (("claim", 1), {"state": "half_open", "probe": "held", "trips": "1"}),
            (("claim", 0), {"state": "half_open", "probe": "held"}),
        ],
    ),
    (
        "a probe's success closes and resets",
        {},
        [
            *[("fail", {}) for _ in range(5)],
            ("cool", {}),
            (("claim", 1), {"state": "half_open"}),
            ("held ok", {"state": "closed", "fails": "0", "win": "", "trips": "0", "probe": ""}),
            (("claim", 4), {"state": "closed"}),
        ],
    ),
    (
        "a probe's failure reopens with the cooldown doubled",
        {},
        [
            *[("fail", {}) for _ in range(5)],
            ("cool", {}),
            (("claim", 1), {}),
            (
                "held fail",
                {"state": "open", "fails": "0", "trips": "2", "probe": "", "cool": (192, 288)},
            ),
            (("claim", 0), {"state": "open"}),
            ("cool", {}),
            (("claim", 1), {"state": "half_open", "probe": "held"}),
            ("held fail", {"state": "open", "trips": "3", "cool": (384, 576)}),
        ],
    ),
    (
        "max_trips consecutive trips retire the domain",
        {"breaker_max_trips": 2},
        [
            *[("fail", {}) for _ in range(5)],
            ("cool", {}),
            (("claim", 1), {}),
            ("held fail", {"state": "retired", "trips": "2", "probe": ""}),
        ],
    ),
]


def _fields(r: redis.Redis, q: Queue) -> dict[str, Any]:
    return dict(zip(FIELDS, r.hmget(q.keys.domain(D), FIELDS), strict=True))


def _now_ms(r: redis.Redis, q: Queue) -> int:
    sec, usec = r.time()
    return int(sec) * 1000 + int(usec) // 1000 + q.testing_clock_offset_ms


def _cooldown_s(r: redis.Redis, q: Queue) -> float:
    trips = [f for _, f in r.xrevrange(q.keys.events, "+", "-") if f["kind"] == "trip"]
    assert trips, "no trip event"
    return (int(r.hget(q.keys.domain(D), "open_until") or 0) - int(trips[0]["at"])) / 1000


def _one(q: Queue) -> Job:
    (job,) = q.claim(1).jobs
    assert job.domain == D
    return job


def _act(q: Queue, r: redis.Redis, action: Any, held: list[Job]) -> None:
    if action == "fail":
        q.retry(_one(q), kind="timeout", delay=0, domain_failed=True)
    elif action == "ok":
        q.ack(_one(q))
    elif action == "cool":
        until = int(r.hget(q.keys.domain(D), "open_until") or 0)
        q.testing_clock_offset_ms += max(until - _now_ms(r, q), 0) + 1000
    elif action in ("held ok", "held fail"):
        for job in held:
            if action == "held ok":
                q.ack(job)
            else:
                q.retry(job, kind="timeout", delay=0, domain_failed=True)
        held.clear()
    else:
        jobs = q.claim(10).jobs
        assert len(jobs) == action[1]
        assert all(j.domain == D for j in jobs)
        if jobs:
            held[:] = jobs


@pytest.mark.parametrize(("name", "settings", "steps"), CASES, ids=[c[0] for c in CASES])
def test_breaker_transition(
    make_queue: Callable[..., Queue],
    redis_client: redis.Redis,
    name: str,
    settings: dict[str, Any],
    steps: list[tuple[Any, dict[str, Any]]],
) -> None:
    q = make_queue(**{"queue": "brt", "domain_concurrency": 4, "breaker_failures": 5, **settings})
    results = q.enqueue_many([f"https://{D}/p/{i}" for i in range(60)])
    assert all(r.status == "added" for r in results)
    held: list[Job] = []
    for i, (action, want) in enumerate(steps):
        _act(q, redis_client, action, held)
        got = _fields(redis_client, q)
        for key, value in want.items():
            if key == "cool":
                lo, hi = value
                assert lo <= _cooldown_s(redis_client, q) <= hi, (name, i, action)
            elif value == "held":
                assert [got[key]] == [j.id for j in held], (name, i, action)
            else:
                assert got[key] == value, (name, i, action, key, got)
