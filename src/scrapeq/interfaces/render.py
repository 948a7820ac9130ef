"""Rich tables for the CLI: status, dead letters, breakers, domains. Pure rendering."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from scrapeq.engine.audit import AuditReport
from scrapeq.engine.job import Job, JobInfo, ms_to_iso

__all__ = [
    "audit_view",
    "breakers_table",
    "dead_table",
    "domains_table",
    "human_delta",
    "job_view",
    "queues_table",
    "status_view",
    "worth_a_look",
]

_COUNTS = ("enqueued", "ready", "delayed", "inflight", "done", "dead", "cancelled")
_STATE_STYLE = {"open": "bold red", "half_open": "yellow", "retired": "bold magenta"}
_STATE_RANK = {"retired": 0, "open": 1, "half_open": 2, "closed": 3}


def _state(state: str) -> Text:
    return Text(state, style=_STATE_STYLE.get(state, "green"))


def _until(iso: str | None) -> str:
    if not iso:
        return ""
    left = (datetime.fromisoformat(iso) - datetime.now(tz=UTC)).total_seconds()
    return f"in {left:.0f}s" if left > 0 else "now"


def worth_a_look(domains: list[dict[str, Any]], limit: int = 15) -> list[dict[str, Any]]:
    """Domains to look at first: retired, open, half-open, then the most dead letters."""
    return sorted(
        domains,
        key=lambda d: (_STATE_RANK.get(d["state"], 9), -d["dead"], -d["ready"], d["domain"]),
    )[:limit]


def status_view(data: dict[str, Any], *, limit: int = 15) -> Group:
    """The `status` screen: totals, lanes, the domains worth a look, alarms."""
    c = data["counts"]
    totals = Table(title=f"queue {data['queue']}", show_edge=False)
    for name in _COUNTS:
        totals.add_column(name, justify="right")
    totals.add_row(*(str(c.get(n, 0)) for n in _COUNTS))
    lanes = Table(title="lanes", show_edge=False)
    for col in ("lane", "ready", "delayed", "oldest ready"):
        lanes.add_column(col, justify="left" if col == "lane" else "right")
    for lane, info in data["lanes"].items():
        lanes.add_row(
            lane, str(info["ready"]), str(info["delayed"]), f"{info['oldest_ready_age']:.1f}s"
        )
    shown = worth_a_look(data["domains"], limit)
    domains = Table(
        title=f"domains worth a look ({len(shown)} of {len(data['domains'])})", show_edge=False
    )
    for col in ("domain", "state", "ready", "delayed", "inflight", "done", "dead", "fails", "open"):
        domains.add_column(col, justify="left" if col in ("domain", "state") else "right")
    for d in shown:
        domains.add_row(
            d["domain"], _state(d["state"]), str(d["ready"]), str(d["delayed"]),
            str(d["inflight"]), str(d["done"]), str(d["dead"]),
            str(d["consecutive_failures"]), _until(d["open_until"]),
        )  # fmt: skip
    parts: list[Any] = [totals, lanes, domains]
    if data.get("paused_until"):
        parts.append(Text(f"dispatch paused until {data['paused_until']}", style="bold red"))
    for alarm in data["alarms"]:
        where = f" {alarm['domain']}" if alarm["domain"] else ""
        parts.append(Text(f"ALARM {alarm['kind']}{where}: {alarm['message']}", style="bold red"))
    return Group(*parts)


def dead_table(jobs: list[Job], total: int | None = None) -> Table:
    """Dead letters, newest first, with reason and last error; ``total``: how many the
    queue (or the domain) holds, for the footer ``50 of 150``."""
    caption = None if total is None else f"{len(jobs)} of {total}"
    table = Table(title=f"dead letters ({len(jobs)})", show_edge=False, caption=caption)
    for col in ("id", "domain", "lane", "attempts", "reason", "last error", "url"):
        table.add_column(col, overflow="fold")
    for job in jobs:
        last = job.last_error
        error = f"{last.kind}: {last.message}" if last else ""
        table.add_row(
            job.id, job.domain, job.lane, f"{job.attempts}/{job.max_attempts}",
            job.dead_reason or "", error[:120], job.url,
        )  # fmt: skip
    return table


def breakers_table(infos: list[dict[str, Any]]) -> Table:
    """Every domain's breaker: state, failures, window, trips, cooldown."""
    table = Table(title="breakers", show_edge=False)
    for col in ("domain", "state", "fails", "window", "trips", "open"):
        table.add_column(col)
    for d in worth_a_look(infos, limit=len(infos)):
        window = d["window"]
        rate = f"{window.count('1')}/{len(window)}" if window else ""
        table.add_row(
            d["domain"], _state(d["state"]), str(d["consecutive_failures"]), rate,
            str(d["trips"]), _until(ms_to_iso(d["open_until"])),
        )  # fmt: skip
    return table


def domains_table(infos: list[dict[str, Any]]) -> Table:
    """Every domain's politeness and counts."""
    table = Table(title="domains", show_edge=False)
    for col in ("domain", "state", "delay", "concurrency", "inflight", "ready", "done", "dead",
                "latency"):  # fmt: skip
        table.add_column(col)
    for d in sorted(infos, key=lambda d: d["domain"]):
        table.add_row(
            d["domain"], _state(d["state"]), _delay(d), _concurrency(d),
            str(d["inflight"]), str(d["ready"]), str(d["done"]), str(d["dead"]), _latency(d),
        )  # fmt: skip
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
        return f"{learned:.2f}s (learned)"
    return f"{delay:g}s"


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
    table = Table(title=f"queues ({len(rows)})", show_edge=False)
    table.add_column("queue")
    for name in _COUNTS:
        table.add_column(name, justify="right")
    for row in rows:
        table.add_row(row["queue"], *(str(row["counts"].get(n, 0)) for n in _COUNTS))
    return table


def human_delta(ms: int | float) -> str:
    """A time from now, for people: ``in 66 s``, ``6.4 s ago``, ``in 5 min``, ``2.5 h ago``."""
    size = abs(ms) / 1000
    if size < 10:
        text = f"{size:.1f} s"
    elif size < 120:
        text = f"{size:.0f} s"
    elif size < 7200:
        text = f"{size / 60:.0f} min"
    elif size < 172_800:
        text = f"{size / 3600:.1f} h"
    else:
        text = f"{size / 86400:.1f} days"
    return f"in {text}" if ms > 0 else f"{text} ago"


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


def job_view(info: JobInfo, queue: str) -> Group:
    """The ``job show`` screen: where the job is, its fields, its error history."""
    job, now = info.job, info.now_ms
    fields = Table(title=f"job {job.id} in queue {queue!r}", show_edge=False, show_header=False)
    fields.add_column(style="bold")
    fields.add_column(overflow="fold")
    rows = [
        ("state", _where(info)),
        ("url", job.url),
        ("domain", job.domain),
        ("lane", job.lane),
        ("attempts", f"{job.attempts} of {job.max_attempts} "
                     f"(throttles {job.throttles}, releases {job.releases})"),
        ("created", _when(job.created_ms or None, now)),
        ("eligible", _when(info.eligible_ms, now)),
        ("expires", _when(job.expires_ms, now)),
        ("payload", "" if job.payload is None else json.dumps(job.payload)[:300]),
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
            errors.add_row(human_delta(e.at_ms - now), e.kind, e.message[:300])
        parts.append(errors)
    return Group(*parts)
