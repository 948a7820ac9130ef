"""The worker's side of the owed-lines ledger (issue 25, runtime/owed.py): a line written from
a settle's answer is sent with its record, kept owed by the settle and acknowledged once the
sink took it; the lines another worker left owed (it died before writing them) are taken over
and written by a live worker; a burst worker ends only once no line is owed."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from pathlib import Path
from typing import Any

from scrapeq import AsyncQueue, Job, Settings
from scrapeq.engine.lua.scripts import Settled, Settlement
from scrapeq.runtime.sinks import JsonlSink
from scrapeq.runtime.worker import Worker
from support.sites import ok, sites


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def queue(redis_url: str, **settings: Any) -> AsyncQueue:
    base: dict[str, Any] = {"allow_private": True, "request_timeout": 5.0}
    return AsyncQueue.from_url(redis_url, settings=Settings(**{**base, **settings}))


async def run_until(worker: Worker, done: Any, timeout: float = 15.0) -> None:
    """Run ``worker`` until ``done()`` holds, then stop it."""
    task = asyncio.create_task(worker.run_async())
    deadline = time.monotonic() + timeout
    while not done() and time.monotonic() < deadline and not task.done():
        await asyncio.sleep(0.05)
    worker.stop()
    await asyncio.wait_for(task, 30)


async def test_a_line_written_from_the_answer_is_owed_then_acknowledged(
    redis_url: str, tmp_path: Path
) -> None:
    results = tmp_path / "r.jsonl"
    sent: list[Settlement] = []

    def on_settled(job: Job, settlement: Settlement, answer: Settled) -> None:
        sent.append(settlement)

    q = queue(redis_url, revisit="on")
    try:
        async with sites(ok) as (site,):
            await q.enqueue_many([site.url(f"/p/{i}") for i in range(5)])
            worker = Worker(q, sink=JsonlSink(results), on_settled=on_settled)
            await run_until(worker, lambda: len(lines(results)) >= 5)
        assert await q.owed_count() == 0, "every line written was acknowledged"
    finally:
        await q.close()
    rows = lines(results)
    assert sorted(r["id"] for r in rows) == sorted(s.job_id for s in sent)
    assert all(r["changed"] is True for r in rows)  # the settle's answer, in the line
    # each settlement carried its record: the line before the answer was applied
    for s in sent:
        assert s.line is not None
        record = json.loads(s.line)
        assert record["id"] == s.job_id and "changed" not in record


async def owe_lines(q: AsyncQueue) -> tuple[Job, Job]:
    """Two lines owed as a worker killed before its writes leaves them: a done page with
    revisit on, and a retry the settle made dead."""
    await q.enqueue("https://gone-a.example/page")
    await q.enqueue("https://gone-b.example/page", max_attempts=1)
    done, retried = sorted((await q.claim(2)).jobs, key=lambda j: j.url)
    record = {"id": done.id, "url": done.url, "outcome": "done", "error": None, "result": 1}
    dying = {"id": retried.id, "url": retried.url, "outcome": "dead", "error": "http_500"}
    answers = await q.settle_many([
        dataclasses.replace(q.done(done), line=json.dumps(record)),
        dataclasses.replace(q.retrying(retried, kind="http_500"), line=json.dumps(dying)),
    ])  # fmt: skip
    assert answers == ["done", "dead"]
    assert await q.owed_count() == 2
    return done, retried


async def test_a_live_worker_takes_over_the_lines_a_dead_one_owed(
    redis_url: str, tmp_path: Path
) -> None:
    results = tmp_path / "r.jsonl"
    q = queue(redis_url, revisit="on", lease=1.0)
    try:
        done, dead = await owe_lines(q)
        assert await q.owed_take(10) == []  # not overdue: their worker may still write them
        started = time.monotonic()
        worker = Worker(q, sink=JsonlSink(results))
        await run_until(worker, lambda: len(lines(results)) >= 2)
        waited = time.monotonic() - started
        assert await q.owed_count() == 0
    finally:
        await q.close()
    rows = {r["id"]: r for r in lines(results)}
    assert set(rows) == {done.id, dead.id} and len(lines(results)) == 2
    # built as the dead worker would have: from the record and the settle's answer
    assert rows[done.id]["changed"] is True and rows[done.id]["result"] == 1
    assert rows[dead.id]["outcome"] == "dead" and rows[dead.id]["error"] == "http_500"
    assert waited >= 0.5, "taken over only once overdue (a lease after the settle)"


async def test_a_burst_worker_ends_once_no_line_is_owed(redis_url: str, tmp_path: Path) -> None:
    results = tmp_path / "r.jsonl"
    q = queue(redis_url, lease=3.0)
    try:
        done, dead = await owe_lines(q)
        settled = time.monotonic()
        without = Worker(q, burst=True, report=False)  # no sink: no line to wait for
        await asyncio.wait_for(without.run_async(), 10)
        assert time.monotonic() - settled < 2.5, "a worker without a sink does not wait"
        assert await q.owed_count() == 2 and not results.exists()
        worker = Worker(q, sink=JsonlSink(results), burst=True, report=False)
        await asyncio.wait_for(worker.run_async(), 20)
        waited = time.monotonic() - settled
        assert await q.owed_count() == 0
    finally:
        await q.close()
    assert {r["id"] for r in lines(results)} == {done.id, dead.id}
    assert waited >= 2.9, "the burst worker waited for the owed lines to be overdue"
