"""End-to-end worker throughput: scrapeq's Worker against a bare aiohttp loop, same URLs.

A fleet of 100 loopback HTTP sites (100 aiohttp servers on 127.0.0.1, one port each, so 100
domains) answers a small HTML page at once. The fleet runs in a separate process with its own
event loop, so the servers do not share the client's loop. Nothing leaves 127.0.0.1.

Four clients fetch the same N URLs (round-robin over the 100 domains), in alternating runs
(bare, scrapeq, bare+gc, scrapeq-gc, then the reverse, ...) so machine drift hits all alike:

* **bare**: one ``aiohttp.ClientSession`` (connector like the Fetcher's: ``limit=1000``,
  ``limit_per_host=0``), a fixed pool of 200 tasks pulling URLs from one shared iterator,
  each reading the whole body. Timed from session creation to the last body read.
* **scrapeq**: the N URLs are enqueued (not timed) into a flushed private redis-server, then
  ``Worker(queue, concurrency=200, burst=True).run_async()`` with
  ``Settings(allow_private=True, domain_concurrency=4)`` is timed from start to burst exit.
* **bare+gc** and **scrapeq-gc** (informational, not the bar): the bare loop run inside
  ``scrapeq.runtime.worker.tuned_gc()``, the garbage-collector tuning the Worker applies by default,
  and the Worker with ``tune_gc=False``, so the share of the ratio that tuning earns shows.

Reported: jobs/s of each (median and best of the rounds), the ratio scrapeq/bare, and per
run the CPU each process (client, fleet, redis-server) spent per job, how busy the client
process kept its one core, and the load of processes not ours (noise on a shared machine).
Bar: ratio of the medians >= 0.7.

When the bar is missed (or with ``--profile always``) a diagnosis follows, on extra runs that
are not part of the figures:

* CPU per job of each process, bare against scrapeq, and what binds (the client's one core or
  latency);
* what the 200 slots do (fetching, held but not fetching, empty), sampled every 2 ms on one
  traced run (``Worker``/``Fetcher`` subclasses that only count), and the time from a job's
  hand-over to the settle buffer until ``settle-1.lua``'s answer is counted (the slot is
  already free by then);
* Redis: ``INFO commandstats`` of the median timed worker run (EVALSHA and the commands its
  scripts run), and the split per script from ``SLOWLOG`` (``slowlog-log-slower-than 0``) of
  the traced run, with jobs per call and client round trips (a counting ``AsyncQueue``);
* cProfile (main-thread CPU time) of the shipped worker and of the bare loop: own time per
  area and the functions the worker adds;
* the worker's per-job steps timed alone (Job.from_json, classify_response, settle ARGV ...);
* where the gap comes from, each run next to a bare run of its own (alternating, medians of
  ``--rounds`` rounds): (0) the shipped worker end to end again (the machine's speed drifts,
  so the sum-up uses figures of the same minutes), (1) the fetch layer alone
  (``scrapeq.runtime.fetch.Fetcher`` driven by the bare loop's pool of 200 tasks, no Redis), (2) the
  queue overhead alone (the real ``Worker`` on the real redis-server with a fetcher that
  answers a canned page without HTTP), (3) the fetch layer alone again while a second process
  drives that no-HTTP worker load against redis-server (database 1), paced to run 0's jobs/s
  so Redis does about the work it does end to end (flat out, the load would claim at several
  times that rate and take a core itself); on a small machine redis-server's CPU also slows
  the client. A last line adds bare + fetch layer extra + queue overhead and sets the sum
  against the end-to-end worker's client CPU per job; what is left is contention and
  interaction.

Subclasses and helpers inside this benchmark do the instrumenting; src/ is not touched.

A full run (5 rounds of the four clients) takes about a minute on a quiet 2-core machine; the
diagnosis (``--profile always``, or when the bar is missed) adds about two minutes.

With ``--sites nginx`` the 100 sites are one real nginx instead (Debian's ``nginx-light``;
``bench/_nginx.py``: one worker process, the same page on 100 ports), the server of issue 40's
"at least 0.85 against nginx"; the fleet's CPU is then nginx's worker's.

Run: ``.venv/bin/python bench/worker_throughput.py [--quick] [--urls N] [--rounds R]
[--sites aiohttp|nginx] [--profile auto|always|never] [--wait-idle S] [--redis-server PATH]``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import gc
import json
import multiprocessing
import os
import platform
import pstats
import resource
import socket
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Coroutine, Iterator, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import aiohttp
import redis
from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy

from _nginx import nginx_fleet
from _redis import (
    SCRIPT_COMMANDS,
    RedisServer,
    add_server_args,
    commandstats,
    format_table,
    pct,
    private_redis,
    server_cpu,
)
from scrapeq.engine.config.settings import Settings
from scrapeq.engine.lua import scripts
from scrapeq.engine.lua.scripts import Call, EnqueueSpec, Settlement
from scrapeq.engine.model.job import Job
from scrapeq.engine.model.request import Request
from scrapeq.engine.queue import AsyncQueue, Command, Queue
from scrapeq.runtime.classify import classify_response
from scrapeq.runtime.deadlines import Deadlines
from scrapeq.runtime.fetch import Fetcher, Response
from scrapeq.runtime.worker import Worker, default_handler, tuned_gc

BAR_RATIO = 0.7
DOMAINS = 100
CONCURRENCY = 200
DOMAIN_CONCURRENCY = 4
PROFILE_URLS = 8_000  # at most, for each cProfile run
NOISY = 0.3  # other load (cores) above which --wait-idle repeats a run
BATCH_SAMPLE = 64  # jobs per settle call in the per-step timings
FULL_URLS = 20_000
FULL_ROUNDS = 5
QUICK_URLS = 4_000
WARMUP_URLS = 1_000
CHUNK = 500
QUEUE_NAME = "bench"
PAGE = (
    b"<!doctype html><html><head><title>bench</title></head><body>"
    + b"<p>a small page for the worker throughput benchmark</p>" * 8
    + b"</body></html>"
)
CLK_TCK = os.sysconf("SC_CLK_TCK")
#: A site's request handler (module-level: the fleet's process is spawned).
Handler = Callable[[web.Request], Coroutine[Any, Any, web.StreamResponse]]


# --- the fleet: 100 loopback sites in their own process --------------------------------------


async def plain_page(request: web.Request) -> web.StreamResponse:
    """Every path: the small page."""
    return web.Response(body=PAGE, content_type="text/html")


async def _fleet(domains: int, conn: Connection, page: Handler) -> None:
    runners: list[web.AppRunner] = []
    ports: list[int] = []
    for _ in range(domains):
        app = web.Application()
        app.router.add_get("/{tail:.*}", page)
        runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=0.1)
        await runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        await web.SockSite(runner, sock, backlog=1024).start()
        runners.append(runner)
        ports.append(int(sock.getsockname()[1]))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_reader(conn.fileno(), stop.set)
    conn.send(ports)
    await stop.wait()
    loop.remove_reader(conn.fileno())
    for runner in runners:
        await runner.cleanup()


def _fleet_main(domains: int, conn: Connection, page: Handler) -> None:
    asyncio.run(_fleet(domains, conn, page))


@dataclass(frozen=True, slots=True)
class Fleet:
    """The running fleet: its process id and the port of each site."""

    pid: int
    ports: list[int]


@contextlib.contextmanager
def fleet(domains: int, page: Handler = plain_page) -> Iterator[Fleet]:
    """Start the fleet process (each site answering with ``page``, a module-level handler:
    the process is spawned), yield its ports, stop it."""
    ctx = multiprocessing.get_context("spawn")
    ours, theirs = ctx.Pipe()
    proc = ctx.Process(target=_fleet_main, args=(domains, theirs, page), name="bench-fleet")
    proc.start()
    try:
        if not ours.poll(60):
            raise RuntimeError("the fleet did not start in 60 s")
        ports: list[int] = ours.recv()
        assert proc.pid is not None
        yield Fleet(proc.pid, ports)
    finally:
        with contextlib.suppress(OSError):
            ours.send("stop")
        proc.join(10)
        if proc.is_alive():
            proc.terminate()
            proc.join(5)
        ours.close()


@contextlib.contextmanager
def nginx_sites(domains: int) -> Iterator[Fleet]:
    """The fleet's sites served by a real nginx instead (``--sites nginx``; bench/_nginx.py):
    the same page on as many ports; the CPU counted as the fleet's is nginx's worker's."""
    with nginx_fleet(domains, PAGE) as (pid, ports):
        yield Fleet(pid, ports)


