"""The demo's report: the figures one run measured, how they are built, and how they print.

:mod:`scrapeq.demo.scenario` runs the scenario and fills a :class:`_Run` per phase as it
goes; once the
phases are over, :func:`_build_report` turns those measurements (plus the breaker events and
dead letters it reads from the queue) into a :class:`DemoReport`, and :func:`render_report`
prints it. Everything here is re-exported by :mod:`scrapeq.demo.scenario`, the place to import from.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from scrapeq.demo.fleet import Fleet, SiteCounts, Workload
from scrapeq.engine.config.settings import Settings
from scrapeq.engine.queue import Queue

__all__ = [
    "DemoReport",
    "Freshness",
    "PhaseReport",
    "SiteFigures",
    "Transition",
    "render_report",
]

#: The scenario's lanes (in report order) and worker pool size, which the report describes.
LANES = ("critical", "normal", "bulk")
CONCURRENCY = 200
#: The queue event kinds that are breaker transitions.
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


# --- building the report ---------------------------------------------------------------------


class _Source(Protocol):
    """What building a report reads from the runner's context (``scrapeq.demo.scenario._Ctx``)."""

    @property
    def settings(self) -> Settings: ...
    @property
    def redis_url(self) -> str: ...
    @property
    def fleet(self) -> Fleet: ...
    @property
    def work(self) -> Workload: ...
    @property
    def sick(self) -> dict[str, str]: ...  # faulty site name -> mode
    @property
    def scrapeq(self) -> _Run: ...
    @property
    def naive(self) -> _Run: ...


def _event_time(event: dict[str, Any]) -> float:
    """When a queue event happened (Unix seconds, Redis clock)."""
    at = event.get("at")
    return datetime.fromisoformat(at).timestamp() if at else 0.0


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


def _site_figures(run: _Run, ctx: _Source, name: str) -> SiteFigures:
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


def _phase_report(run: _Run, ctx: _Source, window: float) -> PhaseReport:
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
    """The queue's domain records by site name (the domain key without its port)."""
    return {str(d["domain"]).split(":")[0]: d for d in domains}


def _queue_figures(ctx: _Source) -> tuple[list[Transition], dict[str, dict[str, int]]]:
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


def _build_report(ctx: _Source, scale: float, keep: bool, shown: Iterable[str]) -> DemoReport:
    """The report of a finished (or interrupted) run; ``shown``: the settings to report."""
    transitions, dead = _queue_figures(ctx)
    s, naive = ctx.settings, ctx.naive
    return DemoReport(
        queue=s.queue,
        queue_kept=keep,
        duration=ctx.scrapeq.limit,
        naive_duration=naive.limit,
        scale=scale,
        interrupted=ctx.scrapeq.interrupted or naive.interrupted,
        settings={k: getattr(s, k) for k in shown},
        jobs={lane: len(ctx.work.lanes[lane]) for lane in LANES},
        healthy_sites=len(ctx.fleet.sites) - len(ctx.sick),
        scrapeq=_phase_report(ctx.scrapeq, ctx, naive.limit),
        naive=_phase_report(naive, ctx, naive.limit) if naive.started else None,
        transitions=transitions,
        dead_letters=dead,
    )


# --- rendering the report ----------------------------------------------------------------------


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
