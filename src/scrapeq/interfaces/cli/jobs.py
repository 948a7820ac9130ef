"""Jobs one by one: ``dead list|replay|purge`` and ``job show|list|cancel``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from scrapeq.interfaces import render
from scrapeq.interfaces.cli.common import (
    _SECONDS,
    Context,
    _confirm,
    _console,
    _die,
    _domain_arg,
    _emit_json,
    _empty_queue_note,
    _error_line,
    _existing_queue,
    _settings,
    _unknown_domain_hint,
)
from scrapeq.interfaces.parsing import count_option

if TYPE_CHECKING:  # the engine is imported when a command runs (see common)
    from scrapeq.engine.queue import CancelResult, Queue

dead_app = typer.Typer(help="Inspect, replay and purge dead letters.", no_args_is_help=True)


@dead_app.command("list")
def dead_list(
    ctx: typer.Context,
    domain: Annotated[str | None, typer.Option(help="Only this domain (host[:port]).")] = None,
    limit: Annotated[
        int, typer.Option(parser=count_option(1, 10_000), help="At most N, newest first.")
    ] = 50,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON document on stdout.")] = False,
) -> None:
    """Dead letters, newest first, with reason and last error.

    Examples:
      scrapeq dead list --domain shop-43.example.com --limit 20
    """
    _domain_arg(domain)
    q = _existing_queue(ctx)
    jobs = q.dead_letters(domain=domain, limit=limit)
    if as_json:
        _emit_json([j.as_dict() for j in jobs])
        return
    _console().print(render.dead_table(jobs, total=q.dead_count(domain)))


@dead_app.command("replay")
def dead_replay(
    ctx: typer.Context,
    everything: Annotated[bool, typer.Option("--all", help="Replay every dead letter.")] = False,
    domain: Annotated[str | None, typer.Option(help="Replay one domain's dead letters.")] = None,
    ids: Annotated[list[str] | None, typer.Option("--id", help="Replay these ids.")] = None,
    reset_attempts: Annotated[
        bool, typer.Option("--reset-attempts", help="Give the jobs their full budget again.")
    ] = False,
) -> None:
    """Move dead letters back to their lanes (exactly one of --all, --domain, --id).

    Examples:
      scrapeq dead replay --domain shop-43.example.com --reset-attempts
      scrapeq dead replay --id b1f --id b20
    """
    _domain_arg(domain)
    if sum([everything, domain is not None, bool(ids)]) != 1:
        _die("choose exactly one of --all, --domain D or --id ID", 2)
    q = _existing_queue(ctx)
    moved, missing, duplicates = q.replay(
        ids=ids or None, domain=domain, all=everything, reset_attempts=reset_attempts
    )
    for job_id in missing:
        _error_line(f"not a dead letter: {job_id}")
    for job_id in duplicates:
        _error_line(f"left dead: {job_id} (a pending job has the same URL)")
    typer.echo(f"replayed {moved} dead letter{'s' if moved != 1 else ''}")
    if (missing or duplicates) and not moved:
        raise typer.Exit(2)


@dead_app.command("purge")
def dead_purge(
    ctx: typer.Context,
    older_than: Annotated[
        float | None,
        typer.Option(parser=_SECONDS, help="Only those that died at least S seconds ago."),
    ] = None,
    domain: Annotated[str | None, typer.Option(help="Only this domain.")] = None,
    everything: Annotated[
        bool, typer.Option("--all", help="Every dead letter (with --yes: without asking).")
    ] = False,
    yes: Annotated[bool, typer.Option("--yes", help="Do not ask for a confirmation.")] = False,
) -> None:
    """Delete dead letters for good.

    Without --older-than or --domain it asks first on a terminal; elsewhere it
    needs --all --yes.

    Examples:
      scrapeq dead purge --older-than 604800
      scrapeq dead purge --all --yes
    """
    _domain_arg(domain)
    if everything and (older_than is not None or domain is not None):
        _die("--all purges every dead letter: not with --older-than or --domain", 2)
    q = _existing_queue(ctx)
    if older_than is None and domain is None and not (everything and yes):
        total = q.dead_count()
        if total:
            _confirm(
                f"Purge all {total} dead letters of queue {q.name!r}?",
                f"refusing to purge every dead letter of queue {q.name!r} without --all --yes",
            )
    purged = q.purge(older_than=older_than, domain=domain)
    typer.echo(f"purged {purged} dead letter{'s' if purged != 1 else ''}")


job_app = typer.Typer(
    help="Jobs: list them by state, show where one is, cancel pending ones.", no_args_is_help=True
)


@job_app.command("show")
def job_show(
    ctx: typer.Context,
    job_id: Annotated[str, typer.Argument(metavar="ID", help="The job's id.")],
    as_json: Annotated[bool, typer.Option("--json", help="One JSON document on stdout.")] = False,
) -> None:
    """Where a job is, its attempts, lane, times and error history.

    Ready and its place in line, delayed until when, in flight and its lease, dead
    and why, or done (while keep_done keeps it).

    Examples:
      scrapeq job show b1f
      scrapeq job show b1f --json | jq .state
    """
    settings = _settings(ctx)
    q = Context(settings).queue()
    info = q.job_info(job_id)
    if info is None:
        _die(_no_job(q, job_id, hint=True), 2)
    # revisit = on: the page's estimated change rate, next visit, expected freshness
    page = q.page_info(info.job.url) if settings.revisit == "on" else None
    if as_json:
        doc = info.as_dict(queue=q.name)
        if page is not None:
            doc["revisit"] = page
        _emit_json(doc)
        return
    _console().print(render.job_view(info, q.name))
    if page is not None:
        _console().print(render.page_revisit_line(page))


@job_app.command("list")
def job_list(
    ctx: typer.Context,
    state: Annotated[
        str | None,
        typer.Option(
            metavar="STATE",
            help="ready, delayed, inflight or dead (default: the "
            "pending ones, ready, delayed and inflight).",
        ),
    ] = None,
    domain: Annotated[
        str | None, typer.Option(metavar="D", help="Only this domain's jobs (host[:port]).")
    ] = None,
    limit: Annotated[
        int, typer.Option(min=1, max=1000, metavar="N", help="At most N jobs of each state.")
    ] = 20,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON document on stdout.")] = False,
) -> None:
    """Jobs by state, to find a pending job's id.

    Ready jobs come most urgent first, delayed ones soonest due, those in flight
    soonest lease end, dead letters newest first. Reads are bounded: without
    --domain, the ready jobs of the domains next in line.

    Examples:
      scrapeq job list --domain shop-43.example.com
      scrapeq job list --state delayed --limit 50 --json
    """
    from scrapeq.engine.ops import listing

    _domain_arg(domain)
    if state is not None and state not in listing.JOB_STATES:
        _die(f"--state takes {', '.join(listing.JOB_STATES)}; got {state!r}", 2)
    q = _existing_queue(ctx)
    try:
        _print_job_list(q, (state,) if state else listing.PENDING_STATES, domain, limit, as_json)
    finally:
        q.close()


def _print_job_list(
    q: Queue, states: tuple[str, ...], domain: str | None, limit: int, as_json: bool
) -> None:
    from scrapeq.engine.ops import listing

    listings = [q.list_jobs(s, domain=domain, limit=limit) for s in states]
    for partial in (x for x in listings if x.partial):
        typer.echo(
            f"scrapeq: note: {domain}'s {partial.state} jobs were looked for among the "
            f"first {listing.SCAN_LIMIT:,} {partial.state} jobs of the queue only",
            err=True,
        )
    if as_json:
        _emit_json([info.as_dict() for x in listings for info in x.jobs])
        return
    counts = q.domains_info([domain])[0] if domain is not None else q.counts()
    where = f" of {domain}" if domain is not None else ""
    _console().print(render.jobs_table(listings, counts, where))


def _no_job(q: Queue, job_id: str, *, hint: bool = False) -> str:
    text = f"no job {job_id} in queue {q.name!r}"
    if not hint:
        return text
    if not q.exists():
        return f"{text} ({_empty_queue_note(q)})"
    if q.settings.keep_done <= 0:
        return f"{text} (a done job is deleted unless keep_done keeps it)"
    return text


@job_app.command("cancel")
def job_cancel(
    ctx: typer.Context,
    ids: Annotated[
        list[str] | None, typer.Argument(metavar="[ID]...", help="Jobs to cancel.")
    ] = None,
    domain: Annotated[
        str | None, typer.Option(help="Cancel every pending job of this domain instead.")
    ] = None,
    force: Annotated[
        bool, typer.Option("--force", help="Cancel jobs in flight too (by id).")
    ] = False,
) -> None:
    """Remove pending jobs (ready or delayed): from every structure, counted as cancelled.

    A job in flight is refused unless --force (its worker's result is then
    refused as stale); a dead letter is purged with `dead purge`, not cancelled.
    --domain cancels the domain's ready and delayed jobs and leaves its jobs in
    flight to finish.

    Examples:
      scrapeq job cancel b1f b20
      scrapeq job cancel --domain shop-43.example.com
    """
    _domain_arg(domain)
    if not ids and domain is None:
        _die("give job ids or --domain D", 2)
    if ids and domain is not None:
        _die("give job ids or --domain D, not both", 2)
    if domain is not None and force:
        _die("--force cancels jobs in flight by id: --domain leaves them to finish", 2)
    q = Context(_settings(ctx)).queue()
    if domain is not None:
        with _unknown_domain_hint(q):
            result = q.cancel(domain=domain)
        typer.echo(_cancelled(result.cancelled, f" of {domain}", result.left_inflight))
        return
    assert ids is not None
    result = q.cancel(ids=ids, force=force)
    refusals = _refusals(q, result)
    for job_id in dict.fromkeys(ids):
        if job_id in refusals:
            _error_line(refusals[job_id])
    typer.echo(_cancelled(result.cancelled, "", 0))
    if refusals and not result.cancelled:
        raise typer.Exit(2)


def _cancelled(n: int, where: str, left_inflight: int) -> str:
    text = f"cancelled {n} job{'s' if n != 1 else ''}{where}"
    if left_inflight:
        them = "it" if left_inflight == 1 else "them"
        text += f"; {left_inflight} in flight left to finish (cancel {them} by id with --force)"
    return text


def _refusals(q: Queue, result: CancelResult) -> dict[str, str]:
    """Job id -> why it was not cancelled, one line each."""
    why: dict[str, str] = {}
    for job_id in result.unknown:
        why[job_id] = _no_job(q, job_id)
    for job_id in result.corrupt:
        why[job_id] = f"{job_id} is not a readable job: see scrapeq audit"
    for job_id in result.done:
        why[job_id] = f"{job_id} is done"
    for job_id in result.dead:
        why[job_id] = f"{job_id} is a dead letter: use dead purge"
    for job_id in result.inflight:
        why[job_id] = f"job {job_id} is in flight; --force to cancel it"
    return why
