"""A settled batch's answers (runtime/settler.py ``_answer_all``): a job done with nothing more
to do for it is counted in bulk (issue 40); every other answer goes through ``_answer`` as
before, and with metrics, a hook or debug logging every answer does."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import pytest

from scrapeq import AsyncQueue
from scrapeq.engine.lua.scripts import Settled, Settlement
from scrapeq.engine.model.job import Job
from scrapeq.runtime.metrics import WorkerMetrics
from scrapeq.runtime.worker import Worker
from scrapeq.runtime.worker_core import Pending


def _job(n: int) -> Job:
    return Job(f"j{n}", f"http://example.com/{n}", "example.com", "normal", 1, 5, token=n)


def _batch() -> tuple[list[Pending], list[Settled], asyncio.Future[Settled]]:
    """Two plain done jobs, one awaited by a future, one answered dead, one done with no job
    (counted by nobody), one stale."""
    awaited: asyncio.Future[Settled] = asyncio.get_running_loop().create_future()
    jobs = [_job(n) for n in range(5)]
    batch: list[Pending] = [
        (Settlement("j0", 0, "done"), jobs[0], None),
        (Settlement("j1", 1, "done"), jobs[1], None),
        (Settlement("j2", 2, "done"), jobs[2], awaited),
        (Settlement("j3", 3, "retry"), jobs[3], None),
        (Settlement("j4", 4, "done"), None, None),
        (Settlement("j5", 5, "done"), jobs[4], None),
    ]
    dead = Settled("dead", reason="max_attempts")
    statuses = [Settled("done"), Settled("done"), Settled("done"), dead, Settled("done"),
                Settled("stale")]  # fmt: skip
    return batch, statuses, awaited


@pytest.mark.parametrize("with_", ["nothing", "metrics", "hook", "debug"])
async def test_a_batchs_answers_are_counted_alike_in_bulk_or_one_by_one(
    make_async_queue: Callable[..., AsyncQueue], with_: str, caplog: pytest.LogCaptureFixture
) -> None:
    seen: list[tuple[str, str]] = []

    def hook(job: Job, settlement: Settlement, answer: Settled) -> None:
        seen.append((job.id, str(answer)))

    options: dict[str, Any] = {}
    if with_ == "metrics":
        options["metrics"] = WorkerMetrics("q")
    if with_ == "hook":
        options["on_settled"] = hook
    if with_ == "debug":
        caplog.set_level(logging.DEBUG, logger="scrapeq.worker")
    worker = Worker(make_async_queue(), report=False, **options)
    batch, statuses, awaited = _batch()
    worker._answer_all(batch, statuses)
    stats = worker.stats
    assert (stats.done, stats.dead, stats.stale) == (3, 1, 1)
    assert awaited.done() and awaited.result() == "done"
    if with_ == "hook":
        assert seen == [("j0", "done"), ("j1", "done"), ("j2", "done"), ("j3", "dead"),
                        ("j4", "stale")]  # fmt: skip
    if with_ == "debug":
        assert [r.getMessage() for r in caplog.records if r.getMessage().startswith("done")] == [
            f"done job=j{n} domain=example.com" for n in range(3)
        ]
