"""The ``scrapeq`` command line: thin, it parses, calls the library and renders.

Exit codes: 0 success, 2 bad usage or bad input (one line on stderr), 1 any other error.
No traceback for user errors.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import logging
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, NoReturn

import redis
import typer
from rich.console import Console

from . import render
from .connection import async_client, check_reachable, redact, resolve_url, sync_client
from .errors import ConfigError, InvalidURL, NotFound, PayloadTooLarge, ScrapeqError
from .job import ms_to_iso
from .keys import QUEUE_SCAN_PATTERN, queue_of_marker
from .logs import formatter
from .queue import AsyncQueue, Queue
from .settings import Settings, load_settings

__all__ = ["app", "main"]

app = typer.Typer(
    name="scrapeq",
    help="A Redis-backed job queue for web scraping built around failure isolation.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

log = logging.getLogger("scrapeq")


@dataclass
class Context:
    """What the global options decided: the settings in force (and ``-v``)."""

    settings: Settings
    verbose: int = 0

    def redis_url(self) -> str:
        return resolve_url(self.settings.redis_url, self.settings.data_dir)

    def checked_url(self) -> str:
        """The Redis URL after one PING through it, for commands that connect later.

        Raises:
            RedisUnavailable: the URL cannot be used (one line, password hidden).
        """
        url = self.redis_url()
        client = sync_client(url)
        try:
            check_reachable(client, url)
        finally:
            client.close()
        return url

    def queue(self) -> Queue:
        url = self.redis_url()
        client = sync_client(url)
        check_reachable(client, url)
        return Queue(client, settings=self.settings)

    def async_queue(self) -> AsyncQueue:
        return AsyncQueue(async_client(self.redis_url()), settings=self.settings)


def _settings(ctx: typer.Context, **flags: Any) -> Settings:
    root: Context = ctx.obj
    if not any(v is not None for v in flags.values()):
        return root.settings
    return root.settings.replace(**{k: v for k, v in flags.items() if v is not None})


def setup_logging(verbose: int, log_format: str = "text") -> None:
    """One line per record on stderr, text or JSON (:mod:`scrapeq.logs`); per-job lines
    only with ``-v``."""
    level = logging.DEBUG if verbose > 0 else logging.INFO
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter(log_format))
    root = logging.getLogger("scrapeq")
    root.handlers[:] = [handler]
    root.setLevel(level)
    root.propagate = False


@app.callback()
def _global(
    ctx: typer.Context,
    redis: Annotated[
        str | None, typer.Option("--redis", help="Redis URL (default: embedded server).")
    ] = None,
    queue: Annotated[str | None, typer.Option("--queue", help="Queue name.")] = None,
    config: Annotated[
        Path | None, typer.Option("--config", help="scrapeq.toml to read (env SCRAPEQ_CONFIG).")
    ] = None,
    data_dir: Annotated[
        Path | None, typer.Option("--data-dir", help="Where the embedded Redis keeps its data.")
    ] = None,
    verbose: Annotated[int, typer.Option("-v", "--verbose", count=True, help="Per-job logs.")] = 0,
) -> None:
    """Global options come before the command: scrapeq --redis URL --queue Q COMMAND."""
    overrides = {"redis_url": redis, "queue": queue, "data_dir": data_dir}
    settings = load_settings(config_file=config, overrides=overrides)
    setup_logging(verbose, settings.log_format)
    ctx.obj = Context(settings, verbose)


def _die(message: str, code: int) -> NoReturn:
    typer.echo(f"scrapeq: error: {message}", err=True)
    raise typer.Exit(code)


def _emit_json(value: Any) -> None:
    typer.echo(json.dumps(value, indent=2, default=str))


# --- worker ------------------------------------------------------------------------------------


@app.command()
def worker(
    ctx: typer.Context,
    concurrency: Annotated[int, typer.Option(min=1, help="Fetches at once per process.")] = 100,
    processes: Annotated[int, typer.Option(min=1, help="Worker processes.")] = 1,
    burst: Annotated[bool, typer.Option(help="Exit 0 once every job is done or dead.")] = False,
    max_runtime: Annotated[
        float | None, typer.Option(min=0, help="Stop gracefully after S seconds.")
    ] = None,
    results: Annotated[
        Path | None, typer.Option(help="Append one JSON line per finished job.")
    ] = None,
    allow_private: Annotated[
        bool | None,
        typer.Option("--allow-private/--no-allow-private", help="Allow private addresses."),
    ] = None,
    handler_timeout: Annotated[
        float | None, typer.Option(help="Seconds a handler may run (default 60).")
    ] = None,
    max_job_time: Annotated[
        float | None,
        typer.Option(help="Seconds a job may be held before its attempt is given up (600)."),
    ] = None,
    log_format: Annotated[
        str | None,
        typer.Option(help="Log lines as 'text' (default) or 'json' (one object a line)."),
    ] = None,
    log_every: Annotated[
        float | None,
        typer.Option(min=0, help="Seconds between queue progress lines (default 10; 0: none)."),
    ] = None,
) -> None:
    """Run workers: claim, fetch, classify and settle jobs until stopped.

    Examples:
      scrapeq worker --concurrency 200 --results results.jsonl
      scrapeq worker --processes 4 --burst
    """
    settings = _settings(
        ctx,
        allow_private=allow_private,
        handler_timeout=handler_timeout,
        max_job_time=max_job_time,
        log_format=log_format,
        log_every=log_every,
    )
    root: Context = ctx.obj
    if log_format is not None:
        setup_logging(root.verbose, settings.log_format)
    if results is not None:
        _check_writable(results)
    results_path = str(results) if results else None
    # The last line is the queue's summary: logged by the only process, or by the
    # supervisor once its children are gone.
    options = WorkerOptions(
        concurrency, burst, max_runtime, results_path, root.verbose, summary=processes == 1
    )
    url = Context(settings).checked_url()
    if processes == 1:
        raise typer.Exit(run_worker_process(settings, url, options, 0))
    from .supervisor import KILL_MARGIN, supervise

    kill_after = settings.shutdown_grace + KILL_MARGIN
    code = supervise(run_worker_process, (settings, url, options), processes, kill_after=kill_after)
    asyncio.run(_log_summary(settings, url))
    raise typer.Exit(code)


async def _log_summary(settings: Settings, url: str) -> None:
    from .reporter import log_summary

    queue = AsyncQueue(async_client(url), settings=settings)
    try:
        await log_summary(queue)
    finally:
        await queue.close()


def _check_writable(path: Path) -> None:
    """Refuse a results path that cannot be appended to, before any job is claimed."""
    if not path.parent.is_dir():
        _die(f"--results {path}: folder {path.parent} does not exist", 2)
    try:
        with path.open("a", encoding="utf-8"):
            pass
    except OSError as exc:
        _die(f"--results {path}: {exc.strerror}", 2)


@dataclass(frozen=True)
class WorkerOptions:
    concurrency: int
    burst: bool
    max_runtime: float | None
    results: str | None
    verbose: int = 0
    summary: bool = False  # log the queue's summary at the end (reporter.log_summary)


def run_worker_process(settings: Settings, url: str, options: WorkerOptions, slot: int) -> int:
    """Body of one worker process (also the target of supervised children)."""
    if not logging.getLogger("scrapeq").handlers:  # a spawned child starts bare
        setup_logging(options.verbose, settings.log_format)
    from .reporter import log_summary
    from .sinks import JsonlSink
    from .worker import Worker

    async def main() -> int:
        queue = AsyncQueue(async_client(url), settings=settings)
        sink = JsonlSink(options.results) if options.results else None
        w = Worker(
            queue,
            concurrency=options.concurrency,
            sink=sink,
            burst=options.burst,
            max_runtime=options.max_runtime,
        )
        try:
            await w.run_async()
            if options.summary and not w.redis_down:  # a lost Redis would hold the exit
                await log_summary(queue)
        finally:
            await queue.close()
        return 0

    return asyncio.run(main())


# --- enqueue and status (the rest of the CLI arrives with the CLI work) --------------------------


@app.command()
def enqueue(
    ctx: typer.Context,
    urls: Annotated[list[str] | None, typer.Argument(help="URLs to add.")] = None,
    file: Annotated[
        str | None, typer.Option("--file", help="Read URLs from a file, one a line ('-': stdin).")
    ] = None,
    lane: Annotated[str | None, typer.Option(help="Lane name (default: normal).")] = None,
    delay: Annotated[float, typer.Option(min=0, help="Seconds before eligible.")] = 0.0,
    max_attempts: Annotated[int | None, typer.Option(min=1, help="Attempt budget.")] = None,
    unique: Annotated[bool, typer.Option(help="Skip URLs already pending.")] = False,
    payload: Annotated[str | None, typer.Option(help="JSON payload for every job.")] = None,
    expires: Annotated[
        float | None, typer.Option(min=0, help="Unclaimed jobs die after S.")
    ] = None,
    allow_private: Annotated[
        bool | None, typer.Option("--allow-private/--no-allow-private")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the ids as JSON.")] = False,
) -> None:
    """Add jobs; invalid URLs are reported one per line on stderr and not added.

    Examples:
      scrapeq enqueue https://shop-43.example.com/p/1 --lane critical
      scrapeq enqueue --file urls.txt --lane bulk --unique
    """
    settings = _settings(ctx, allow_private=allow_private)
    try:
        payload_value = None if payload is None else json.loads(payload)
    except json.JSONDecodeError as exc:
        _die(f"--payload is not valid JSON: {exc}", 2)
    q = Context(settings).queue()
    options: dict[str, Any] = dict(
        lane=lane,
        delay=delay,
        max_attempts=max_attempts,
        payload=payload_value,
        unique=unique,
        expires=expires,
    )
    q.prepare("https://example.com/", **options)  # bad options fail once, before any input
    added, ids, bad = _enqueue_stream(q, _url_lines(urls or [], file), options, as_json)
    if as_json:
        _emit_json({"added": added, "ids": ids, "invalid": bad})
    else:
        typer.echo(f"added {added} job{'s' if added != 1 else ''}")
    if bad and not added:
        raise typer.Exit(2)


def _url_lines(urls: list[str], file: str | None) -> Any:
    for i, u in enumerate(urls, 1):
        yield f"argument {i}", u
    if file is None:
        return
    try:
        stream = sys.stdin if file == "-" else open(file, encoding="utf-8")  # noqa: SIM115
    except OSError as exc:
        _die(f"cannot read {file}: {exc.strerror}", 2)
    with stream:
        for n, line in enumerate(stream, 1):
            text = line.strip()
            if text and not text.startswith("#"):
                yield f"line {n}", text


def _enqueue_stream(
    q: Queue, lines: Any, options: dict[str, Any], keep_ids: bool
) -> tuple[int, list[str], int]:
    """Validate and add URLs in batches of 1000, never holding the whole input."""
    batch: list[Any] = []
    added, ids, bad = 0, [], 0

    def flush() -> None:
        nonlocal added
        for r in q.enqueue_many(batch):
            if r.added:
                added += 1
                if keep_ids:
                    ids.append(r.id)
        batch.clear()

    for where, url in lines:
        try:
            batch.append(q.prepare(url, **options))
        except (InvalidURL, ConfigError) as exc:
            bad += 1
            typer.echo(f"{where}: {exc}", err=True)
        if len(batch) >= 1000:
            flush()
    if batch:
        flush()
    return added, ids, bad


@app.command()
def status(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON document on stdout.")] = False,
    limit: Annotated[int, typer.Option(min=1, help="Domains shown in the table.")] = 15,
) -> None:
    """Counts, lanes, the domains worth a look first, and alarms.

    Examples:
      scrapeq status
      scrapeq --queue shops status --json | jq .counts
    """
    q = _existing_queue(ctx)
    data = q.status()
    if as_json:
        _emit_json(data)
        return
    _console().print(render.status_view(data, limit=limit))


def _console() -> Console:
    # Piped output is not folded at 80 columns: lines stay greppable.
    width = None if sys.stdout.isatty() else 200
    return Console(highlight=False, soft_wrap=False, width=width)


@app.command()
def audit(
    ctx: typer.Context,
    repair: Annotated[
        bool, typer.Option("--repair", help="Fix what is safely fixable and say what was done.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON document on stdout.")] = False,
) -> None:
    """Check the queue's Redis structures; exit 1 with the list when anything is off.

    Every job in exactly one place, no id without its job nor job key that nothing names,
    inflight counters equal to the leases, every domain with ready jobs reachable, counters
    equal to the structures. With --repair, stranded domains are filed again, counters
    recounted, orphan job keys filed again (and so on), and each fix is printed.

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


