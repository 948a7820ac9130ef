"""The demo: the shop-43 incident replayed on a local fleet, scrapeq against a naive retry loop.

:func:`run_demo` starts the fleet of :mod:`scrapeq.demo.fleet` (40 healthy shops and five faulty
sites, in a separate process) and runs the same scenario twice against it:

1. **scrapeq**: a bulk backfill, then normal work, enqueued at once; a burst of critical
   re-crawls at 40% of the phase. One in-process
   :class:`~scrapeq.runtime.worker.Worker` (200 jobs at
   once) works the queue for ``duration`` seconds with demo-sized settings
   (:data:`DEMO_SETTINGS`: 3 s request deadline, 10 s breaker cooldown), under a live view.
2. **the naive retry loop** of the article, for ``naive_duration`` seconds: the same URLs in
   one FIFO (it has no lanes: the critical burst joins the tail), one shared pool of the same
   size, every URL tried up to 3 times with a sleep of 1, 2 then 4 s after each failure,
   ``raise_for_status`` (a 404 is retried too) and per-read timeouts only
   (``ClientTimeout(sock_read=...)``, which a slow drip defeats).

Every figure of the :class:`DemoReport` is measured in the run: freshness (enqueue to done, by
wall clock, healthy shops only) from what each phase saw finish, and fetches per site from the
fleet's own counters, read before and after each phase.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import re
import secrets
import signal
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import redis
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from scrapeq.demo.fleet import Fleet, Workload
from scrapeq.demo.report import (
    _STATE_STYLE,
    CONCURRENCY,
    LANES,
    TRANSITIONS,
    DemoReport,
    Freshness,
    PhaseReport,
    SiteFigures,
    Transition,
    _build_report,
    _by_site,
    _diff,
    _event_time,
    _Run,
    _table,
    render_report,
)
from scrapeq.engine.config.settings import Settings
from scrapeq.engine.model.job import Job
from scrapeq.engine.model.keys import Keys
from scrapeq.engine.model.lanes import Lanes
from scrapeq.engine.model.request import Request
from scrapeq.engine.queue import AsyncQueue
from scrapeq.errors import ConfigError, RedisUnavailable
from scrapeq.runtime.fetch import Fetcher, Response
from scrapeq.runtime.sinks import CallableSink
from scrapeq.runtime.worker import Worker

__all__ = [
    "DEMO_SETTINGS",
    "DemoReport",
    "Freshness",
    "PhaseReport",
    "SiteFigures",
    "Transition",
    "render_report",
    "run_demo",
]

#: Settings the scenario needs, applied over the caller's (the others are kept).
DEMO_SETTINGS: dict[str, object] = {
    "allow_private": True,  # the fleet listens on loopback
    "request_timeout": 3.0,
    "breaker_failures": 5,
    "breaker_cooldown": 10.0,
    "breaker_cooldown_max": 300.0,
    "backoff_base": 1.0,
    "backoff_cap": 30.0,
    "domain_concurrency": 2,
    "domain_delay": 0.0,
    "shutdown_grace": 1.0,
    "respect_robots": False,
    "proxy": (),
    "lanes": Lanes.default(),
}
#: Jobs per ordinary site and lane at scale 1, in enqueue order (``weight`` multiplies them).
BASE_JOBS: dict[str, int] = {"bulk": 40, "normal": 30, "critical": 8}
#: The critical burst arrives at this fraction of a phase.
BURST_AT = 0.4
NAIVE_TRIES = 3
#: Seconds between live refreshes, between polls in line mode, and between status lines.
REFRESH, POLL, LINE_EVERY = 0.5, 1.0, 5.0


# --- the run's context ------------------------------------------------------------------------


def _site(url: str) -> str:
    return (urlsplit(url).hostname or "").lower()


@dataclass
class _Ctx:
    settings: Settings
    redis_url: str
    fleet: Fleet
    work: Workload
    view: _View
    sick: dict[str, str]  # faulty site name -> mode
    scrapeq: _Run
    naive: _Run


async def _nap(seconds: float, done: Callable[[], bool]) -> None:
    end = time.monotonic() + seconds
    while not done() and time.monotonic() < end:
        await asyncio.sleep(min(0.1, max(end - time.monotonic(), 0.0)))


async def _later(delay: float, fn: Callable[[], Awaitable[None]]) -> None:
    await asyncio.sleep(delay)
    await fn()


async def _start(run: _Run, fleet: Fleet) -> None:
    run.fleet_before = await asyncio.to_thread(fleet.stats)
    run.started = time.time()


# --- phase 1: scrapeq ------------------------------------------------------------------------


class _CountingFetcher(Fetcher):
    """The default fetcher, counting (client side) the fetches it starts and holds per site."""

    def __init__(self, settings: Settings, fleet: Fleet, run: _Run) -> None:
        super().__init__(settings, resolver=fleet.resolver())
        self._run = run

    async def fetch(
        self,
        url: str,
        *,
        normalised: bool = False,
        request: Request | None = None,
        exit: str | None = None,
    ) -> Response:
        site = _site(url)
        self._run.fetches[site] += 1
        self._run.hold(site, 1)
        try:
            return await super().fetch(url, normalised=normalised, request=request, exit=exit)
        finally:
            self._run.hold(site, -1)


async def _title(job: Job, response: Response) -> dict[str, Any]:
    """The demo's handler: the page title."""
    found = re.search(r"<title>(.*?)</title>", response.text())
    return {"title": found.group(1) if found else None}