def make_urls(ports: Sequence[int], n: int) -> list[str]:
    """``n`` distinct URLs, round-robin over the sites."""
    return [f"http://127.0.0.1:{ports[i % len(ports)]}/item/{i:07d}" for i in range(n)]


# --- CPU accounting --------------------------------------------------------------------------


def own_cpu() -> float:
    """CPU seconds this process used so far (every thread, user + system)."""
    use = resource.getrusage(resource.RUSAGE_SELF)
    return use.ru_utime + use.ru_stime


class GcTime:
    """CPU time this process spends in the cyclic garbage collector while active, and the
    collections of each generation (``gc.callbacks``)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.collections = [0, 0, 0]
        self._began = 0.0

    def _note(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._began = time.process_time()
        else:
            self.seconds += time.process_time() - self._began
            self.collections[info["generation"]] += 1

    def __enter__(self) -> GcTime:
        gc.callbacks.append(self._note)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._note)


def proc_cpu(pid: int) -> float:
    """CPU seconds another process used so far (``/proc/PID/stat`` utime + stime)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


#: Our own processes (this one, the fleet, redis-server): not counted as other load.
OURS: set[int] = set()


def other_cpu() -> dict[int, float]:
    """CPU seconds used so far by every process of the machine that is not ours."""
    out: dict[int, float] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) in OURS:
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            out[int(entry.name)] = proc_cpu(int(entry.name))
    return out


def other_delta(before: dict[int, float]) -> float:
    """CPU seconds other processes used since ``before`` (new processes: all of theirs)."""
    return sum(cpu - before.get(pid, 0.0) for pid, cpu in other_cpu().items())


#: ``--wait-idle``: longest wait for a quiet machine before each run, seconds.
WAIT_IDLE = [0.0]


def wait_idle(threshold: float = 0.25) -> float:
    """Wait up to ``WAIT_IDLE`` s until processes not ours use < ``threshold`` cores."""
    began = time.perf_counter()
    while time.perf_counter() - began < WAIT_IDLE[0]:
        before = other_cpu()
        time.sleep(0.5)
        if other_delta(before) / 0.5 < threshold:
            break
    return time.perf_counter() - began


def redis_pid(server: RedisServer) -> int:
    client = redis.Redis.from_url(server.url)
    try:
        info: dict[str, Any] = client.info("server")
        return int(info["process_id"])
    finally:
        client.close()


@dataclass(frozen=True, slots=True)
class Run:
    """One timed run of one client."""

    kind: str  # "bare" or "scrapeq"
    jobs: int
    seconds: float
    client_cpu: float
    fleet_cpu: float
    redis_cpu: float
    other_cpu: float  # processes not ours, during the run
    commandstats: dict[str, tuple[int, float]] = field(default_factory=dict)
    load_cpu: float = 0.0  # our load process (contention runs only)
    gc_cpu: float = 0.0  # of client_cpu: in the garbage collector
    gc_collections: tuple[int, ...] = ()  # per generation

    @property
    def rate(self) -> float:
        return self.jobs / self.seconds

    @property
    def other_cores(self) -> float:
        """Cores that processes other than ours kept busy during the run (noise)."""
        return max(self.other_cpu, 0.0) / self.seconds

    def us_per_job(self, cpu: float) -> float:
        return cpu / self.jobs * 1e6


# --- (a) the bare aiohttp loop ---------------------------------------------------------------


async def _bare(urls: Sequence[str], concurrency: int, proxy: str | None = None) -> int:
    """Fetch ``urls`` with ``concurrency`` tasks over one session (through ``proxy``, if
    any: bench/cost.py's reference for a job through an exit); answers the 200s."""
    connector = aiohttp.TCPConnector(limit=1000, limit_per_host=0, ttl_dns_cache=60)
    ok = 0
    async with aiohttp.ClientSession(
        connector=connector, cookie_jar=aiohttp.DummyCookieJar()
    ) as session:
        todo = iter(urls)

        async def fetcher() -> None:
            nonlocal ok
            for url in todo:
                async with session.get(url, proxy=proxy) as resp:
                    body = await resp.read()
                    if resp.status == 200 and body:
                        ok += 1

        await asyncio.gather(*(fetcher() for _ in range(concurrency)))
    return ok


async def _fetch_layer(urls: Sequence[str], concurrency: int) -> int:
    """The bare loop's pool of tasks, fetching through scrapeq's Fetcher: no Redis at all."""
    ok = 0
    async with Fetcher(Settings(allow_private=True)) as fetcher:
        todo = iter(urls)

        async def puller() -> None:
            nonlocal ok
            for url in todo:
                response = await fetcher.fetch(url, normalised=True)
                if response.status == 200 and response.body:
                    ok += 1

        await asyncio.gather(*(puller() for _ in range(concurrency)))
    return ok


ClientLoop = Callable[[Sequence[str], int], Coroutine[Any, Any, int]]


def run_bare(
    urls: Sequence[str],
    fleet_pid: int,
    *,
    profile: cProfile.Profile | None = None,
    loop: ClientLoop = _bare,
    kind: str = "bare",
    server: RedisServer | None = None,
    load_pid: int | None = None,
    tuned: bool = False,
) -> Run:
    """Time one run of a pool-of-tasks client (the bare loop, or the Fetcher alone).

    ``server``: also measure redis-server's CPU over the run; ``load_pid``: the CPU of our
    load process (contention runs); ``tuned``: inside the worker's ``tuned_gc()``.
    """
    if load_pid is None:
        wait_idle()
    admin = redis.Redis.from_url(server.url) if server is not None else None
    redis0 = server_cpu(admin) if admin is not None else 0.0
    load0 = proc_cpu(load_pid) if load_pid is not None else 0.0
    cpu0, fleet0, others = own_cpu(), proc_cpu(fleet_pid), other_cpu()
    start = time.perf_counter()
    with _profiling(profile), tuned_gc() if tuned else contextlib.nullcontext(), GcTime() as gct:
        ok = asyncio.run(loop(urls, CONCURRENCY))
    seconds = time.perf_counter() - start
    client, fleet_cpu, other = (
        own_cpu() - cpu0,
        proc_cpu(fleet_pid) - fleet0,
        other_delta(others),
    )
    load = proc_cpu(load_pid) - load0 if load_pid is not None else 0.0
    redis_used = 0.0
    if admin is not None:
        redis_used = server_cpu(admin) - redis0
        admin.close()
    if ok != len(urls):
        raise RuntimeError(f"{kind}: {ok} of {len(urls)} fetches answered 200")
    return Run(
        kind,
        ok,
        seconds,
        client,
        fleet_cpu,
        redis_used,
        other,
        load_cpu=load,
        gc_cpu=gct.seconds,
        gc_collections=tuple(gct.collections),
    )


@contextlib.contextmanager
def _profiling(profile: cProfile.Profile | None) -> Iterator[None]:
    if profile is None:
        yield
        return
    profile.enable()
    try:
        yield
    finally:
        profile.disable()


# --- (b) the scrapeq worker ------------------------------------------------------------------


def bench_settings() -> Settings:
    return Settings(allow_private=True, domain_concurrency=DOMAIN_CONCURRENCY, queue=QUEUE_NAME)


WorkerFactory = Callable[[AsyncQueue], Worker]


def plain_worker(q: AsyncQueue) -> Worker:
    """The worker under test, exactly as the brief says."""
    return Worker(q, concurrency=CONCURRENCY, burst=True)


