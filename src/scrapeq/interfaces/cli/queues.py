"""The queue as a whole: ``status``, ``audit``, ``queue list`` and ``queue clear``."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

import typer

from scrapeq.interfaces import render
from scrapeq.interfaces.cli.common import (
    _COUNT,
    Context,
    _confirm,
    _console,
    _die,
    _emit_json,
    _existing_queue,
    _settings,
)


def status(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON document on stdout.")] = False,
    limit: Annotated[int, typer.Option(parser=_COUNT, help="Domains shown in the table.")] = 15,
) -> None:
    """Counts, lanes, the domains worth a look first, and alarms.

    Examples:
      scrapeq status
      scrapeq --queue shops status --json | jq .counts
    """
    q = _existing_queue(ctx)
    data = q.status()
    if as_json:
        _emit_json(_status_json(data))
        return
    _console().print(render.status_view(data, limit=limit))


def _status_json(data: dict[str, Any]) -> dict[str, Any]:
    """``status --json``: the schema of docs/INTERFACE.md, each time and age followed by its
    ``_ms`` integer twin (``paused_until_ms``, ``open_until_ms``, ``oldest_ready_age_ms``)."""
    for lane in data["lanes"].values():
        _twin(lane, "oldest_ready_age", round(lane["oldest_ready_age"] * 1000))
    for domain in data["domains"]:
        _twin(domain, "open_until", _iso_ms(domain["open_until"]))
    _twin(data, "paused_until", _iso_ms(data["paused_until"]))
    return data


def _twin(out: dict[str, Any], name: str, ms: int | None) -> None:
    """Put ``name_ms`` right after ``name`` in ``out`` (in place, keeping the order)."""
    items = list(out.items())
    out.clear()
    for key, value in items:
        out[key] = value
        if key == name:
            out[f"{name}_ms"] = ms


def _iso_ms(iso: str | None) -> int | None:
    """ISO 8601 text (as :func:`ms_to_iso` writes it) back to integer ms since the epoch."""
    if iso is None:
        return None
    return round(datetime.fromisoformat(iso).timestamp() * 1000)


def audit(
    ctx: typer.Context,
    repair: Annotated[
        bool, typer.Option("--repair", help="Fix what is safely fixable and say what was done.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON document on stdout.")] = False,
) -> None:
    """Check the queue's Redis structures; exit 1 with the list when anything is off.

    Every job in exactly one place, no id without its job nor job key that
    nothing names, inflight counters equal to the leases holding a slot,
    every domain with ready jobs reachable, counters equal to the structures.
    With --repair, stranded domains are filed again, counters recounted,
    orphan job keys filed again (and so on), and each fix is printed.

    Examples:
      scrapeq audit
      scrapeq --queue shops audit --repair --json
    """
    report = _existing_queue(ctx).audit(repair=repair)
    if as_json:
        _emit_json(report.as_dict())
    else:
        _console().print(render.audit_view(report))
    if not report.ok:
        raise typer.Exit(1)


queue_app = typer.Typer(help="The queues on this Redis: list, clear.", no_args_is_help=True)

#: ``queue list`` looks at most at this many keys (SCAN calls of COUNT 1000): about 1 s of
#: server time in small steps, so a big shared Redis is never held up.
_LIST_SCAN_CALLS = 1000


@queue_app.command("list")
def queue_list(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON document on stdout.")] = False,
) -> None:
    """The queues on this Redis with their counts (found by a bounded SCAN).

    Examples:
      scrapeq queue list
      scrapeq queue list --json | jq '.[].queue'
    """
    from scrapeq.engine.facades.sync_queue import Queue  # when the command runs (see common)

    settings = _settings(ctx)
    q = Context(settings).queue()
    found = q.known_queues(max_calls=_LIST_SCAN_CALLS)
    if found is None:
        _die("the server refused SCAN: cannot list its queues", 1)
    rows = [
        {"queue": name, "counts": Queue(q.client, settings=settings.replace(queue=name)).counts()}
        for name in found.names
    ]
    if not found.complete:
        typer.echo(
            f"scrapeq: only the first {_LIST_SCAN_CALLS * 1000:,} keys were scanned: "
            "more queues may exist",
            err=True,
        )
    if as_json:
        _emit_json(rows)
        return
    _console().print(render.queues_table(rows))


@queue_app.command("clear")
def queue_clear(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="The queue to delete.")],
    yes: Annotated[bool, typer.Option("--yes", help="Do not ask for a confirmation.")] = False,
) -> None:
    """Delete every key of queue NAME (jobs, dead letters, counters, settings), in slices.

    Stop its workers first. Without --yes it asks on a terminal, and refuses elsewhere.

    Examples:
      scrapeq queue clear old-crawl --yes
    """
    q = Context(_settings(ctx).replace(queue=name)).queue()
    if not q.exists():
        typer.echo(f"queue {name!r} has no keys: nothing to clear")
        return
    if not yes:
        c = q.counts()
        pending = c["ready"] + c["delayed"] + c["inflight"]
        _confirm(
            f"Delete queue {name!r} ({pending} pending jobs, {c['dead']} dead letters)?",
            f"refusing to clear queue {name!r} without --yes",
        )
    deleted = q.clear()
    typer.echo(f"cleared queue {name!r}: {deleted} keys deleted")
