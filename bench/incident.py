"""The one-hanging-site incident through scrapeq and its peers, side by side.

The demo's fleet (:func:`scrapeq.demo.fleet.default_sites`: 40 healthy shops beside a 503, a
404, a hanging, a 429 and a dripping site; the hanging ``shop-43`` carries 25 times a shop's
backlog) is fetched by each system in turn, from the same job list (the demo's ``BASE_JOBS``
per site times ``--scale``, round robin over the sites), each against the same private
redis-server (``bench/_redis.py``), flushed before each system, each with **the same request
timeout (30 s) and the same total concurrency** (``--concurrency``, 64) and its natural
retry settings (3 retries, exponential backoff where it has one):

* ``scrapeq``: scrapeq's own :class:`~scrapeq.runtime.worker.Worker` (its defaults: 5
  attempts, full-jitter backoff, breakers, ``domain_concurrency`` ``auto``);
* ``scrapy``: plain Scrapy, its default retry middleware (``RETRY_TIMES`` 3, no backoff), one
  download slot per site (``CONCURRENT_REQUESTS_PER_DOMAIN`` 8, its default);
* ``scrapy-priority``: plain Scrapy whose requests leave its scheduler by priority alone
  (``SCHEDULER_PRIORITY_QUEUE`` ``scrapy.pqueues.ScrapyPriorityQueue``): Scrapy's default,
  ``DownloaderAwarePriorityQueue``, takes the next request from the download slot with the
  fewest downloads, so a request's priority orders it only among its own site's;
* ``scrapy-redis``: the same spider on scrapy-redis's scheduler and dupefilter;
* ``scrapy-scrapeq``: the same spider on :mod:`scrapeq.contrib.scrapy`;
* ``rq``: an RQ worker pool of ``SimpleWorker`` processes, ``Retry(max=3, interval=[1, 2, 4])``;
* ``dramatiq``: 2 processes x concurrency/2 threads, ``max_retries=3`` (its exponential
  backoff from 15 s);
* ``celery``: a threads pool, ``autoretry_for`` with ``retry_backoff`` (1, 2, 4 s), 3 retries;
* ``arq`` (when installed; it pins redis-py < 6, so it is not in the ``bench`` extra: see
  ``--python-for``): an arq worker, ``Retry(defer=2 ** try)``, ``max_tries`` 4;
* ``crawlee``: Crawlee for Python's ``HttpCrawler`` with its default storage (the file
  system), ``max_request_retries`` 3, concurrency fixed at ``--concurrency``
  (``bench/_crawlee_peer.py``);
* ``crawlee-scrapeq``: the same crawler on :mod:`scrapeq.contrib.crawlee`'s storage client,
  watched (its failed navigations charge scrapeq's breakers and are retried by scrapeq).

The sync peers fetch with urllib (``bench/_fetch.py``): their 30 s timeout is a socket
timeout (per connect, per read), as ``requests``' is, not a total deadline.

``--burst-after`` seconds into each run (10; 3 with ``--quick``) a burst of ``--burst`` (40)
critical jobs for a separate loopback site is enqueued with the system's top priority (lane
``critical``; Scrapy ``priority=100``; Crawlee ``forefront=True``; a ``critical`` queue
listed first for RQ and Celery; a higher-priority actor on its own queue for Dramatiq; arq has
none: the tail).

Each system runs in a child process (its own process group) until every healthy page and the
whole burst are fetched, or ``--duration`` seconds (90; 12 with ``--quick``). The figures come
from the servers' own counters, sampled every second, so no system reports on itself:

* healthy pages fetched (200s on the healthy shops) in the first 30 s and in all;
* fetches spent on each faulty site;
* where every job is once the system was stopped (below);
* the burst: p50/p99 seconds from its enqueue to each page's first fetch, and pages fetched.

How a run is stopped (as it always was): SIGTERM to the child's whole process group (every
process of the system gets it at once: scrapeq's worker and Scrapy stop taking work and wait
for what is in flight; RQ's, Dramatiq's and Celery's worker processes start their warm
shutdown), then SIGKILL to the group 0.5 s after the child has exited, or 10 s after the
SIGTERM if it has not. scrapeq's worker (30 s ``shutdown_grace``) and the four Scrapy
variants wait for their hanging and dripping fetches and are killed at 10 s; for RQ, Dramatiq
and Celery the child is only their launcher, which exits at once, so their workers get 0.5 s;
arq's child (``handle_signals=False``) exits at once, cancelling its jobs.

Where every job is: each job of the run (the job list and the burst) is put in exactly one
category, read from the system's own store (by ``--account NAME``, under the system's
interpreter, with its own API where it has one) and from what the sites saw of its URL
(:meth:`scrapeq.demo.fleet.Fleet.paths`: each request and how it ended), in this order:

* ``done``: fetched OK: a site answered its URL with a 200 (a dripping body only when
  complete; a burst page when the burst site served it). For scrapeq (and Scrapy on
  scrapeq): the queue's own ``done`` count.
* ``failed``: ended without a page, as the system records it: scrapeq's dead letters; RQ's
  ``rq:failed:<queue>`` and ``rq:finished:<queue>`` registries (a 404 is a job that returned);
  arq's ``arq:result:<id>`` records; Dramatiq's dead letters (``dramatiq:<queue>.XQ.msgs``);
  Crawlee's request files marked handled (``handled_at``: given up after its retries).
  A system that keeps no record of a job that ended (plain Scrapy with either queue,
  scrapy-redis, Celery without a result backend; Dramatiq for a job that returned) counts
  as failed a job whose every attempt had ended at the stop with a final answer (404) or
  after its retries were spent (4 attempts: a 503, a 429, a timeout).
* ``pending``: the system will run it again with no one's help: scrapeq's ready, delayed and
  in-flight jobs (an in-flight job's lease expires and it is reaped); scrapy-redis's
  ``incident:requests`` sorted set; RQ's queues (``rq:queue:<queue>``), ``rq:scheduled`` and
  ``rq:deferred`` registries, and a job in ``rq:wip:<queue>`` (started by a worker that is
  gone) with retries left, which RQ's cleanup re-queues once its entry expires (job timeout
  600 s + 60 s); Dramatiq's ``dramatiq:<queue>.msgs`` and ``<queue>.DQ.msgs`` (queued, delayed
  retries, and messages fetched but not acked by a worker that is gone, put back when its
  heartbeat lapses); Celery's queue lists (``celery``, ``critical``) and kombu's ``unacked``
  hash (fetched, not acked: an ETA retry a worker held; restored after the visibility
  timeout, 1 h); arq's ``arq:queue`` (a running job stays there; its ``arq:in-progress`` key
  expires).
* ``lost``: none of the above: it was in the stopped process's memory only (plain Scrapy's
  whole frontier; what scrapy-redis had popped; a Celery task acked on receipt, its
  default, and running when its worker died), or never stored. Lost includes ``stranded``
  (in the JSON with its record): held in a record of a process that is gone that will not
  make it run again (RQ's ``rq:wip`` with no retry left: its cleanup records it failed,
  unfetched; Crawlee's unhandled request files: its default queue is purged at the next
  start).

``--quick`` (scrapeq and plain Scrapy, a tenth of the jobs) is what
``tests/e2e/test_bench_incident.py`` runs to check the harness works, not its speed. ``--runs N``
repeats the whole round; the table shows medians (min-max). ``--plot PATH`` draws healthy
pages over time, one line per system (matplotlib, in the ``bench`` extra).

``--python-for SYSTEM=PYTHON`` runs that system's child under another interpreter (the
others, and the harness, stay on the one running this script): arq, whose redis-py pin
conflicts with the project's, from a venv of its own, e.g. ``python3 -m venv /tmp/arq-venv &&
/tmp/arq-venv/bin/pip install -e . arq==0.28.0`` then ``--python-for
arq=/tmp/arq-venv/bin/python``.

Run: ``python bench/incident.py [--quick] [--systems scrapeq,scrapy,...] [--runs N]
[--json PATH] [--plot PATH] [--python-for SYSTEM=PYTHON]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _burst_timeline
import _crawlee_peer
from _burst_timeline import Timeline
from _redis import add_server_args, format_table, load_note, private_redis
from scrapeq.demo.fleet import Fleet, SiteSpec, default_sites
from scrapeq.demo.scenario import BASE_JOBS

TIMEOUT = 30.0
RETRIES = 3


# --- the job list --------------------------------------------------------------------------


def job_urls(fleet: Fleet, scale: float) -> dict[str, list[str]]:
    """Site name -> its URLs (``http://127.0.0.1:<port>/p/<n>``), the demo's counts."""
    per_site = sum(BASE_JOBS.values())
    urls: dict[str, list[str]] = {}
    n = 0
    for spec in fleet.sites:
        count = max(1, round(per_site * spec.weight * scale))
        port = fleet.ports[spec.name]
        urls[spec.name] = [f"http://127.0.0.1:{port}/p/{n + i}" for i in range(count)]
        n += count
    return urls


def interleave(urls: dict[str, list[str]]) -> list[str]:
    """Every URL, round robin over the sites (as a mixed backlog arrives)."""
    out: list[str] = []
    lists = [list(v) for v in urls.values()]
    while any(lists):
        for lst in lists:
            if lst:
                out.append(lst.pop(0))
    return out


# --- the systems (each runs in a child: python bench/incident.py --child NAME ...) ----------


class Burst(NamedTuple):
    """The critical burst: its URLs, enqueued at ``at`` (``time.monotonic()``, system-wide)
    with the system's top priority."""

    urls: list[str]
    at: float


def _later(at: float, fn: Callable[[], None]) -> None:
    """Run ``fn`` at monotonic time ``at`` on a daemon thread."""

    def run() -> None:
        time.sleep(max(0.0, at - time.monotonic()))
        fn()

    threading.Thread(target=run, daemon=True).start()


def _json_env(name: str) -> dict[str, Any]:
    """The JSON object in $``name`` (unset: empty), for experiments."""
    return dict(json.loads(os.environ.get(name) or "{}"))


def _scrapeq_settings() -> dict[str, Any]:
    """scrapeq settings of the worker and Scrapy on scrapeq alike, beyond the bench's own:
    ``domain_concurrency`` when $BENCH_DOMAIN_CONCURRENCY sets it (the throughput bench: 16
    sites x 4 = 64), and those of $BENCH_SCRAPEQ_SETTINGS (a JSON object)."""
    value = os.environ.get("BENCH_DOMAIN_CONCURRENCY")
    fixed = {"domain_concurrency": int(value)} if value else {}
    return {**fixed, **_json_env("BENCH_SCRAPEQ_SETTINGS")}


def _child_scrapeq(redis_url: str, urls: list[str], concurrency: int, burst: Burst) -> None:
    from scrapeq.engine.config.settings import Settings
    from scrapeq.engine.queue import AsyncQueue, Queue
    from scrapeq.runtime.worker import Worker

    settings = Settings(
        allow_private=True, request_timeout=TIMEOUT, queue="incident", **_scrapeq_settings()
    )
    q = Queue.from_url(redis_url, settings=settings)
    q.enqueue_many(urls)
    aq = AsyncQueue.from_url(redis_url, settings=settings)
    worker = Worker(aq, concurrency=concurrency, report=False)
    timeline = Timeline(burst.urls)  # where the burst's wait goes ($BENCH_TIMELINE)
    timeline.watch_claims(aq)

    def burst_in() -> None:
        q.enqueue_many(burst.urls, lane="critical")
        timeline.enqueued(busy=len(worker._flights))

    _later(burst.at, burst_in)
    worker.run()


def _scrapy_settings(concurrency: int) -> dict[str, Any]:
    return {
        "CONCURRENT_REQUESTS": concurrency,
        "DOWNLOAD_TIMEOUT": TIMEOUT,
        "RETRY_TIMES": RETRIES,
        "LOG_LEVEL": "WARNING",
        "ROBOTSTXT_OBEY": False,
        "TELNETCONSOLE_ENABLED": False,
        "TWISTED_REACTOR": "twisted.internet.asyncioreactor.AsyncioSelectorReactor",
    }


def _run_spider(
    urls: list[str], settings: dict[str, Any], slot_per_site: bool, burst: Burst
) -> None:
    import scrapy
    import scrapy.signals
    from scrapy.crawler import CrawlerProcess

    timeline = Timeline(burst.urls)

    class Incident(scrapy.Spider):
        name = "incident"

        @classmethod
        def from_crawler(cls, crawler: Any, *args: Any, **kwargs: Any) -> Any:
            spider = super().from_crawler(crawler, *args, **kwargs)
            crawler.signals.connect(spider.opened, signal=scrapy.signals.spider_opened)
            return spider

        def opened(self) -> None:
            # The burst enters the scheduler on time, whatever start() has reached.
            from twisted.internet import reactor

            delay = max(0.0, burst.at - time.monotonic())
            reactor.callLater(delay, self.send_burst)  # type: ignore[attr-defined]

        def send_burst(self) -> None:
            frontier = _frontier_of(self.crawler)  # Scrapy on scrapeq: its timeline
            if frontier is not None:
                timeline.watch_claims(frontier.queue)
            for url in burst.urls:
                meta = {"download_slot": url.split("/")[2]} if slot_per_site else {}
                meta["scrapeq_lane"] = "critical"  # read by Scrapy on scrapeq only
                request = scrapy.Request(url, callback=self.parse_page, meta=meta, priority=100)
                self.crawler.engine.crawl(request)
            if frontier is not None:
                timeline.enqueued(busy=len(frontier.held))

        async def start(self) -> Any:
            for url in urls:
                # One download slot per site, as distinct host names would have.
                meta = {"download_slot": url.split("/")[2]} if slot_per_site else {}
                yield scrapy.Request(url, callback=self.parse_page, meta=meta)

        def parse_page(self, response: Any) -> Any:
            yield {"url": response.url}

    process = CrawlerProcess(settings={**settings, "ITEM_PIPELINES": {}})
    process.crawl(Incident)
    process.start()


def _frontier_of(crawler: Any) -> Any:
    """Scrapy on scrapeq's frontier of ``crawler`` (None for the other schedulers)."""
    if "scrapeq" not in str(crawler.settings.get("SCHEDULER")):
        return None
    from scrapeq.contrib.scrapy._frontier import Frontier

    return Frontier.of(crawler)


def _child_scrapy(redis_url: str, urls: list[str], concurrency: int, burst: Burst) -> None:
    _run_spider(urls, _scrapy_settings(concurrency), slot_per_site=True, burst=burst)


def _child_scrapy_priority(redis_url: str, urls: list[str], concurrency: int, burst: Burst) -> None:
    settings = {
        **_scrapy_settings(concurrency),
        "SCHEDULER_PRIORITY_QUEUE": "scrapy.pqueues.ScrapyPriorityQueue",
    }
    _run_spider(urls, settings, slot_per_site=True, burst=burst)


def _child_scrapy_scrapeq(redis_url: str, urls: list[str], concurrency: int, burst: Burst) -> None:
    settings = _scrapy_settings(concurrency)
    del settings["RETRY_TIMES"]
    settings.update(
        SCHEDULER="scrapeq.contrib.scrapy.Scheduler",
        DUPEFILTER_CLASS="scrapeq.contrib.scrapy.DupeFilter",
        DOWNLOADER_MIDDLEWARES={
            "scrapy.downloadermiddlewares.retry.RetryMiddleware": None,
            "scrapeq.contrib.scrapy.ReportMiddleware": 950,
        },
        SPIDER_MIDDLEWARES={"scrapeq.contrib.scrapy.ReportMiddleware": 10},
        SCRAPEQ_REDIS_URL=redis_url,
        SCRAPEQ_QUEUE="incident",
        # Scrapy settings of $BENCH_SCRAPY_SETTINGS (a JSON object): SCRAPEQ_URGENT_SLOTS, ...
        **_json_env("BENCH_SCRAPY_SETTINGS"),
        SCRAPEQ_SETTINGS={
            "allow_private": True,
            "request_timeout": TIMEOUT,
            **_scrapeq_settings(),
        },
    )
    _run_spider(urls, settings, slot_per_site=False, burst=burst)


def _child_arq(redis_url: str, urls: list[str], concurrency: int, burst: Burst) -> None:
    import aiohttp
    from arq import Retry, Worker, create_pool
    from arq.connections import RedisSettings
    from arq.worker import func

    async def fetch(ctx: dict[str, Any], url: str) -> int:
        try:
            async with ctx["session"].get(url) as resp:
                await resp.read()
                status = resp.status
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise Retry(defer=2 ** ctx["job_try"]) from exc
        if status >= 500 or status == 429:
            raise Retry(defer=2 ** ctx["job_try"])
        return status

    async def startup(ctx: dict[str, Any]) -> None:
        timeout = aiohttp.ClientTimeout(total=TIMEOUT)
        connector = aiohttp.TCPConnector(limit=0)
        ctx["session"] = aiohttp.ClientSession(timeout=timeout, connector=connector)

    async def shutdown(ctx: dict[str, Any]) -> None:
        await ctx["session"].close()

    settings = RedisSettings.from_dsn(redis_url)

    async def main() -> None:
        pool = await create_pool(settings)
        for url in urls:
            await pool.enqueue_job("fetch", url)

        async def burst_in() -> None:  # arq has no priorities: the burst joins the queue
            await asyncio.sleep(max(0.0, burst.at - time.monotonic()))
            for url in burst.urls:
                await pool.enqueue_job("fetch", url)

        burst_task = asyncio.create_task(burst_in())
        worker = Worker(
            # arq names a function by its __qualname__ (here _child_arq.<locals>.fetch), not
            # the name its jobs were enqueued under.
            functions=[func(fetch, name="fetch")],
            redis_settings=settings,
            max_jobs=concurrency,
            max_tries=RETRIES + 1,
            job_timeout=TIMEOUT + 5,
            on_startup=startup,
            on_shutdown=shutdown,
            handle_signals=False,
        )
        await worker.async_run()
        await burst_task

    asyncio.run(main())


def _child_scrapy_redis(redis_url: str, urls: list[str], concurrency: int, burst: Burst) -> None:
    settings = _scrapy_settings(concurrency)
    settings.update(
        SCHEDULER="scrapy_redis.scheduler.Scheduler",
        DUPEFILTER_CLASS="scrapy_redis.dupefilter.RFPDupeFilter",
        REDIS_URL=redis_url,
    )
    _run_spider(urls, settings, slot_per_site=True, burst=burst)


def _peer_env(redis_url: str) -> dict[str, str]:
    here = str(Path(__file__).resolve().parent)
    env = dict(os.environ, BENCH_REDIS_URL=redis_url)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (here, env.get("PYTHONPATH")) if p)
    return env