def untuned_worker(q: AsyncQueue) -> Worker:
    """The worker with CPython's collector settings left alone (informational)."""
    return Worker(q, concurrency=CONCURRENCY, burst=True, tune_gc=False)


def fill(q: Queue, specs: Sequence[EnqueueSpec]) -> None:
    q.client.flushall()
    for start in range(0, len(specs), CHUNK):
        q.enqueue_many(specs[start : start + CHUNK])


async def _worker(
    url: str, queue_cls: type[AsyncQueue], factory: WorkerFactory
) -> tuple[Worker, float]:
    client: redis.asyncio.Redis = redis.asyncio.Redis.from_url(url, decode_responses=True)
    q = queue_cls(client, settings=bench_settings())
    await client.ping()
    worker = factory(q)
    start = time.perf_counter()
    await worker.run_async()
    seconds = time.perf_counter() - start
    await q.close()
    return worker, seconds


def run_scrapeq(
    server: RedisServer,
    specs: Sequence[EnqueueSpec],
    fleet_pid: int,
    *,
    factory: WorkerFactory = plain_worker,
    queue_cls: type[AsyncQueue] = AsyncQueue,
    profile: cProfile.Profile | None = None,
    before: Callable[[redis.Redis], None] | None = None,
    kind: str = "scrapeq",
) -> tuple[Run, Worker]:
    """Enqueue ``specs`` into a flushed server (not timed), then time one burst worker run."""
    sync = Queue(redis.Redis.from_url(server.url, decode_responses=True), settings=bench_settings())
    fill(sync, specs)
    sync.client.config_resetstat()
    if before is not None:
        before(sync.client)
    wait_idle()
    cpu0, fleet0, redis0 = own_cpu(), proc_cpu(fleet_pid), server_cpu(sync.client)
    others = other_cpu()
    with _profiling(profile), GcTime() as gct:
        worker, seconds = asyncio.run(_worker(server.url, queue_cls, factory))
    other = other_delta(others)
    client_cpu, fleet_cpu = own_cpu() - cpu0, proc_cpu(fleet_pid) - fleet0
    redis_used = server_cpu(sync.client) - redis0
    stats = commandstats(sync.client)
    counts = sync.status()["counts"]
    sync.close()
    done = worker.stats.done
    if done != len(specs) or counts["done"] != len(specs):
        raise RuntimeError(f"{kind}: {done} done of {len(specs)} (queue counts {counts})")
    run = Run(
        kind,
        done,
        seconds,
        client_cpu,
        fleet_cpu,
        redis_used,
        other,
        stats,
        gc_cpu=gct.seconds,
        gc_collections=tuple(gct.collections),
    )
    return run, worker


# --- the comparison --------------------------------------------------------------------------