async def _enqueue(q: AsyncQueue, run: _Run, work: Workload, lane: str) -> None:
    run.enqueue(lane, work.lanes[lane])
    await q.enqueue_many(work.lanes[lane], lane=lane)


async def _scrapeq_phase(ctx: _Ctx) -> None:
    run = ctx.scrapeq
    q = AsyncQueue.from_url(ctx.redis_url, settings=ctx.settings)
    fetcher = _CountingFetcher(ctx.settings, ctx.fleet, run)

    async def record(rec: dict[str, Any]) -> None:
        run.finish(rec["url"], rec["outcome"])

    sink = CallableSink(record)
    worker = Worker(q, handler=_title, concurrency=CONCURRENCY, fetcher=fetcher, sink=sink)
    task: asyncio.Task[Any] | None = None
    burst: asyncio.Task[None] | None = None
    try:
        await _start(run, ctx.fleet)
        sec, usec = await q.client.time()
        run.redis_t0 = float(sec) + float(usec) / 1e6
        for lane in ("bulk", "normal"):
            await _enqueue(q, run, ctx.work, lane)
        task = asyncio.create_task(worker.run_async())
        critical = functools.partial(_enqueue, q, run, ctx.work, "critical")
        burst = asyncio.create_task(_later(run.limit * BURST_AT, critical))
        await ctx.view.watch(_ScrapeqProbe(q, ctx).frame, task.done, run.started + run.limit)
        run.interrupted = task.done()  # the worker took a SIGINT or SIGTERM
    finally:
        if burst is not None:
            burst.cancel()
        if task is not None:
            worker.stop()
            await task
            run.domains = _by_site(await q.domains_info())
        run.ended = time.time()
        await fetcher.close()
        await q.close()
    run.fleet_after = await asyncio.to_thread(ctx.fleet.stats)


# --- phase 2: the naive retry loop ---------------------------------------------------------------


async def _naive_worker(
    session: aiohttp.ClientSession, todo: asyncio.Queue[str], run: _Run
) -> None:
    """The article's loop: up to 3 tries, sleeping 1, 2, 4 s after each failure."""
    while True:
        url = await todo.get()
        site = _site(url)
        run.hold(site, 1)
        try:
            for attempt in range(NAIVE_TRIES):
                run.fetches[site] += 1
                try:
                    async with session.get(url) as resp:
                        await resp.read()
                except Exception:  # the naive loop: every failure looks the same
                    await asyncio.sleep(2**attempt)
                    continue
                run.finish(url, "done")
                break
            else:
                run.finish(url, "gave_up")
        finally:
            run.hold(site, -1)


def _naive_session(ctx: _Ctx) -> aiohttp.ClientSession:
    """One shared session: per-read timeouts only, and a raise on every 4xx and 5xx."""
    t = ctx.settings.request_timeout
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=CONCURRENCY, resolver=ctx.fleet.resolver()),
        timeout=aiohttp.ClientTimeout(total=None, sock_connect=t, sock_read=t),
        raise_for_status=True,
    )


def _on_sigint(loop: asyncio.AbstractEventLoop, callback: Callable[[], None] | None) -> None:
    """Route SIGINT to ``callback`` (``None``: stop routing); an ignored SIGINT stays so."""
    with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
        if callback is None:
            loop.remove_signal_handler(signal.SIGINT)
        elif signal.getsignal(signal.SIGINT) != signal.SIG_IGN:
            loop.add_signal_handler(signal.SIGINT, callback)


