"""The owed-lines ledger (issue 25): a results line the worker writes from a settle's answer
is kept in Redis by that very settle (``lua/includes/owed.lua``) until the worker acknowledges
it (``owed_ack-1.lua``), and a line nobody acknowledged within ``lease`` is taken over by
another worker (``owed_take-1.lua``). The scripts against a real redis-server, on one
partition and on several, on the single server and on the test cluster."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable
from importlib import resources
from typing import Any

import pytest
import redis

from scrapeq import Queue
from scrapeq.engine.config.limits import MAX_OWED_LINE
from scrapeq.engine.lua import scripts
from scrapeq.engine.lua.scripts import Settlement
from scrapeq.engine.model.job import Job
from scrapeq.engine.queue import partition_of_id
from scrapeq.errors import ConfigError, PayloadTooLarge, ScriptError

pytestmark = pytest.mark.backends

QueueFactory = Callable[..., Queue]
LEASE = 30.0


def record(job: Job, **fields: Any) -> str:
    """A results record as the worker sends it (JSON on one line)."""
    return json.dumps({"id": job.id, "url": job.url, "outcome": "done", **fields})


def owing(item: Settlement, job: Job, **fields: Any) -> Settlement:
    return dataclasses.replace(item, line=record(job, **fields))


def claim_all(q: Queue, n: int) -> list[Job]:
    jobs: list[Job] = []
    while len(jobs) < n:
        got = q.claim(n - len(jobs)).jobs
        assert got, "every job claimed"
        jobs += got
    return jobs


def seeded(q: Queue, n: int) -> list[Job]:
    q.enqueue_many([f"https://shop-{i}.example.com/p" for i in range(n)])
    return claim_all(q, n)


def now_ms(q: Queue) -> int:
    """The scripts' clock (the server's TIME plus the queue's testing offset)."""
    return int(q._drive(q._op_now_ms()))


def ledger(
    client: Any, q: Queue, part: int | None = None
) -> tuple[dict[str, str], dict[str, float]]:
    keys = q.keys if part is None else dataclasses.replace(q.keys, partition=part)
    owed = client.hgetall(keys.owed)
    due = dict(client.zrange(keys.owed_due, 0, -1, withscores=True))
    return owed, due


def test_a_settle_keeps_the_lines_it_makes_due_in_the_same_call(
    make_queue: QueueFactory, redis_client: Any
) -> None:
    q = make_queue(lease=LEASE, max_attempts=1)
    q.enqueue("https://kind.example.com/p", max_attempts=5)  # a retry that is not its last
    retried = claim_all(q, 1)[0]
    done, dead, released, plain, bare, failed = seeded(q, 6)
    now = now_ms(q)
    answers = q.settle_many([
        owing(q.done(done), done, links={"queued": 1}),
        owing(q.retrying(retried, delay=5), retried, outcome="dead"),
        owing(q.retrying(dead), dead, outcome="dead", error="boom"),  # past max_attempts
        owing(q.releasing(released, shutdown=True), released, outcome="dead"),
        q.done(plain),  # no record sent: nothing owed
        owing(q.done(bare), bare, result="é ünïcode"),
        owing(q.failing(failed, "http_404"), failed, outcome="dead"),
    ])  # fmt: skip
    assert answers == ["done", "retried", "dead", "released", "done", "done", "dead"]
    owed, due = ledger(redis_client, q)
    assert set(owed) == {done.id, dead.id, bare.id, failed.id}
    assert set(due) == set(owed)
    # the record as sent, then the settle's answer as the worker got it
    assert owed[done.id] == record(done, links={"queued": 1}) + "\ndone"
    assert owed[dead.id] == record(dead, outcome="dead", error="boom") + "\ndead:max_attempts"
    assert owed[failed.id].endswith("\ndead:http_404")
    assert json.loads(owed[bare.id].split("\n")[0])["result"] == "é ünïcode"
    # overdue a lease after the settle (the clock read before it: a few ms of slack)
    assert all(now + LEASE * 1000 <= d <= now + LEASE * 1000 + 5000 for d in due.values())
    assert q.owed_count() == 4 and q.status()["owed_lines"] == 4
    assert q.owed_take(10) == []  # nothing overdue yet


