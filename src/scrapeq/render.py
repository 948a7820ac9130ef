"""Rich tables for the CLI: status, dead letters, breakers, domains. Pure rendering."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from .audit import AuditReport
from .job import Job, ms_to_iso

__all__ = [
    "audit_view",
    "breakers_table",
    "dead_table",
    "domains_table",
    "status_view",
    "worth_a_look",
]

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
    for name in ("enqueued", "ready", "delayed", "inflight", "done", "dead"):
        totals.add_column(name, justify="right")
    totals.add_row(
        *(str(c[n]) for n in ("enqueued", "ready", "delayed", "inflight", "done", "dead"))
    )
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


def dead_table(jobs: list[Job]) -> Table:
    """Dead letters, newest first, with reason and last error."""
    table = Table(title=f"dead letters ({len(jobs)})", show_edge=False)
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
    for col in ("domain", "state", "delay", "concurrency", "inflight", "ready", "done", "dead"):
        table.add_column(col)
    for d in sorted(infos, key=lambda d: d["domain"]):
        table.add_row(
            d["domain"], _state(d["state"]), f"{d['delay_ms'] / 1000:g}s", str(d["concurrency"]),
            str(d["inflight"]), str(d["ready"]), str(d["done"]), str(d["dead"]),
        )  # fmt: skip
    return table


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