def _run_workers(cmd: list[str], redis_url: str) -> None:
    """Run a peer's worker command until this child is stopped (its group goes with it)."""
    proc = subprocess.Popen(cmd, cwd=Path(__file__).resolve().parent, env=_peer_env(redis_url))
    proc.wait()


def _child_rq(redis_url: str, urls: list[str], concurrency: int, burst: Burst) -> None:
    from rq import Queue as RQueue
    from rq import Retry

    conn = redis.Redis.from_url(redis_url)
    q = RQueue("incident", connection=conn)
    retry = Retry(max=RETRIES, interval=[1, 2, 4])
    with conn.pipeline() as pipe:
        for url in urls:
            q.enqueue("_fetch.fetch", url, retry=retry, job_timeout=600, pipeline=pipe)
        pipe.execute()
    critical = RQueue("critical", connection=conn)  # listed first: its workers take it first
    _later(burst.at, lambda: [critical.enqueue("_fetch.fetch", u, retry=retry) for u in burst.urls])
    rq = str(Path(sys.executable).parent / "rq")
    _run_workers([rq, "worker-pool", "-n", str(concurrency), "-w", "rq.worker.SimpleWorker",
                  "--url", redis_url, "critical", "incident"], redis_url)  # fmt: skip


def _child_dramatiq(redis_url: str, urls: list[str], concurrency: int, burst: Burst) -> None:
    os.environ["BENCH_REDIS_URL"] = redis_url
    import _peers

    for url in urls:
        _peers.dramatiq_fetch.send(url)
    _later(burst.at, lambda: [_peers.dramatiq_critical.send(u) for u in burst.urls])
    threads = max(1, concurrency // 2)
    exe = str(Path(sys.executable).parent / "dramatiq")
    _run_workers([exe, "_peers", "--processes", "2", "--threads", str(threads)], redis_url)


def _child_celery(redis_url: str, urls: list[str], concurrency: int, burst: Burst) -> None:
    os.environ["BENCH_REDIS_URL"] = redis_url
    import _peers

    for url in urls:
        _peers.celery_fetch.delay(url)
    burst_in = [_peers.celery_fetch.s(u).set(queue="critical") for u in burst.urls]
    _later(burst.at, lambda: [sig.apply_async() for sig in burst_in])
    exe = str(Path(sys.executable).parent / "celery")
    _run_workers([exe, "-A", "_peers", "worker", "-Q", "critical,celery", "--pool", "threads",
                  "--concurrency",
                  str(concurrency), "-l", "WARNING", "--without-gossip", "--without-mingle",
                  "--without-heartbeat"], redis_url)  # fmt: skip


def _child_crawlee(redis_url: str, urls: list[str], concurrency: int, burst: Burst) -> None:
    _crawlee_peer.run_crawlee(
        redis_url, urls, concurrency, burst.urls, burst.at, on_scrapeq=False,
        timeout=TIMEOUT, retries=RETRIES, scrapeq_settings={},
    )  # fmt: skip


def _child_crawlee_scrapeq(redis_url: str, urls: list[str], concurrency: int, burst: Burst) -> None:
    _crawlee_peer.run_crawlee(
        redis_url, urls, concurrency, burst.urls, burst.at, on_scrapeq=True,
        timeout=TIMEOUT, retries=RETRIES, scrapeq_settings=_scrapeq_settings(),
    )  # fmt: skip


#: Each system's child, in the order a full run takes them (the table's rows).
CHILDREN = {
    "scrapeq": _child_scrapeq,
    "scrapy": _child_scrapy,
    "scrapy-priority": _child_scrapy_priority,
    "scrapy-redis": _child_scrapy_redis,
    "scrapy-scrapeq": _child_scrapy_scrapeq,
    "rq": _child_rq,
    "dramatiq": _child_dramatiq,
    "celery": _child_celery,
    "arq": _child_arq,
    "crawlee": _child_crawlee,
    "crawlee-scrapeq": _child_crawlee_scrapeq,
}
SYSTEMS = tuple(CHILDREN)


# --- where every job is after the run (python bench/incident.py --account NAME ...) ---------
#
# Each reader runs under the system's own interpreter (--python-for) and reads the system's
# store with its own API where it has one; it prints {"finished": {where: [url, ...]},
# "pending": {...}, "stranded": {...}} (the URLs of the jobs each record holds), or, for
# scrapeq, {"counts": Queue.counts()}. _account() then puts every job in one category.


def _urls_of(where: dict[str, list[str]]) -> dict[str, list[str]]:
    return {k: sorted(set(v)) for k, v in where.items() if v}


def _store_scrapeq(redis_url: str) -> dict[str, Any]:
    from scrapeq.engine.queue import Queue

    q = Queue.from_url(redis_url, "incident")
    try:
        return {"counts": q.counts()}
    finally:
        q.close()


def _store_none(redis_url: str) -> dict[str, Any]:
    """Plain Scrapy: its frontier was in the stopped process's memory."""
    return {"finished": {}, "pending": {}, "stranded": {}}


def _store_scrapy_redis(redis_url: str) -> dict[str, Any]:
    from scrapy_redis import picklecompat

    conn = redis.Redis.from_url(redis_url)
    queued = [picklecompat.loads(m)["url"] for m in conn.zrange("incident:requests", 0, -1)]
    return {"finished": {}, "pending": _urls_of({"incident:requests": queued}), "stranded": {}}


def _store_rq(redis_url: str) -> dict[str, Any]:
    from rq import Queue as RQueue
    from rq.job import Job
    from rq.registry import (
        DeferredJobRegistry,
        FailedJobRegistry,
        FinishedJobRegistry,
        ScheduledJobRegistry,
        StartedJobRegistry,
    )

    conn = redis.Redis.from_url(redis_url)

    def urls(ids: list[str]) -> list[Job]:
        return [j for j in Job.fetch_many(ids, connection=conn) if j is not None]

    def members(key: str) -> list[str]:
        # The registries' keys read as they are: their get_job_ids() would first clean up
        # (move expired entries), changing what is being looked at.
        return [m.decode().split(":")[0] for m in conn.zrange(key, 0, -1)]

    finished: dict[str, list[str]] = {}
    pending: dict[str, list[str]] = {}
    stranded: dict[str, list[str]] = {}
    for name in ("critical", "incident"):
        q = RQueue(name, connection=conn)
        finished[f"rq:finished:{name}"] = [
            j.args[0] for j in urls(members(FinishedJobRegistry(queue=q).key))
        ]
        finished[f"rq:failed:{name}"] = [
            j.args[0] for j in urls(members(FailedJobRegistry(queue=q).key))
        ]
        pending[f"rq:queue:{name}"] = [j.args[0] for j in urls(q.get_job_ids())]
        for registry in (ScheduledJobRegistry(queue=q), DeferredJobRegistry(queue=q)):
            pending[registry.key] = [j.args[0] for j in urls(members(registry.key))]
        # Started by a worker that is gone: RQ's cleanup re-queues it when its entry expires
        # if it has retries left, else records it failed (AbandonedJobError) without a fetch.
        for job in urls(members(StartedJobRegistry(queue=q).key)):
            if job.retries_left:
                pending.setdefault(f"rq:wip:{name} (retries left)", []).append(job.args[0])
            else:
                stranded.setdefault(f"rq:wip:{name} (no retry left)", []).append(job.args[0])
    return {"finished": _urls_of(finished), "pending": _urls_of(pending),
            "stranded": _urls_of(stranded)}  # fmt: skip


def _store_dramatiq(redis_url: str) -> dict[str, Any]:
    # dramatiq's RedisBroker (brokers/redis/dispatch.lua): dramatiq:<queue>.msgs holds every
    # message not yet acked, queued (the list dramatiq:<queue>) or fetched by a worker (its
    # set dramatiq:__acks__.<worker>.<queue>; a worker whose heartbeat lapses has those put
    # back); <queue>.DQ is the delay queue (retries); <queue>.XQ.msgs the dead letters.
    conn = redis.Redis.from_url(redis_url)
    finished: dict[str, list[str]] = {}
    pending: dict[str, list[str]] = {}
    for queue in ("default", "critical"):
        for sub in (queue, f"{queue}.DQ"):
            key = f"dramatiq:{sub}.msgs"
            pending[key] = [json.loads(m)["args"][0] for m in conn.hvals(key)]
        key = f"dramatiq:{queue}.XQ.msgs"
        finished[key] = [json.loads(m)["args"][0] for m in conn.hvals(key)]
    return {"finished": _urls_of(finished), "pending": _urls_of(pending), "stranded": {}}


def _store_celery(redis_url: str) -> dict[str, Any]:
    # kombu's Redis transport: a list per queue (celery, critical) of messages, and the hash
    # `unacked` of messages a worker fetched and has not acked (ETA retries wait there in
    # the worker's memory); a worker restores an entry older than the visibility timeout
    # (1 h) to its queue. No result backend: a task that ended is in no record.
    import base64

    conn = redis.Redis.from_url(redis_url)

    def url(message: bytes | dict[str, Any]) -> str:
        envelope = json.loads(message) if isinstance(message, bytes) else message
        args, _kwargs, _embed = json.loads(base64.b64decode(envelope["body"]))
        return str(args[0])

    pending: dict[str, list[str]] = {}
    for key in conn.scan_iter(match="*"):
        name = key.decode()
        if conn.type(key) == b"list":
            pending[name] = [url(m) for m in conn.lrange(key, 0, -1)]
    pending["unacked"] = [url(json.loads(v)[0]) for v in conn.hvals("unacked")]
    return {"finished": {}, "pending": _urls_of(pending), "stranded": {}}


def _store_arq(redis_url: str) -> dict[str, Any]:
    # arq keeps a job in arq:queue until it ends (a running one too: its arq:in-progress key
    # expires and the job runs again), and its result in arq:result:<id> (keep_result, 1 h).
    from arq import create_pool
    from arq.connections import RedisSettings

    async def read() -> dict[str, Any]:
        pool = await create_pool(RedisSettings.from_dsn(redis_url))
        try:
            queued = [j.args[0] for j in await pool.queued_jobs()]
            ended = [r.args[0] for r in await pool.all_job_results()]
        finally:
            await pool.aclose()
        return {"finished": _urls_of({"arq:result:*": ended}),
                "pending": _urls_of({"arq:queue": queued}), "stranded": {}}  # fmt: skip

    return asyncio.run(read())


STORES: dict[str, Callable[[str], dict[str, Any]]] = {
    "scrapeq": _store_scrapeq,
    "scrapy": _store_none,
    "scrapy-priority": _store_none,
    "scrapy-scrapeq": _store_scrapeq,
    "arq": _store_arq,
    "scrapy-redis": _store_scrapy_redis,
    "rq": _store_rq,
    "dramatiq": _store_dramatiq,
    "celery": _store_celery,
    "crawlee": _crawlee_peer.read_store,
    "crawlee-scrapeq": _store_scrapeq,
}

#: Systems that keep no record of a job that ended (so the sites tell): "all" of them, or
#: only those that ended with an answer the system does not retry (a 404: Dramatiq keeps
#: only its failures, in the dead letters).
UNRECORDED_ENDS = {
    "scrapy": "all", "scrapy-priority": "all", "scrapy-redis": "all", "celery": "all",
    "dramatiq": "final",
}  # fmt: skip
FINAL = {"404"}

CATEGORIES = ("done", "failed", "pending", "lost")


def _account(
    name: str,
    store: dict[str, Any],
    jobs: list[str],
    outcomes: dict[str, tuple[int, list[str]]],
) -> dict[str, Any]:
    """Put every job in one category (see the module docstring); counts per category, and
    per record for pending and stranded."""
    if "counts" in store:  # scrapeq: its own counts
        c = store["counts"]
        pending = c["ready"] + c["delayed"] + c["inflight"]
        lost = len(jobs) - c["done"] - c["dead"] - pending - c["cancelled"]
        return {"jobs": len(jobs), "done": c["done"], "failed": c["dead"] + c["cancelled"],
                "pending": pending, "lost": lost, "stranded": 0,
                "where": {"ready": c["ready"], "delayed": c["delayed"],
                          "inflight (lease)": c["inflight"],
                          "never enqueued": len(jobs) - c["enqueued"]}}  # fmt: skip
    ended = {u for urls in store["finished"].values() for u in urls}
    where_pending = {u: k for k, urls in store["pending"].items() for u in urls}
    where_stranded = {u: k for k, urls in store["stranded"].items() for u in urls}
    unrecorded = UNRECORDED_ENDS.get(name)
    counts = dict.fromkeys(CATEGORIES, 0)
    where: dict[str, int] = {}
    stranded = 0
    for url in jobs:
        requests, seen = outcomes.get(url, (0, []))
        settled = requests == len(seen)  # no attempt was still under way at the stop
        final = settled and bool(FINAL & set(seen))
        spent = settled and len(seen) > RETRIES
        if "200" in seen:
            counts["done"] += 1
        elif (
            url in ended
            or (unrecorded == "all" and (final or spent))
            or (unrecorded == "final" and final)
        ):
            counts["failed"] += 1
        elif url in where_pending:
            counts["pending"] += 1
            where[where_pending[url]] = where.get(where_pending[url], 0) + 1
        else:
            counts["lost"] += 1
            if url in where_stranded:
                stranded += 1
                where[where_stranded[url]] = where.get(where_stranded[url], 0) + 1
    return {"jobs": len(jobs), **counts, "stranded": stranded, "where": where}


def _read_store(name: str, python: str, redis_url: str) -> dict[str, Any]:
    cmd = [python, __file__, "--account", name, "--redis-url", redis_url]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise RuntimeError(f"reading {name}'s store failed: {proc.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(proc.stdout)
    return result


# --- the critical burst's site ---------------------------------------------------------------


class BurstSite:
    """A loopback site, served on a thread of this process, that notes when each page was
    first asked for (``time.monotonic()``): how fresh the critical burst is."""

    def __init__(self) -> None:
        self.first: dict[str, float] = {}
        self.port = 0
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=lambda: asyncio.run(self._serve()), daemon=True)

    async def _serve(self) -> None:
        from aiohttp import web

        async def page(request: web.Request) -> web.Response:
            self.first.setdefault(request.path, time.monotonic())
            return web.Response(text="<title>critical</title>", content_type="text/html")

        app = web.Application()
        app.router.add_get("/{tail:.*}", page)
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self.port = int(site._server.sockets[0].getsockname()[1])  # type: ignore[union-attr]
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        self._ready.set()
        await self._stop.wait()
        await runner.cleanup()

    def __enter__(self) -> BurstSite:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the burst site did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(5)

    def urls(self, run: str, n: int) -> list[str]:
        return [f"http://127.0.0.1:{self.port}/{run}/c/{i}" for i in range(n)]

    def fetched_urls(self, urls: list[str]) -> list[str]:
        """The burst's URLs that were fetched."""
        return [u for u in urls if "/" + u.split("/", 3)[3] in self.first]

    def first_by_url(self, urls: list[str]) -> dict[str, float]:
        """The burst's URLs that were fetched -> when first asked for."""
        paths = {u: "/" + u.split("/", 3)[3] for u in urls}
        return {u: self.first[p] for u, p in paths.items() if p in self.first}

    def freshness(self, urls: list[str], at: float) -> list[float]:
        """Seconds from the burst's enqueue to each of its pages' first fetch."""
        paths = ["/" + u.split("/", 3)[3] for u in urls]
        return sorted(self.first[p] - at for p in paths if p in self.first)


# --- one run ---------------------------------------------------------------------------------


def _healthy(stats: dict[str, Any], sites: list[SiteSpec]) -> int:
    return sum(int(stats[s.name].statuses.get("200", 0)) for s in sites if s.healthy)


def run_system(
    name: str,
    fleet: Fleet,
    redis_url: str,
    urls: dict[str, list[str]],
    args: argparse.Namespace,
    site: BurstSite,
    run: int,
) -> dict[str, Any]:
    """Run one system for ``args.duration`` seconds; the fleet's counts say what it did."""
    client = redis.Redis.from_url(redis_url)
    client.flushall()
    client.close()
    fleet.reset_paths()
    before = fleet.stats()
    healthy_total = sum(len(urls[s.name]) for s in fleet.sites if s.healthy)
    burst_urls = site.urls(f"{name}-{run}", args.burst)
    burst_at = time.monotonic() + args.burst_after
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump({"urls": interleave(urls), "burst": burst_urls, "burst_at": burst_at}, f)
        url_file = f.name
    python = args.python_for.get(name, sys.executable)
    cmd = [python, __file__, "--child", name, "--redis-url", redis_url,
           "--url-file", url_file, "--concurrency", str(args.concurrency)]  # fmt: skip
    log = tempfile.TemporaryFile()  # noqa: SIM115 (closed below)
    timeline_file = tempfile.NamedTemporaryFile(suffix=".jsonl", delete=False)  # noqa: SIM115
    timeline_file.close()
    env = {**os.environ, _burst_timeline.ENV: timeline_file.name}
    started = time.monotonic()
    proc = subprocess.Popen(
        cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env
    )
    timeline: list[tuple[float, int]] = []
    at_30 = None
    try:
        while True:
            time.sleep(1.0)
            now = time.monotonic() - started
            stats = fleet.stats()
            done = _healthy(stats, fleet.sites) - _healthy(before, fleet.sites)
            timeline.append((round(now, 1), done))
            if at_30 is None and now >= 30:
                at_30 = done
            burst_done = len(site.freshness(burst_urls, burst_at)) == len(burst_urls)
            finished = done >= healthy_total and burst_done
            if finished or now >= args.duration or proc.poll() is not None:
                break
    finally:
        _stop_group(proc)
        os.unlink(url_file)
    time.sleep(1.0)  # the sites see the stopped system's connections close
    after = fleet.stats()
    jobs = interleave(urls) + burst_urls
    outcomes = {
        f"http://127.0.0.1:{fleet.ports[s]}{path}": seen
        for s, paths in fleet.paths().items()
        for path, seen in paths.items()
    }
    fetched = set(site.fetched_urls(burst_urls))
    outcomes.update({u: (1, ["200"]) for u in burst_urls if u in fetched})
    store = _read_store(name, python, redis_url)
    accounting = _account(name, store, jobs, outcomes)
    log.seek(0)
    tail = log.read().decode(errors="replace")[-2000:]
    log.close()
    fresh = site.freshness(burst_urls, burst_at)
    faulty = {
        s.name: (after[s.name] - before[s.name]).requests for s in fleet.sites if not s.healthy
    }
    result: dict[str, Any] = {
        "system": name,
        "healthy_total": healthy_total,
        "healthy_30s": at_30 if at_30 is not None else timeline[-1][1],
        "healthy_done": timeline[-1][1],
        "seconds": timeline[-1][0],
        "faulty_fetches": faulty,
        "timeline": timeline,
        "accounting": accounting,
        "burst": len(burst_urls),
        "burst_fetched": len(fresh),
        "burst_p50": _pct(fresh, 50),
        "burst_p99": _pct(fresh, 99),
        "burst_first": _pct(fresh, 0),
        "burst_quartiles": [_pct(fresh, q) for q in (25, 50, 75, 100)],
        "breakdown": _burst_timeline.breakdown(
            _burst_timeline.read(timeline_file.name), burst_at, site.first_by_url(burst_urls)
        ),
    }
    os.unlink(timeline_file.name)
    if result["healthy_done"] == 0 or result["burst_fetched"] < result["burst"]:
        result["log_tail"] = tail
    return result


def _pct(values: list[float], p: float) -> float | None:
    """The p-th percentile (nearest rank) of sorted ``values``; None when empty."""
    if not values:
        return None
    rank = max(1, -(-len(values) * p // 100))
    return round(values[int(rank) - 1], 2)


def _stop_group(proc: subprocess.Popen[bytes]) -> None:
    """Stop the child and the workers it started (its own process group), by force at last."""
    for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 10.0)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(wait)
        except subprocess.TimeoutExpired:
            continue
        if sig is signal.SIGTERM:
            time.sleep(0.5)  # the group's other members (worker processes) finish
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        return


# --- report ----------------------------------------------------------------------------------


def _median_range(values: list[int]) -> str:
    med = statistics.median(values)
    if len(values) == 1:
        return f"{med:g}"
    return f"{med:g} ({min(values)}-{max(values)})"


def _median_float(values: list[float | None]) -> str:
    """Median (min-max) of the runs that fetched the burst; '-' when none did."""
    got = [v for v in values if v is not None]
    if not got:
        return "-"
    med = statistics.median(got)
    if len(got) == 1:
        return f"{med:.2f}"
    return f"{med:.2f} ({min(got):.2f}-{max(got):.2f})"


def table(results: list[dict[str, Any]], faulty: list[str]) -> str:
    by: dict[str, list[dict[str, Any]]] = {}
    for r in results:
        by.setdefault(r["system"], []).append(r)
    headers = ["system", "healthy in 30 s", "healthy in all", "s", *faulty, *CATEGORIES,
               "burst p50 s", "burst p99 s", "burst fetched"]  # fmt: skip
    rows = []
    for name, runs in by.items():
        accounts = [r["accounting"] for r in runs if r.get("accounting")]
        rows.append(
            [
                name,
                _median_range([r["healthy_30s"] for r in runs]),
                _median_range([r["healthy_done"] for r in runs]) + f" / {runs[0]['healthy_total']}",
                _median_range([round(r["seconds"]) for r in runs]),
                *(_median_range([r["faulty_fetches"][f] for r in runs]) for f in faulty),
                *(
                    _median_range([a[c] for a in accounts]) if accounts else "n/a"
                    for c in CATEGORIES
                ),
                _median_float([r["burst_p50"] for r in runs]),
                _median_float([r["burst_p99"] for r in runs]),
                _median_range([r["burst_fetched"] for r in runs]) + f" / {runs[0]['burst']}",
            ]
        )
    return format_table(headers, rows)


def plot(results: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    shown: set[str] = set()
    for r in results:
        if r["system"] in shown:
            continue  # the first run of each system
        shown.add(r["system"])
        xs = [0.0] + [t for t, _ in r["timeline"]]
        ys = [0] + [d for _, d in r["timeline"]]
        ax.plot(xs, ys, label=r["system"])
    ax.axvline(30, color="grey", linestyle=":", linewidth=1)
    ax.set_xlabel("seconds")
    ax.set_ylabel("healthy pages fetched")
    ax.set_title("One hanging site: healthy pages over time (30 s timeout, same concurrency)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def _from_json(paths: list[Path], plot_path: Path | None) -> int:
    """Print the table (and draw the plot) of saved results."""
    merged: dict[str, list[dict[str, Any]]] = {}
    for path in paths:
        by: dict[str, list[dict[str, Any]]] = {}
        for r in json.loads(path.read_text()):
            by.setdefault(r["system"], []).append(r)
        merged.update(by)
    results = [r for runs in merged.values() for r in runs]
    faulty = sorted(next(iter(results))["faulty_fetches"])
    print(table(results, faulty))
    if plot_path is not None:
        plot(results, plot_path)
    return 0


def add_python_for_arg(parser: argparse.ArgumentParser) -> None:
    """``--python-for SYSTEM=PYTHON`` (repeatable), shared with bench/peer_throughput.py."""
    parser.add_argument(
        "--python-for",
        action="append",
        default=[],
        metavar="SYSTEM=PYTHON",
        help="run SYSTEM's child under this interpreter (repeatable; e.g. "
        "arq=/tmp/arq-venv/bin/python: arq pins redis-py < 6)",
    )


def prepare_run(args: argparse.Namespace, prog: str) -> bool:
    """Signals stop the run cleanly, and ``args.python_for`` becomes {system: interpreter};
    False (after one line on stderr) when a --python-for value is bad.

    Stopped by a signal, the private redis-server, the fleet and the running system's
    processes are stopped too (a background job may have inherited SIGINT ignored).
    """
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        args.python_for = _python_for(args.python_for)
    except ValueError as exc:
        print(f"{prog}: --python-for {exc}", file=sys.stderr)
        return False
    return True


def _python_for(values: list[str]) -> dict[str, str]:
    """``--python-for SYSTEM=PYTHON`` values -> {system: interpreter}; ValueError if bad."""
    out: dict[str, str] = {}
    for value in values:
        name, sep, python = value.partition("=")
        if not sep or not name or not python:
            raise ValueError(f"{value!r}: expected SYSTEM=PYTHON")
        if name not in SYSTEMS:
            raise ValueError(f"{value!r}: unknown system {name!r} (known: {', '.join(SYSTEMS)})")
        if not (os.path.isfile(python) and os.access(python, os.X_OK)):
            raise ValueError(f"{value!r}: {python} is not an executable file")
        out[name] = python
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="a short run (checks the harness)")
    parser.add_argument("--systems", default=None, help=f"comma-separated, of {SYSTEMS}")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--scale", type=float, default=None)
    parser.add_argument("--duration", type=float, default=None)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--burst", type=int, default=40, help="critical jobs in the burst")
    parser.add_argument("--burst-after", type=float, default=None, help="seconds into a run")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--plot", type=Path, default=None)
    parser.add_argument(
        "--from-json",
        type=Path,
        nargs="+",
        default=None,
        help="no run: the table (and --plot) of earlier --json files; a system in a later "
        "file replaces its runs from an earlier one",
    )
    add_python_for_arg(parser)
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--redis-url", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--url-file", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--account", default=None, help=argparse.SUPPRESS)
    add_server_args(parser)
    args = parser.parse_args(argv)
    if not prepare_run(args, "incident"):
        return 2
    if args.account:
        print(json.dumps(STORES[args.account](args.redis_url)))
        return 0
    if args.child:
        job = json.loads(Path(args.url_file).read_text())
        burst = Burst(job["burst"], job["burst_at"])
        CHILDREN[args.child](args.redis_url, job["urls"], args.concurrency, burst)
        return 0
    if args.from_json:
        return _from_json(args.from_json, args.plot)
    default_systems = "scrapeq,scrapy" if args.quick else ",".join(SYSTEMS)
    systems = (args.systems or default_systems).split(",")
    unknown = [s for s in systems if s not in CHILDREN]
    if unknown:
        print(f"incident: unknown system {unknown[0]!r} (known: {', '.join(SYSTEMS)})",
              file=sys.stderr)  # fmt: skip
        return 2
    args.scale = args.scale or (0.1 if args.quick else 1.0)
    args.duration = args.duration or (12.0 if args.quick else 90.0)
    args.burst_after = args.burst_after or (3.0 if args.quick else 10.0)
    results: list[dict[str, Any]] = []
    with (
        private_redis(args.redis_server) as server,
        Fleet(default_sites(), track_paths=True) as fleet,
        BurstSite() as site,
    ):
        urls = job_urls(fleet, args.scale)
        print(f"redis {server.version}; {sum(len(v) for v in urls.values())} jobs, "
              f"concurrency {args.concurrency}, timeout {TIMEOUT:g} s, "
              f"{args.duration:g} s per run; {load_note()}")  # fmt: skip
        for run in range(args.runs):
            for name in systems:
                result = run_system(name, fleet, server.url, urls, args, site, run)
                result["run"] = run
                results.append(result)
                print(f"run {run + 1} {name}: healthy {result['healthy_done']}/"
                      f"{result['healthy_total']} in {result['seconds']:g} s, "
                      f"faulty fetches {result['faulty_fetches']}, burst fetched "
                      f"{result['burst_fetched']}/{result['burst']} p50 {result['burst_p50']} "
                      f"p99 {result['burst_p99']}; jobs {result['accounting']}",
                      flush=True)  # fmt: skip
                print(f"  {name} burst first fetch {result['burst_first']} s, quartiles "
                      f"{result['burst_quartiles']} s", flush=True)  # fmt: skip
                if result["breakdown"]:
                    print(f"  {name} {_burst_timeline.line(result['breakdown'])}", flush=True)
        faulty = [s.name for s in fleet.sites if not s.healthy]
    print(table(results, faulty))
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=1))
    if args.plot is not None:
        plot(results, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
