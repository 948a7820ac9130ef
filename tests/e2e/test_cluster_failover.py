"""A master of the cluster killed (SIGKILL) mid-run: its replica takes over, the worker carries
on by itself, every job ends done or dead, no lease token is issued twice, and the audit is
clean afterwards (or repairs what the lost writes left, and says so)."""

from __future__ import annotations

import asyncio
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from scrapeq import AsyncQueue, Queue, Settings
from scrapeq.engine.model.job import Job
from scrapeq.engine.queue import partition_of_id
from scrapeq.runtime.worker import Worker
from support.cluster_proc import RedisCluster
from support.sites import sites

JOBS = 240
DOMAINS = 12


@pytest.fixture
def own_cluster() -> Iterator[RedisCluster]:
    """A cluster of this test's own: one of its masters dies."""
    cluster = RedisCluster(Path(tempfile.mkdtemp(prefix="scrapeq-failover-"))).start()
    try:
        yield cluster
    finally:
        cluster.stop()


async def paced(request: web.Request) -> web.StreamResponse:
    await asyncio.sleep(0.02)
    return web.Response(text="ok")


@pytest.mark.slow
@pytest.mark.parametrize("partitions", [1, 3])
async def test_a_master_killed_mid_run_the_worker_carries_on(
    own_cluster: RedisCluster, partitions: int
) -> None:
    settings = Settings(
        partitions=partitions,
        queue="crawl",
        allow_private=True,
        backoff_base=0.05,
        backoff_cap=0.2,
        request_timeout=2.0,
        lease=3.0,
        domain_concurrency=2,
        keep_done=600.0,
    )
    # the node of the queue's tag (with partitions: of partition 0's)
    tag = "sq:{crawl}:meta" if partitions == 1 else "sq:{crawl:0}:meta"
    owner = own_cluster.master_of(tag)
    tokens: list[tuple[str, int]] = []

    def handler(job: Job, response: Any) -> None:
        tokens.append((job.id, job.token))

    async with sites(*[paced] * DOMAINS) as started:
        q = AsyncQueue.from_url(own_cluster.url, settings=settings)
        try:
            urls = [started[i % DOMAINS].url(f"/p/{i}") for i in range(JOBS)]
            ids = [r.id for r in await q.enqueue_many(urls)]
            for node in own_cluster.live_masters():
                c = node.client()
                assert c.execute_command("WAIT", 1, 5000) == 1  # the replicas have every job
                c.close()
            worker = Worker(q, handler=handler, concurrency=8)
            task = asyncio.create_task(worker.run_async())
            deadline = time.monotonic() + 90
            while (await q.counts())["done"] < JOBS // 5:
                assert time.monotonic() < deadline and not task.done()
                await asyncio.sleep(0.05)
            own_cluster.kill(owner)  # mid-run: about a fifth done
            killed_at = time.monotonic()
            while True:
                assert time.monotonic() < deadline, "the worker did not finish after the failover"
                assert not task.done(), "the worker gave up"
                try:
                    counts = await q.counts()
                except Exception:  # the slot has no master for a moment: ask again
                    await asyncio.sleep(0.2)
                    continue
                if counts["ready"] + counts["delayed"] + counts["inflight"] == 0:
                    break
                await asyncio.sleep(0.1)
            took = time.monotonic() - killed_at
            worker.stop()
            await asyncio.wait_for(task, 30)
        finally:
            await q.close()

    assert own_cluster.master_of(tag) is not owner, "the replica took over"
    sync = Queue.from_url(own_cluster.nodes[-1].url, settings=settings)
    try:
        places = [sync.job_info(i) for i in ids]
        assert all(p is not None and p.state in ("done", "dead") for p in places), [
            (i, p and p.state) for i, p in zip(ids, places, strict=True)
        ]
        # tokens fence a job's lease: unique within a partition (a job lives in one)
        issued = {(partition_of_id(i, partitions), t) for i, t in tokens}
        assert len(issued) == len(tokens), "a lease token was issued twice"
        repaired = sync.audit(repair=True)
        after = sync.audit()
        assert after.problems == [], after.as_dict()
    finally:
        sync.close()
    print(f"failover: finished {took:.1f} s after the kill; {len(tokens)} attempts for {JOBS} "
          f"jobs; audit repaired {len(repaired.problems)} problem(s)")  # fmt: skip