async def _naive_phase(ctx: _Ctx) -> None:
    run, stop, todo = ctx.naive, asyncio.Event(), asyncio.Queue[str]()
    loop = asyncio.get_running_loop()
    _on_sigint(loop, stop.set)
    session = _naive_session(ctx)

    async def put(lane: str) -> None:
        run.enqueue(lane, ctx.work.lanes[lane])
        for url in ctx.work.lanes[lane]:
            todo.put_nowait(url)

    tasks: list[asyncio.Task[None]] = []
    try:
        await _start(run, ctx.fleet)
        await put("bulk")
        await put("normal")
        tasks = [asyncio.create_task(_naive_worker(session, todo, run)) for _ in range(CONCURRENCY)]
        tasks.append(asyncio.create_task(_later(run.limit * BURST_AT, lambda: put("critical"))))
        await ctx.view.watch(_NaiveProbe(ctx).frame, stop.is_set, run.started + run.limit)
    finally:
        run.interrupted = stop.is_set()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        run.ended = time.time()
        await session.close()
        _on_sigint(loop, None)
    run.fleet_after = await asyncio.to_thread(ctx.fleet.stats)


# --- the live view -----------------------------------------------------------------------------


@dataclass(slots=True)
class _Frame:
    view: RenderableType
    line: str
    news: list[str]


class _View:
    """A rich Live view on a terminal console; otherwise a status line every few seconds."""

    def __init__(self, console: Console | None) -> None:
        self.console = console or Console(highlight=False)
        self.live = console is not None and console.is_terminal

    async def watch(
        self, frame: Callable[[], Awaitable[_Frame]], done: Callable[[], bool], deadline: float
    ) -> None:
        """Show ``frame()`` until ``done()`` or the wall-clock ``deadline``."""
        if self.live:
            with Live(console=self.console, auto_refresh=False) as live:
                while not done() and time.time() < deadline:
                    live.update((await frame()).view, refresh=True)
                    await _nap(min(REFRESH, deadline - time.time()), done)
                live.update((await frame()).view, refresh=True)
            return
        last = 0.0
        while not done() and time.time() < deadline:
            shown = await frame()
            for line in shown.news:
                self.console.print(line, markup=False, highlight=False)
            if time.monotonic() - last >= LINE_EVERY:
                self.console.print(shown.line, markup=False, highlight=False)
                last = time.monotonic()
            await _nap(min(POLL, deadline - time.time()), done)


class _Probe:
    """What both phases' frames share: lane bars, the healthy rate, the fleet's counts."""

    label = ""

    def __init__(self, ctx: _Ctx, run: _Run) -> None:
        self.ctx, self.run = ctx, run
        self._marks: deque[tuple[float, int]] = deque(maxlen=12)

    def rate(self) -> float:
        """Healthy jobs done per second over the last few refreshes."""
        site_of = self.ctx.work.site_of
        done = sum(
            1 for u, (o, _) in self.run.finished.items() if o == "done" and site_of[u].healthy
        )
        now = time.monotonic()
        self._marks.append((now, done))
        then, before = self._marks[0]
        return (done - before) / (now - then) if now > then else 0.0

    def lanes(self) -> tuple[Table, str]:
        """A progress bar per lane (finished over enqueued), and the same as text."""
        enqueued = Counter(lane for lane, _ in self.run.enqueued.values())
        finished = Counter(self.run.enqueued[url][0] for url in self.run.finished)
        grid = Table.grid(padding=(0, 1))
        for lane in LANES:
            bar = ProgressBar(total=max(enqueued[lane], 1), completed=finished[lane], width=40)
            grid.add_row(f"{lane:>8}", bar, f"{finished[lane]}/{enqueued[lane]} {self.label}")
        return grid, ", ".join(f"{ln} {finished[ln]}/{enqueued[ln]}" for ln in LANES)

    async def fetched(self) -> Counter[str]:
        after = await asyncio.to_thread(self.ctx.fleet.stats)
        return Counter({n: c.requests for n, c in _diff(self.run.fleet_before, after).items()})


