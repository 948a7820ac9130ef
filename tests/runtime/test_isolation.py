"""Which job a dying worker takes with it (issue 21 item 2): runtime/isolation.py.

The gate alone (pure asyncio), then a worker against a real Redis: a job whose attempt was
given back before (``unused``) runs its handler alone in its process, its lease marked while
it does, and the mark is what makes a death in that handler spend the attempt. The end-to-end
crash (a handler calling ``os._exit``) is in tests/e2e/test_worker_process.py.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis

from scrapeq import AsyncQueue, Queue, Settings
from scrapeq.engine.model.job import Job
from scrapeq.runtime.isolation import HandlerGate
from scrapeq.runtime.worker import Worker
from support.sites import ok, sites

# --- the gate ------------------------------------------------------------------------------------


async def test_shared_calls_run_together_and_an_alone_call_waits_for_them() -> None:
    gate = HandlerGate()
    await gate.shared()
    await gate.shared()  # at once: nothing runs alone
    alone = asyncio.create_task(gate.alone())
    await asyncio.sleep(0.01)
    assert not alone.done(), "alone waits while shared calls run"
    late = asyncio.create_task(gate.shared())
    gate.leave()
    await asyncio.sleep(0.01)
    assert not alone.done() and not late.done(), "a queued alone call goes first"
    gate.leave()
    await asyncio.wait_for(alone, 1)
    await asyncio.sleep(0.01)
    assert not late.done(), "nothing starts beside an alone call"
    gate.release()
    await asyncio.wait_for(late, 1)
    gate.leave()


async def test_two_alone_calls_run_one_after_the_other() -> None:
    gate = HandlerGate()
    await gate.alone()
    second = asyncio.create_task(gate.alone())
    await asyncio.sleep(0.01)
    assert not second.done()
    gate.release()
    await asyncio.wait_for(second, 1)
    gate.release()
    await asyncio.wait_for(gate.shared(), 1)
    gate.leave()


async def test_a_cancelled_alone_waiter_holds_nothing_back() -> None:
    gate = HandlerGate()
    await gate.shared()
    alone = asyncio.create_task(gate.alone())
    await asyncio.sleep(0.01)
    late = asyncio.create_task(gate.shared())
    await asyncio.sleep(0.01)
    assert not late.done()
    alone.cancel()
    await asyncio.gather(alone, return_exceptions=True)
    await asyncio.wait_for(late, 1)  # the shared call behind it goes on
    gate.leave()
    gate.leave()


# --- the worker ----------------------------------------------------------------------------------

SETTINGS = Settings(allow_private=True, lease=0.5, backoff_base=0.01, backoff_cap=0.01)


@pytest.fixture
async def aq(redis_url: str) -> AsyncIterator[AsyncQueue]:
    q = AsyncQueue.from_url(redis_url, settings=SETTINGS)
    yield q
    await q.close()


def _given_back(redis_url: str, url: str) -> str:
    """Claim ``url``'s job and let its lease expire unrenewed (a worker that died at once):
    the reap gives its attempt back, so its next handler runs alone."""
    q = Queue.from_url(redis_url, settings=SETTINGS)
    try:
        (job,) = q.claim().jobs
        assert job.url == url
        q.testing_clock_offset_ms += 600  # past its 0.5 s lease: the queue's clock, no sleep
        q.reap()
        stored = q.get_job(job.id)
        assert stored is not None and stored.unused == 1 and stored.attempts == 0
        return job.id
    finally:
        q.close()


async def test_a_job_given_back_before_runs_its_handler_alone_and_marked(
    aq: AsyncQueue, redis_url: str
) -> None:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    lock = threading.Lock()
    running: list[str] = []
    seen: dict[str, Any] = {"max": 0, "beside_suspect": [], "marked": None}
    async with sites(ok) as (site,):
        suspect_url = site.url("/suspect")
        await aq.enqueue(suspect_url)
        suspect = await asyncio.to_thread(_given_back, redis_url, suspect_url)
        await aq.enqueue_many([site.url(f"/p/{i}") for i in range(30)])

        def handler(job: Job, response: Any) -> dict[str, int]:
            with lock:
                running.append(job.id)
                seen["max"] = max(seen["max"], len(running))
                if suspect in running and len(running) > 1:
                    seen["beside_suspect"].append(list(running))
            if job.id == suspect:
                text = client.get(aq.keys.job(job.id))
                seen["marked"] = (text, job.token)
            time.sleep(0.02)
            with lock:
                running.remove(job.id)
            return {"ok": 1}

        await asyncio.sleep(0.05)  # past the (<= 10 ms) backoff: the suspect is due again
        worker = Worker(aq, handler=handler, burst=True, concurrency=20)
        stats = await asyncio.wait_for(worker.run_async(), 30)
    client.close()
    assert stats.done == 31
    assert seen["beside_suspect"] == [], "no handler ran beside the suspect's"
    assert seen["max"] > 1, "the others ran side by side"
    text, token = seen["marked"]
    assert f'"hr":{token}' in text, "its lease was marked while its handler ran"
    assert (await aq.status())["counts"]["done"] == 31