def test_a_stale_settle_owes_nothing(make_queue: QueueFactory, redis_client: Any) -> None:
    q = make_queue(lease=LEASE)
    (job,) = seeded(q, 1)
    assert q.settle_many([owing(q.done(job), job)]) == ["done"]
    assert q.owed_ack([job.id]) == 1
    assert q.settle_many([owing(q.done(job), job)]) == ["stale"]  # settled already
    assert ledger(redis_client, q) == ({}, {})


def test_a_revisit_or_budget_answer_is_kept_whole(make_queue: QueueFactory) -> None:
    q = make_queue(lease=LEASE, revisit="on", allow_private=True)
    (job,) = seeded(q, 1)
    assert q.settle_many([owing(q.done(job), job)]) == ["done"]
    q.testing_clock_offset_ms += round(LEASE * 1000) + 1
    (taken,) = q.owed_take(5)
    assert (taken.job_id, taken.answer, taken.answer.changed) == (job.id, "done", True)
    assert json.loads(taken.record) == json.loads(record(job))


def test_ack_removes_lines_and_is_idempotent(make_queue: QueueFactory, redis_client: Any) -> None:
    q = make_queue(lease=LEASE)
    a, b, c = seeded(q, 3)
    q.settle_many([owing(q.done(j), j) for j in (a, b, c)])
    assert q.owed_ack([a.id, b.id]) == 2
    assert q.owed_ack([a.id, b.id, "nobody"]) == 0  # again: nothing changes
    assert q.owed_ack([]) == 0
    owed, due = ledger(redis_client, q)
    assert set(owed) == set(due) == {c.id}


def test_take_answers_only_overdue_lines_and_arms_them_again(
    make_queue: QueueFactory, redis_client: Any
) -> None:
    q = make_queue(lease=LEASE)
    jobs = seeded(q, 5)
    q.settle_many([owing(q.done(j), j) for j in jobs[:3]])
    q.testing_clock_offset_ms += 20_000
    q.settle_many([owing(q.done(j), j) for j in jobs[3:]])  # 20 s later
    q.testing_clock_offset_ms += round(LEASE * 1000) - 10_000  # the first three overdue
    first = q.owed_take(2)
    assert [t.job_id for t in first] == [j.id for j in jobs[:2]]  # the most overdue first
    assert [t.job_id for t in q.owed_take(10)] == [jobs[2].id]  # the first two armed again
    now = now_ms(q)
    _, due = ledger(redis_client, q)
    assert all(now <= due[j.id] <= now + LEASE * 1000 + 5000 for j in jobs[:3])
    assert q.owed_take(10) == []  # the others not overdue yet, the taken ones armed again
    q.testing_clock_offset_ms += round(LEASE * 1000) + 1
    again = q.owed_take(10)
    assert {t.job_id for t in again} == {j.id for j in jobs}  # nobody acknowledged: again
    assert all(
        t.answer == "done" and t.record == record(j)
        for t, j in zip(
            sorted(again, key=lambda t: t.job_id), sorted(jobs, key=lambda j: j.id), strict=True
        )
    )
    q.owed_ack([t.job_id for t in again])
    assert q.owed_count() == 0 and ledger(redis_client, q) == ({}, {})


def test_lines_live_in_their_jobs_partitions(make_queue: QueueFactory, redis_client: Any) -> None:
    q = make_queue(lease=LEASE, partitions=3)
    jobs = seeded(q, 12)
    assert {partition_of_id(j.id, 3) for j in jobs} == {0, 1, 2}
    answers = q.settle_many(
        [owing(q.done(j), j) if i % 2 else owing(q.failing(j, "gone"), j, outcome="dead")
         for i, j in enumerate(jobs)]
    )  # fmt: skip
    assert set(answers) == {"done", "dead"}
    for part in range(3):
        owed, due = ledger(redis_client, q, part)
        mine = {j.id for j in jobs if partition_of_id(j.id, 3) == part}
        assert set(owed) == set(due) == mine
    assert ledger(redis_client, q) == ({}, {})  # nothing under the queue's home
    assert q.owed_count() == 12 and q.status()["owed_lines"] == 12
    q.testing_clock_offset_ms += round(LEASE * 1000) + 1
    taken = q.owed_take(2)  # at most 2 from each partition
    assert len(taken) == 6 and {partition_of_id(t.job_id, 3) for t in taken} == {0, 1, 2}
    assert q.owed_ack([j.id for j in jobs]) == 12
    assert q.owed_count() == 0