def _existing_queue(ctx: typer.Context) -> Queue:
    """The queue for a command that reads or tidies it; a queue never used is no error.

    Monitoring may poll before the first enqueue, so such a queue answers zeros and empty
    lists. A hint on stderr names the queues that do exist, in case the name is a typo.
    """
    q = Context(_settings(ctx)).queue()
    if not q.exists():
        typer.echo(f"scrapeq: {_empty_queue_note(q)}", err=True)
    return q


def _empty_queue_note(q: Queue) -> str:
    """``queue 'shpos' is empty; known queues: shops`` (as much as a cheap look finds)."""
    known = _known_queues(q.client)
    if known is None:
        return f"queue {q.name!r} is empty"
    names, complete = known
    if not names:
        if complete:
            return f"queue {q.name!r} is empty; no queues on this Redis yet"
        return f"queue {q.name!r} is empty; no queues among the first keys scanned"
    more = "" if complete else " (and maybe more: only the first keys were scanned)"
    return f"queue {q.name!r} is empty; known queues: {', '.join(names)}{more}"


#: A hint must stay cheap on a big Redis: at most this many SCAN calls of COUNT 1000 each.
_SCAN_CALLS = 5


def _known_queues(client: redis.Redis) -> tuple[list[str], bool] | None:
    """The queues a bounded SCAN finds, and whether it saw every key; None if SCAN failed.

    Failure is tolerated (e.g. an ACL user without SCAN): the hint just names none.
    """
    found: set[str] = set()
    cursor = 0
    try:
        for _ in range(_SCAN_CALLS):
            cursor, batch = client.scan(cursor, match=QUEUE_SCAN_PATTERN, count=1000)
            names = (queue_of_marker(str(key)) for key in batch)
            found.update(n for n in names if n is not None)
            if cursor == 0:
                return sorted(found), True
    except redis.RedisError:
        return None
    return sorted(found), False