def median_run(runs: list[Run]) -> Run:
    return sorted(runs, key=lambda r: r.rate)[len(runs) // 2]


def cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "?"


def _run_row(label: str, r: Run) -> list[object]:
    return [
        label,
        r.jobs,
        r.seconds,
        r.rate,
        r.us_per_job(r.client_cpu),
        r.us_per_job(r.gc_cpu),
        "/".join(str(n) for n in r.gc_collections) or "-",
        r.us_per_job(r.fleet_cpu),
        r.us_per_job(r.redis_cpu) if r.kind.startswith("scrapeq") else "-",
        r.client_cpu / r.seconds,
        (r.client_cpu + r.fleet_cpu + r.redis_cpu) / r.seconds,
        r.other_cores,
    ]


RUN_HEADERS = [
    "run",
    "jobs",
    "s",
    "jobs/s",
    "client us/job",
    "of it gc",
    "collections",
    "fleet us/job",
    "redis us/job",
    "client core",
    "cores busy",
    "other load",
]


def print_rounds(runs: list[Run]) -> None:
    rows = [_run_row(f"{i}. {r.kind}", r) for i, r in enumerate(runs, 1)]
    print(format_table(RUN_HEADERS, rows))
    print(
        "(CPU per job of each process over the timed span; of it gc: the client's CPU in the "
        "garbage collector; collections: of generations 0/1/2; client core: share of one core "
        "the client process used; cores busy: our three processes; other load: cores used "
        "meanwhile by processes not ours, i.e. noise)"
    )


def print_summary(bare: list[Run], sq: list[Run], tuned: list[Run], untuned: list[Run]) -> float:
    mb, ms, mt, mu = median_run(bare), median_run(sq), median_run(tuned), median_run(untuned)
    best_b, best_s = max(r.rate for r in bare), max(r.rate for r in sq)
    best_t = max(r.rate for r in tuned)
    ratio = ms.rate / mb.rate
    rows: list[list[object]] = [
        ["bare aiohttp", len(bare), mb.rate, best_b],
        ["scrapeq Worker", len(sq), ms.rate, best_s],
        ["ratio scrapeq/bare", "", f"{ratio:.3f}", f"{best_s / best_b:.3f}"],
        ["informational: bare+gc", len(tuned), mt.rate, best_t],
        ["ratio scrapeq/(bare+gc)", "", f"{ms.rate / mt.rate:.3f}", f"{best_s / best_t:.3f}"],
        ["informational: scrapeq-gc", len(untuned), mu.rate, max(r.rate for r in untuned)],
        ["ratio (scrapeq-gc)/bare", "", f"{mu.rate / mb.rate:.3f}", ""],
    ]
    print(format_table(["client", "runs", "median jobs/s", "best jobs/s"], rows))
    print(
        "(bare+gc: the bare loop inside the worker's tuned_gc(), which the Worker applies by "
        "default; scrapeq-gc: the Worker with tune_gc=False; the bar is scrapeq against the "
        "plain bare loop, as the issue defines it)"
    )
    return ratio


# --- diagnosis: instrumented subclasses (never used in the timed runs) -----------------------


@dataclass
class ScriptTally:
    """Client-side figures of one script: calls, jobs asked / got, seconds awaited."""

    calls: int = 0
    asked: int = 0
    items: int = 0
    seconds: float = 0.0
    sizes: Counter[int] = field(default_factory=Counter)


class CountingQueue(AsyncQueue):
    """An AsyncQueue that tallies every script call and its round-trip time."""

    def __init__(self, client: redis.asyncio.Redis, *, settings: Settings) -> None:
        super().__init__(client, settings=settings)
        self.tally: dict[str, ScriptTally] = {}

    async def _step(self, step: Call[Any] | Command) -> Any:
        start = time.perf_counter()
        answer = await super()._step(step)
        elapsed = time.perf_counter() - start
        name = step.script if isinstance(step, Call) else str(step.args[0]).lower()
        t = self.tally.setdefault(name, ScriptTally())
        t.calls += 1
        t.seconds += elapsed
        if isinstance(step, Call):
            args = json.loads(step.args)
            t.asked += int(args.get("n", len(args.get("items", []))))
            if name == "claim":
                got = len(answer[1])
            else:  # a list of answers per item; one answer otherwise (log_leader's)
                got = len(answer) if isinstance(answer, list) else 1
            t.items += got
            t.sizes[got] += 1
        return answer


class CountingFetcher(Fetcher):
    """A Fetcher that counts the fetches in progress and notes when each ended (by URL)."""

    active = 0

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self.ended: dict[str, float] = {}  # URL -> perf_counter() at the end of its fetch

    async def fetch(
        self, url: str, *, normalised: bool = False, request: Request | None = None
    ) -> Response:
        self.active += 1
        try:
            return await super().fetch(url, normalised=normalised, request=request)
        finally:
            self.active -= 1
            self.ended[url] = time.perf_counter()


class TracedWorker(Worker):
    """The plain worker, plus a 2 ms sampler of what its 200 slots are doing.

    It watches through public means only: its fetcher (a :class:`CountingFetcher`, handed in)
    notes when each fetch ended, by URL; the ``on_claimed`` and ``on_settled`` hooks count
    the claims and answers, and close each job's settle wait: from the end of its fetch to its
    answer, the time its settlement spends buffered and in flight to Redis once its slot was
    freed (the built-in handler runs inline, in microseconds).
    """

    def __init__(self, queue: AsyncQueue, **options: Any) -> None:
        self.counting = CountingFetcher(queue.settings)
        self.claimed = self.answered = 0
        super().__init__(
            queue,
            fetcher=self.counting,
            on_claimed=self.note_claimed,
            on_settled=self.note_settled,
            **options,
        )
        self.samples: list[tuple[int, int, int]] = []  # (held, fetching, awaiting answer)
        self.settle_waits: list[float] = []
        self.lags: list[float] = []  # event-loop lag: how late a 2 ms sleep wakes up

    def note_claimed(self, jobs: Sequence[Job]) -> None:
        self.claimed += len(jobs)

    def note_settled(self, job: Job, settlement: Settlement, answer: str) -> None:
        self.answered += 1
        ended = self.counting.ended.pop(job.url, None)
        if ended is not None:
            self.settle_waits.append(time.perf_counter() - ended)

    async def run_async(self) -> Any:
        sampler = asyncio.create_task(self.sample_slots())
        try:
            return await super().run_async()
        finally:
            sampler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sampler
            await self.counting.close()  # handed in: not the worker's to close

    async def sample_slots(self) -> None:
        while True:
            asked = time.perf_counter()
            await asyncio.sleep(0.002)
            self.lags.append(time.perf_counter() - asked - 0.002)
            awaiting = len(self.counting.ended)  # fetched, not answered yet
            held = self.claimed - self.answered - awaiting
            self.samples.append((held, self.counting.active, awaiting))


#: Headers of the canned response (what the fleet's aiohttp server sends, roughly).
CANNED_HEADERS: CIMultiDictProxy[str] = CIMultiDictProxy(
    CIMultiDict({"Content-Type": "text/html; charset=utf-8", "Content-Length": str(len(PAGE))})
)


class CannedFetcher(Fetcher):
    """No HTTP: every fetch yields to the loop (``asyncio.sleep(delay)``, 0 by default) and
    answers 200 with the PAGE body, so a worker using it costs only claim, settle and its own
    bookkeeping."""

    def __init__(self, settings: Settings, *, delay: float = 0.0) -> None:
        super().__init__(settings)
        self.delay = delay

    async def fetch(
        self, url: str, *, normalised: bool = False, request: Request | None = None
    ) -> Response:
        await asyncio.sleep(self.delay)
        return Response(
            url=url, status=200, headers=CANNED_HEADERS, body=PAGE, elapsed=0.0001, redirects=0
        )


def canned_worker(q: AsyncQueue) -> Worker:
    """The shipped worker with no HTTP: queue overhead alone."""
    return Worker(q, concurrency=CONCURRENCY, burst=True, fetcher=CannedFetcher(q.settings))


# --- diagnosis: reports ----------------------------------------------------------------------


def print_cpu_split(bare: Run, sq: Run) -> None:
    print("\n-- CPU per job of each process, median timed runs (us) --")
    rows: list[list[object]] = []
    tb = bare.client_cpu + bare.fleet_cpu + bare.redis_cpu
    ts = sq.client_cpu + sq.fleet_cpu + sq.redis_cpu
    for label, b, s in (
        ("client (this process)", bare.client_cpu, sq.client_cpu),
        ("fleet process", bare.fleet_cpu, sq.fleet_cpu),
        ("redis-server", bare.redis_cpu, sq.redis_cpu),
        ("all three", tb, ts),
    ):
        rows.append([label, bare.us_per_job(b), sq.us_per_job(s), sq.us_per_job(s - b)])
    rows.append(["wall per job", bare.seconds / bare.jobs * 1e6, sq.seconds / sq.jobs * 1e6, ""])
    rows.append(
        [
            "client process busy (cores)",
            bare.client_cpu / bare.seconds,
            sq.client_cpu / sq.seconds,
            "",
        ]
    )
    rows.append(["all three busy (cores)", tb / bare.seconds, ts / sq.seconds, ""])
    print(format_table(["", "bare", "scrapeq", "extra"], rows))
    print_model(bare, sq)


def print_model(bare: Run, sq: Run) -> None:
    """Say what binds: the client process's one core, or latency."""
    busy_b, busy_s = bare.client_cpu / bare.seconds, sq.client_cpu / sq.seconds
    per_b, per_s = bare.us_per_job(bare.client_cpu), sq.us_per_job(sq.client_cpu)
    need = per_b / BAR_RATIO
    ratio = sq.rate / bare.rate
    if min(busy_b, busy_s) >= 0.8:
        print(
            f"=> Both clients keep their process's one core busy ({busy_b:.0%} bare, {busy_s:.0%} "
            "scrapeq; one event loop, one GIL), so jobs/s ~ 1 / client CPU per job: the model "
            f"ratio {per_b:.0f}/{per_s:.0f} = {per_b / per_s:.2f} vs {ratio:.2f} measured. For "
            f"{BAR_RATIO} the worker may spend at most {need:.0f} us/job in its process; it spends "
            f"{per_s:.0f}: "
            + (
                f"{per_s - need:.0f} us/job must go."
                if per_s > need
                else f"{need - per_s:.0f} us/job to spare."
            )
        )
    else:
        print(
            f"=> The client process is not saturated ({busy_b:.0%} bare, {busy_s:.0%} scrapeq of "
            "one core): the worker is bound by latency (see the slot states below), or the "
            "machine is busy (see 'other load')."
        )


def print_slots(worker: TracedWorker, run: Run) -> None:
    samples = worker.samples
    if not samples:
        print("\n-- slot states: no samples (the traced run was shorter than 2 ms) --")
        return
    held = statistics.mean(s[0] for s in samples)
    fetching = statistics.mean(s[1] for s in samples)
    awaiting = statistics.mean(s[2] for s in samples)
    other = held - fetching
    empty = CONCURRENCY - held
    print(
        f"\n-- What the {CONCURRENCY} slots do (sampled every 2 ms over one traced run, "
        f"{run.jobs:,} jobs at {run.rate:,.0f}/s) --"
    )
    rows: list[list[object]] = [
        ["fetching (inside Fetcher.fetch)", fetching, f"{fetching / CONCURRENCY:.0%}"],
        [
            "held, not fetching (task start, classify, handler inline)",
            other,
            f"{other / CONCURRENCY:.0%}",
        ],
        ["empty, waiting for a claim", empty, f"{empty / CONCURRENCY:.0%}"],
    ]
    print(format_table(["slot state", "mean slots", "share"], rows))
    waits = worker.settle_waits
    if waits:
        settle = (
            f"settle wait per job (end of its fetch until its answer reached on_settled; "
            f"slot already free): p50 {pct(waits, 50) * 1e3:.1f} ms, p90 "
            f"{pct(waits, 90) * 1e3:.1f} ms over {len(waits):,} jobs; mean {awaiting:.0f} jobs "
            "handed over and not yet answered"
        )
    else:
        settle = "settle wait per job: not measured (no answer reached on_settled)"
    lags = worker.lags
    print(settle)
    print(
        f"mean fetch time {fetching / run.rate * 1e3:.1f} ms (Little's law); event-loop lag "
        f"p50 {pct(lags, 50) * 1e3:.1f} ms, p90 {pct(lags, 90) * 1e3:.1f} ms"
    )


def slowlog_run(
    server: RedisServer, specs: Sequence[EnqueueSpec], fleet_pid: int
) -> tuple[Run, TracedWorker, dict[str, list[float]]]:
    """One traced worker run with every command in SLOWLOG: server time per script."""
    admin = redis.Redis.from_url(server.url, decode_responses=True)
    shas = {
        script.sha: name
        for name, script in Queue(admin, settings=bench_settings())._scripts.items()
    }

    def arm(client: redis.Redis) -> None:
        client.config_set("slowlog-max-len", 1_000_000)
        client.config_set("slowlog-log-slower-than", 0)
        client.slowlog_reset()

    def traced(q: AsyncQueue) -> Worker:
        return TracedWorker(q, concurrency=CONCURRENCY, burst=True)

    try:
        run, worker = run_scrapeq(
            server, specs, fleet_pid, factory=traced, queue_cls=CountingQueue, before=arm
        )
        admin.config_set("slowlog-log-slower-than", -1)
        entries: list[Any] = admin.execute_command("SLOWLOG", "GET", -1)  # type: ignore[no-untyped-call]
    finally:
        admin.config_set("slowlog-log-slower-than", 10_000)
        admin.config_set("slowlog-max-len", 128)
        admin.slowlog_reset()
        admin.close()
    per: dict[str, list[float]] = {}
    for entry in entries:
        command = entry["command"] if isinstance(entry, dict) else entry[3]
        words = command.split() if isinstance(command, str) else [str(w) for w in command]
        if not words or words[0].upper() != "EVALSHA":
            continue
        name = shas.get(words[1], words[1][:8])
        duration = float(entry["duration"] if isinstance(entry, dict) else entry[2])
        per.setdefault(name, []).append(duration)
    assert isinstance(worker, TracedWorker)
    return run, worker, per


def print_scripts(run: Run, worker: Worker, per: dict[str, list[float]]) -> None:
    q = worker.queue
    assert isinstance(q, CountingQueue)
    jobs = run.jobs
    per = {name: d for name, d in per.items() if name in q.tally}  # not the checks afterwards
    total = sum(sum(v) for v in per.values())
    print(f"\n-- Redis time per script (SLOWLOG of the traced run, {jobs:,} jobs) --")
    rows: list[list[object]] = []
    for name, durations in sorted(per.items(), key=lambda kv: -sum(kv[1])):
        t = q.tally[name]
        rows.append(
            [
                f"{name}-1.lua",
                len(durations),
                t.items / max(t.calls, 1),
                statistics.mean(durations),
                sum(durations) / jobs,
                f"{sum(durations) / total:.0%}",
                t.seconds / max(t.calls, 1) * 1e3,
            ]
        )
    headers = ["script", "calls", "jobs/call", "us/call", "us/job", "share"]
    print(format_table([*headers, "client round trip ms"], rows))
    print(
        f"scripts: {total / jobs:.1f} us/job of wall time inside Redis (redis-server CPU "
        f"{run.us_per_job(run.redis_cpu):.1f} us/job; wall is longer when Redis waits for a core)"
    )
    for name in ("claim", "settle"):
        tally = q.tally.get(name)
        if tally is None or not tally.calls:
            continue
        sizes = ", ".join(f"{s}x{c:,}" for s, c in sorted(tally.sizes.most_common(6)))
        asked = f", asked {tally.asked / tally.calls:.1f}/call" if name == "claim" else ""
        got = tally.items / tally.calls
        print(f"{name}: {tally.calls:,} calls, {got:.1f} jobs/call{asked}; sizes {sizes}")


def print_commandstats(run: Run) -> None:
    jobs = run.jobs
    stats = {k: v for k, v in run.commandstats.items() if k not in {"info", "config", "ping"}}
    print(f"\n-- Redis INFO commandstats, median timed worker run ({jobs:,} jobs) --")
    rows: list[list[object]] = [
        [name.upper(), calls, calls / jobs, usec / jobs, usec / max(calls, 1)]
        for name, (calls, usec) in sorted(stats.items(), key=lambda kv: -kv[1][1])[:14]
        if name != "scripts"
    ]
    print(format_table(["command", "calls", "calls/job", "usec/job", "usec/call"], rows))
    script_us = stats["scripts"][1]
    inner_us = sum(u for k, (_c, u) in stats.items() if k not in {"scripts", *SCRIPT_COMMANDS})
    if script_us > 0:
        print(
            f"EVALSHA's {script_us / jobs:.1f} us/job include the commands its scripts run "
            f"({inner_us / jobs:.1f} us/job, the rows below it); the other "
            f"{(script_us - inner_us) / jobs:.1f} us/job ({1 - inner_us / script_us:.0%}) are Lua "
            "itself: interpreting, cjson decode/encode of CFG, ARGV and every job, and the "
            "redis.call bridge"
        )


def _area(file: str) -> str:
    if file == "~":
        return "C builtins (socket send/recv, epoll, ...)"
    for marker, area in (
        ("scrapeq/worker.py", "scrapeq worker.py"),
        ("scrapeq/fetch.py", "scrapeq fetch.py"),
        ("scrapeq/urls.py", "scrapeq urls.py"),
        ("scrapeq/", "scrapeq queue/scripts/job/classify"),
        ("aiohttp/", "aiohttp"),
        ("yarl/", "yarl/multidict"),
        ("multidict/", "yarl/multidict"),
        ("redis/", "redis-py"),
        ("asyncio/", "asyncio"),
        ("concurrent/", "threads (to_thread)"),
        ("threading.py", "threads (to_thread)"),
        ("json/", "json"),
        ("urllib/", "urllib.parse"),
        ("worker_throughput.py", "this benchmark"),
    ):
        if marker in file:
            return area
    return "other stdlib"


def _where(file: str, line: int) -> str:
    if file == "~":
        return "builtin"
    short = file.split("site-packages/")[-1].split("/src/")[-1].split("/lib/python3")[-1]
    return f"{short}:{line}"


@dataclass(frozen=True, slots=True)
class Profile:
    jobs: int
    own: dict[str, tuple[int, float]]  # function -> (calls, own seconds)
    cum: dict[str, tuple[int, float]]  # scrapeq functions -> (calls, cumulative seconds)
    areas: Counter[str]

    @property
    def total(self) -> float:
        return sum(self.areas.values())


def read_profile(prof: cProfile.Profile, jobs: int) -> Profile:
    raw: dict[Any, Any] = pstats.Stats(prof).stats  # type: ignore[attr-defined]
    own: dict[str, tuple[int, float]] = {}
    cum: dict[str, tuple[int, float]] = {}
    areas: Counter[str] = Counter()
    for (file, line, func), (_cc, ncalls, tottime, cumtime, _callers) in raw.items():
        areas[_area(file)] += tottime
        name = f"{func} ({_where(file, line)})"
        own[name] = (ncalls, tottime)
        if "scrapeq/" in file:
            cum[name] = (ncalls, cumtime)
    return Profile(jobs, own, cum, areas)


def print_profiles(sq: Profile, bare: Profile, runs: tuple[Run, Run]) -> None:
    """Shipped worker against the bare loop: own time per area and function."""

    def us(seconds: float, p: Profile) -> float:
        return seconds / p.jobs * 1e6

    def own(p: Profile, name: str) -> float:
        return us(p.own.get(name, (0, 0.0))[1], p)

    print(
        f"\n-- cProfile, one extra run of each ({sq.jobs:,} jobs; main-thread CPU time, inflated "
        f"by the profiler: shipped worker {us(sq.total, sq):.0f} us/job at {runs[0].rate:,.0f}/s, "
        f"bare {us(bare.total, bare):.0f} at {runs[1].rate:,.0f}/s) --"
    )
    names = sorted(set(sq.areas) | set(bare.areas), key=lambda a: -sq.areas.get(a, 0.0))
    rows: list[list[object]] = []
    for a in names:
        vals = [us(p.areas.get(a, 0.0), p) for p in (sq, bare)]
        if max(vals) >= 0.5:
            rows.append([a, *vals, vals[0] - vals[1]])
    rows.append(["all", us(sq.total, sq), us(bare.total, bare), us(sq.total - bare.total, sq)])
    print("own time per area (us/job):")
    print(format_table(["area", "shipped", "bare", "extra"], rows))
    extra = sorted(sq.own, key=lambda name: own(bare, name) - own(sq, name))
    print(
        "\nfunctions by own time the shipped worker adds over bare "
        "(us/job; calls: coroutine resumes):"
    )
    rows = [
        [n[:86], sq.own[n][0] / sq.jobs, own(sq, n), own(bare, n), own(sq, n) - own(bare, n)]
        for n in extra[:16]
    ]
    print(format_table(["function", "calls/job", "worker", "bare", "extra"], rows))
    print("\nshipped worker, scrapeq functions by cumulative time (us/job):")
    top = sorted(sq.cum.items(), key=lambda kv: -kv[1][1])[:16]
    rows = [[n[:86], c / sq.jobs, us(t, sq), f"{t / sq.total:.0%}"] for n, (c, t) in top]
    print(format_table(["function", "calls/job", "cumulative", "of all"], rows))


def _per_op_us(fn: Callable[[], object], n: int) -> tuple[float, float]:
    """(wall, CPU) microseconds per call of ``fn``."""
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(n):
        fn()
    return (time.perf_counter() - wall) / n * 1e6, (time.process_time() - cpu) / n * 1e6


async def _deadline_cost(kind: str, blocks: int, tasks: int = CONCURRENCY) -> tuple[float, float]:
    """(wall, CPU) us per deadline-bounded block beyond a bare ``await asyncio.sleep(0)``, with
    ``tasks`` tasks doing blocks at once (as the fetch slots do: the loop's timer heap holds
    what they leave)."""
    deadlines = Deadlines(30.0)
    todo = iter(range(blocks))

    async def slot() -> None:
        for _ in todo:
            if kind == "asyncio.timeout":
                async with asyncio.timeout(30.0):
                    await asyncio.sleep(0)
            elif kind == "Deadlines":
                with deadlines.start():
                    await asyncio.sleep(0)
            else:
                await asyncio.sleep(0)

    wall, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*(slot() for _ in range(tasks)))
    deadlines.close()
    return (time.perf_counter() - wall) / blocks * 1e6, (time.process_time() - cpu) / blocks * 1e6


