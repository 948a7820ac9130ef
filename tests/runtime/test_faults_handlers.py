"""Handler faults end to end: a handler whose result JSON cannot hold, one that raises
SystemExit or KeyboardInterrupt.

A result goes into a JSON record (the results JSONL format), so a result that is not JSON is
the handler's error, like an exception it raised: a retry that spends an attempt (error kind
``handler_result``), ending dead after ``max_attempts``. It is neither our fault (a release,
no attempt spent: an endless loop) nor the site's (the breaker is not charged), and it is
never written as something else (``str()`` of a set is not the set).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from scrapeq import AsyncQueue, Settings
from scrapeq.runtime.sinks import JsonlSink
from scrapeq.runtime.worker import Worker
from support.sites import ok, sites
from support.workers import results

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
    rows = {r["id"]: r for r in results(out)}
    assert rows[good]["outcome"] == "done" and rows[good]["result"] == {"ok": True}
    assert rows[bad]["outcome"] == "dead" and rows[bad]["result"] is None
    assert error_type in rows[bad]["error"]
    (info,) = await aq.domains_info([site.domain])
    assert info["consecutive_failures"] == 0, "the handler's error is not the site's"


# --- a handler raising what is not an Exception ---------------------------------------------
# SystemExit, KeyboardInterrupt (and a CancelledError that is not the worker's own) raised by
# a handler are its error: a retry recording it. They used to end the worker (a sync
# handler's sys.exit(3): exit 3 with a traceback; an async one's KeyboardInterrupt: exit 130),
# leaving the job in flight until its lease expired. The worker runs in a thread with its own
# loop here, so an exception escaping it (the defect) fails this test, not the test session.


def _raises(exc: type[BaseException], *, run: str) -> tuple[Callable[..., Any], bool]:
    """A handler raising ``exc`` on /bad, and whether it runs in a thread."""

    def sync(job: Any, response: Any) -> Any:
        if job.url.endswith("/bad"):
            raise exc(3) if exc is SystemExit else exc()
        return {"ok": True}

    async def coro(job: Any, response: Any) -> Any:
        return sync(job, response)

    return (coro, True) if run == "async" else (sync, run == "thread")


ESCAPES = {
    "thread-SystemExit": (SystemExit, "thread"),
    "thread-KeyboardInterrupt": (KeyboardInterrupt, "thread"),
    "inline-SystemExit": (SystemExit, "inline"),
    "async-KeyboardInterrupt": (KeyboardInterrupt, "async"),
    "async-SystemExit": (SystemExit, "async"),
    "async-CancelledError": (asyncio.CancelledError, "async"),
    "thread-GeneratorExit": (GeneratorExit, "thread"),
    "async-GeneratorExit": (GeneratorExit, "async"),
}


def _burst_in_thread(redis_url: str, handler: Callable[..., Any], in_thread: bool) -> Any:
    """Run a burst worker in a thread with its own event loop; its stats, or what escaped."""
    settings = Settings(
        allow_private=True, max_attempts=MAX_ATTEMPTS, backoff_base=0.01, backoff_cap=0.05
    )

    async def main() -> Any:
        q = AsyncQueue.from_url(redis_url, settings=settings)
        try:
            worker = Worker(q, handler=handler, burst=True, concurrency=4,
                            handler_in_thread=in_thread)  # fmt: skip
            return await worker.run_async()
        finally:
            await q.close()

    outcome: dict[str, Any] = {}

    def body() -> None:
        try:
            outcome["stats"] = asyncio.run(main())
        except BaseException as exc:  # the defect: caught so it fails this test only
            outcome["escaped"] = exc

    thread = threading.Thread(target=body, daemon=True)
    thread.start()
    thread.join(20)
    assert not thread.is_alive(), "the burst worker never finished"
    assert "escaped" not in outcome, f"the worker ended with {outcome.get('escaped')!r}"
    return outcome["stats"]


@pytest.mark.parametrize("case", sorted(ESCAPES))
async def test_a_base_exception_from_a_handler_is_its_error_never_the_workers_exit(
    aq: AsyncQueue, redis_url: str, case: str
) -> None:
    exc, run = ESCAPES[case]
    handler, in_thread = _raises(exc, run=run)
    async with sites(ok) as (site,):
        bad = (await aq.enqueue(site.url("/bad"))).id
        await aq.enqueue_many([site.url(f"/good/{i}") for i in range(3)])
        stats = await asyncio.to_thread(_burst_in_thread, redis_url, handler, in_thread)
    assert (stats.done, stats.dead) == (3, 1)
    counts = (await aq.status())["counts"]
    assert (counts["done"], counts["dead"], counts["inflight"]) == (3, 1, 0)
    (dead,) = await aq.dead_letters()
    assert dead.id == bad and dead.dead_reason == "max_attempts"
    assert [e.kind for e in dead.errors] == ["handler_error"] * MAX_ATTEMPTS
    assert exc.__name__ in dead.errors[-1].message, dead.errors[-1].message
