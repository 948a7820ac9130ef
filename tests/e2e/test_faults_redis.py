"""Redis faults end to end: a clean restart, a crash that loses the last writes, an eviction.

* SIGTERM: a private redis-server with an append-only file stops cleanly mid-run and starts
  again on the same port; two ``scrapeq worker --burst`` processes reconnect by themselves
  and every job ends done.
* SIGKILL with the AOF cut back: the server dies and restarts with the writes of its last
  moments gone (what ``appendfsync everysec`` may lose). An in-process worker whose handler
  records every (job, token) it is handed runs through it: what was written before the cut
  survives (every enqueue, every settle), every job still ends done, a fencing token is never
  handed out twice, and the audit finds nothing left to repair.
* Eviction (issue 10, defect 7): a claimed job's key vanishes while its fetch is in flight;
  ``scrapeq worker --burst`` still finishes every other job of that domain and exits 0, and
  ``scrapeq status --json`` raises ``jobs_lost``.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from aiohttp import web

from scrapeq import AsyncQueue, Queue, Settings
from scrapeq.engine.model.keys import Keys
from scrapeq.runtime.worker import Worker
from support.processes import wait_until
from support.redis_proc import RedisProcess
from support.sites import SiteThread, sites, slow
from support.workers import SCRAPEQ, WorkerProc, clean_env, results


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Callable[..., WorkerProc]]:
    """Start ``scrapeq --redis URL worker --allow-private ARGS``; killed at the end."""
    started: list[WorkerProc] = []

    def start(url: str, *args: str, **settings: Any) -> WorkerProc:
        log = tmp_path / f"worker-{len(started)}.log"
        argv = [SCRAPEQ, "--redis", url, "worker", "--allow-private", *args]
        proc = WorkerProc.start(argv, log, env=clean_env(**settings), cwd=tmp_path)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.kill_all()


def _counts(q: Queue) -> dict[str, int]:
    return q.status()["counts"]  # type: ignore[no-any-return]


def _ended(c: dict[str, int], total: int) -> None:
    """Every one of ``total`` jobs ended done or dead; nothing is left anywhere else."""
    assert c["enqueued"] == total == c["done"] + c["dead"], c
    assert (c["ready"], c["delayed"], c["inflight"]) == (0, 0, 0), c


# --- SIGTERM: a clean restart --------------------------------------------------------------------


@pytest.mark.slow
def test_redis_sigterm_mid_run_workers_reconnect_and_lose_nothing(
    aof_redis: RedisProcess,
    site_thread: SiteThread,
    spawn: Callable[..., WorkerProc],
    tmp_path: Path,
) -> None:
    site_a, site_b = site_thread.start(slow(0.1)), site_thread.start(slow(0.1))
    q = Queue.from_url(aof_redis.url, settings=Settings(allow_private=True))
    urls = [s.url(f"/p/{i}") for s in (site_a, site_b) for i in range(80)]
    ids = [r.id for r in q.enqueue_many(urls)]
    q.close()
    out = tmp_path / "results.jsonl"
    # lease 5 s outlives the outage: heartbeats fail meanwhile, no lease expires.
    env: dict[str, Any] = {"lease": 5}
    workers = [
        spawn(aof_redis.url, "--burst", "--concurrency", "4", "--results", str(out), **env)
        for _ in range(2)
    ]

    def done() -> int:
        q = Queue.from_url(aof_redis.url)
        try:
            return _counts(q)["done"]
        finally:
            q.close()

    wait_until(lambda: done() >= 30, 20, "30 jobs done")
    # each worker past its start (a worker that never reached Redis refuses to start, by
    # design): on a loaded machine one may still be importing when the other has done 30
    wait_until(lambda: all("worker started" in w.text() for w in workers), 30, "both started")
    aof_redis.stop(signal.SIGTERM)
    time.sleep(1.0)
    assert all(w.running() for w in workers), "the workers outlive Redis going away"
    aof_redis.start()
    for w in workers:
        assert w.wait(60) == 0, w.text()

    q = Queue.from_url(aof_redis.url)
    try:
        c = _counts(q)
        _ended(c, len(ids))
        assert c["dead"] == 0
        report = q.audit()
        assert report.ok, report.as_dict()
    finally:
        q.close()
    finished = Counter(r["id"] for r in results(out) if r["outcome"] == "done")
    assert set(finished) == set(ids), "every job finished, none lost with the restart"
    assert any("redis unavailable" in w.text() for w in workers)


# --- SIGKILL and a lost last second --------------------------------------------------------------


@pytest.mark.slow
async def test_redis_sigkill_with_aof_cut_back_repeats_no_token_and_loses_no_enqueue(
    aof_redis: RedisProcess,
) -> None:
    settings = Settings(
        allow_private=True, domain_concurrency=10, backoff_base=0.1, backoff_cap=0.5, lease=3
    )
    handed: list[tuple[str, int]] = []

    def record(job: Any, response: Any) -> dict[str, int]:
        handed.append((job.id, job.token))
        return {"token": job.token}

    admin = Queue.from_url(aof_redis.url, settings=settings)
    q = AsyncQueue.from_url(aof_redis.url, settings=settings)
    try:
        async with sites(slow(0.05), slow(0.05)) as pair:
            urls = [s.url(f"/p/{i}") for s in pair for i in range(100)]
            await q.enqueue_many(urls)
            worker = Worker(q, handler=record, concurrency=4, burst=True, handler_in_thread=False)
            task = asyncio.create_task(worker.run_async())
            await _until(lambda: _counts(admin)["done"] >= 30, task, 20)

            # The cut: everything written up to here (every enqueue among it) survives.
            kept = _counts(admin)
            await asyncio.to_thread(aof_redis.wait_aof_flushed)
            cut = aof_redis.aof_sizes()
            handed_at_cut = len(handed)
            await asyncio.sleep(0.7)  # claims and settles the crash will take back
            lost_handovers = len(handed) - handed_at_cut
            await asyncio.to_thread(aof_redis.stop, signal.SIGKILL)
            aof_redis.truncate_aof(cut)
            await asyncio.to_thread(aof_redis.start)

            after = _counts(admin)
            assert after["enqueued"] == len(urls), "every enqueue was written before the cut"
            assert after["done"] >= kept["done"], "what was flushed before the cut survived"
            await asyncio.wait_for(task, 60)

        _ended(_counts(admin), len(urls))
        assert _counts(admin)["dead"] == 0
        admin.audit(repair=True)
        report = admin.audit()
        assert report.ok, report.as_dict()
    finally:
        await q.close()
        admin.close()

    assert lost_handovers > 0, "the lost second held work: the test took something back"
    tokens = Counter(token for _, token in handed)
    repeated = {t: n for t, n in tokens.items() if n > 1}
    assert not repeated, f"fencing tokens handed out twice: {repeated}"
    again = Counter(job_id for job_id, _ in handed)
    assert any(n > 1 for n in again.values()), "some job lost with the cut was handed again"


async def _until(cond: Callable[[], bool], task: asyncio.Task[Any], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not await asyncio.to_thread(cond):
        assert not task.done(), "the worker stopped early"
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)


# --- eviction: a claimed job's key vanishes (issue 10, defect 7) ---------------------------------


@pytest.mark.slow
def test_a_job_key_evicted_in_flight_strands_nothing_and_status_alarms(
    redis_url: str, site_thread: SiteThread, spawn: Callable[..., WorkerProc]
) -> None:
    queue_keys = Keys("default")
    victim: dict[str, str] = {}
    client = redis.Redis.from_url(redis_url)

    async def evicting(request: web.Request) -> web.StreamResponse:
        if request.path == "/victim":
            # the job is claimed and its fetch in flight: what an eviction policy does now
            client.delete(queue_keys.job(victim["id"]))
        await asyncio.sleep(0.05)
        return web.Response(text="ok")

    site = site_thread.start(evicting)
    q = Queue.from_url(redis_url, settings=Settings(allow_private=True))
    try:
        victim["id"] = q.enqueue(site.url("/victim")).id  # first: claimed first
        others = [r.id for r in q.enqueue_many([site.url(f"/p/{i}") for i in range(10)])]
        # One job of the domain at a time: the vanished job's slot must be given back.
        w = spawn(redis_url, "--burst", "--concurrency", "4", domain_concurrency=1, lease=1)
        assert w.wait(30) == 0, w.text()
        assert site.hits["/victim"] == 1
        assert sum(site.hits[f"/p/{i}"] for i in range(10)) == len(others)

        c = _counts(q)
        assert (c["enqueued"], c["done"], c["dead"]) == (11, 10, 0), c
        assert (c["ready"], c["delayed"], c["inflight"]) == (0, 0, 0), c
        (info,) = q.domains_info([site.domain])
        assert info["inflight"] == 0
        report = q.audit()
        assert report.ok, report.as_dict()
    finally:
        q.close()
        client.close()

    shown = subprocess.run(
        [SCRAPEQ, "--redis", redis_url, "status", "--json"],
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert shown.returncode == 0, shown.stderr
    alarms = json.loads(shown.stdout)["alarms"]
    assert [a["kind"] for a in alarms] == ["jobs_lost"], alarms
    assert "1 claimed jobs" in alarms[0]["message"]
