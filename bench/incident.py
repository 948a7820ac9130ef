"""The one-hanging-site incident through scrapeq and its peers, side by side.

The demo's fleet (:func:`scrapeq.demo.fleet.default_sites`: 40 healthy shops beside a 503, a
404, a hanging, a 429 and a dripping site; the hanging ``shop-43`` carries 25 times a shop's
backlog) is fetched by each system in turn, from the same job list (the demo's
``BASE_JOBS`` per site times ``--scale``), each against its own flushed private redis-server
(``bench/_redis.py``), each with **the same request timeout (30 s) and the same total
concurrency** (``--concurrency``, 64), each with its natural retry settings (3 retries,
exponential backoff where it has one):

* ``scrapeq``: scrapeq's own :class:`~scrapeq.runtime.worker.Worker` (its defaults: 5
  attempts, full-jitter backoff, breakers; ``domain_concurrency`` 2);
* ``scrapy``: plain Scrapy, its default retry middleware (``RETRY_TIMES`` 3, no backoff), one
  download slot per site (``CONCURRENT_REQUESTS_PER_DOMAIN`` 8, its default);
* ``scrapy-scrapeq``: the same spider on :mod:`scrapeq.contrib.scrapy`;
* ``arq``: an arq worker (``max_jobs`` = the concurrency), an aiohttp fetch per job, a
  failure retried 3 times by ``Retry(defer=2 ** try)``.

Each system runs in a child process for ``--duration`` seconds (or until every healthy page is
fetched); the figures come from the fleet's own counters (requests and statuses per site),
sampled every second, so no system reports on itself:

* healthy pages fetched (200s on the healthy shops) in the first 30 s and in all;
* fetches spent on each faulty site;
* for scrapeq: jobs lost or stranded (every job is done, dead, or pending in Redis at the end).

Not measured here (yet): scrapy-redis, RQ, Dramatiq and Celery, the critical burst's
freshness, the no-op and 50 ms throughput. ``--quick`` runs a short version (scrapeq and
plain Scrapy, a tenth of the jobs, 12 s each) that ``tests/test_bench_incident.py`` uses to
check the harness works, not its speed. ``--plot PATH`` draws healthy pages over time, one
line per system (matplotlib, in the ``bench`` extra).

Run: ``python bench/incident.py [--quick] [--systems scrapeq,scrapy,...] [--runs N]
[--json PATH] [--plot PATH]``.
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
import time
from pathlib import Path
from typing import Any

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _redis import add_server_args, format_table, load_note, private_redis
from scrapeq.demo.fleet import Fleet, SiteSpec, default_sites
from scrapeq.demo.scenario import BASE_JOBS

SYSTEMS = ("scrapeq", "scrapy", "scrapy-redis", "scrapy-scrapeq", "rq", "dramatiq", "celery", "arq")
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


def _child_scrapeq(redis_url: str, urls: list[str], concurrency: int) -> None:
    from scrapeq.engine.queue import AsyncQueue, Queue
    from scrapeq.engine.settings import Settings
    from scrapeq.runtime.worker import Worker

    settings = Settings(allow_private=True, request_timeout=TIMEOUT, queue="incident")
    q = Queue.from_url(redis_url, settings=settings)
    q.enqueue_many(urls)
    q.close()
    aq = AsyncQueue.from_url(redis_url, settings=settings)
    Worker(aq, concurrency=concurrency, report=False).run()


def _scrapy_settings(concurrency: int) -> dict[str, Any]:
    return {
        "CONCURRENT_REQUESTS": concurrency,
        "DOWNLOAD_TIMEOUT": TIMEOUT,
        "RETRY_TIMES": RETRIES,
        "LOG_LEVEL": "WARNING",
        "ROBOTSTXT_OBEY": False,
        "TELNETCONSOLE_ENABLED": False,
    }


def _run_spider(urls: list[str], settings: dict[str, Any], slot_per_site: bool) -> None:
    import scrapy
    from scrapy.crawler import CrawlerProcess

    class Incident(scrapy.Spider):
        name = "incident"

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


def _child_scrapy(redis_url: str, urls: list[str], concurrency: int) -> None:
    _run_spider(urls, _scrapy_settings(concurrency), slot_per_site=True)


def _child_scrapy_scrapeq(redis_url: str, urls: list[str], concurrency: int) -> None:
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
        SCRAPEQ_SETTINGS={"allow_private": True, "request_timeout": TIMEOUT},
    )
    _run_spider(urls, settings, slot_per_site=False)


def _child_arq(redis_url: str, urls: list[str], concurrency: int) -> None:
    import aiohttp
    from arq import Retry, Worker, create_pool
    from arq.connections import RedisSettings

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
        await pool.aclose()
        worker = Worker(
            functions=[fetch],
            redis_settings=settings,
            max_jobs=concurrency,
            max_tries=RETRIES + 1,
            job_timeout=TIMEOUT + 5,
            on_startup=startup,
            on_shutdown=shutdown,
            handle_signals=False,
        )
        await worker.async_run()

    asyncio.run(main())


def _child_scrapy_redis(redis_url: str, urls: list[str], concurrency: int) -> None:
    settings = _scrapy_settings(concurrency)
    settings.update(
        SCHEDULER="scrapy_redis.scheduler.Scheduler",
        DUPEFILTER_CLASS="scrapy_redis.dupefilter.RFPDupeFilter",
        REDIS_URL=redis_url,
    )
    _run_spider(urls, settings, slot_per_site=True)


def _peer_env(redis_url: str) -> dict[str, str]:
    here = str(Path(__file__).resolve().parent)
    env = dict(os.environ, BENCH_REDIS_URL=redis_url)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (here, env.get("PYTHONPATH")) if p)
    return env


def _run_workers(cmd: list[str], redis_url: str) -> None:
    """Run a peer's worker command until this child is stopped (its group goes with it)."""
    proc = subprocess.Popen(cmd, cwd=Path(__file__).resolve().parent, env=_peer_env(redis_url))
    proc.wait()