# --- refusals: nothing written --------------------------------------------------------------


def dump(url: str) -> dict[bytes, bytes | None]:
    client = redis.Redis.from_url(url)
    try:
        return {key: client.dump(key) for key in client.scan_iter()}
    finally:
        client.close()


def raw(q: Queue, name: str, args: str) -> Any:
    return q._step(scripts.Call(name, args, lambda x: x))


@pytest.mark.backends("single")
def test_an_oversized_or_broken_line_is_refused_before_any_write(
    make_queue: QueueFactory, redis_url: str
) -> None:
    q = make_queue(lease=LEASE)
    good, bad = seeded(q, 2)
    too_long = "x" * (MAX_OWED_LINE + 1)
    with pytest.raises(PayloadTooLarge, match="owed-lines ledger"):
        dataclasses.replace(q.done(bad), line=too_long)
    with pytest.raises(ValueError, match="one line"):
        dataclasses.replace(q.done(bad), line='{"a":\n1}')
    dataclasses.replace(q.done(bad), line="é" * (MAX_OWED_LINE // 2))  # bytes: exactly the most
    before = dump(redis_url)
    for line, why in (
        (too_long, r"at most 4194304 bytes, got 4194305"),
        ('{"a":\n1}', "expected JSON text on one line"),
        (7, "expected a non-empty string"),
    ):
        items = [
            {"id": good.id, "token": good.token, "outcome": "done", "line": "{}"},
            {"id": bad.id, "token": bad.token, "outcome": "done", "line": line},
        ]
        with pytest.raises(ScriptError, match=rf"items\[1\]\.line: {why}"):
            raw(q, "settle", json.dumps({"items": items}))
        assert dump(redis_url) == before  # the good item was not settled either
    assert q.settle_many([owing(q.done(good), good)]) == ["done"]


@pytest.mark.backends("single")
def test_bad_take_and_ack_arguments_are_refused_before_any_write(
    make_queue: QueueFactory, redis_url: str
) -> None:
    q = make_queue(lease=LEASE)
    (job,) = seeded(q, 1)
    q.settle_many([owing(q.done(job), job)])
    q.testing_clock_offset_ms += round(LEASE * 1000) + 1
    for n in (0, 1001, 1.5, True, "3"):
        with pytest.raises(ConfigError, match=r"1\.\.1000"):
            q.owed_take(n)  # type: ignore[arg-type]
    before = dump(redis_url)
    for args, why in (({"n": 0}, "n: expected an integer in"), ({"n": 1001}, "n: expected"),
                      ({"n": 2.5}, "n: expected"), ({}, "n: expected"),
                      ({"ids": "a1"}, "ids: expected a list"),
                      ({"ids": [job.id, 5]}, r"ids\[1\]: expected a non-empty string"),
                      ({"ids": ["a"] * 1001}, "ids: at most 1000")):  # fmt: skip
        name = "owed_take" if "ids" not in args else "owed_ack"
        with pytest.raises(ScriptError, match=why):
            raw(q, name, json.dumps(args))
        assert dump(redis_url) == before
    assert [t.job_id for t in q.owed_take(1)] == [job.id]


def test_the_line_bound_is_one_number_in_python_and_lua() -> None:
    lua = resources.files("scrapeq.engine").joinpath("lua", "includes", "owed.lua").read_text()
    found = re.search(r"OWED = \{MAX_LINE = (\d+)", lua)
    assert found is not None and int(found.group(1)) == MAX_OWED_LINE == 4 * 1024 * 1024
