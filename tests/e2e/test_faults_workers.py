"""Worker processes killed with SIGKILL at random moments under load, in rounds, restarted.

Two ``scrapeq worker --burst`` processes work a few hundred jobs over a few loopback sites
(three slow-ish healthy ones and a delisted one whose pages are 404: dead at once). In each
round a seeded choice of them is killed at a random moment while jobs are in flight, and
restarted. Then:

* every job ends done or dead (``enqueued == done + dead``; nothing ready, delayed or in
  flight), and the burst workers exit 0 on their own;
* the audit finds nothing wrong;
* a page is fetched more than once only because a kill caught its job in flight: the sites
  count requests per path (one path a job), and a job's extra fetches are at most the number
  of kills whose in-flight snapshot holds it.
"""

from __future__ import annotations

import random
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from scrapeq import Queue, Settings
from scrapeq.engine.model.keys import Keys
from support.processes import wait_until
from support.sites import SiteThread, slow, status
from support.workers import SCRAPEQ, WorkerProc, clean_env

SEED = 20260110
ROUNDS = 3
WORKERS = 2
#: Jobs per healthy site (three of them) and on the 404 site.
PER_SITE, PER_GONE = 120, 40
#: Worker settings: leases short enough that a killed worker's jobs come back in seconds,
#: long enough (heartbeat every lease/3) that a live worker never loses one on a busy machine.
WORKER_ENV: dict[str, Any] = {"lease": 3, "shutdown_grace": 2}


class Workers:
    """``scrapeq worker --burst`` processes on one queue, each slot restartable."""

    def __init__(self, redis_url: str, tmp_path: Path) -> None:
        self.redis_url = redis_url
        self.tmp_path = tmp_path
        self.slots: list[WorkerProc | None] = [None] * WORKERS
        self.all: list[WorkerProc] = []

    def start(self, slot: int) -> None:
        log = self.tmp_path / f"worker-{slot}-{len(self.all)}.log"
        argv = [SCRAPEQ, "--redis", self.redis_url, "worker", "--allow-private", "--burst",
                "--concurrency", "5"]  # fmt: skip
        proc = WorkerProc.start(argv, log, env=clean_env(**WORKER_ENV), cwd=self.tmp_path)
        self.slots[slot] = proc
        self.all.append(proc)

    def kill(self, slot: int) -> None:
        proc = self.slots[slot]
        assert proc is not None
        proc.signal(signal.SIGKILL)
        proc.wait(10)

    def close(self) -> None:
        for proc in self.all:
            proc.kill_all()


@pytest.fixture
def workers(redis_url: str, tmp_path: Path) -> Iterator[Workers]:
    w = Workers(redis_url, tmp_path)
    yield w
    w.close()


def _inflight(q: Queue) -> set[str]:
    return set(q.client.zrange(Keys(q.name).inflight, 0, -1))


def _kill_round(q: Queue, workers: Workers, rng: random.Random) -> tuple[int, set[str]]:
    """Kill a seeded choice of workers at a random moment under load; restart them.

    Answers the in-flight count read just before the kill and the in-flight ids read just
    after it. The second is the one the bound uses: a killed worker's leases stay in flight
    until they expire (seconds later), so the snapshot holds every job the kill caught,
    whereas jobs claimed between a read before the kill and the kill would be missed.
    """
    wait_until(lambda: len(_inflight(q)) > 0, 15, "jobs in flight")
    time.sleep(rng.uniform(0.2, 1.0))
    victims = rng.choice([[0], [1], [0, 1]])
    before = len(_inflight(q))
    for slot in victims:
        workers.kill(slot)
    caught = _inflight(q)
    for slot in victims:
        workers.start(slot)
    return before, caught


@pytest.mark.slow
def test_workers_killed_at_random_moments_lose_nothing_and_refetch_little(
    redis_url: str, site_thread: SiteThread, workers: Workers
) -> None:
    rng = random.Random(SEED)
    healthy = [site_thread.start(slow(0.2)) for _ in range(3)]
    gone = site_thread.start(status(404))
    q = Queue.from_url(redis_url, settings=Settings(allow_private=True))
    try:
        urls = [s.url(f"/p/{i}") for s in healthy for i in range(PER_SITE)]
        urls += [gone.url(f"/p/{i}") for i in range(PER_GONE)]
        rng.shuffle(urls)
        path_of = {r.id: url for r, url in zip(q.enqueue_many(urls), urls, strict=True)}

        for slot in range(WORKERS):
            workers.start(slot)
        kills = [_kill_round(q, workers, rng) for _ in range(ROUNDS)]
        for slot in range(WORKERS):
            proc = workers.slots[slot]
            assert proc is not None and proc.wait(60) == 0, proc.text()

        c = q.status()["counts"]
        assert c["enqueued"] == len(urls) == c["done"] + c["dead"], c
        assert (c["ready"], c["delayed"], c["inflight"]) == (0, 0, 0), c
        assert (c["done"], c["dead"]) == (3 * PER_SITE, PER_GONE), "no job died of the kills"
        assert all(before > 0 for before, _ in kills), "every kill came under load"
        report = q.audit()
        assert report.ok, report.as_dict()
    finally:
        q.close()

    hits = {s.base: s.hits for s in [*healthy, gone]}

    def fetches(url: str) -> int:
        base, path = url.rsplit("/p/", 1)
        return hits[base][f"/p/{path}"]

    caught_by = {job_id: sum(job_id in caught for _, caught in kills) for job_id in path_of}
    extra = {job_id: fetches(url) - 1 for job_id, url in path_of.items()}
    assert all(fetches(url) >= 1 for url in path_of.values()), "every job was fetched"
    over = {j: (extra[j], caught_by[j]) for j in path_of if extra[j] > caught_by[j]}
    assert not over, f"fetched again without a kill catching them in flight: {over}"
    assert sum(extra.values()) <= sum(len(caught) for _, caught in kills)
