"""Rich tables for the CLI: status, dead letters, breakers, domains. Pure rendering.

rich is imported by the functions that build its tables, not with this module: commands
that print JSON or one line (``status --json``, ``--version``) start without it.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from scrapeq.engine.model.job import ms_to_iso
from scrapeq.engine.model.urls import redact_text, redact_url
from scrapeq.interfaces import views

if TYPE_CHECKING:
    from rich.console import Console, Group
    from rich.table import Table
    from rich.text import Text

    from scrapeq.engine.model.job import Job, JobInfo
    from scrapeq.engine.ops.audit import AuditReport
    from scrapeq.engine.ops.listing import JobListing

__all__ = [
    "DOMAIN_SORTS",
    "audit_view",
    "breakers_table",
    "dead_table",
    "domains_table",
    "human_delta",
    "human_duration",
    "human_until",
    "job_view",
    "jobs_table",
    "page_revisit_line",
    "pick_domains",
    "printable",
    "queues_table",
    "status_view",
    "worth_a_look",
]

_COUNTS = ("enqueued", "ready", "delayed", "inflight", "done", "dead", "cancelled")
_STATE_STYLE = {"open": "bold red", "half_open": "yellow", "retired": "bold magenta"}


def _state(state: str) -> Text:
    from rich.text import Text

    return Text(state, style=_STATE_STYLE.get(state, "green"))


def worth_a_look(domains: list[dict[str, Any]], limit: int = 15) -> list[dict[str, Any]]:
    """Domains to look at first: retired, open, half-open, then the most dead letters."""
    return sorted(domains, key=views.worth_a_look_key)[:limit]


#: ``--sort`` keys of ``domains`` and ``breakers`` (see :data:`views.CLI_SORTS`).
DOMAIN_SORTS = views.CLI_SORTS


def pick_domains(
    infos: list[dict[str, Any]],
    *,
    states: list[str] | None = None,
    sort: str = "name",
    limit: int | None = None,
) -> list[dict[str, Any]]:
    """The domains a listing shows: those in ``states`` (all when None), ordered by ``sort``
    (one of :data:`DOMAIN_SORTS`, :func:`views.order_for_listing`), at most ``limit``. Ties go
    by name."""
    if sort not in DOMAIN_SORTS:
        raise ValueError(f"unknown sort key {sort!r}")
    rows = views.order_for_listing([d for d in infos if not states or d["state"] in states], sort)
    return rows if limit is None else rows[:limit]


def _shown(title: str, shown: int, total: int | None) -> str:
    return title if total is None or total == shown else f"{title} ({shown} of {total})"


def status_view(data: dict[str, Any], *, limit: int = 15) -> Group:
    """The `status` screen: totals, lanes, the domains worth a look, alarms."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    c = data["counts"]
    totals = Table(title=f"queue {data['queue']}", show_edge=False)
    for name in _COUNTS:
        totals.add_column(name, justify="right")
    totals.add_row(*(str(c.get(n, 0)) for n in _COUNTS))
    lanes = Table(title="lanes", show_edge=False)
    for col in ("lane", "ready", "delayed", "oldest ready"):
        lanes.add_column(col, justify="left" if col == "lane" else "right")
    for lane, info in data["lanes"].items():
        age = info["oldest_ready_age"]
        lanes.add_row(
            lane, str(info["ready"]), str(info["delayed"]), human_duration(age) if age else ""
        )
    shown = worth_a_look(data["domains"], limit)
    domains = Table(
        title=f"domains worth a look ({len(shown)} of {len(data['domains'])})", show_edge=False
    )
    revisits = any(d.get("revisit_pages") for d in shown)
    for col in ("domain", "state", "ready", "delayed", "inflight", "done", "dead", "fails", "open",
                *(_REVISIT_COLUMNS if revisits else ())):  # fmt: skip
        domains.add_column(col, justify="left" if col in ("domain", "state") else "right")
    for d in shown:
        domains.add_row(
            d["domain"], _state(d["state"]), str(d["ready"]), str(d["delayed"]),
            str(d["inflight"]), str(d["done"]), str(d["dead"]),
            str(d["consecutive_failures"]), human_until(d["open_until"]),
            *(_revisit_cells(d) if revisits else ()),
        )  # fmt: skip
    parts: list[Any] = [totals, lanes, domains]
    if data.get("revisits"):
        budget = next((d["revisit_budget"] for d in data["domains"] if d.get("revisit_budget")),
                      None)  # fmt: skip
        parts.append(Text(revisits_line(data["revisits"], budget)))
    if data.get("paused_until"):
        until = f"{data['paused_until']} ({human_until(data['paused_until'])})"
        parts.append(Text(f"dispatch paused until {until}", style="bold red"))
    for alarm in data["alarms"]:
        where = f" {alarm['domain']}" if alarm["domain"] else ""
        parts.append(Text(f"ALARM {alarm['kind']}{where}: {alarm['message']}", style="bold red"))
    return Group(*parts)