# --- dead letters ------------------------------------------------------------------------------

dead_app = typer.Typer(help="Inspect, replay and purge dead letters.", no_args_is_help=True)
app.add_typer(dead_app, name="dead")


@dead_app.command("list")
def dead_list(
    ctx: typer.Context,
    domain: Annotated[str | None, typer.Option(help="Only this domain (host[:port]).")] = None,
    limit: Annotated[int, typer.Option(min=1, max=10000, help="At most N, newest first.")] = 50,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON document on stdout.")] = False,
) -> None:
    """Dead letters, newest first, with reason and last error.

    Examples:
      scrapeq dead list --domain shop-43.example.com --limit 20
    """
    jobs = _existing_queue(ctx).dead_letters(domain=domain, limit=limit)
    if as_json:
        _emit_json([j.as_dict() for j in jobs])
        return
    _console().print(render.dead_table(jobs))


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
    if sum([everything, domain is not None, bool(ids)]) != 1:
        _die("choose exactly one of --all, --domain D or --id ID", 2)
    q = _existing_queue(ctx)
    moved, missing, duplicates = q.replay(
        ids=ids or None, domain=domain, all=everything, reset_attempts=reset_attempts
    )
    for job_id in missing:
        typer.echo(f"not a dead letter: {job_id}", err=True)
    for job_id in duplicates:
        typer.echo(f"left dead: {job_id} (a pending job has the same URL)", err=True)
    typer.echo(f"replayed {moved} dead letter{'s' if moved != 1 else ''}")
    if (missing or duplicates) and not moved:
        raise typer.Exit(2)