async def _async_costs(job: Job, response: Response, n: int) -> list[tuple[str, float, float]]:
    async def trivial() -> None:
        return None

    out: list[tuple[str, float, float]] = []
    for label, make in (
        (
            "asyncio.to_thread(handler) (a user's sync handler only; built-in: inline)",
            lambda: asyncio.to_thread(default_handler, job, response),
        ),
        ("create_task + run (one task per job)", lambda: asyncio.create_task(trivial())),
    ):
        wall, cpu = time.perf_counter(), time.process_time()
        for _ in range(n):
            await make()
        out.append(
            (label, (time.perf_counter() - wall) / n * 1e6, (time.process_time() - cpu) / n * 1e6)
        )
    blocks = 20 * n
    base_wall, base_cpu = await _deadline_cost("none", blocks)
    for kind, label in (
        ("Deadlines", "request deadline, scrapeq.deadlines (every fetch; 200 tasks)"),
        ("asyncio.timeout", "  the same with asyncio.timeout() (before 8d58e8b; 200 tasks)"),
    ):
        wall, cpu = await _deadline_cost(kind, blocks)
        out.append((label, wall - base_wall, cpu - base_cpu))
    return out


def micro_costs(server: RedisServer, url: str) -> None:
    """Per-job steps the worker adds, timed alone on a quiet loop (lower bounds)."""
    from scrapeq.runtime.worker import _record  # private: imported here, for this table only

    settings = bench_settings().replace(domain_concurrency=10 * BATCH_SAMPLE)  # one domain
    sync = Queue(redis.Redis.from_url(server.url, decode_responses=True), settings=settings)
    sync.client.flushall()
    sync.enqueue_many([sync.prepare(url) for _ in range(BATCH_SAMPLE)])
    _next, texts = sync._step(scripts.claim(BATCH_SAMPLE))
    sync.client.flushall()
    sync.close()
    jobs = [Job.from_json(t) for t in texts]
    assert len(jobs) == BATCH_SAMPLE, len(jobs)
    job = jobs[0]
    response = Response(
        url=job.url,
        status=200,
        headers=CIMultiDictProxy(CIMultiDict({"Content-Type": "text/html"})),
        body=PAGE,
        elapsed=0.001,
        redirects=0,
    )
    fetcher = Fetcher(settings)
    started = time.monotonic()
    n = 20_000
    rows: list[list[object]] = []
    for label, fn, per in (
        (
            "Fetcher._validate: parse_target (redirect hops only)",
            lambda: fetcher._validate(url),
            1,
        ),
        (
            "Fetcher._check_private (every fetch: a job's URL is normalised)",
            lambda: fetcher._check_private(url),
            1,
        ),
        ("Job.from_json (every claimed job)", lambda: Job.from_json(texts[0]), 1),
        (
            "classify_response (every fetch)",
            lambda: classify_response(200, response.headers, 0.001, slow_call=settings.slow_call),
            1,
        ),
        (
            "_record: result dict + datetime.now().isoformat() (only with a result sink)",
            lambda: _record(job, "done", response, started, None, default_handler(job, response)),
            1,
        ),
        (
            f"queue.done + settle-1.lua ARGV JSON (per job, batch of {BATCH_SAMPLE})",
            lambda: scripts.settle([sync.done(j) for j in jobs]),
            BATCH_SAMPLE,
        ),
    ):
        wall, cpu = _per_op_us(fn, n // per)
        rows.append([label, wall / per, cpu / per])
    for label, wall, cpu in asyncio.run(_async_costs(job, response, 5_000)):
        rows.append([label, wall, cpu])
    print("\n-- Per-job steps of the worker timed alone, quiet loop (lower bounds, us) --")
    print(format_table(["step", "wall", "CPU (all threads)"], rows))


def clean(measure: Callable[[], Run]) -> Run:
    """``measure()``; with ``--wait-idle``, repeated (twice at most) while other load is high."""
    run = measure()
    for _ in range(2):
        if WAIT_IDLE[0] <= 0 or run.other_cores <= NOISY:
            break
        run = measure()
    return run


# --- diagnosis: where the gap comes from -------------------------------------------------------

#: The load process (contention runs) stops by itself after this long, whatever happens.
LOAD_MAX_SECONDS = 120.0
#: Jobs the load process enqueues per cycle, in URLs of a timed run (it refills when done).
LOAD_FILL = 2


class _LoadState:
    """The load process's side: pace, jobs done over all cycles, the parent's window."""

    def __init__(self, conn: Connection, target: float) -> None:
        self.conn = conn
        self.target = target
        self.delay = CONCURRENCY / target  # per canned fetch; adjusted while running
        self.done_before = 0  # jobs of the cycles already over
        self.mark: tuple[int, float] | None = None
        self.window = (0, 0.0)  # (jobs, seconds) between the parent's "mark" and "stop"
        self.stopped = False
        self.announced = False


async def _pace(state: _LoadState, worker: Worker, fetcher: CannedFetcher) -> None:
    """Every 0.2 s, set the sleep per fetch so ``CONCURRENCY`` slots make ``target`` jobs/s:
    rate = slots / (sleep + the rest of a job's time), the rest estimated from the last 0.2 s."""
    last, then = worker.stats.done, time.perf_counter()
    while True:
        await asyncio.sleep(0.2)
        done, now = worker.stats.done, time.perf_counter()
        rate = (done - last) / (now - then)
        if rate > 0:
            rest = max(CONCURRENCY / rate - fetcher.delay, 0.0)
            wanted = max(CONCURRENCY / state.target - rest, 0.0)
            fetcher.delay = state.delay = 0.5 * fetcher.delay + 0.5 * wanted
        last, then = done, now


async def _load_cycle(state: _LoadState, url: str, deadline: float) -> None:
    """One burst of the paced no-HTTP worker on the load queue."""
    client: redis.asyncio.Redis = redis.asyncio.Redis.from_url(url, decode_responses=True)
    q = AsyncQueue(client, settings=bench_settings())
    fetcher = CannedFetcher(q.settings, delay=state.delay)
    worker = Worker(q, concurrency=CONCURRENCY, burst=True, fetcher=fetcher)
    loop = asyncio.get_running_loop()
    fd = state.conn.fileno()

    def stop() -> None:
        if not state.stopped:
            state.stopped = True
            loop.remove_reader(fd)
            worker.stop()

    def message() -> None:
        try:
            what = state.conn.recv()
        except EOFError:  # the parent is gone
            what = "stop"
        done = state.done_before + worker.stats.done
        if what == "mark":
            state.mark = (done, time.perf_counter())
        elif what == "stop":
            if state.mark is not None:
                state.window = (done - state.mark[0], time.perf_counter() - state.mark[1])
            stop()

    loop.add_reader(fd, message)
    timer = loop.call_later(max(deadline - time.monotonic(), 0.0), stop)
    pacer = asyncio.create_task(_pace(state, worker, fetcher))
    if not state.announced:  # the parent measures once the load runs at its pace
        state.announced = True
        loop.call_later(1.0, state.conn.send, "running")
    try:
        await worker.run_async()
    finally:
        pacer.cancel()
        timer.cancel()
        if not state.stopped:
            loop.remove_reader(fd)
        state.done_before += worker.stats.done
        await q.close()


def _load_main(url: str, ports: list[int], n: int, target: float, conn: Connection) -> None:
    """The load process: the no-HTTP worker, paced to ``target`` jobs/s, refilled with ``n``
    jobs whenever it is done, until told to stop (or ``LOAD_MAX_SECONDS``); sends back
    (jobs, seconds) of the window between the parent's "mark" and "stop"."""
    specs = make_specs(make_urls(ports, n))
    q = Queue(redis.Redis.from_url(url, decode_responses=True), settings=bench_settings())
    state = _LoadState(conn, target)
    deadline = time.monotonic() + LOAD_MAX_SECONDS
    try:
        while not state.stopped and time.monotonic() < deadline:
            q.client.flushdb()
            for start in range(0, len(specs), CHUNK):
                q.enqueue_many(specs[start : start + CHUNK])
            asyncio.run(_load_cycle(state, url, deadline))
    finally:
        q.client.flushdb()
        q.close()
        with contextlib.suppress(OSError):
            conn.send((*state.window, state.delay))
        conn.close()


@dataclass
class Load:
    """The running load process; ``done``/``seconds``/``delay`` are known once it stopped."""

    pid: int
    conn: Connection
    done: int = 0
    seconds: float = 0.0
    delay: float = 0.0  # the paced sleep per canned fetch it ended with

    def mark(self) -> None:
        """Start of the parent's measuring window."""
        self.conn.send("mark")

    @property
    def rate(self) -> float:
        return self.done / self.seconds if self.seconds > 0 else 0.0


@contextlib.contextmanager
def queue_load(server: RedisServer, ports: Sequence[int], n: int, rate: float) -> Iterator[Load]:
    """A second process driving the no-HTTP worker against redis-server (database 1), its
    canned fetches paced so that it makes ``rate`` jobs/s (when it can)."""
    ctx = multiprocessing.get_context("spawn")
    ours, theirs = ctx.Pipe()
    url = f"redis://127.0.0.1:{server.port}/1"
    proc = ctx.Process(
        target=_load_main, args=(url, list(ports), n, rate, theirs), name="bench-queue-load"
    )
    proc.start()
    theirs.close()
    assert proc.pid is not None
    load = Load(proc.pid, ours)
    OURS.add(proc.pid)
    try:
        if not ours.poll(60) or ours.recv() != "running":
            raise RuntimeError("the queue load process did not start in 60 s")
        yield load
    finally:
        with contextlib.suppress(OSError):
            ours.send("stop")
        with contextlib.suppress(OSError, EOFError):
            if ours.poll(30):
                load.done, load.seconds, load.delay = ours.recv()
        proc.join(10)
        if proc.is_alive():
            proc.terminate()
            proc.join(5)
        OURS.discard(proc.pid)
        ours.close()


@dataclass
class Part:
    """One row of the decomposition: its runs and the bare neighbour of each."""

    label: str
    runs: list[Run] = field(default_factory=list)
    bares: list[Run] = field(default_factory=list)
    loads: list[Load] = field(default_factory=list)

    def median(self, of: Callable[[Run, Run], float]) -> float:
        return statistics.median(of(r, b) for r, b in zip(self.runs, self.bares, strict=True))


def _client_us(r: Run) -> float:
    return r.us_per_job(r.client_cpu)


def gap_decomposition(
    server: RedisServer,
    urls: Sequence[str],
    specs: Sequence[EnqueueSpec],
    sites: Fleet,
    rounds: int,
    bare: Run,
    sq: Run,
) -> None:
    """End to end again, fetch layer alone, queue overhead alone, contention: each next to a
    bare run of its own, so the sum-up compares figures of the same minutes (the machine's
    speed drifts; the timed runs above may be off by tens of percent by now)."""
    e2e = Part("0. end to end (shipped Worker)")
    fetch = Part("1. fetch layer alone (Fetcher, no Redis)")
    queue = Part("2. queue overhead alone (Worker, no HTTP)")
    contended = Part("3. fetch layer alone, redis busy (load)")

    def end_to_end() -> Run:
        return run_scrapeq(server, specs, sites.pid, kind="end to end")[0]

    def fetch_alone() -> Run:
        return run_bare(urls, sites.pid, loop=_fetch_layer, kind="fetch alone")

    def queue_alone() -> Run:
        return run_scrapeq(server, specs, sites.pid, factory=canned_worker, kind="queue alone")[0]

    def fetch_contended() -> Run:
        pace = statistics.median(r.rate for r in e2e.runs)  # this round's and earlier
        with queue_load(server, sites.ports, LOAD_FILL * len(urls), pace) as load:
            load.mark()
            run = run_bare(
                urls,
                sites.pid,
                loop=_fetch_layer,
                kind="fetch contended",
                server=server,
                load_pid=load.pid,
            )
        contended.loads.append(load)
        return run

    pairs = 0
    for _ in range(rounds):
        for part, measure in (
            (e2e, end_to_end),
            (fetch, fetch_alone),
            (queue, queue_alone),
            (contended, fetch_contended),
        ):
            if pairs % 2 == 0:
                part.bares.append(clean(lambda: run_bare(urls, sites.pid)))
                part.runs.append(clean(measure))
            else:
                part.runs.append(clean(measure))
                part.bares.append(clean(lambda: run_bare(urls, sites.pid)))
            pairs += 1
    print(
        f"\n-- Where the gap comes from: each run next to a bare run of its own (alternating; "
        f"medians of {rounds} round(s), {len(urls):,} URLs) --"
    )
    rows: list[list[object]] = []
    for part in (e2e, fetch, queue, contended):
        with_redis = part in (e2e, queue)
        rows.append(
            [
                part.label,
                part.median(lambda r, b: r.rate),
                part.median(lambda r, b: _client_us(r)),
                part.median(lambda r, b: r.us_per_job(r.redis_cpu)) if with_redis else "-",
                part.median(lambda r, b: r.redis_cpu / r.seconds) if part is not fetch else "-",
                part.median(lambda r, b: r.load_cpu / r.seconds) if part is contended else "-",
                part.median(lambda r, b: b.rate),
                part.median(lambda r, b: _client_us(b)),
                part.median(lambda r, b: r.rate / b.rate),
                part.median(lambda r, b: max(r.other_cores, b.other_cores)),
            ]
        )
    headers = ["run", "jobs/s", "client us/job", "redis us/job", "redis cores", "load cores"]
    print(format_table([*headers, "bare jobs/s", "bare us/job", "ratio", "other load"], rows))
    rates = ", ".join(
        f"{load.rate:,.0f} jobs/s (fetch = sleep {load.delay * 1e3:.1f} ms)"
        for load in contended.loads
    )
    print(
        f"(ratio: jobs/s against the bare neighbour; run 2 has no HTTP, so its ratio only shows "
        f"how far the queue is from binding. Run 3: a second process drives the no-HTTP worker "
        f"({CONCURRENCY} slots) against redis-server, paced to run 0's jobs/s; load cores: its "
        f"own CPU. It ran at {rates})"
    )
    base = e2e.median(lambda r, b: _client_us(b))
    fetch_extra = fetch.median(lambda r, b: _client_us(r) - _client_us(b))
    queue_us = queue.median(lambda r, b: _client_us(r))
    modelled = base + fetch_extra + queue_us
    measured = e2e.median(lambda r, b: _client_us(r))
    rest = measured - modelled
    # each against its own bare neighbour, so drift between the pairs cancels
    inflation = statistics.median(
        (_client_us(c) - _client_us(cb)) - (_client_us(f) - _client_us(fb))
        for c, cb, f, fb in zip(
            contended.runs, contended.bares, fetch.runs, fetch.bares, strict=True
        )
    )
    print(
        f"=> client CPU per job: bare {base:.0f} + fetch layer extra {fetch_extra:+.0f} + queue "
        f"overhead {queue_us:+.0f} = {modelled:.0f} us/job vs {measured:.0f} measured end to end "
        f"(run 0 and its bare neighbours); the remaining {rest:+.0f} us/job "
        f"({rest / measured:+.0%}) is contention/interaction. Run 3 alone: with redis-server and "
        f"the load process busy, the fetch layer's client CPU per job changes by "
        f"{inflation:+.0f} us/job ({inflation / fetch.median(lambda r, b: _client_us(r)):+.0%}; "
        f"each against its own bare neighbour). (Timed runs above: bare {_client_us(bare):.0f}, "
        f"worker {_client_us(sq):.0f} us/job.)"
    )


def diagnose(
    server: RedisServer,
    urls: Sequence[str],
    specs: Sequence[EnqueueSpec],
    sites: Fleet,
    bare: Run,
    sq: Run,
    rounds: int,
) -> None:
    print("\n== Diagnosis (extra runs, not part of the figures above) ==")
    print_cpu_split(bare, sq)
    traced_run, traced, per = slowlog_run(server, specs, sites.pid)
    assert isinstance(traced, TracedWorker)
    print_slots(traced, traced_run)
    print_commandstats(sq)
    print_scripts(traced_run, traced, per)
    # CPU time of the main thread: preemption by other processes is not charged to a function
    n = min(len(urls), PROFILE_URLS)
    prof_sq = cProfile.Profile(time.thread_time)
    run_sq = run_scrapeq(server, specs[:n], sites.pid, profile=prof_sq)[0]
    prof_bare = cProfile.Profile(time.thread_time)
    run_b = run_bare(urls[:n], sites.pid, profile=prof_bare)
    print_profiles(read_profile(prof_sq, run_sq.jobs), read_profile(prof_bare, n), (run_sq, run_b))
    micro_costs(server, urls[0])
    gap_decomposition(server, urls, specs, sites, rounds, bare, sq)


# --- main ------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="scrapeq Worker vs a bare aiohttp loop on 100 loopback sites in a separate "
        f"process (bar: median jobs/s ratio scrapeq/bare >= {BAR_RATIO}).",
    )
    parser.add_argument(
        "--quick", action="store_true", help=f"{QUICK_URLS:,} URLs, one round of each"
    )
    parser.add_argument(
        "--urls", type=int, default=None, help=f"URLs per run (default {FULL_URLS:,})"
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=None,
        help=f"timed runs of each client, alternating (default {FULL_ROUNDS}; --quick: 1)",
    )
    parser.add_argument(
        "--sites",
        choices=("aiohttp", "nginx"),
        default="aiohttp",
        help="what serves the 100 sites: aiohttp servers in one process (the default) or one "
        "nginx (Debian's nginx-light)",
    )
    parser.add_argument(
        "--profile",
        choices=("auto", "always", "never"),
        default="auto",
        help="diagnosis runs: when the bar is missed (auto, the default), always, or never",
    )
    parser.add_argument(
        "--wait-idle",
        type=float,
        default=0.0,
        metavar="S",
        help="before each run, wait up to S seconds for other processes to use under 0.25 "
        f"cores, and repeat (twice at most) a run they disturbed (> {NOISY} cores): for a "
        "shared machine; default 0: neither",
    )
    add_server_args(parser)
    args = parser.parse_args(argv)
    args.urls = args.urls or (QUICK_URLS if args.quick else FULL_URLS)
    args.rounds = args.rounds or (1 if args.quick else FULL_ROUNDS)
    if args.urls < 1 or args.rounds < 1:
        parser.error("--urls and --rounds must be >= 1")
    return args


