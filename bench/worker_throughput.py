"""End-to-end worker throughput: scrapeq's Worker against a bare aiohttp loop, same URLs.

A fleet of 100 loopback HTTP sites (100 aiohttp servers on 127.0.0.1, one port each, so 100
domains) answers a small HTML page at once. The fleet runs in a separate process with its own
event loop, so the servers do not share the client's loop. Nothing leaves 127.0.0.1.

Two clients fetch the same N URLs (round-robin over the 100 domains), in alternating runs
(bare, scrapeq, then scrapeq, bare, ...) so machine drift hits both alike:

* **bare**: one ``aiohttp.ClientSession`` (connector like the Fetcher's: ``limit=1000``,
  ``limit_per_host=0``), a fixed pool of 200 tasks pulling URLs from one shared iterator,
  each reading the whole body. Timed from session creation to the last body read.
* **scrapeq**: the N URLs are enqueued (not timed) into a flushed private redis-server, then
  ``Worker(queue, concurrency=200, burst=True).run_async()`` with
  ``Settings(allow_private=True, domain_concurrency=4)`` is timed from start to burst exit.

Reported: jobs/s of each (median and best of the rounds), the ratio scrapeq/bare, and per
run the CPU each process (client, fleet, redis-server) spent per job, how busy the client
process kept its one core, and the load of processes not ours (noise on a shared machine).
Bar: ratio of the medians >= 0.7.

When the bar is missed (or with ``--profile always``) a diagnosis follows, on extra runs that
are not part of the figures:

* CPU per job of each process, bare against scrapeq, and what binds (the client's one core or
  latency);
* what the 200 slots do (fetching, waiting for the settle answer, in the handler, empty):
  sampled every 2 ms on one traced run (``Worker``/``Fetcher`` subclasses that only count);
* Redis: ``INFO commandstats`` of the median timed worker run (EVALSHA and the commands its
  scripts run), and the split per script from ``SLOWLOG`` (``slowlog-log-slower-than 0``) of
  the traced run, with jobs per call and client round trips (a counting ``AsyncQueue``);
* cProfile (main-thread CPU time) of the shipped worker, of the worker with the changes A + B
  + D below, and of the bare loop: own time per area and the functions the worker adds;
* the worker's per-job steps timed alone (parse_target again, Job.from_json, to_thread ...);
* what-if runs, each next to a bare run of its own: A: an async handler (no
  ``asyncio.to_thread`` per job), B: a slot freed once its settlement is buffered, D: claims
  of every free slot (``scrapeq.worker.BATCH`` 64 -> 200), and A + B + D. They are applied by
  subclasses and a patched constant inside this benchmark; src/ is not touched.

A full run takes about 1.5 minutes on a quiet 2-core machine (diagnosis included).

Run: ``.venv/bin/python bench/worker_throughput.py [--quick] [--urls N] [--rounds R]
[--profile auto|always|never] [--wait-idle S] [--redis-server PATH]``
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
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
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp
import redis
from aiohttp import web
from multidict import CIMultiDict, CIMultiDictProxy

import scrapeq.worker
from _redis import RedisServer, add_server_args, format_table, private_redis
from scrapeq import scripts
from scrapeq.classify import classify_response
from scrapeq.fetch import Fetcher, Response
from scrapeq.job import Job
from scrapeq.queue import AsyncQueue, Command, Queue
from scrapeq.scripts import Call, EnqueueSpec
from scrapeq.settings import Settings
from scrapeq.worker import Handler, Worker, default_handler

if TYPE_CHECKING:
    from scrapeq.worker import _Flight

BAR_RATIO = 0.7
DOMAINS = 100
CONCURRENCY = 200
DOMAIN_CONCURRENCY = 4
PROFILE_URLS = 8_000  # at most, for each cProfile run
NOISY = 0.3  # other load (cores) above which --wait-idle repeats a run
BATCH_SAMPLE = 64  # jobs per settle call in the per-step timings
FULL_URLS = 20_000
FULL_ROUNDS = 3
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


# --- the fleet: 100 loopback sites in their own process --------------------------------------


async def _fleet(domains: int, conn: Connection) -> None:
    async def page(request: web.Request) -> web.StreamResponse:
        return web.Response(body=PAGE, content_type="text/html")

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


def _fleet_main(domains: int, conn: Connection) -> None:
    asyncio.run(_fleet(domains, conn))


@dataclass(frozen=True, slots=True)
class Fleet:
    """The running fleet: its process id and the port of each site."""

    pid: int
    ports: list[int]


@contextlib.contextmanager
def fleet(domains: int) -> Iterator[Fleet]:
    """Start the fleet process, yield its ports, stop it."""
    ctx = multiprocessing.get_context("spawn")
    ours, theirs = ctx.Pipe()
    proc = ctx.Process(target=_fleet_main, args=(domains, theirs), name="bench-fleet")
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


def make_urls(ports: Sequence[int], n: int) -> list[str]:
    """``n`` distinct URLs, round-robin over the sites."""
    return [f"http://127.0.0.1:{ports[i % len(ports)]}/item/{i:07d}" for i in range(n)]


# --- CPU accounting --------------------------------------------------------------------------


def own_cpu() -> float:
    """CPU seconds this process used so far (every thread, user + system)."""
    use = resource.getrusage(resource.RUSAGE_SELF)
    return use.ru_utime + use.ru_stime


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


def redis_cpu(client: redis.Redis) -> float:
    cpu: dict[str, Any] = client.info("cpu")
    return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])


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


async def _bare(urls: Sequence[str], concurrency: int) -> int:
    connector = aiohttp.TCPConnector(limit=1000, limit_per_host=0, ttl_dns_cache=60)
    ok = 0
    async with aiohttp.ClientSession(
        connector=connector, cookie_jar=aiohttp.DummyCookieJar()
    ) as session:
        todo = iter(urls)

        async def fetcher() -> None:
            nonlocal ok
            for url in todo:
                async with session.get(url) as resp:
                    body = await resp.read()
                    if resp.status == 200 and body:
                        ok += 1

        await asyncio.gather(*(fetcher() for _ in range(concurrency)))
    return ok


def run_bare(
    urls: Sequence[str], fleet_pid: int, *, profile: cProfile.Profile | None = None
) -> Run:
    wait_idle()
    cpu0, fleet0, others = own_cpu(), proc_cpu(fleet_pid), other_cpu()
    start = time.perf_counter()
    with _profiling(profile):
        ok = asyncio.run(_bare(urls, CONCURRENCY))
    seconds = time.perf_counter() - start
    client, fleet_cpu, other = (
        own_cpu() - cpu0,
        proc_cpu(fleet_pid) - fleet0,
        other_delta(others),
    )
    if ok != len(urls):
        raise RuntimeError(f"bare: {ok} of {len(urls)} fetches answered 200")
    return Run("bare", ok, seconds, client, fleet_cpu, 0.0, other)


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


def fill(q: Queue, specs: Sequence[EnqueueSpec]) -> None:
    q.client.flushall()
    for start in range(0, len(specs), CHUNK):
        q.enqueue_many(specs[start : start + CHUNK])


def commandstats(client: redis.Redis) -> dict[str, tuple[int, float]]:
    """cmdstat name -> (calls, usec)."""
    raw: dict[str, Any] = client.info("commandstats")
    return {
        k.removeprefix("cmdstat_"): (int(v["calls"]), float(v["usec"]))
        for k, v in raw.items()
        if k.startswith("cmdstat_")
    }


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
    cpu0, fleet0, redis0 = own_cpu(), proc_cpu(fleet_pid), redis_cpu(sync.client)
    others = other_cpu()
    with _profiling(profile):
        worker, seconds = asyncio.run(_worker(server.url, queue_cls, factory))
    other = other_delta(others)
    client_cpu, fleet_cpu = own_cpu() - cpu0, proc_cpu(fleet_pid) - fleet0
    server_cpu = redis_cpu(sync.client) - redis0
    stats = commandstats(sync.client)
    counts = sync.status()["counts"]
    sync.close()
    done = worker.stats.done
    if done != len(specs) or counts["done"] != len(specs):
        raise RuntimeError(f"{kind}: {done} done of {len(specs)} (queue counts {counts})")
    run = Run(kind, done, seconds, client_cpu, fleet_cpu, server_cpu, other, stats)
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
        r.us_per_job(r.fleet_cpu),
        r.us_per_job(r.redis_cpu) if r.kind != "bare" else "-",
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
        "(CPU per job of each process over the timed span; client core: share of one core the "
        "client process used; cores busy: our three processes; other load: cores used meanwhile "
        "by processes not ours, i.e. noise)"
    )


def print_summary(bare: list[Run], sq: list[Run]) -> float:
    mb, ms = median_run(bare), median_run(sq)
    best_b, best_s = max(r.rate for r in bare), max(r.rate for r in sq)
    ratio = ms.rate / mb.rate
    rows: list[list[object]] = [
        ["bare aiohttp", len(bare), mb.rate, best_b],
        ["scrapeq Worker", len(sq), ms.rate, best_s],
        ["ratio scrapeq/bare", "", f"{ratio:.3f}", f"{best_s / best_b:.3f}"],
    ]
    print(format_table(["client", "runs", "median jobs/s", "best jobs/s"], rows))
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
            got = len(answer[1]) if name == "claim" else len(answer)
            t.items += got
            t.sizes[got] += 1
        return answer


class CountingFetcher(Fetcher):
    """A Fetcher that counts the fetches in progress."""

    active = 0

    async def fetch(self, url: str, *, normalised: bool = False) -> Response:
        self.active += 1
        try:
            return await super().fetch(url, normalised=normalised)
        finally:
            self.active -= 1


class TracedWorker(Worker):
    """The plain worker, plus a 2 ms sampler of what its 200 slots are doing."""

    def __init__(self, queue: AsyncQueue, **options: Any) -> None:
        super().__init__(queue, **options)
        self.counting = CountingFetcher(self.settings)
        self._fetcher = self.counting  # still owned (closed) by the worker
        self.samples: list[tuple[int, int, int]] = []  # (held, fetching, awaiting settle)
        self.settle_waits: list[float] = []
        self.lags: list[float] = []  # event-loop lag: how late a 2 ms sleep wakes up

    async def run_async(self) -> Any:
        sampler = asyncio.create_task(self._sample())
        try:
            return await super().run_async()
        finally:
            sampler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sampler

    async def _sample(self) -> None:
        while True:
            asked = time.perf_counter()
            await asyncio.sleep(0.002)
            self.lags.append(time.perf_counter() - asked - 0.002)
            flights = self._flights.values()
            waiting = sum(1 for f in flights if f.submitted)
            self.samples.append((len(flights), self.counting.active, waiting))

    async def _submit(self, settlement: Any) -> str:
        start = time.perf_counter()
        try:
            return await super()._submit(settlement)
        finally:
            self.settle_waits.append(time.perf_counter() - start)


async def async_default_handler(job: Job, response: Response) -> dict[str, Any]:
    """The default handler's result, as a coroutine: no thread hop per job."""
    return default_handler(job, response)