@dead_app.command("purge")
def dead_purge(
    ctx: typer.Context,
    older_than: Annotated[
        float | None, typer.Option(min=0, help="Only those that died at least S seconds ago.")
    ] = None,
    domain: Annotated[str | None, typer.Option(help="Only this domain.")] = None,
) -> None:
    """Delete dead letters for good.

    Examples:
      scrapeq dead purge --older-than 604800
    """
    purged = _existing_queue(ctx).purge(older_than=older_than, domain=domain)
    typer.echo(f"purged {purged} dead letter{'s' if purged != 1 else ''}")


# --- breakers and domains ----------------------------------------------------------------------


@app.command()
def breakers(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON document on stdout.")] = False,
) -> None:
    """Every domain's circuit breaker: state, failures, window, trips, cooldown."""
    infos = _existing_queue(ctx).domains_info()
    if as_json:
        _emit_json([_breaker_json(d) for d in infos])
        return
    _console().print(render.breakers_table(infos))


def _breaker_json(info: dict[str, Any]) -> dict[str, Any]:
    keys = ("domain", "state", "consecutive_failures", "window", "trips", "open_until")
    out = {k: info[k] for k in keys}
    out["open_until"] = ms_to_iso(info["open_until"])
    return out


breaker_app = typer.Typer(help="Steer one domain's breaker by hand.", no_args_is_help=True)
app.add_typer(breaker_app, name="breaker")