def dead_table(jobs: list[Job], total: int | None = None, now_ms: float | None = None) -> Table:
    """Dead letters, newest first, with when they died, reason and last error; ``total``: how
    many the queue (or the domain) holds, for the footer ``50 of 150``."""
    from rich.table import Table

    caption = None if total is None else f"{len(jobs)} of {total}"
    table = Table(title=f"dead letters ({len(jobs)})", show_edge=False, caption=caption)
    for col in ("id", "domain", "lane", "attempts", "died", "reason", "last error", "url"):
        table.add_column(col, overflow="fold")
    now = time.time() * 1000 if now_ms is None else now_ms
    for job in jobs:
        last = job.last_error
        error = f"{last.kind}: {last.message}" if last else ""
        died = human_delta(job.died_ms - now) if job.died_ms else ""
        table.add_row(
            job.id, job.domain, job.lane, f"{job.attempts}/{job.max_attempts}", died,
            job.dead_reason or "", redact_text(error)[:120], redact_url(job.url),
        )  # fmt: skip
    return table


def breakers_table(infos: list[dict[str, Any]], total: int | None = None) -> Table:
    """Breakers in the order given: state, failures, window (failures/calls), trips, cooldown;
    ``total``: how many domains there are when ``infos`` is a selection."""
    from rich.table import Table

    table = Table(title=_shown("breakers", len(infos), total), show_edge=False)
    for col in ("domain", "state", "fails", "window", "trips", "open"):
        table.add_column(col)
    for d in infos:
        calls = d["window_calls"]
        rate = f"{d['window_failures']}/{calls}" if calls else ""
        table.add_row(
            d["domain"], _state(d["state"]), str(d["consecutive_failures"]), rate,
            str(d["trips"]), human_until(ms_to_iso(d["open_until"])),
        )  # fmt: skip
    return table


def domains_table(infos: list[dict[str, Any]], total: int | None = None) -> Table:
    """Domains in the order given: politeness and counts; ``total`` as for breakers."""
    from rich.table import Table

    table = Table(title=_shown("domains", len(infos), total), show_edge=False)
    tiers = any("tier" in d for d in infos)  # with an exit pool
    autos = any("auto_fetcher" in d for d in infos)  # fetcher auto
    revisits = any(d.get("revisit_pages") for d in infos)  # pages revisited
    budgets = any(views.budget_cuts(d) for d in infos)  # a per-domain budget cut something
    for col in ("domain", "state", "delay", "concurrency", "inflight", "ready", "done", "dead",
                "latency", *(("tier",) if tiers else ()), *(_REVISIT_COLUMNS if revisits else ()),
                *(("budget",) if budgets else ()), *(("fetcher",) if autos else ())):  # fmt: skip
        table.add_column(col)
    for d in infos:
        tier = (f"{d.get('tier', '-')}" + (f" ({d['benched_exits']} benched)"
                if d.get("benched_exits") else ""),) if tiers else ()  # fmt: skip
        table.add_row(
            d["domain"], _state(d["state"]), _delay(d), _concurrency(d),
            str(d["inflight"]), str(d["ready"]), str(d["done"]), str(d["dead"]), _latency(d),
            *tier, *(_revisit_cells(d) if revisits else ()),
            *((views.budget_cuts(d) or "-",) if budgets else ()),
            *((views.auto_fetcher(d) or "-",) if autos else ()),
        )  # fmt: skip
    return table


#: The revisit columns of the domain tables (revisit = on).
_REVISIT_COLUMNS = ("revisits/h", "of budget", "fresh")