class EarlyFreeWorker(Worker):
    """What-if: a job gives its slot back once its settlement is buffered.

    The plain worker holds the slot until ``settle-1.lua`` has answered (flush period + script
    + round trip), so a slot spends that time neither fetching nor claimable. Here the slot is
    freed at hand-over, and the claim loop is woken again when the answer arrives (so the
    burst exit check still sees every settlement).
    """

    async def _run_job(self, flight: _Flight) -> None:
        job = flight.job
        try:
            settlement, record = await self._attempt(job)
            if record is not None and self.sink is not None:
                settlement = await self._write_result(job, settlement, record)
            flight.submitted = True
            self._free(job)
            status = await self._submit(settlement)
            self._log_outcome(job, settlement, status)
        except asyncio.CancelledError:
            raise
        except Exception:
            if not flight.submitted:
                flight.submitted = True
                await self._submit(self.queue.releasing(job))
        finally:
            self._free(job)

    def _free(self, job: Job) -> None:
        self._flights.pop(job.id, None)
        self._slot_freed.set()


@contextlib.contextmanager
def claim_batch(n: int) -> Iterator[None]:
    """What-if D: ``scrapeq.worker.BATCH`` (most jobs one claim asks for) set to ``n``."""
    saved = scrapeq.worker.BATCH
    scrapeq.worker.BATCH = n
    try:
        yield
    finally:
        scrapeq.worker.BATCH = saved