class _ScrapeqProbe(_Probe):
    label = "done+dead"

    def __init__(self, q: AsyncQueue, ctx: _Ctx) -> None:
        super().__init__(ctx, ctx.scrapeq)
        self.q = q
        self.seen: set[str] = set()
        self.log: deque[str] = deque(maxlen=8)

    async def frame(self) -> _Frame:
        status, news, fetched = await self.q.status(), await self._news(), await self.fetched()
        bars, lanes = self.lanes()
        rate, dead, run = self.rate(), status["counts"]["dead"], self.run
        head = Text(
            f"scrapeq · queue {status['queue']} · {run.elapsed():5.1f} of {run.limit:g} s · "
            f"{rate:4.0f} healthy jobs/s · dead letters {dead}",
            style="bold",
        )
        table = _domain_table(status["domains"], fetched, self.ctx)
        events = Text("\n".join(self.log) or "no breaker transitions yet", style="dim")
        line = f"[scrapeq {run.elapsed():5.1f} s] {lanes} · {rate:.0f}/s · dead {dead}"
        return _Frame(Group(head, bars, table, events), line, news)

    async def _news(self) -> list[str]:
        events = [e for e in reversed(await self.q.events(200)) if e["id"] not in self.seen]
        self.seen.update(e["id"] for e in events)
        news = [_event_line(e, self.run.redis_t0) for e in events if e["kind"] in TRANSITIONS]
        self.log.extend(news)
        return news


class _NaiveProbe(_Probe):
    label = "done+given up"

    def __init__(self, ctx: _Ctx) -> None:
        super().__init__(ctx, ctx.naive)

    async def frame(self) -> _Frame:
        fetched, (bars, lanes), rate, run = (
            await self.fetched(),
            self.lanes(),
            self.rate(),
            self.run,
        )
        held = sum(run.inflight[n] for n in self.ctx.sick)
        head = Text(
            f"naive retry loop · {run.elapsed():5.1f} of {run.limit:g} s · {rate:4.0f} healthy "
            f"jobs/s · {held}/{CONCURRENCY} workers held by faulty sites",
            style="bold",
        )
        table = _table("site", "mode", "workers held", "fetches")
        for name, mode in self.ctx.sick.items():
            table.add_row(name, mode, str(run.inflight[name]), str(fetched[name]))
        line = f"[naive {run.elapsed():5.1f} s] {lanes} · {rate:.0f}/s · held by faulty {held}"
        return _Frame(Group(head, bars, table), line, [])


def _event_line(event: dict[str, Any], t0: float) -> str:
    site = str(event["domain"]).split(":")[0] or "(all)"
    return f"{_event_time(event) - t0:6.1f} s  {site:<20} {event['kind']:<10} {event['message']}"


_SUMMED = ("queued", "inflight", "done", "dead", "fetches")


def _breaker_text(domain: dict[str, Any]) -> Text:
    """The breaker state, with the cooldown left when open."""
    state, until = str(domain["state"]), domain.get("open_until")
    left = f" {datetime.fromisoformat(until).timestamp() - time.time():.0f} s" if until else ""
    return Text(state + left, style=_STATE_STYLE.get(state, ""))


def _domain_table(domains: list[dict[str, Any]], fetched: Counter[str], ctx: _Ctx) -> Table:
    """The faulty sites one a row, then one row summing the healthy shops."""
    table = _table("site", "mode", "breaker", "queued", "in flight", "done", "dead", "fetches")
    healthy: Counter[str] = Counter()
    for d in sorted(domains, key=lambda d: str(d["domain"])):
        name = str(d["domain"]).split(":")[0]
        cells = [int(d["ready"]) + int(d["delayed"]), d["inflight"], d["done"], d["dead"]]
        cells.append(fetched[name])
        if name not in ctx.sick:
            healthy.update(dict(zip(_SUMMED, cells, strict=True)))
            healthy["closed"] += d["state"] == "closed"
            continue
        table.add_row(name, ctx.sick[name], _breaker_text(d), *map(str, cells))
    count = len(ctx.fleet.sites) - len(ctx.sick)
    sums = [str(healthy[k]) for k in _SUMMED]
    table.add_row(f"{count} healthy shops", "shop", f"{healthy['closed']} closed", *sums)
    return table


# --- the entry point --------------------------------------------------------------------------


async def _main(ctx: _Ctx) -> None:
    await _scrapeq_phase(ctx)
    if not ctx.scrapeq.interrupted and ctx.naive.limit > 0:
        await _naive_phase(ctx)


def _close_runs(ctx: _Ctx, interrupted: bool) -> None:
    """After the loop: mark an interrupted phase; read the fleet counts a phase missed."""
    current = ctx.naive if ctx.naive.started else ctx.scrapeq
    current.interrupted = current.interrupted or interrupted
    for run in (ctx.scrapeq, ctx.naive):
        if run.started and run.ended is None:
            run.ended = time.time()
        if run.started and run.fleet_after is None:
            run.fleet_after = ctx.fleet.stats()


