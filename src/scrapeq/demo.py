"""The demo: the shop-43 incident replayed on a local fleet, scrapeq against a naive retry loop.

:func:`run_demo` starts the fleet of :mod:`scrapeq.fleet` (40 healthy shops and five faulty
sites, in a separate process) and runs the same scenario twice against it:

1. **scrapeq**: a bulk backfill, then normal work, enqueued at once; a burst of critical
   re-crawls at 40% of the phase. One in-process :class:`~scrapeq.worker.Worker` (200 jobs at
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
import dataclasses
import functools
import math
import re
import secrets
import signal
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import redis
from rich import box
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from .errors import ConfigError, RedisUnavailable
from .fetch import Fetcher, Response
from .fleet import Fleet, SiteCounts, Workload
from .job import Job
from .keys import Keys
from .lanes import Lanes
from .queue import AsyncQueue, Queue
from .settings import Settings
from .sinks import CallableSink
from .worker import Worker

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
LANES = ("critical", "normal", "bulk")
CONCURRENCY = 200
#: The critical burst arrives at this fraction of a phase.
BURST_AT = 0.4
NAIVE_TRIES = 3
#: Seconds between live refreshes, between polls in line mode, and between status lines.
REFRESH, POLL, LINE_EVERY = 0.5, 1.0, 5.0
TRANSITIONS = frozenset({"trip", "half_open", "recovered", "retired", "global_pause", "reset"})
_STATE_STYLE = {"closed": "green", "open": "red", "half_open": "yellow", "retired": "magenta"}


# --- the report ------------------------------------------------------------------------------


@dataclass(slots=True)
class Freshness:
    """Enqueue-to-done seconds of one lane's jobs on healthy shops.

    ``p50``/``p95``/``p99`` (nearest rank) are over the ``done`` jobs, ``None`` when none
    was; ``total`` counts the lane's healthy jobs, done or not.
    """

    lane: str
    done: int
    total: int
    p50: float | None
    p95: float | None
    p99: float | None


@dataclass(slots=True)
class SiteFigures:
    """One faulty site in one phase.

    Attributes:
        fetches, bytes, statuses: the fleet's own counts for the phase: requests that
            reached the site, body bytes it sent, statuses it answered.
        client_fetches: requests the client side started.
        failed: jobs dead (scrapeq) or given up (naive); ``pending``: neither done nor failed.
        breaker, trips: the domain's breaker at the end of the phase (scrapeq only).
    """

    name: str
    mode: str
    jobs: int
    done: int
    failed: int
    pending: int
    fetches: int
    bytes: int
    statuses: dict[str, int]
    client_fetches: int
    breaker: str | None = None
    trips: int | None = None


@dataclass(slots=True)
class PhaseReport:
    """What one phase (``scrapeq`` or ``naive``) achieved.

    Attributes:
        healthy_done_in_window: healthy jobs done within the first ``window`` seconds (the
            naive phase's length), to compare phases of different lengths.
        healthy_drained_at: seconds until the last healthy job was done, ``None`` if some
            never were.
        peak_faulty_inflight: most requests in flight at once to faulty sites (each holds a
            worker slot).
    """

    name: str
    seconds: float
    interrupted: bool
    healthy_total: int
    healthy_done: int
    window: float
    healthy_done_in_window: int
    healthy_drained_at: float | None
    peak_faulty_inflight: int
    freshness: list[Freshness]
    faulty: list[SiteFigures]
    faulty_fetches: int
    healthy_fetches: int

    def site(self, name: str) -> SiteFigures:
        """The figures of faulty site ``name`` (KeyError when it is not one)."""
        for figures in self.faulty:
            if figures.name == name:
                return figures
        raise KeyError(name)


@dataclass(slots=True)
class Transition:
    """A breaker event, ``at`` seconds after the scrapeq phase started (Redis clock)."""

    at: float
    site: str
    kind: str
    message: str


@dataclass(slots=True)
class DemoReport:
    """Every figure of one demo run; :meth:`as_dict` gives the JSON-friendly form.

    ``dead_letters`` is site -> reason -> count, read from the queue; ``naive`` is ``None``
    when the naive loop did not run (interrupted before it, or ``naive_duration`` 0).
    """

    queue: str
    queue_kept: bool
    duration: float
    naive_duration: float
    scale: float
    interrupted: bool
    settings: dict[str, Any]
    jobs: dict[str, int]
    healthy_sites: int
    scrapeq: PhaseReport
    naive: PhaseReport | None
    transitions: list[Transition]
    dead_letters: dict[str, dict[str, int]]

    def as_dict(self) -> dict[str, Any]:
        """The report as plain dicts, lists, strings and numbers."""
        return dataclasses.asdict(self)


# --- what a phase measures ---------------------------------------------------------------------


def _site(url: str) -> str:
    return (urlsplit(url).hostname or "").lower()


def _diff(
    before: dict[str, SiteCounts] | None, after: dict[str, SiteCounts]
) -> dict[str, SiteCounts]:
    base = before or {}
    return {name: counts - base.get(name, SiteCounts()) for name, counts in after.items()}


@dataclass
class _Run:
    """The measurements of one phase, filled in as it runs (an interrupted one stays readable)."""

    name: str
    limit: float
    sick: frozenset[str]
    enqueued: dict[str, tuple[str, float]] = field(default_factory=dict)  # url: lane, time
    finished: dict[str, tuple[str, float]] = field(default_factory=dict)  # url: outcome, time
    fetches: Counter[str] = field(default_factory=Counter)  # started, by site name
    inflight: Counter[str] = field(default_factory=Counter)
    peak_sick: int = 0
    started: float = 0.0
    ended: float | None = None
    redis_t0: float = 0.0
    domains: dict[str, dict[str, Any]] | None = None  # by site name, at the phase's end
    interrupted: bool = False
    fleet_before: dict[str, SiteCounts] | None = None
    fleet_after: dict[str, SiteCounts] | None = None

    def enqueue(self, lane: str, urls: list[str]) -> None:
        now = time.time()
        self.enqueued.update((url, (lane, now)) for url in urls)

    def finish(self, url: str, outcome: str) -> None:
        self.finished.setdefault(url, (outcome, time.time()))

    def hold(self, site: str, n: int) -> None:
        """``n`` more (or fewer) requests in flight to ``site``."""
        self.inflight[site] += n
        if site in self.sick:
            self.peak_sick = max(self.peak_sick, sum(self.inflight[s] for s in self.sick))

    def elapsed(self) -> float:
        return max((self.ended or time.time()) - self.started, 0.0) if self.started else 0.0

    def fleet(self) -> dict[str, SiteCounts]:
        return _diff(self.fleet_before, self.fleet_after or {})


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

    async def fetch(self, url: str) -> Response:
        site = _site(url)
        self._run.fetches[site] += 1
        self._run.hold(site, 1)
        try:
            return await super().fetch(url)
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


def _event_time(event: dict[str, Any]) -> float:
    at = event.get("at")
    return datetime.fromisoformat(at).timestamp() if at else 0.0


def _event_line(event: dict[str, Any], t0: float) -> str:
    site = str(event["domain"]).split(":")[0] or "(all)"
    return f"{_event_time(event) - t0:6.1f} s  {site:<20} {event['kind']:<10} {event['message']}"


def _table(*columns: str, title: str | None = None) -> Table:
    """A table whose text columns (site, mode, breaker, statuses) are left-aligned."""
    table = Table(
        title=title,
        title_justify="left",
        title_style="bold",
        header_style="bold",
        box=box.SIMPLE_HEAD if title else None,
    )
    for col in columns:
        left = col in ("site", "mode", "breaker", "statuses", "")
        table.add_column(col, justify="left" if left else "right")
    return table


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


# --- building the report ---------------------------------------------------------------------


def _percentile(values: list[float], pct: float) -> float | None:
    """Nearest-rank percentile, rounded to the millisecond (``None`` when empty)."""
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[max(math.ceil(pct / 100 * len(ordered)) - 1, 0)], 3)


def _freshness(run: _Run, work: Workload) -> list[Freshness]:
    out = []
    for lane in LANES:
        urls = [u for u, (ln, _) in run.enqueued.items() if ln == lane and work.site_of[u].healthy]
        done = [u for u in urls if run.finished.get(u, ("", 0.0))[0] == "done"]
        ages = [run.finished[u][1] - run.enqueued[u][1] for u in done]
        p50, p95, p99 = (_percentile(ages, p) for p in (50, 95, 99))
        out.append(Freshness(lane, len(ages), len(urls), p50, p95, p99))
    return out


def _site_figures(run: _Run, ctx: _Ctx, name: str) -> SiteFigures:
    urls = [u for u in run.enqueued if ctx.work.site_of[u].name == name]
    outcomes = Counter(run.finished[u][0] for u in urls if u in run.finished)
    failed = sum(n for outcome, n in outcomes.items() if outcome != "done")
    counts = run.fleet().get(name, SiteCounts())
    info = (run.domains or {}).get(name)
    return SiteFigures(
        name=name,
        mode=ctx.sick[name],
        jobs=len(urls),
        done=outcomes["done"],
        failed=failed,
        pending=len(urls) - outcomes["done"] - failed,
        fetches=counts.requests,
        bytes=counts.bytes,
        statuses=counts.statuses,
        client_fetches=run.fetches[name],
        breaker=None if info is None else str(info["state"]),
        trips=None if info is None else int(info["trips"]),
    )


def _phase_report(run: _Run, ctx: _Ctx, window: float) -> PhaseReport:
    healthy = [u for u in run.enqueued if ctx.work.site_of[u].healthy]
    times = [
        run.finished[u][1] - run.started for u in healthy if run.finished.get(u, ("",))[0] == "done"
    ]
    faulty = [_site_figures(run, ctx, name) for name in ctx.sick]
    drained = max(times) if healthy and len(times) == len(healthy) else None
    return PhaseReport(
        name=run.name,
        seconds=round(run.elapsed(), 2),
        interrupted=run.interrupted,
        healthy_total=len(healthy),
        healthy_done=len(times),
        window=window,
        healthy_done_in_window=sum(1 for t in times if t <= window),
        healthy_drained_at=None if drained is None else round(drained, 2),
        peak_faulty_inflight=run.peak_sick,
        freshness=_freshness(run, ctx.work),
        faulty=faulty,
        faulty_fetches=sum(f.fetches for f in faulty),
        healthy_fetches=sum(c.requests for n, c in run.fleet().items() if n not in ctx.sick),
    )


def _by_site(domains: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {str(d["domain"]).split(":")[0]: d for d in domains}


def _queue_figures(ctx: _Ctx) -> tuple[list[Transition], dict[str, dict[str, int]]]:
    """Breaker transitions (oldest first) and dead letters by site and reason, from Redis."""
    q = Queue.from_url(ctx.redis_url, settings=ctx.settings)
    try:
        if ctx.scrapeq.started and ctx.scrapeq.domains is None:
            ctx.scrapeq.domains = _by_site(q.domains_info())
        events = [e for e in reversed(q.events(10_000)) if e["kind"] in TRANSITIONS]
        dead: dict[str, Counter[str]] = {}
        for job in q.dead_letters(limit=100_000):
            dead.setdefault(job.domain.split(":")[0], Counter())[job.dead_reason or "?"] += 1
    finally:
        q.close()
    t0 = ctx.scrapeq.redis_t0
    transitions = [
        Transition(
            round(_event_time(e) - t0, 2),
            str(e["domain"]).split(":")[0] or "(all)",
            str(e["kind"]),
            str(e["message"]),
        )
        for e in events
    ]
    return transitions, {site: dict(c) for site, c in sorted(dead.items())}


def _build_report(ctx: _Ctx, scale: float, keep: bool) -> DemoReport:
    transitions, dead = _queue_figures(ctx)
    s, naive = ctx.settings, ctx.naive
    return DemoReport(
        queue=s.queue,
        queue_kept=keep,
        duration=ctx.scrapeq.limit,
        naive_duration=naive.limit,
        scale=scale,
        interrupted=ctx.scrapeq.interrupted or naive.interrupted,
        settings={k: getattr(s, k) for k in DEMO_SETTINGS if k not in ("proxy", "lanes")},
        jobs={lane: len(ctx.work.lanes[lane]) for lane in LANES},
        healthy_sites=len(ctx.fleet.sites) - len(ctx.sick),
        scrapeq=_phase_report(ctx.scrapeq, ctx, naive.limit),
        naive=_phase_report(naive, ctx, naive.limit) if naive.started else None,
        transitions=transitions,
        dead_letters=dead,
    )


# --- rendering the report ----------------------------------------------------------------------


def _fresh(lane: int, phase: PhaseReport) -> str:
    f = phase.freshness[lane]
    if f.p50 is None:
        return f"— (0 of {f.total} done)"
    return f"{f.p50:.2f} / {f.p95:.2f} / {f.p99:.2f} s ({f.done}/{f.total})"


def _site_fetches(i: int, phase: PhaseReport) -> str:
    site, failed = phase.faulty[i], "dead" if phase.name == "scrapeq" else "given up"
    return f"{site.fetches:,} ({site.done} done, {site.failed} {failed})"


def _drained(phase: PhaseReport) -> str:
    at = phase.healthy_drained_at
    return f"after {at:.1f} s" if at is not None else f"not within {phase.seconds:.0f} s"


def _side_by_side(report: DemoReport) -> Table:
    a, b = report.scrapeq, report.naive
    right = f"naive retry loop ({b.seconds:.0f} s)" if b else "naive retry loop"
    table = _table("", f"scrapeq ({a.seconds:.0f} s)", right, title="side by side")

    def row(label: str, fn: Callable[[PhaseReport], str]) -> None:
        table.add_row(label, fn(a), fn(b) if b else "not run")

    row(
        f"healthy jobs done in the first {a.window:g} s",
        lambda p: f"{p.healthy_done_in_window:,}/{p.healthy_total:,}",
    )
    row("every healthy job done", _drained)
    for i, lane in enumerate(LANES):
        row(f"freshness {lane} p50 / p95 / p99", functools.partial(_fresh, i))
    row("peak requests held by faulty sites", lambda p: f"{p.peak_faulty_inflight}/{CONCURRENCY}")
    row("fetches on faulty sites (the fleet's count)", lambda p: f"{p.faulty_fetches:,}")
    for i, site in enumerate(a.faulty):
        row(f"  {site.name} ({site.mode})", functools.partial(_site_fetches, i))
    row("fetches on healthy shops", lambda p: f"{p.healthy_fetches:,}")
    return table


def _faulty_table(phase: PhaseReport) -> Table:
    title = "scrapeq and the faulty sites (fetches and statuses: the fleet's counts)"
    columns = ("site", "mode", "jobs", "fetches", "statuses", "done", "dead", "parked")
    table = _table(*columns, "breaker", "trips", title=title)
    for s in phase.faulty:
        statuses = " ".join(f"{k}×{v}" for k, v in sorted(s.statuses.items())) or "no answer"
        state = Text(s.breaker or "", style=_STATE_STYLE.get(s.breaker or "", ""))
        cells = (s.jobs, s.fetches, statuses, s.done, s.failed, s.pending)
        table.add_row(s.name, s.mode, *map(str, cells), state, str(s.trips or 0))
    return table


def _print_lines(console: Console, title: str, lines: list[str]) -> None:
    console.print(Text(title, style="bold"))
    for line in lines or ["none"]:
        console.print("  " + line, markup=False, highlight=False)


def render_report(report: DemoReport, console: Console) -> None:
    """Print a report: the scenario, the side-by-side figures, breakers and dead letters."""
    s, jobs = report.settings, report.jobs
    lanes = ", ".join(f"{lane} {n:,}" for lane, n in jobs.items())
    console.print(Text("\nscrapeq demo: one hanging site among healthy shops", style="bold"))
    console.print(
        f"{report.healthy_sites} healthy shops + {len(report.scrapeq.faulty)} faulty sites; "
        f"{sum(jobs.values()):,} jobs ({lanes}); {CONCURRENCY} at once; "
        f"{s['request_timeout']:g} s deadline; breaker {s['breaker_failures']} failures, "
        f"{s['breaker_cooldown']:g} s cooldown; queue {report.queue}"
        + (" (kept)" if report.queue_kept else " (removed)"),
        markup=False,
        highlight=False,
    )
    if report.interrupted:
        console.print(Text("interrupted: partial figures", style="yellow"))
    console.print(_side_by_side(report))
    console.print(_faulty_table(report.scrapeq))
    transitions = [
        f"{t.at:6.1f} s  {t.site:<20} {t.kind:<10} {t.message}" for t in report.transitions
    ]
    _print_lines(console, "breaker transitions (seconds into the scrapeq phase)", transitions)
    dead = [
        f"{site:<20} " + ", ".join(f"{reason} {n}" for reason, n in reasons.items())
        for site, reasons in report.dead_letters.items()
    ]
    _print_lines(console, "dead letters by site and reason", dead)


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
        with Fleet(seed=seed) as fleet:
            sick = {s.name: str(s.mode) for s in fleet.sites if not s.healthy}
            work = Workload.build(fleet, BASE_JOBS, scale=scale, seed=seed)
            runs = [
                _Run(n, limit, frozenset(sick))
                for n, limit in (("scrapeq", duration), ("naive", naive_limit))
            ]
            ctx = _Ctx(demo, redis_url, fleet, work, _View(console), sick, *runs)
            interrupted = False
            try:
                asyncio.run(_main(ctx))
            except KeyboardInterrupt:
                interrupted = True
            _close_runs(ctx, interrupted)
            return _build_report(ctx, scale, keep_queue)
    finally:
        if not keep_queue:
            with contextlib.suppress(redis.RedisError):  # Redis gone: nothing to clean
                _drop_queue(redis_url, name)