@breaker_app.command("reset")
def breaker_reset(
    ctx: typer.Context, domain: Annotated[str, typer.Argument(help="host[:port]")]
) -> None:
    """Close a domain's breaker (a retired domain is un-retired)."""
    q = Context(_settings(ctx)).queue()
    with _unknown_domain_hint(q):
        state = q.breaker_reset(domain)
    typer.echo(f"{domain}: {state}")


@breaker_app.command("trip")
def breaker_trip(
    ctx: typer.Context,
    domain: Annotated[str, typer.Argument(help="host[:port]")],
    cooldown: Annotated[
        float | None, typer.Option(min=0, help="Seconds open (default: the next cooldown).")
    ] = None,
) -> None:
    """Open a domain's breaker now: its jobs wait, nothing is fetched from it."""
    q = Context(_settings(ctx)).queue()
    with _unknown_domain_hint(q):
        state = q.breaker_trip(domain, cooldown=cooldown)
    typer.echo(f"{domain}: {state}")


@contextlib.contextmanager
def _unknown_domain_hint(q: Queue) -> Iterator[None]:
    """Add the empty-queue hint to an unknown domain's error when the queue was never used."""
    try:
        yield
    except NotFound as exc:
        if q.exists():
            raise
        raise NotFound(f"{exc} ({_empty_queue_note(q)})") from None


@app.command()
def domains(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON document on stdout.")] = False,
) -> None:
    """Every domain's politeness (delay, concurrency) and counts."""
    infos = _existing_queue(ctx).domains_info()
    if as_json:
        _emit_json([_domain_json(d) for d in infos])
        return
    _console().print(render.domains_table(infos))


def _domain_json(info: dict[str, Any]) -> dict[str, Any]:
    keys = ("domain", "state", "ready", "delayed", "inflight", "done", "dead", "enqueued")
    out = {k: info[k] for k in keys}
    out["delay"] = info["delay_ms"] / 1000
    out["concurrency"] = info["concurrency"]
    return out


domain_app = typer.Typer(help="Per-domain politeness overrides.", no_args_is_help=True)
app.add_typer(domain_app, name="domain")


@domain_app.command("set")
def domain_set(
    ctx: typer.Context,
    domain: Annotated[str, typer.Argument(help="host[:port]")],
    delay: Annotated[
        float | None, typer.Option(min=0, help="Minimum seconds between request starts.")
    ] = None,
    concurrency: Annotated[int | None, typer.Option(min=1, help="Jobs in flight at once.")] = None,
) -> None:
    """Set a domain's politeness overrides.

    Examples:
      scrapeq domain set shop-43.example.com --delay 2 --concurrency 1
    """
    if delay is None and concurrency is None:
        _die("give --delay and/or --concurrency", 2)
    q = Context(_settings(ctx)).queue()
    got = q.domain_set(domain, delay=delay, concurrency=concurrency)
    typer.echo(f"{domain}: delay {got['delay']:g}s, concurrency {got['concurrency']}")


# --- demo and dashboard ------------------------------------------------------------------------


@app.command()
def demo(
    ctx: typer.Context,
    duration: Annotated[float, typer.Option(min=1, help="Seconds the scrapeq phase runs.")] = 60,
) -> None:
    """Replay the one-hanging-site incident on a local fleet and report, side by side with a
    naive retry loop run against the same fleet.

    Without --redis the demo runs its own Redis in a temporary folder and stops it at the
    end: your embedded server (data_dir) is neither used nor started.

    Examples:
      scrapeq demo --duration 30
    """
    from .demo import render_report, run_demo

    settings = _settings(ctx)
    console = _console()
    with _demo_redis(settings) as url:
        report = run_demo(settings, redis_url=url, duration=duration, console=console)
    render_report(report, console)


@contextlib.contextmanager
def _demo_redis(settings: Settings) -> Iterator[str]:
    """The configured Redis, or a private throwaway one (the demo's queue is dropped anyway)."""
    if settings.redis_url is not None:
        yield Context(settings).checked_url()
        return
    from .embedded import private_server

    with private_server() as url:
        yield url