def _child_rq(redis_url: str, urls: list[str], concurrency: int) -> None:
    from rq import Queue as RQueue
    from rq import Retry

    conn = redis.Redis.from_url(redis_url)
    q = RQueue("incident", connection=conn)
    retry = Retry(max=RETRIES, interval=[1, 2, 4])
    with conn.pipeline() as pipe:
        for url in urls:
            q.enqueue("_peers.fetch", url, retry=retry, job_timeout=600, pipeline=pipe)
        pipe.execute()
    rq = str(Path(sys.executable).parent / "rq")
    _run_workers([rq, "worker-pool", "-n", str(concurrency), "-w", "rq.worker.SimpleWorker",
                  "--url", redis_url, "-q", "incident"], redis_url)  # fmt: skip


def _child_dramatiq(redis_url: str, urls: list[str], concurrency: int) -> None:
    os.environ["BENCH_REDIS_URL"] = redis_url
    import _peers

    for url in urls:
        _peers.dramatiq_fetch.send(url)
    threads = max(1, concurrency // 2)
    exe = str(Path(sys.executable).parent / "dramatiq")
    _run_workers([exe, "_peers", "--processes", "2", "--threads", str(threads)], redis_url)


def _child_celery(redis_url: str, urls: list[str], concurrency: int) -> None:
    os.environ["BENCH_REDIS_URL"] = redis_url
    import _peers

    for url in urls:
        _peers.celery_fetch.delay(url)
    exe = str(Path(sys.executable).parent / "celery")
    _run_workers([exe, "-A", "_peers", "worker", "--pool", "threads", "--concurrency",
                  str(concurrency), "-l", "WARNING", "--without-gossip", "--without-mingle",
                  "--without-heartbeat"], redis_url)  # fmt: skip


CHILDREN = {
    "scrapeq": _child_scrapeq,
    "scrapy": _child_scrapy,
    "scrapy-scrapeq": _child_scrapy_scrapeq,
    "arq": _child_arq,
    "scrapy-redis": _child_scrapy_redis,
    "rq": _child_rq,
    "dramatiq": _child_dramatiq,
    "celery": _child_celery,
}


# --- one run ---------------------------------------------------------------------------------


def _healthy(stats: dict[str, Any], sites: list[SiteSpec]) -> int:
    return sum(int(stats[s.name].statuses.get("200", 0)) for s in sites if s.healthy)


def run_system(
    name: str, fleet: Fleet, redis_url: str, urls: dict[str, list[str]], args: argparse.Namespace
) -> dict[str, Any]:
    """Run one system for ``args.duration`` seconds; the fleet's counts say what it did."""
    client = redis.Redis.from_url(redis_url)
    client.flushall()
    client.close()
    before = fleet.stats()
    healthy_total = sum(len(urls[s.name]) for s in fleet.sites if s.healthy)
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(interleave(urls), f)
        url_file = f.name
    cmd = [sys.executable, __file__, "--child", name, "--redis-url", redis_url,
           "--url-file", url_file, "--concurrency", str(args.concurrency)]  # fmt: skip
    log = tempfile.TemporaryFile()  # noqa: SIM115 (closed below)
    started = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
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
            if done >= healthy_total or now >= args.duration or proc.poll() is not None:
                break
    finally:
        _stop_group(proc)
        os.unlink(url_file)
    after = fleet.stats()
    log.seek(0)
    tail = log.read().decode(errors="replace")[-2000:]
    log.close()
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
        "lost": _scrapeq_lost(redis_url, urls) if "scrapeq" in name else None,
    }
    if result["healthy_done"] == 0:
        result["log_tail"] = tail
    return result


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