WhatIf = tuple[str, WorkerFactory, int]


def what_if_variants() -> list[WhatIf]:
    """(label, worker factory, claim batch) of each experiment."""
    fast: Handler = async_default_handler
    batch = scrapeq.worker.BATCH

    def a(q: AsyncQueue) -> Worker:
        return Worker(q, concurrency=CONCURRENCY, burst=True, handler=fast)

    def b(q: AsyncQueue) -> Worker:
        return EarlyFreeWorker(q, concurrency=CONCURRENCY, burst=True)

    def abd(q: AsyncQueue) -> Worker:
        return EarlyFreeWorker(q, concurrency=CONCURRENCY, burst=True, handler=fast)

    return [
        ("as shipped (plain Worker)", plain_worker, batch),
        ("A. async handler: no asyncio.to_thread per job", a, batch),
        ("B. slot freed once its settlement is buffered", b, batch),
        (f"D. claim batch {batch} -> {CONCURRENCY} (every free slot)", plain_worker, CONCURRENCY),
        ("A + B + D", abd, CONCURRENCY),
    ]


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
            f"{per_s:.0f}: {per_s - need:.0f} us/job must go."
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
        return
    held = statistics.mean(s[0] for s in samples)
    fetching = statistics.mean(s[1] for s in samples)
    waiting = statistics.mean(s[2] for s in samples)
    other = held - fetching - waiting
    empty = CONCURRENCY - held
    waits = sorted(worker.settle_waits)
    p50 = waits[len(waits) // 2] * 1e3 if waits else 0.0
    p90 = waits[int(len(waits) * 0.9)] * 1e3 if waits else 0.0
    print(
        f"\n-- What the {CONCURRENCY} slots do (sampled every 2 ms over one traced run, "
        f"{run.jobs:,} jobs at {run.rate:,.0f}/s) --"
    )
    rows: list[list[object]] = [
        ["fetching (inside Fetcher.fetch)", fetching, f"{fetching / CONCURRENCY:.0%}"],
        ["held, waiting for settle-1.lua's answer", waiting, f"{waiting / CONCURRENCY:.0%}"],
        ["held, classify + handler (to_thread)", other, f"{other / CONCURRENCY:.0%}"],
        ["empty, waiting for a claim", empty, f"{empty / CONCURRENCY:.0%}"],
    ]
    print(format_table(["slot state", "mean slots", "share"], rows))
    lags = sorted(worker.lags)
    print(
        f"settle wait per job (hand-over to answer): p50 {p50:.1f} ms, p90 {p90:.1f} ms; "
        f"mean fetch time {fetching / run.rate * 1e3:.1f} ms (Little's law); event-loop lag "
        f"p50 {lags[len(lags) // 2] * 1e3:.1f} ms, p90 {lags[int(len(lags) * 0.9)] * 1e3:.1f} ms"
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
    ]
    print(format_table(["command", "calls", "calls/job", "usec/job", "usec/call"], rows))
    script_us = stats.get("evalsha", (0, 0.0))[1]
    inner_us = sum(u for k, (_c, u) in stats.items() if k not in {"evalsha", "eval"})
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


def print_profiles(sq: Profile, fixed: Profile, bare: Profile, runs: tuple[Run, Run, Run]) -> None:
    """Shipped worker, worker with A + B + D, bare loop: own time per area and function."""

    def us(seconds: float, p: Profile) -> float:
        return seconds / p.jobs * 1e6

    def own(p: Profile, name: str) -> float:
        return us(p.own.get(name, (0, 0.0))[1], p)

    print(
        f"\n-- cProfile, one extra run of each ({sq.jobs:,} jobs; main-thread CPU time, inflated "
        f"by the profiler: shipped {us(sq.total, sq):.0f} us/job at {runs[0].rate:,.0f}/s, "
        f"A + B + D {us(fixed.total, fixed):.0f} at {runs[1].rate:,.0f}/s, bare "
        f"{us(bare.total, bare):.0f} at {runs[2].rate:,.0f}/s) --"
    )
    names = sorted(set(sq.areas) | set(bare.areas), key=lambda a: -sq.areas.get(a, 0.0))
    rows: list[list[object]] = []
    for a in names:
        vals = [us(p.areas.get(a, 0.0), p) for p in (sq, fixed, bare)]
        if max(vals) >= 0.5:
            rows.append([a, *vals, vals[1] - vals[2]])
    rows.append(["all", us(sq.total, sq), us(fixed.total, fixed), us(bare.total, bare), ""])
    print("own time per area (us/job):")
    print(format_table(["area", "shipped", "A + B + D", "bare", "A+B+D extra"], rows))
    for label, p in (("the shipped worker", sq), ("the worker with A + B + D", fixed)):
        extra = sorted(p.own, key=lambda name: own(bare, name) - own(p, name))
        print(f"\nfunctions by own time {label} adds over bare (us/job; calls: coroutine resumes):")
        rows = [
            [n[:86], p.own[n][0] / p.jobs, own(p, n), own(bare, n), own(p, n) - own(bare, n)]
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


async def _async_costs(job: Job, response: Response, n: int) -> list[tuple[str, float, float]]:
    async def trivial() -> None:
        return None

    async def timeout_block() -> None:
        async with asyncio.timeout(30):
            pass

    out: list[tuple[str, float, float]] = []
    for label, make in (
        (
            "asyncio.to_thread(default_handler) (every job: sync handler)",
            lambda: asyncio.to_thread(default_handler, job, response),
        ),
        ("asyncio.timeout() enter + exit (every fetch)", timeout_block),
        ("create_task + run (one task per job)", lambda: asyncio.create_task(trivial())),
    ):
        wall, cpu = time.perf_counter(), time.process_time()
        for _ in range(n):
            await make()
        out.append(
            (label, (time.perf_counter() - wall) / n * 1e6, (time.process_time() - cpu) / n * 1e6)
        )
    return out


def micro_costs(server: RedisServer, url: str) -> None:
    """Per-job steps the worker adds, timed alone on a quiet loop (lower bounds)."""
    from scrapeq.worker import _record  # private: imported here, for this table only

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
        ("Fetcher._validate: parse_target again (every fetch)", lambda: fetcher._validate(url), 1),
        ("Job.from_json (every claimed job)", lambda: Job.from_json(texts[0]), 1),
        (
            "classify_response (every fetch)",
            lambda: classify_response(200, response.headers, 0.001, slow_call=settings.slow_call),
            1,
        ),
        (
            "_record: result dict + datetime.now().isoformat() (built even without a sink)",
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


def what_ifs(
    server: RedisServer, urls: Sequence[str], specs: Sequence[EnqueueSpec], fleet_pid: int
) -> None:
    """Each variant right after a bare run of its own: its ratio is against that neighbour."""
    print(
        "\n-- What-if runs: each change applied by a subclass in this benchmark (src/ untouched); "
        "one run each, ratio against a bare run just before it --"
    )
    rows: list[list[object]] = []
    for label, factory, batch in what_if_variants():

        def variant(factory: WorkerFactory = factory) -> Run:
            return run_scrapeq(server, specs, fleet_pid, factory=factory, kind="what-if")[0]

        bare = clean(lambda: run_bare(urls, fleet_pid))
        with claim_batch(batch):
            run = clean(variant)
        rows.append(
            [label, *_run_row("", run)[1:], bare.rate, bare.other_cores, run.rate / bare.rate]
        )
    print(format_table([*RUN_HEADERS, "bare jobs/s", "bare other", "ratio"], rows))


def diagnose(
    server: RedisServer,
    urls: Sequence[str],
    specs: Sequence[EnqueueSpec],
    fleet_pid: int,
    bare: Run,
    sq: Run,
) -> None:
    print("\n== Diagnosis (extra runs, not part of the figures above) ==")
    print_cpu_split(bare, sq)
    traced_run, traced, per = slowlog_run(server, specs, fleet_pid)
    assert isinstance(traced, TracedWorker)
    print_slots(traced, traced_run)
    print_commandstats(sq)
    print_scripts(traced_run, traced, per)
    # CPU time of the main thread: preemption by other processes is not charged to a function
    n = min(len(urls), PROFILE_URLS)
    profiles: list[Profile] = []
    runs: list[Run] = []
    _label, fixed_factory, fixed_batch = what_if_variants()[-1]
    for factory, batch in ((plain_worker, scrapeq.worker.BATCH), (fixed_factory, fixed_batch)):
        prof = cProfile.Profile(time.thread_time)
        with claim_batch(batch):
            run = run_scrapeq(server, specs[:n], fleet_pid, factory=factory, profile=prof)[0]
        profiles.append(read_profile(prof, run.jobs))
        runs.append(run)
    prof = cProfile.Profile(time.thread_time)
    runs.append(run_bare(urls[:n], fleet_pid, profile=prof))
    profiles.append(read_profile(prof, n))
    print_profiles(profiles[0], profiles[1], profiles[2], (runs[0], runs[1], runs[2]))
    micro_costs(server, urls[0])
    what_ifs(server, urls, specs, fleet_pid)


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
    with fleet(DOMAINS) as sites, private_redis(args.redis_server) as server:
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
            order = ("bare", "scrapeq") if i % 2 == 0 else ("scrapeq", "bare")
            for kind in order:
                if kind == "bare":
                    runs.append(clean(lambda: run_bare(urls, sites.pid)))
                else:
                    runs.append(clean(lambda: run_scrapeq(server, specs, sites.pid)[0]))
        print_rounds(runs)
        print()
        bare = [r for r in runs if r.kind == "bare"]
        sq = [r for r in runs if r.kind == "scrapeq"]
        ratio = print_summary(bare, sq)
        passed = ratio >= BAR_RATIO
        print(
            f"\n{'PASS' if passed else 'FAIL'}: scrapeq {median_run(sq).rate:,.0f} jobs/s vs bare "
            f"{median_run(bare).rate:,.0f} jobs/s, ratio {ratio:.2f} "
            f"({'>=' if passed else '<'} {BAR_RATIO}; median of {args.rounds} round(s), "
            f"{args.urls:,} URLs)"
        )
        if args.profile == "always" or (args.profile == "auto" and not passed):
            diagnose(server, urls, specs, sites.pid, median_run(bare), median_run(sq))
    print(f"\ntotal time {time.perf_counter() - began:.0f} s")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