def make_specs(urls: Sequence[str]) -> list[EnqueueSpec]:
    q = Queue(redis.Redis(), settings=bench_settings())  # prepare() does not touch Redis
    return [q.prepare(url) for url in urls]


def revision() -> str:
    """The git commit of the checkout, with ``+dirty`` when src/ has local changes."""
    root = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--", "src"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown revision"
    return head + ("+dirty" if dirty else "")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    WAIT_IDLE[0] = args.wait_idle
    print(
        f"machine: nproc {len(os.sched_getaffinity(0))} ({os.cpu_count()} CPUs), {cpu_model()}, "
        f"{platform.system()} {platform.release()}; Python {platform.python_version()}, "
        f"aiohttp {aiohttp.__version__}, redis-py {redis.__version__}"
    )
    print(f"command: {' '.join([Path(sys.executable).name, *sys.argv])}; scrapeq at {revision()}")
    load = os.getloadavg()
    print(f"load average before: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    if load[0] > 0.5 * len(os.sched_getaffinity(0)):
        print("warning: the machine is busy; figures will be noisy (see 'other load')")
    began = time.perf_counter()
    sites_of = nginx_sites if args.sites == "nginx" else fleet
    with sites_of(DOMAINS) as sites, private_redis(args.redis_server) as server:
        print(f"redis-server {server.version} ({server.binary}); fleet pid {sites.pid}")
        OURS.update({os.getpid(), sites.pid, redis_pid(server)})
        print(
            f"{DOMAINS} sites on 127.0.0.1 ports {min(sites.ports)}-{max(sites.ports)}; "
            f"{args.urls:,} URLs x {args.rounds} rounds; concurrency {CONCURRENCY}, "
            f"domain_concurrency {DOMAIN_CONCURRENCY}; page {len(PAGE)} bytes\n"
        )
        urls = make_urls(sites.ports, args.urls)
        specs = make_specs(urls)
        run_bare(urls[:WARMUP_URLS], sites.pid)  # warm-up, not reported
        run_scrapeq(server, make_specs(urls[:WARMUP_URLS]), sites.pid)
        runs: list[Run] = []
        for i in range(args.rounds):
            order = ("bare", "scrapeq", "bare+gc", "scrapeq-gc")
            for kind in order if i % 2 == 0 else reversed(order):
                if kind == "bare":
                    runs.append(clean(lambda: run_bare(urls, sites.pid)))
                elif kind == "scrapeq-gc":
                    runs.append(
                        clean(
                            lambda: run_scrapeq(
                                server, specs, sites.pid, factory=untuned_worker, kind="scrapeq-gc"
                            )[0]
                        )
                    )
                elif kind == "bare+gc":
                    runs.append(
                        clean(lambda: run_bare(urls, sites.pid, tuned=True, kind="bare+gc"))
                    )
                else:
                    runs.append(clean(lambda: run_scrapeq(server, specs, sites.pid)[0]))
        print_rounds(runs)
        print()
        bare = [r for r in runs if r.kind == "bare"]
        sq = [r for r in runs if r.kind == "scrapeq"]
        ratio = print_summary(
            bare,
            sq,
            [r for r in runs if r.kind == "bare+gc"],
            [r for r in runs if r.kind == "scrapeq-gc"],
        )
        passed = ratio >= BAR_RATIO
        print(
            f"\n{'PASS' if passed else 'FAIL'}: scrapeq {median_run(sq).rate:,.0f} jobs/s vs bare "
            f"{median_run(bare).rate:,.0f} jobs/s, ratio {ratio:.2f} "
            f"({'>=' if passed else '<'} {BAR_RATIO}; median of {args.rounds} round(s), "
            f"{args.urls:,} URLs)"
        )
        if args.profile == "always" or (args.profile == "auto" and not passed):
            diagnose(server, urls, specs, sites, median_run(bare), median_run(sq), args.rounds)
    print(f"\ntotal time {time.perf_counter() - began:.0f} s")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