@app.command()
def dashboard(
    ctx: typer.Context,
    host: Annotated[str, typer.Option(help="Address to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port to bind.")] = 8000,
) -> None:
    """Serve the web dashboard and /metrics (Prometheus text format)."""
    from .web import serve

    context = Context(_settings(ctx))
    context.checked_url()
    listening = False

    def ready(base: str) -> None:
        nonlocal listening
        listening = True
        typer.echo(f"dashboard on {base}/  (metrics: /metrics)", err=True)

    try:
        serve(context.async_queue, host=host, port=port, on_ready=ready)
    except OSError as exc:
        if listening:  # not a bind failure: a bug or the machine's, keep the traceback
            raise
        _die(f"cannot serve the dashboard on {host}:{port}: {_bind_problem(exc)}", 1)


def _bind_problem(exc: OSError) -> str:
    """Why an address could not be bound, in the OS's words, with a hint when there is one."""
    # asyncio re-raises bind errors with the address in the text: keep only the OS's reason.
    # (A host that does not resolve is a gaierror, whose negative errno strerror() lacks.)
    reason = os.strerror(exc.errno) if exc.errno and exc.errno > 0 else exc.strerror or str(exc)
    return f"{reason} (choose another --port)" if exc.errno == errno.EADDRINUSE else reason


# --- the embedded Redis ------------------------------------------------------------------------

server_app = typer.Typer(
    help="The embedded Redis: the private redis-server of --data-dir.", no_args_is_help=True
)
app.add_typer(server_app, name="server")


@server_app.command("status")
def server_status(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON document on stdout.")] = False,
) -> None:
    """Whether the embedded Redis runs: pid, socket, data dir, memory. Starts nothing.

    Examples:
      scrapeq server status
      scrapeq --data-dir /srv/scrapeq server status --json
    """
    from .embedded import server_info

    settings = _settings(ctx)
    _note_redis_url(settings)
    info = server_info(settings.data_dir)
    if as_json:
        _emit_json(info.as_dict())
        return
    rows = [("state", "running" if info.running else "not running")]
    if info.running:
        rows += [("pid", str(info.pid) if info.pid is not None else "unknown")]
    rows += [("socket", str(info.files.socket)), ("data dir", str(info.files.data_dir))]
    if info.running:
        rows += [("memory", info.used_memory_human or "unknown")]
    for name, value in rows:
        typer.echo(f"{name:<9} {value}")


@server_app.command("stop")
def server_stop(ctx: typer.Context) -> None:
    """Stop the embedded Redis: SHUTDOWN SAVE, wait for it to exit, remove its pidfile.

    Stopping a server that does not run is no error. The next command that needs Redis
    (without --redis) starts it again, with its data.

    Examples:
      scrapeq server stop
    """
    from .embedded import server_info, stop_server

    settings = _settings(ctx)
    _note_redis_url(settings)
    info = server_info(settings.data_dir)
    if not stop_server(settings.data_dir):
        typer.echo(f"no embedded Redis running in {info.files.data_dir}")
        return
    pid = f" (pid {info.pid})" if info.pid is not None else ""
    typer.echo(f"stopped the embedded Redis{pid} in {info.files.data_dir}")


def _note_redis_url(settings: Settings) -> None:
    """Say on stderr that the commands use another server than the embedded one."""
    if settings.redis_url is not None:
        typer.echo(
            f"scrapeq: note: redis_url is set ({redact(settings.redis_url)}): the other "
            "commands use that server, not this embedded one",
            err=True,
        )


# --- entry point -------------------------------------------------------------------------------

_USER_ERRORS = (ConfigError, InvalidURL, NotFound, PayloadTooLarge)


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; answers the exit code (0, 1 or 2). Never a traceback for user errors.

    Usage errors and the library's errors become one line on stderr.
    """
    try:
        rv = app(args=argv, prog_name="scrapeq", standalone_mode=False)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except _USER_ERRORS as exc:
        return _fail(str(exc), 2)
    except ScrapeqError as exc:
        return _fail(str(exc), 1)
    except (KeyboardInterrupt, typer.Abort):
        return _fail("interrupted", 130)
    except Exception as exc:
        # typer's usage errors (bad option, bad value): click exceptions, duck-typed since
        # typer vendors click.
        format_message = getattr(exc, "format_message", None)
        code = getattr(exc, "exit_code", None)
        if callable(format_message) and isinstance(code, int):
            return _fail(str(format_message()), code)
        raise
    return rv if isinstance(rv, int) else 0


def _fail(message: str, code: int) -> int:
    typer.echo(f"scrapeq: error: {message}", err=True)
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
