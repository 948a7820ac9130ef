"""Handler faults end to end: a handler whose result JSON cannot hold.

A result goes into a JSON record (the results JSONL format), so a result that is not JSON is
the handler's error, like an exception it raised: a retry that spends an attempt (error kind
``handler_result``), ending dead after ``max_attempts``. It is neither our fault (a release,
no attempt spent: an endless loop) nor the site's (the breaker is not charged), and it is
never written as something else (``str()`` of a set is not the set).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from scrapeq import AsyncQueue, Settings
from scrapeq.runtime.sinks import JsonlSink
from scrapeq.runtime.worker import Worker
from sites import ok, sites

MAX_ATTEMPTS = 3


class _Opaque:
    """An object JSON has no form for."""


def _tuple_keys() -> dict[Any, Any]:
    return {("a", 1): "x"}


def _circular() -> dict[str, Any]:
    loop: dict[str, Any] = {"n": 1}
    loop["self"] = loop
    return loop


BAD_RESULTS: dict[str, tuple[Callable[[], Any], str]] = {
    "set": (lambda: {"tags": {"a", "b"}}, "TypeError"),
    "object": (lambda: {"item": _Opaque()}, "TypeError"),
    "tuple_keys": (_tuple_keys, "TypeError"),
    "circular": (_circular, "ValueError"),
}


@pytest.fixture
async def aq(redis_url: str) -> AsyncIterator[AsyncQueue]:
    settings = Settings(
        allow_private=True, max_attempts=MAX_ATTEMPTS, backoff_base=0.01, backoff_cap=0.05
    )
    q = AsyncQueue.from_url(redis_url, settings=settings)
    yield q
    await q.close()


def _lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("case", sorted(BAD_RESULTS))
async def test_a_result_json_cannot_hold_is_the_handlers_error(
    aq: AsyncQueue, tmp_path: Path, case: str
) -> None:
    make, error_type = BAD_RESULTS[case]
    out = tmp_path / "results.jsonl"

    def handler(job: Any, response: Any) -> Any:
        return make() if job.url.endswith("/bad") else {"ok": True}

    async with sites(ok) as (site,):
        bad = (await aq.enqueue(site.url("/bad"))).id
        good = (await aq.enqueue(site.url("/good"))).id
        worker = Worker(aq, handler=handler, sink=JsonlSink(out), burst=True, concurrency=4)
        task = asyncio.create_task(worker.run_async())
        # Bounded: a result the sink cannot write used to release the job forever.
        finished, _ = await asyncio.wait({task}, timeout=15)
        if not finished:
            worker.stop()
            worker.stop()  # a second stop releases at once
            await asyncio.wait_for(task, 10)
        fetches = site.hits["/bad"]
    assert finished, f"the burst worker never finished: {fetches} fetches of /bad in 15 s"

    counts = (await aq.status())["counts"]
    assert (counts["done"], counts["dead"], counts["ready"], counts["delayed"]) == (1, 1, 0, 0)
    (dead,) = await aq.dead_letters()
    assert dead.id == bad and dead.dead_reason == "max_attempts"
    kinds = [e.kind for e in dead.errors]
    assert kinds == ["handler_result"] * MAX_ATTEMPTS, kinds
    assert error_type in dead.errors[-1].message, dead.errors[-1].message
    assert fetches == MAX_ATTEMPTS, "each attempt is one fetch, then the job is dead"
    rows = {r["id"]: r for r in _lines(out)}
    assert rows[good]["outcome"] == "done" and rows[good]["result"] == {"ok": True}
    assert rows[bad]["outcome"] == "dead" and rows[bad]["result"] is None
    assert error_type in rows[bad]["error"]
    (info,) = await aq.domains_info([site.domain])
    assert info["consecutive_failures"] == 0, "the handler's error is not the site's"