def _drop_queue(redis_url: str, name: str) -> None:
    """Delete every key of queue ``name``."""
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        keys = list(client.scan_iter(match=Keys(name).prefix + "*", count=1000))
        for start in range(0, len(keys), 500):
            client.unlink(*keys[start : start + 500])
    finally:
        client.close()


def _check_reachable(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url, socket_connect_timeout=5)
    try:
        client.ping()
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        raise RedisUnavailable(f"Redis connection failed: {exc}") from exc
    finally:
        client.close()


@contextlib.contextmanager
def _quieter(name: str, level: int = logging.WARNING) -> Iterator[None]:
    """Raise logger ``name`` to at least ``level`` for the block, then restore its own level."""
    logger = logging.getLogger(name)
    before = logger.level
    if logger.getEffectiveLevel() < level:
        logger.setLevel(level)
    try:
        yield
    finally:
        logger.setLevel(before)


def run_demo(
    settings: Settings,
    *,
    redis_url: str,
    duration: float = 60.0,
    console: Console | None = None,
    scale: float = 1.0,
    naive_duration: float | None = None,
    keep_queue: bool = False,
    seed: int = 43,
) -> DemoReport:
    """Run the incident scenario, scrapeq then the naive retry loop, on one local fleet.

    Ctrl-C (SIGINT) ends the running phase cleanly and answers a partial report (after an
    interrupted scrapeq phase the naive loop is not run). The fleet process is always stopped.
    While it runs the ``scrapeq.runtime.worker`` logger is raised to WARNING (its INFO line per dead
    letter would flood the progress view), and restored after.

    Args:
        settings: the caller's settings; :data:`DEMO_SETTINGS` and a fresh queue name
            (``demo-<UTC time>-<random>``) are applied over them.
        redis_url: the Redis server to use.
        duration: seconds the scrapeq phase runs (the worker then gets 1 s to finish).
        console: where the progress goes: a terminal console gets a rich Live view; any
            other, or ``None`` (a default console), a status line every few seconds.
        scale: multiplies every job count (about 5,400 jobs at 1.0).
        naive_duration: seconds the naive loop runs; default ``min(duration, 30)``; 0 skips it.
        keep_queue: keep the run's queue in Redis (by default its keys are deleted).
        seed: seeds the job order and the fleet's latencies.

    Returns:
        The figures measured in this run.

    Raises:
        ConfigError: ``duration`` or ``scale`` is not positive.
        RedisUnavailable: Redis cannot be reached (checked before the fleet starts).
    """
    if not duration > 0 or not scale > 0:
        raise ConfigError("duration" if not duration > 0 else "scale", "must be > 0")
    _check_reachable(redis_url)
    name = f"demo-{datetime.now(UTC):%Y%m%d-%H%M%S}-{secrets.token_hex(2)}"
    demo = settings.replace(queue=name, **DEMO_SETTINGS)
    naive_limit = min(duration, 30.0) if naive_duration is None else max(naive_duration, 0.0)
    try:
        limits = (duration, naive_limit)
        return _run_phases(demo, redis_url, limits, console, scale, keep_queue, seed)
    finally:
        if not keep_queue:
            with contextlib.suppress(redis.RedisError):  # Redis gone: nothing to clean
                _drop_queue(redis_url, name)


def _run_phases(
    demo: Settings,
    redis_url: str,
    limits: tuple[float, float],
    console: Console | None,
    scale: float,
    keep_queue: bool,
    seed: int,
) -> DemoReport:
    """:func:`run_demo`'s two phases (scrapeq, then the naive loop) on a fresh fleet."""
    with _quieter("scrapeq.worker"), Fleet(seed=seed) as fleet:
        sick = {s.name: str(s.mode) for s in fleet.sites if not s.healthy}
        work = Workload.build(fleet, BASE_JOBS, scale=scale, seed=seed)
        names = ("scrapeq", "naive")
        runs = [_Run(n, lim, frozenset(sick)) for n, lim in zip(names, limits, strict=True)]
        ctx = _Ctx(demo, redis_url, fleet, work, _View(console), sick, *runs)
        interrupted = False
        try:
            asyncio.run(_main(ctx))
        except KeyboardInterrupt:
            interrupted = True
        _close_runs(ctx, interrupted)
        shown = [k for k in DEMO_SETTINGS if k not in ("proxy", "lanes")]
        return _build_report(ctx, scale, keep_queue, shown)