def _revisit_cells(d: dict[str, Any]) -> tuple[str, str, str]:
    """A domain's revisit load (visits an hour its pages are scheduled at), its share of the
    revisit budget and its estimated freshness; ``-`` when it has none."""
    if not d.get("revisit_pages"):
        return "-", "-", "-"
    fresh = d.get("freshness")
    budget = d.get("revisit_budget")
    used = f"{100 * d['revisit_load'] / budget:.0f}% of {budget:g}" if budget else "-"
    return f"{d['revisit_load']:.1f}", used, "-" if fresh is None else f"{100 * fresh:.0f}%"


def revisits_line(figures: dict[str, Any], budget: float | None = None) -> str:
    """``status``'s queue-wide revisit figures in one line; ``budget``: a domain's revisit
    budget (visits an hour), when known."""
    fresh = figures["freshness"]
    shown = "not estimated yet" if fresh is None else f"{100 * fresh:.1f}%"
    of = f" (budget {budget:g}/h a domain)" if budget else ""
    return (f"revisits: {figures['pages']} pages tracked, {figures['load']:.1f} visits/h "
            f"scheduled{of}, estimated freshness {shown}")  # fmt: skip


def page_revisit_line(page: dict[str, Any]) -> str:
    """A page's revisit state (``Queue.page_info``) in one line, for ``job show`` and
    ``domains URL``."""
    if not page.get("tracked"):
        return "revisit: not tracked (no visit settled with revisit = on)"
    rate = page["rate"]
    est = ("rate not estimated yet (no interval observed)" if rate is None
           else f"estimated {rate:.3g} changes/h ({page['changes']} of {page['intervals']} "
           "intervals changed)")  # fmt: skip
    fresh = page["freshness"]
    due = datetime.fromtimestamp(page["due"], tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    wait = page["due"] - page["now"]
    when = f"in {human_duration(wait)}" if wait > 0 else "now (due)"
    shown = "-" if fresh is None else f"{100 * fresh:.1f}%"
    every = human_duration(page["interval"])
    return (f"revisit: {est}; next visit {when}, {due} (every {every}); "
            f"expected freshness {shown}")  # fmt: skip


def exits_table(exits: list[dict[str, Any]]) -> Table:
    """The exit pool: each exit's state, tier and counts (names are redacted already)."""
    from rich.table import Table

    table = Table(title=f"exits ({len(exits)})", show_edge=False)
    for col in ("exit", "id", "tier", "state", "requests", "ok", "bans", "failures",
                "timeouts", "success", "latency", "bytes", "spend"):  # fmt: skip
        table.add_column(col)
    for e in exits:
        rate = "-" if e["success_rate"] is None else f"{100 * e['success_rate']:.1f}%"
        latency = "-" if e["latency_ms"] is None else f"{e['latency_ms']} ms"
        table.add_row(
            e["name"], e["id"], e["tier"], _state(e["state"]), str(e["requests"]), str(e["ok"]),
            str(e["bans"]), str(e["failures"]), str(e["timeouts"]), rate, latency,
            str(e["bytes"]), "-" if e["spend"] is None else f"{e['spend']:g}",
        )  # fmt: skip
    return table


def domain_exits_table(domain: str, info: dict[str, Any]) -> Table:
    """A domain's tier, its benched exits and its requests and bytes per tier."""
    from rich.table import Table

    table = Table(title=f"{domain}: tier {info['tier']}", show_edge=False)
    for col in ("tier", "requests", "bytes", "benched exits"):
        table.add_column(col)
    for tier, counts in info["per_tier"].items():
        benched = [b["name"] for b in info["benched"] if b["tier"] == tier]
        table.add_row(
            tier, str(counts["requests"]), str(counts["bytes"]), ", ".join(benched) or "-"
        )
    return table


def _concurrency(d: dict[str, Any]) -> str:
    """A fixed limit as is; an adaptive one as ``auto <limit>`` (its learned value)."""
    if not d.get("adaptive"):
        return str(d["concurrency"])
    return f"auto {d['limit']:.1f}"


def _delay(d: dict[str, Any]) -> str:
    """The delay between request starts: the set one, or an adaptive domain's learned one."""
    delay = d["delay_ms"] / 1000
    learned = (d.get("interval_ms") or 0) / 1000 if d.get("adaptive") else 0
    if learned > delay:
        return f"{human_duration(learned)} (learned)"
    return human_duration(delay)


def _latency(d: dict[str, Any]) -> str:
    """An adaptive domain's current latency over its no-load baseline, in ms."""
    if d.get("latency_ms") is None or d.get("baseline_ms") is None:
        return "-"
    return f"{d['latency_ms']:.0f}/{d['baseline_ms']:.0f} ms"


def print_to(console: Console, renderable: Any) -> None:
    """Print a renderable (kept here so the CLI never builds rich objects itself)."""
    console.print(renderable)


def audit_view(report: AuditReport) -> Group:
    """The `audit` screen: what was checked, then each problem (and what repair did)."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    c = report.checked
    head = (
        f"audit of queue {report.queue}: {c['jobs']} jobs, {c['domains']} domains, "
        f"{c['leases']} leases, {c['fingerprints']} fingerprints checked"
    )
    if not report.problems:
        return Group(Text(head), Text("clean: nothing is off", style="green"))
    table = Table(show_edge=False)
    for name in ("problem", "subject", "detail", "repaired"):
        table.add_column(name)
    for p in report.problems:
        mark = Text("yes", style="green") if p.repaired else Text("no", style="bold red")
        table.add_row(p.kind, p.subject, p.detail, mark)
    verdict = (
        Text(f"{len(report.problems)} problems, all repaired", style="green")
        if report.ok
        else Text(f"{sum(not p.repaired for p in report.problems)} problems left", style="bold red")
    )
    return Group(Text(head), table, verdict)


def queues_table(rows: list[dict[str, Any]]) -> Table:
    """The queues on a Redis, each with its counts (``queue list``)."""
    from rich.table import Table

    table = Table(title=f"queues ({len(rows)})", show_edge=False)
    table.add_column("queue")
    for name in _COUNTS:
        table.add_column(name, justify="right")
    for row in rows:
        table.add_row(row["queue"], *(str(row["counts"].get(n, 0)) for n in _COUNTS))
    return table


def printable(text: str) -> str:
    """``text`` safe to write on a terminal: each character that is not printable (controls
    such as ESC and BEL, line breaks, bidirectional overrides) as its Python escape
    (``\\x1b``, ``\\n``, ``\\u202e``), the rest as it is. Pure."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def human_duration(seconds: float) -> str:
    """A length of time as people read it: ``250 ms``, ``6.4 s``, ``66 s``, ``2 min 5 s``,
    ``12 min``, ``1 h 30 min``, ``3 h``, ``2 d 4 h``. Pure; a negative length reads as its size.

    Precision falls with size (a tenth of a second under 10 s, a second under 10 min, a minute
    under 10 h, then an hour) and a unit that rounds to 0 is left out.
    """
    size = abs(seconds)
    if size == 0:
        return "0 s"
    if size < 0.9995:
        return f"{max(size * 1000, 1):.0f} ms"
    if size < 9.95:
        return f"{size:.1f} s"
    if size < 119.5:
        return f"{size:.0f} s"
    if size < 599.5:
        return _two_units(round(size), 60, "min", "s")
    if size < 35_970:  # 9 h 59.5 min
        minutes = round(size / 60)
        return f"{minutes} min" if minutes < 60 else _two_units(minutes, 60, "h", "min")
    hours = round(size / 3600)
    return f"{hours} h" if hours < 48 else _two_units(hours, 24, "d", "h")


def _two_units(n: int, per: int, big: str, small: str) -> str:
    whole, rest = divmod(n, per)
    return f"{whole} {big}" + (f" {rest} {small}" if rest else "")


def human_delta(ms: int | float) -> str:
    """A time relative to now (``ms`` = that time minus now, in ms), for people: ``in 66 s``,
    ``12 s ago``, ``in 5 min``, ``3 h ago``; within half a second ``now`` (to come) or
    ``just now`` (past)."""
    if abs(ms) < 500:
        return "now" if ms > 0 else "just now"
    text = human_duration(ms / 1000)
    return f"in {text}" if ms > 0 else f"{text} ago"


def human_until(iso: str | None, now: datetime | None = None) -> str:
    """An ISO 8601 time as :func:`human_delta` reads it (empty for None)."""
    if not iso:
        return ""
    when = datetime.fromisoformat(iso)
    return human_delta((when - (now or datetime.now(tz=UTC))).total_seconds() * 1000)


def _when(ms: int | None, now_ms: int) -> str:
    if ms is None:
        return ""
    return f"{ms_to_iso(ms)} ({human_delta(ms - now_ms)})"


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _where(info: JobInfo) -> str:
    job, now = info.job, info.now_ms
    if info.state == "ready":
        return f"ready: {_ordinal(info.position or 0)} of {info.depth} in {job.domain}'s queue"
    if info.state == "delayed":
        return f"delayed until {_when(info.eligible_ms, now)}"
    if info.state == "inflight":
        return (
            f"inflight: lease until {_when(info.lease_deadline_ms, now)}, token {job.token}, "
            f"claimed {human_delta((job.claimed_ms or now) - now)}, worker not recorded"
        )
    if info.state == "dead":
        return f"dead ({job.dead_reason}) since {_when(job.died_ms, now)}"
    if info.state == "done":
        return f"done {_when(info.done_ms, now)}; kept until {_when(info.kept_until_ms, now)}"
    return f"{info.state}: in no structure of the queue (see scrapeq audit)"


def _request_line(shown: dict[str, Any] | None) -> str:
    """A job's request in one line (secrets already ``***``); empty for a plain GET."""
    if shown is None:
        return ""
    if "error" in shown:
        return str(shown["error"])
    parts = [str(shown["method"])]
    parts += [f"{n}: {v}" for n, v in shown["headers"]]
    if shown["body_bytes"]:
        parts.append(f"body {shown['body_bytes']:,} bytes")
    parts += [f"cookie {n}={v}" for n, v in shown["cookies"]]
    if shown["meta"] is not None:
        parts.append("meta " + json.dumps(shown["meta"]))
    return "; ".join(parts)[:300]


def job_view(info: JobInfo, queue: str) -> Group:
    """The ``job show`` screen: where the job is, its fields, its error history."""
    from rich.console import Group
    from rich.table import Table

    job, now = info.job, info.now_ms
    fields = Table(title=f"job {job.id} in queue {queue!r}", show_edge=False, show_header=False)
    fields.add_column(style="bold")
    fields.add_column(overflow="fold")
    rows = [
        ("state", _where(info)),
        ("url", redact_url(job.url)),
        ("domain", job.domain),
        ("lane", job.lane),
        ("attempts", f"{job.attempts} of {job.max_attempts} "
                     f"(throttles {job.throttles}, releases {job.releases})"),
        ("created", _when(job.created_ms or None, now)),
        ("eligible", _when(info.eligible_ms, now)),
        ("expires", _when(job.expires_ms, now)),
        ("payload", "" if job.payload is None else json.dumps(job.payload_shown())[:300]),
        ("request", _request_line(job.request_shown())),
        ("raw", (job.raw or "")[:300]),
    ]  # fmt: skip
    for name, value in rows:
        if value:
            fields.add_row(name, value)
    parts: list[Any] = [fields]
    if job.errors:
        errors = Table(title=f"errors ({len(job.errors)}, oldest first)", show_edge=False)
        for col in ("when", "kind", "message"):
            errors.add_column(col, overflow="fold")
        for e in job.errors:
            errors.add_row(human_delta(e.at_ms - now), e.kind, redact_text(e.message)[:300])
        parts.append(errors)
    return Group(*parts)


def jobs_table(listings: list[JobListing], counts: dict[str, int], where: str) -> Table:
    """``job list``: the jobs of each listing in its order, one row each; ``counts``: how many
    the queue (or the domain ``where`` names) holds in each state, for the title."""
    from rich.table import Table

    shown = ", ".join(f"{x.state} {len(x.jobs)} of {counts.get(x.state, 0)}" for x in listings)
    table = Table(title=f"jobs{where}: {shown}", show_edge=False)
    for col in ("id", "state", "domain", "lane", "attempts", "when", "url"):
        table.add_column(col, overflow="fold")
    for listing in listings:
        for info in listing.jobs:
            job = info.job
            table.add_row(
                job.id, info.state, job.domain, job.lane, f"{job.attempts}/{job.max_attempts}",
                _job_when(info), redact_url(job.url),
            )  # fmt: skip
    return table


def _job_when(info: JobInfo) -> str:
    """When a listed job moves next: eligible, its lease ends, or when it died."""
    ms = {"inflight": info.lease_deadline_ms, "dead": info.job.died_ms}.get(
        info.state, info.eligible_ms
    )
    if ms is None:
        return ""
    label = {"inflight": "lease ends", "dead": "died"}.get(info.state, "eligible")
    return f"{label} {human_delta(ms - info.now_ms)}"