def _scrapeq_lost(redis_url: str, urls: dict[str, list[str]]) -> int:
    """Jobs that are neither done, dead nor pending in the queue (lost or stranded)."""
    from scrapeq.engine.queue import Queue

    q = Queue.from_url(redis_url, "incident")
    try:
        c = q.counts()
    finally:
        q.close()
    kept = c["done"] + c["dead"] + c["ready"] + c["delayed"] + c["inflight"] + c["cancelled"]
    return c["enqueued"] - kept


# --- report ----------------------------------------------------------------------------------


def _median_range(values: list[int]) -> str:
    med = statistics.median(values)
    if len(values) == 1:
        return f"{med:g}"
    return f"{med:g} ({min(values)}-{max(values)})"


def table(results: list[dict[str, Any]], faulty: list[str]) -> str:
    by: dict[str, list[dict[str, Any]]] = {}
    for r in results:
        by.setdefault(r["system"], []).append(r)
    headers = ["system", "healthy in 30 s", "healthy in all", "s", *faulty, "lost"]
    rows = []
    for name, runs in by.items():
        lost = [r["lost"] for r in runs if r["lost"] is not None]
        rows.append(
            [
                name,
                _median_range([r["healthy_30s"] for r in runs]),
                _median_range([r["healthy_done"] for r in runs]) + f" / {runs[0]['healthy_total']}",
                _median_range([round(r["seconds"]) for r in runs]),
                *(_median_range([r["faulty_fetches"][f] for r in runs]) for f in faulty),
                _median_range(lost) if lost else "n/a",
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="a short run (checks the harness)")
    parser.add_argument("--systems", default=None, help=f"comma-separated, of {SYSTEMS}")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--scale", type=float, default=None)
    parser.add_argument("--duration", type=float, default=None)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--plot", type=Path, default=None)
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--redis-url", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--url-file", default=None, help=argparse.SUPPRESS)
    add_server_args(parser)
    args = parser.parse_args(argv)
    if args.child:
        CHILDREN[args.child](args.redis_url, json.loads(Path(args.url_file).read_text()),
                             args.concurrency)  # fmt: skip
        return 0
    default_systems = "scrapeq,scrapy" if args.quick else ",".join(SYSTEMS)
    systems = (args.systems or default_systems).split(",")
    unknown = [s for s in systems if s not in CHILDREN]
    if unknown:
        print(f"incident: unknown system {unknown[0]!r} (known: {', '.join(SYSTEMS)})",
              file=sys.stderr)  # fmt: skip
        return 2
    args.scale = args.scale or (0.1 if args.quick else 1.0)
    args.duration = args.duration or (12.0 if args.quick else 90.0)
    results: list[dict[str, Any]] = []
    with private_redis(args.redis_server) as server, Fleet(default_sites()) as fleet:
        urls = job_urls(fleet, args.scale)
        print(f"redis {server.version}; {sum(len(v) for v in urls.values())} jobs, "
              f"concurrency {args.concurrency}, timeout {TIMEOUT:g} s, "
              f"{args.duration:g} s per run; {load_note()}")  # fmt: skip
        for run in range(args.runs):
            for name in systems:
                result = run_system(name, fleet, server.url, urls, args)
                result["run"] = run
                results.append(result)
                print(f"run {run + 1} {name}: healthy {result['healthy_done']}/"
                      f"{result['healthy_total']} in {result['seconds']:g} s, "
                      f"faulty fetches {result['faulty_fetches']}", flush=True)  # fmt: skip
        faulty = [s.name for s in fleet.sites if not s.healthy]
    print(table(results, faulty))
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=1))
    if args.plot is not None:
        plot(results, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
