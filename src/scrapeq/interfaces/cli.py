"""The ``scrapeq`` command line: thin, it parses, calls the library and renders.

Exit codes: 0 success, 2 bad usage or bad input (one line on stderr), 1 any other error.
No traceback for user errors.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import functools
import json
import logging
import logging.handlers
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console

from scrapeq.engine import listing
from scrapeq.engine.connection import (
    async_client,
    check_reachable,
    redact,
    resolve_url,
    sync_client,
)
from scrapeq.engine.job import ms_to_iso
from scrapeq.engine.queue import AsyncQueue, CancelResult, Queue
from scrapeq.engine.settings import (
    CONFIG_FILE_NAME,
    ENV_PREFIX,
    UNIQUE_MODES,
    Settings,
    load_settings,
)
from scrapeq.engine.status import learned_timing
from scrapeq.engine.urls import domain_of
from scrapeq.errors import (
    ConfigError,
    InvalidURL,
    NotFound,
    PayloadTooLarge,
    RedisUnavailable,
    ScrapeqError,
)
from scrapeq.interfaces import render
from scrapeq.interfaces.crawl_new import NEW_HELP, new_crawl_line, nothing_to_do_line
from scrapeq.interfaces.enqueue_file import (
    EnqueueFailed,
    EnqueueRun,
    Item,
    read_items,
    resume_problem,
    say_failure,
    send_once,
    stdin_bytes,
)
from scrapeq.interfaces.enqueue_requests import RequestFlags, read_requests
from scrapeq.interfaces.parsing import (
    concurrency_option,
    count_option,
    json_object,
    seconds_option,
)
from scrapeq.interfaces.results_opt import (
    EXTRACT_HELP,
    RESULTS_HELP,
    extract_fields_of,
    results_problem,
)
from scrapeq.runtime.logs import formatter

__all__ = ["app", "command", "main"]

app = typer.Typer(
    name="scrapeq",
    help="A Redis-backed job queue for web scraping built around failure isolation.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

log = logging.getLogger("scrapeq")

#: The parsers of duration (>= 0 s) and count (>= 1) options: bounded (issue 21, item 10).
_SECONDS = seconds_option()
_COUNT = count_option()


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
        client = sync_client(url, self.settings.cluster)
        try:
            check_reachable(client, url)
        finally:
            client.close()
        return url

    def queue(self) -> Queue:
        url = self.redis_url()
        client = sync_client(url, self.settings.cluster)
        check_reachable(client, url)
        return Queue(client, settings=self.settings)

    def async_queue(self) -> AsyncQueue:
        return AsyncQueue(
            async_client(self.redis_url(), self.settings.cluster), settings=self.settings
        )


def _settings(ctx: typer.Context, **flags: Any) -> Settings:
    root: Context = ctx.obj
    if not any(v is not None for v in flags.values()):
        return root.settings
    return root.settings.replace(**{k: v for k, v in flags.items() if v is not None})


def setup_logging(verbose: int, log_format: str = "text") -> None:
    """One line per record on stderr, text or JSON (:mod:`scrapeq.runtime.logs`); per-job lines
    only with ``-v``."""
    level = logging.DEBUG if verbose > 0 else logging.INFO
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter(log_format))
    root = logging.getLogger("scrapeq")
    root.handlers[:] = [handler]
    root.setLevel(level)
    root.propagate = False


def _package_version() -> str:
    """The installed distribution's version (the package's own when not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("scrapeq")
    except PackageNotFoundError:
        from scrapeq import __version__

        return __version__


def _setting_default(name: str) -> str:
    """A setting's default as text (for --help)."""
    return str(Settings.__dataclass_fields__[name].default)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"scrapeq {_package_version()}")
        raise typer.Exit()


def _env_help(text: str, env: str, default: str) -> str:
    """Help of a global option that ``load_settings`` also reads from the environment (typer
    does not read it, so flag > env > file > default holds): its variable and its default."""
    return f"{text} \\[env var: {env}; default: {default}]"


@app.callback()
def _global(
    ctx: typer.Context,
    redis: Annotated[
        str | None,
        typer.Option(
            "--redis",
            metavar="URL",
            help=_env_help(
                "Redis URL: redis://, rediss:// or unix://.",
                f"{ENV_PREFIX}REDIS_URL",
                "the embedded Redis of --data-dir",
            ),
        ),
    ] = None,
    queue: Annotated[
        str | None,
        typer.Option(
            "--queue",
            metavar="NAME",
            help=_env_help("Queue name.", f"{ENV_PREFIX}QUEUE", _setting_default("queue")),
        ),
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            metavar="FILE",
            help=_env_help(
                "Settings file to read.", f"{ENV_PREFIX}CONFIG", f"./{CONFIG_FILE_NAME} if any"
            ),
        ),
    ] = None,
    data_dir: Annotated[
        Path | None,
        typer.Option(
            "--data-dir",
            metavar="DIR",
            help=_env_help(
                "Where the embedded Redis keeps its data.",
                f"{ENV_PREFIX}DATA_DIR",
                "$XDG_DATA_HOME/scrapeq, else ~/.local/share/scrapeq",
            ),
        ),
    ] = None,
    verbose: Annotated[
        int,
        typer.Option("-v", "--verbose", count=True, help="Per-job log lines (a count: -v, -vv)."),
    ] = 0,
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version."
        ),
    ] = False,
) -> None:
    """Global options come before the command: scrapeq --redis URL --queue Q COMMAND."""
    overrides = {"redis_url": redis, "queue": queue, "data_dir": data_dir}
    settings = _load_settings(config, overrides, verbose)
    ctx.obj = Context(settings, verbose)


def _load_settings(config: Path | None, overrides: dict[str, Any], verbose: int) -> Settings:
    """The settings; what loading them logs (a misspelt ``SCRAPEQ_*`` variable) is held, then
    written in the log format they choose (text when they cannot be loaded)."""
    held = logging.handlers.BufferingHandler(capacity=100)
    logging.getLogger("scrapeq").handlers[:] = [held]
    log_format = "text"
    try:
        settings = load_settings(config_file=config, overrides=overrides)
        log_format = settings.log_format
    finally:
        setup_logging(verbose, log_format)
        for record in held.buffer:
            logging.getLogger(record.name).handle(record)
    return settings


def _die(message: str, code: int) -> NoReturn:
    _error_line(f"scrapeq: error: {message}")
    raise typer.Exit(code)


def _error_line(line: str) -> None:
    """One line on stderr; what it echoes of the input cannot steer the terminal (issue 21,
    item 11): control characters are written escaped (``\\x1b``)."""
    typer.echo(render.printable(line), err=True)


def _emit_json(value: Any) -> None:
    typer.echo(json.dumps(value, indent=2, default=str))


#: ``--allow-private`` and ``--no-allow-private`` are two flags, one help row each: as one
#: switch its ``--no-`` form took a column of its own, which cut option names at 80 columns.
AllowPrivate = Annotated[
    bool,
    typer.Option("--allow-private", help="Allow private addresses (loopback, LAN, link-local)."),
]
RefusePrivate = Annotated[
    bool, typer.Option("--no-allow-private", help="Refuse them, whatever the settings say.")
]


def _private(allow: bool, refuse: bool) -> bool | None:
    """The ``allow_private`` the flags ask for: None (the settings decide) unless one is given."""
    if allow and refuse:
        _die("--allow-private and --no-allow-private contradict each other", 2)
    return True if allow else (False if refuse else None)


# --- worker ------------------------------------------------------------------------------------


@app.command()
def worker(
    ctx: typer.Context,
    concurrency: Annotated[
        int, typer.Option(parser=_COUNT, help="Fetches at once per process.")
    ] = 100,
    processes: Annotated[int, typer.Option(parser=_COUNT, help="Worker processes.")] = 1,
    burst: Annotated[
        bool, typer.Option("--burst", help="Exit 0 once every job is done or dead.")
    ] = False,
    max_runtime: Annotated[
        float | None, typer.Option(parser=_SECONDS, help="Stop gracefully after S seconds.")
    ] = None,
    results: Annotated[str | None, typer.Option(metavar="PATH|URL", help=RESULTS_HELP)] = None,
    allow_private: AllowPrivate = False,
    no_allow_private: RefusePrivate = False,
    handler_timeout: Annotated[
        float | None, typer.Option(parser=_SECONDS, help="Seconds a handler may run (default 60).")
    ] = None,
    max_job_time: Annotated[
        float | None,
        typer.Option(
            parser=_SECONDS,
            help="Seconds a job may be held before its attempt is given up (600).",
        ),
    ] = None,
    handler: Annotated[
        str | None,
        typer.Option(help="Your handler, package.module:function (default: page metadata)."),
    ] = None,
    extract: Annotated[str | None, typer.Option(metavar="FIELDS", help=EXTRACT_HELP)] = None,
    save_bodies: Annotated[
        Path | None, typer.Option(help="Store each body in DIR/ab/abcdef... (its SHA-256).")
    ] = None,
    request_timeout: Annotated[
        float | None,
        typer.Option(parser=_SECONDS, help="Total seconds of one fetch, body included (30)."),
    ] = None,
    lease: Annotated[
        float | None,
        typer.Option(parser=_SECONDS, help="Seconds of a job's lease; heartbeats renew it (60)."),
    ] = None,
    domain_concurrency: Annotated[
        str | None,
        typer.Option(help="Jobs in flight per domain: a number, or auto (learned; default)."),
    ] = None,
    domain_delay: Annotated[
        float | None,
        typer.Option(parser=_SECONDS, help="Seconds between request starts per domain (0)."),
    ] = None,
    log_format: Annotated[
        str | None,
        typer.Option(help="Log lines as 'text' (default) or 'json' (one object a line)."),
    ] = None,
    log_every: Annotated[
        float | None,
        typer.Option(
            parser=_SECONDS,
            help="Seconds between queue progress lines (default 10; 0: none).",
        ),
    ] = None,
    metrics_port: Annotated[
        int | None,
        typer.Option(
            min=1,
            max=65535,
            help="Serve this process's /metrics on 127.0.0.1:PORT (process i: PORT+i).",
        ),
    ] = None,
) -> None:
    """Run workers: claim, fetch, classify and settle jobs until stopped.

    Examples:
      scrapeq worker --concurrency 200 --results results.jsonl
      scrapeq worker --processes 4 --burst --handler myproject.parse:product
    """
    settings = _settings(
        ctx,
        allow_private=_private(allow_private, no_allow_private),
        handler_timeout=handler_timeout,
        max_job_time=max_job_time,
        handler=handler,
        log_format=log_format,
        log_every=log_every,
        request_timeout=request_timeout,
        lease=lease,
        domain_concurrency=domain_concurrency,
        domain_delay=domain_delay,
    )
    root: Context = ctx.obj
    if log_format is not None:
        setup_logging(root.verbose, settings.log_format)
    options = _worker_options(
        settings, concurrency, burst, max_runtime, results, save_bodies, verbose=root.verbose,
        extract=extract,
    )  # fmt: skip
    if metrics_port is not None:
        if metrics_port + processes - 1 > 65535:
            _die(f"--metrics-port {metrics_port}: ports up to {metrics_port + processes - 1}", 2)
        options = dataclasses.replace(options, metrics_port=metrics_port)
    _run_workers(settings, options, processes)


@app.command()
def crawl(
    ctx: typer.Context,
    urls: Annotated[list[str], typer.Argument(help="Seed URLs.", show_default=False)],
    scope: Annotated[
        str | None, typer.Option(help="Links followed: host (default), domain or any.")
    ] = None,
    max_depth: Annotated[
        int | None,
        typer.Option(parser=count_option(0), help="Links followed from a seed, at most."),
    ] = None,
    max_pages: Annotated[
        int | None, typer.Option(parser=_COUNT, help="Pages per domain, at most.")
    ] = None,
    results: Annotated[str | None, typer.Option(metavar="PATH|URL", help=RESULTS_HELP)] = None,
    handler: Annotated[
        str | None, typer.Option(help="Your handler, package.module:function.")
    ] = None,
    extract: Annotated[str | None, typer.Option(metavar="FIELDS", help=EXTRACT_HELP)] = None,
    concurrency: Annotated[
        int, typer.Option(parser=_COUNT, help="Fetches at once per process.")
    ] = 100,
    processes: Annotated[int, typer.Option(parser=_COUNT, help="Worker processes.")] = 1,
    save_bodies: Annotated[
        Path | None, typer.Option(help="Store each body in DIR/ab/abcdef... (its SHA-256).")
    ] = None,
    allow_private: AllowPrivate = False,
    no_allow_private: RefusePrivate = False,
    log_every: Annotated[
        float | None,
        typer.Option(
            parser=_SECONDS,
            help="Seconds between queue progress lines (default 10; 0: none).",
        ),
    ] = None,
    new: Annotated[bool, typer.Option("--new", "--fresh", help=NEW_HELP)] = False,
    yes: Annotated[bool, typer.Option("--yes", help="Do not ask for a confirmation.")] = False,
) -> None:
    """Crawl from the seeds: follow links in scope until none is left, then exit 0.

    Every page is fetched once (the seen-set), its links resolved, canonicalised,
    kept in scope and enqueued with the page's settlement. Stops like
    `worker --burst`.

    Examples:
      scrapeq crawl https://shop.example.com/ --max-depth 3 --results p.jsonl
      scrapeq crawl https://example.com/ --scope domain --handler my.parse:page
      scrapeq crawl https://shop.example.com/ --new --yes  # from the start
    """
    settings = _settings(
        ctx,
        allow_private=_private(allow_private, no_allow_private),
        handler=handler,
        scope=scope,
        max_depth=max_depth,
        max_pages=max_pages,
        log_every=log_every,
    )
    options = _worker_options(
        settings,
        concurrency,
        True,
        None,
        results,
        save_bodies,
        follow_links=True,
        verbose=ctx.obj.verbose,
        extract=extract,
    )
    q = Context(settings).queue()
    if new:
        if not yes:
            refusal = f"refusing to start a new crawl of queue {q.name!r} without --yes"
            _confirm(f"forget what queue {q.name!r} has seen and crawl again?", refusal)
        typer.echo(new_crawl_line(q.name, q.new_crawl()), err=True)
    seeds = q.enqueue_many(urls, unique="seen")
    added = sum(r.added for r in seeds)
    typer.echo(f"crawl: {added} seeds enqueued ({len(seeds) - added} seen before)", err=True)
    if not added and _nothing_to_do(settings, Context(settings).checked_url()):
        typer.echo(nothing_to_do_line(len(seeds), len(seeds) - added), err=True)
        raise typer.Exit(0)
    _run_workers(settings, options, processes)


def _worker_options(
    settings: Settings,
    concurrency: int,
    burst: bool,
    max_runtime: float | None,
    results: str | None,
    save_bodies: Path | None,
    *,
    follow_links: bool = False,
    verbose: int = 0,
    extract: str | None = None,
) -> WorkerOptions:
    """Check what a worker needs before any job is claimed: the results file, the bodies'
    folder, the handler (imported here, so a typo is one line and exit 2)."""
    problem = results_problem(results) if results is not None else None
    if problem is not None:
        _die(problem, 2)
    if save_bodies is not None and not save_bodies.is_dir():
        _die(f"--save-bodies {save_bodies}: not a folder", 2)
    fields, problem = extract_fields_of(extract, settings.handler)
    if problem is not None:
        _die(problem, 2)
    if settings.handler is not None:
        from scrapeq.runtime.handlers import import_handler

        import_handler(settings.handler)
    return WorkerOptions(
        concurrency,
        burst,
        max_runtime,
        results,
        follow_links=follow_links,
        save_bodies=str(save_bodies) if save_bodies else None,
        verbose=verbose,
        extract=fields,
    )


def _run_workers(settings: Settings, options: WorkerOptions, processes: int) -> NoReturn:
    url = Context(settings).checked_url()
    if options.burst and _nothing_to_do(settings, url):
        typer.echo(f"scrapeq: queue {settings.queue!r} is empty: nothing to do", err=True)
        raise typer.Exit(0)
    if processes == 1:
        # The last line is the queue's summary: logged by the only process, or by the
        # supervisor once its children are gone.
        one = dataclasses.replace(options, summary=True)
        raise typer.Exit(run_worker_process(settings, url, one, 0))
    from scrapeq.runtime.supervisor import KILL_MARGIN, SUMMARY_MARGIN, supervise

    # Built now, while Redis answers: building a client asks the server whether it is a
    # cluster node, a blocking probe (5 s) that no timer bounds, and at the end Redis may be
    # gone (the children have bounded their exits by then; the summary must not undo that).
    queue = AsyncQueue(async_client(url, settings.cluster), settings=settings)
    kill_after = settings.shutdown_grace + KILL_MARGIN
    code = supervise(run_worker_process, (settings, url, options), processes, kill_after=kill_after)
    asyncio.run(_log_summary(queue, SUMMARY_MARGIN))
    raise typer.Exit(code)


def _nothing_to_do(settings: Settings, url: str) -> bool:
    """No job ready, delayed or in flight: a burst worker would stop at once."""
    q = Queue(sync_client(url, settings.cluster), settings=settings)
    try:
        c = q.counts()
    finally:
        q.close()
    return c["ready"] + c["delayed"] + c["inflight"] == 0


async def _log_summary(queue: AsyncQueue, timeout: float) -> None:
    from scrapeq.runtime.reporter import log_summary

    try:
        await log_summary(queue, timeout=timeout)
    finally:
        await queue.close()


@dataclass(frozen=True)
class WorkerOptions:
    concurrency: int
    burst: bool
    max_runtime: float | None
    results: str | None
    follow_links: bool = False
    save_bodies: str | None = None
    verbose: int = 0
    summary: bool = False  # log the queue's summary at the end (reporter.log_summary)
    metrics_port: int | None = None  # serve /metrics on 127.0.0.1:(port + slot)
    extract: tuple[str, ...] | None = None  # --extract: the built-in handler's fields


def _handler(settings: Settings, options: WorkerOptions) -> Any:
    """The handler a worker process runs: the user's, --extract's, or the default (None)."""
    from scrapeq.runtime.handlers import import_handler

    if settings.handler:
        return import_handler(settings.handler)
    if options.extract:
        from scrapeq.runtime.extract import extractor

        return extractor(options.extract)
    return None


def run_worker_process(settings: Settings, url: str, options: WorkerOptions, slot: int) -> int:
    """Body of one worker process (also the target of supervised children)."""
    if not logging.getLogger("scrapeq").handlers:  # a spawned child starts bare
        setup_logging(options.verbose, settings.log_format)
    from scrapeq.runtime.metrics import WorkerMetrics
    from scrapeq.runtime.reporter import log_summary
    from scrapeq.runtime.sinks import sink_from_url
    from scrapeq.runtime.worker import Worker

    metrics = None
    if options.metrics_port is not None:
        metrics = WorkerMetrics(settings.queue)
        port = options.metrics_port + slot
        try:
            metrics.serve(port)
        except OSError as exc:
            typer.echo(f"scrapeq: error: cannot serve metrics on 127.0.0.1:{port}: "
                       f"{_bind_problem(exc)}", err=True)  # fmt: skip
            return 1
        log.info("worker metrics on http://127.0.0.1:%d/metrics", port)

    async def main() -> int:
        queue = AsyncQueue(async_client(url, settings.cluster), settings=settings)
        sink = sink_from_url(options.results) if options.results else None
        w = Worker(
            queue,
            handler=_handler(settings, options),
            concurrency=options.concurrency,
            sink=sink,
            burst=options.burst,
            max_runtime=options.max_runtime,
            follow_links=options.follow_links,
            save_bodies=options.save_bodies,
            metrics=metrics,
        )
        try:
            await w.run_async()
            if options.summary and not w.redis_down:  # a lost Redis would hold the exit
                await log_summary(queue)
        finally:
            await queue.close()
        return 0

    try:
        return asyncio.run(main())
    finally:
        if metrics is not None:
            metrics.close()


# --- enqueue and status (the rest of the CLI arrives with the CLI work) --------------------------


@app.command()
def enqueue(
    ctx: typer.Context,
    urls: Annotated[list[str] | None, typer.Argument(help="URLs to add.")] = None,
    file: Annotated[
        str | None, typer.Option("--file", help="Read URLs from a file, one a line ('-': stdin).")
    ] = None,
    lane: Annotated[str | None, typer.Option(help="Lane name (default: normal).")] = None,
    delay: Annotated[float, typer.Option(parser=_SECONDS, help="Seconds before eligible.")] = 0.0,
    max_attempts: Annotated[int | None, typer.Option(parser=_COUNT, help="Attempt budget.")] = None,
    unique: Annotated[
        str | None,
        typer.Option(
            "--unique",
            metavar="[=MODE]",
            help="Skip duplicates: pending (bare --unique: skip URLs already pending), seen "
            "(skip URLs ever enqueued with seen, or within recrawl_after), off. "
            "Default: the unique setting.",
        ),
    ] = None,
    payload: Annotated[str | None, typer.Option(help="JSON payload for every job.")] = None,
    expires: Annotated[
        float | None, typer.Option(parser=_SECONDS, help="Unclaimed jobs die after S seconds.")
    ] = None,
    allow_private: AllowPrivate = False,
    no_allow_private: RefusePrivate = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the ids as JSON.")] = False,
    resume_from: Annotated[
        int | None,
        typer.Option(
            "--resume-from",
            metavar="LINE",
            help="Start at this line of --file or --requests (the line a failed run named).",
        ),
    ] = None,
    method: Annotated[
        str | None, typer.Option(help="HTTP method (default GET; POST with a body).")
    ] = None,
    header: Annotated[
        list[str] | None,
        typer.Option("--header", metavar="'NAME: VALUE'", help="A request header (repeatable)."),
    ] = None,
    data: Annotated[
        str | None,
        typer.Option(metavar="@PATH|TEXT", help="Request body: text, or @PATH for a file's bytes."),
    ] = None,
    json_body: Annotated[
        str | None,
        typer.Option(
            "--json-body", metavar="JSON", help="Request body as JSON (--json is output)."
        ),
    ] = None,
    form: Annotated[
        list[str] | None,
        typer.Option("--form", metavar="NAME=VALUE", help="A form field of the body (repeatable)."),
    ] = None,
    cookie: Annotated[
        list[str] | None,
        typer.Option("--cookie", metavar="NAME=VALUE", help="A cookie to send (repeatable)."),
    ] = None,
    meta: Annotated[
        str | None, typer.Option(metavar="JSON", help="Meta for the handler and results line.")
    ] = None,
    requests: Annotated[
        str | None,
        typer.Option(
            "--requests",
            metavar="PATH",
            help="Read requests from a JSONL file, one object a line ('-': stdin).",
        ),
    ] = None,
) -> None:
    """Add jobs; invalid URLs are reported one per line on stderr and not added.

    A run that fails part-way says how many jobs it added and the line to resume from.

    Examples:
      scrapeq enqueue https://shop-43.example.com/p/1 --lane critical
      scrapeq enqueue --file urls.txt --lane bulk --unique
      scrapeq enqueue --file urls.txt --unique=seen --json
      scrapeq enqueue --file urls.txt --unique --resume-from 7001
      scrapeq enqueue https://api.example.com/search --json-body '{"q": "shoes"}'
      scrapeq enqueue --requests requests.jsonl --unique
    """
    settings = _settings(ctx, allow_private=_private(allow_private, no_allow_private))
    flags = RequestFlags(
        method, tuple(header or ()), data, json_body, tuple(form or ()), tuple(cookie or ()), meta
    )
    source = _enqueue_source(urls, file, requests, flags)
    problem = resume_problem(urls, source, resume_from)
    if problem is not None:
        _die(problem, 2)
    template = _template(flags)  # bad flags fail before anything connects
    payload_value = _payload_object(payload)
    if unique is not None and unique not in UNIQUE_MODES:
        _die(f"--unique takes off, pending or seen (--unique=MODE), got {unique!r}", 2)
    q = Context(settings).queue()
    send_once(q.client)
    options: dict[str, Any] = dict(
        lane=lane,
        delay=delay,
        max_attempts=max_attempts,
        payload=payload_value,
        unique=unique,
        expires=expires,
    )
    q.prepare("https://example.com/", **options)  # bad options fail once, before any input
    run = EnqueueRun(q, options, keep_ids=as_json, resume_from=resume_from or 1)
    run.template = template
    mode = unique or settings.unique
    with _input(source) as stream:
        try:
            run.run(_items(urls, stream, requests is not None, run.resume_from), _refused)
        except EnqueueFailed as failed:
            raise typer.Exit(say_failure(failed, mode, as_json=as_json)) from None
    added, skipped, bad = run.added, run.skipped, run.invalid
    if as_json:
        _emit_json(run.summary())
    else:
        line = f"added {added} job{'s' if added != 1 else ''}"
        if mode != "off":
            line += f", skipped {skipped} duplicate{'s' if skipped != 1 else ''}"
        typer.echo(line)
    if bad and not added and not skipped:
        raise typer.Exit(2)


def _enqueue_source(
    urls: list[str] | None, file: str | None, requests: str | None, flags: RequestFlags
) -> str | None:
    """The file ``enqueue`` reads (``--file`` or ``--requests``), after checking the mix."""
    if requests is not None:
        if urls or file is not None or flags.given:
            _die("--requests PATH holds whole requests: give it without URLs, --file or "
                 "request flags", 2)  # fmt: skip
        return requests
    if not urls and file is None:
        _die("give URLs or --file PATH ('-' for stdin), or --requests PATH", 2)
    return file


def _template(flags: RequestFlags) -> Callable[[str], Any] | None:
    """Every URL's request when request flags were given; a bad flag is exit 2."""
    if not flags.given:
        return None
    try:
        return flags.template()
    except ConfigError as exc:
        _die(str(exc), 2)


def _items(urls: list[str] | None, stream: Any, requests: bool, first: int) -> Iterator[Item]:
    if requests:
        return read_requests(stream, first_line=first)
    return read_items(urls or [], stream, first_line=first)


@contextlib.contextmanager
def _input(file: str | None) -> Iterator[Any]:
    """``--file``'s byte stream (``-``: stdin), or None; a missing file is exit 2."""
    if file is None:
        yield None
        return
    try:
        stream = stdin_bytes() if file == "-" else open(file, "rb")  # noqa: SIM115
    except OSError as exc:
        _die(f"cannot read {file}: {exc.strerror}", 2)
    with stream:
        yield stream


def _refused(where: str, exc: Exception) -> None:
    _error_line(f"{where}: {exc}")


def _payload_object(text: str | None) -> dict[str, Any] | None:
    """``--payload``: a JSON object (the handler reads named fields from it), or None."""
    if text is None:
        return None
    try:
        return json_object("--payload", text)
    except ConfigError as exc:
        _die(f"--payload {exc.reason}", 2)


@app.command()
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

    Every job in exactly one place, no id without its job nor job key that
    nothing names, inflight counters equal to the leases, every domain with ready
    jobs reachable, counters equal to the structures. With --repair, stranded
    domains are filed again, counters recounted, orphan job keys filed again (and
    so on), and each fix is printed.

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
    known = _known_queues(q)
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


def _known_queues(q: Queue) -> tuple[list[str], bool] | None:
    """The queues a bounded SCAN finds, and whether it saw every key; None if SCAN failed.

    Failure is tolerated (e.g. an ACL user without SCAN): the hint just names none.
    """
    try:
        return q.known_queues(max_calls=_SCAN_CALLS)
    except RedisUnavailable:
        return None


# --- dead letters ------------------------------------------------------------------------------

dead_app = typer.Typer(help="Inspect, replay and purge dead letters.", no_args_is_help=True)
app.add_typer(dead_app, name="dead")


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


def _domain_arg(domain: str | None) -> str | None:
    """A domain given on the command line: ``host[:port]`` as scrapeq spells it, else a usage
    error (exit 2) naming the spelling meant, if any; None stays None."""
    if domain is None:
        return None
    spelled: set[str] = set()
    for scheme in ("http", "https"):
        with contextlib.suppress(InvalidURL):
            spelled.add(domain_of(f"{scheme}://{domain}/"))
    if domain in spelled:
        return domain
    hint = f"; did you mean {min(spelled)!r}?" if spelled else ""
    _die(f"{domain!r} is not a domain: give host[:port], e.g. shop-43.example.com{hint}", 2)


def _confirm(question: str, refusal: str) -> None:
    """Ask ``question`` on a terminal; without one, stop with ``refusal`` (exit 2)."""
    if not sys.stdin.isatty():
        _die(refusal, 2)
    if not typer.confirm(question, default=False, err=True):  # stdout keeps the result only
        _die("not confirmed: nothing done", 1)


# --- one job ------------------------------------------------------------------------------------

job_app = typer.Typer(
    help="Jobs: list them by state, show where one is, cancel pending ones.", no_args_is_help=True
)
app.add_typer(job_app, name="job")


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
    q = Context(_settings(ctx)).queue()
    info = q.job_info(job_id)
    if info is None:
        _die(_no_job(q, job_id, hint=True), 2)
    if as_json:
        _emit_json(info.as_dict(queue=q.name))
        return
    _console().print(render.job_view(info, q.name))


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


# --- the queues of a Redis -----------------------------------------------------------------------

queue_app = typer.Typer(help="The queues on this Redis: list, clear.", no_args_is_help=True)
app.add_typer(queue_app, name="queue")

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


# --- breakers and domains ----------------------------------------------------------------------


#: ``--state`` of ``domains`` and ``breakers``: a domain's breaker states.
DOMAIN_STATES = ("closed", "open", "half_open", "retired")
_STATE_HELP = f"Only domains in this state ({', '.join(DOMAIN_STATES)}); may be repeated."
_SORT_HELP = f"Order by one of: {', '.join(render.DOMAIN_SORTS)}."
_LIMIT_HELP = "Show at most N domains."


@app.command()
def breakers(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON document on stdout.")] = False,
    state: Annotated[list[str] | None, typer.Option(metavar="STATE", help=_STATE_HELP)] = None,
    sort: Annotated[
        str, typer.Option(metavar="KEY", help=_SORT_HELP + " state: worth a look first.")
    ] = "state",
    limit: Annotated[int | None, typer.Option(parser=_COUNT, metavar="N", help=_LIMIT_HELP)] = None,
) -> None:
    """Every domain's circuit breaker: state, failures, window, trips, cooldown.

    Examples:
      scrapeq breakers --state open --state half_open
      scrapeq breakers --sort failures --limit 20 --json
    """
    _check_listing(state, sort)
    infos = _existing_queue(ctx).domains_info()
    rows = render.pick_domains(infos, states=state, sort=sort, limit=limit)
    if as_json:
        size = ctx.obj.settings.breaker_window
        _emit_json([_breaker_json(d, size) for d in rows])
        return
    _console().print(render.breakers_table(rows, total=len(infos)))


def _check_listing(states: list[str] | None, sort: str) -> None:
    """``--state`` and ``--sort`` of ``domains``/``breakers``: a usage error before any look."""
    for state in states or ():
        if state not in DOMAIN_STATES:
            _die(f"--state takes {', '.join(DOMAIN_STATES)}; got {state!r}", 2)
    if sort not in render.DOMAIN_SORTS:
        _die(f"--sort takes {', '.join(render.DOMAIN_SORTS)}; got {sort!r}", 2)


def _breaker_json(info: dict[str, Any], window_size: int) -> dict[str, Any]:
    """One breaker: its recent window as counts (failures among the last calls recorded)."""
    keys = ("domain", "state", "consecutive_failures")
    out = {k: info[k] for k in keys}
    out["window_failures"] = info["window_failures"]
    out["window_calls"] = info["window_calls"]
    out["window_size"] = window_size
    out["trips"] = info["trips"]
    _time_fields(out, "open_until", info["open_until"])
    return out


def _time_fields(out: dict[str, Any], name: str, ms: int | float | None) -> None:
    """A point in time in JSON: ``name`` ISO 8601 UTC text and ``name_ms`` the integer ms
    since the epoch (both null when unset). docs/INTERFACE.md, "JSON output"."""
    out[name] = ms_to_iso(ms)
    out[f"{name}_ms"] = None if ms is None else int(ms)


breaker_app = typer.Typer(help="Steer one domain's breaker by hand.", no_args_is_help=True)
app.add_typer(breaker_app, name="breaker")


@breaker_app.command("reset")
def breaker_reset(
    ctx: typer.Context, domain: Annotated[str, typer.Argument(help="host[:port]")]
) -> None:
    """Close a domain's breaker (a retired domain is un-retired)."""
    _domain_arg(domain)
    q = Context(_settings(ctx)).queue()
    with _unknown_domain_hint(q):
        state = q.breaker_reset(domain)
    typer.echo(f"{domain}: {state}")


@breaker_app.command("trip")
def breaker_trip(
    ctx: typer.Context,
    domain: Annotated[str, typer.Argument(help="host[:port]")],
    cooldown: Annotated[
        float | None,
        typer.Option(parser=_SECONDS, help="Seconds open (default: the next cooldown)."),
    ] = None,
) -> None:
    """Open a domain's breaker now: its jobs wait, nothing is fetched from it."""
    _domain_arg(domain)
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
    state: Annotated[list[str] | None, typer.Option(metavar="STATE", help=_STATE_HELP)] = None,
    sort: Annotated[str, typer.Option(metavar="KEY", help=_SORT_HELP)] = "name",
    limit: Annotated[int | None, typer.Option(parser=_COUNT, metavar="N", help=_LIMIT_HELP)] = None,
) -> None:
    """Every domain's politeness (delay, concurrency) and counts.

    Examples:
      scrapeq domains --sort ready --limit 10
      scrapeq domains --state retired --json
    """
    _check_listing(state, sort)
    infos = _existing_queue(ctx).domains_info()
    rows = render.pick_domains(infos, states=state, sort=sort, limit=limit)
    if as_json:
        _emit_json([_domain_json(d) for d in rows])
        return
    _console().print(render.domains_table(rows, total=len(infos)))


def _domain_json(info: dict[str, Any]) -> dict[str, Any]:
    keys = ("domain", "state", "ready", "delayed", "inflight", "done", "dead", "enqueued")
    out = {k: info[k] for k in keys}
    out["window_failures"] = info["window_failures"]
    out["window_calls"] = info["window_calls"]
    out["delay"] = info["delay_ms"] / 1000
    out["delay_ms"] = int(info["delay_ms"])
    out["concurrency"] = info["concurrency"]
    out["adaptive"] = info["adaptive"]
    limit = info["limit"]
    out["limit"] = round(limit, 2) if isinstance(limit, float) else limit
    out.update(learned_timing(info))
    return out


domain_app = typer.Typer(help="Per-domain politeness overrides.", no_args_is_help=True)
app.add_typer(domain_app, name="domain")


@domain_app.command("set")
def domain_set(
    ctx: typer.Context,
    domain: Annotated[str, typer.Argument(help="host[:port]")],
    delay: Annotated[
        float | None, typer.Option(parser=_SECONDS, help="Minimum seconds between request starts.")
    ] = None,
    concurrency: Annotated[
        str | None,
        typer.Option(
            parser=concurrency_option,
            help="Jobs in flight at once: a number, or auto (learned).",
        ),
    ] = None,
) -> None:
    """Set a domain's politeness overrides.

    Examples:
      scrapeq domain set shop-43.example.com --delay 2 --concurrency 1
      scrapeq domain set shop-43.example.com --concurrency auto
    """
    _domain_arg(domain)
    if delay is None and concurrency is None:
        _die("give --delay and/or --concurrency", 2)
    q = Context(_settings(ctx)).queue()
    conc = int(concurrency) if concurrency not in (None, "auto") else concurrency
    got = q.domain_set(domain, delay=delay, concurrency=conc)
    limit = f"auto (now {got['concurrency']})" if got["adaptive"] else str(got["concurrency"])
    typer.echo(f"{domain}: delay {got['delay']:g}s, concurrency {limit}")


# --- demo and dashboard ------------------------------------------------------------------------


@app.command()
def demo(
    ctx: typer.Context,
    duration: Annotated[
        float, typer.Option(parser=seconds_option(1), help="Seconds the scrapeq phase runs.")
    ] = 60,
) -> None:
    """Replay the one-hanging-site incident on a local fleet and report.

    The report sets it beside a naive retry loop run against the same fleet.
    Without --redis the demo runs its own Redis in a temporary folder and stops it
    at the end: your embedded server (data_dir) is neither used nor started.

    Examples:
      scrapeq demo --duration 30
    """
    from scrapeq.demo.scenario import render_report, run_demo

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
    from scrapeq.engine.embedded import private_server

    with private_server() as url:
        yield url


@app.command()
def dashboard(
    ctx: typer.Context,
    host: Annotated[str, typer.Option(help="Address to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port to bind.")] = 8000,
    token: Annotated[
        str | None,
        typer.Option(
            envvar="SCRAPEQ_DASHBOARD_TOKEN",
            help="Required on every request (16+ characters); required off loopback.",
            show_default=False,
        ),
    ] = None,
    allowed_host: Annotated[
        list[str] | None,
        typer.Option(help="Another name the Host header may carry (a proxy's); repeatable."),
    ] = None,
    read_only: Annotated[
        bool, typer.Option("--read-only", help="Hide and refuse every action.")
    ] = False,
) -> None:
    """Serve the web dashboard and /metrics (Prometheus text format).

    Examples:
      scrapeq dashboard --port 8000
      export SCRAPEQ_DASHBOARD_TOKEN=$(openssl rand -hex 16)
      scrapeq dashboard --host 0.0.0.0 --allowed-host dash.example.com --read-only
    """
    from scrapeq.interfaces.web import check_token, serve

    try:
        check_token(token, host)
    except ConfigError as exc:
        _die(f"--{exc.name}: {str(exc).partition(': ')[2]}", 2)
    context = Context(_settings(ctx))
    context.checked_url()
    listening = False

    def ready(base: str) -> None:
        nonlocal listening
        listening = True
        note = " read-only," if read_only else ""
        auth = " token required" if token else " loopback only"
        typer.echo(f"dashboard on {base}/ ({note}{auth}; metrics: /metrics)", err=True)

    try:
        serve(
            context.async_queue,
            host=host,
            port=port,
            on_ready=ready,
            token=token,
            allowed_hosts=allowed_host or (),
            read_only=read_only,
        )
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
    from scrapeq.engine.embedded import server_info

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

    Stopping a server that does not run is no error. The next command that needs
    Redis (without --redis) starts it again, with its data.

    Examples:
      scrapeq server stop
    """
    from scrapeq.engine.embedded import server_info, stop_server

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

    Usage errors and the library's errors become one line on stderr. A command that fails
    (1 or 2) stops the embedded Redis it started: a first command with a typo leaves nothing
    running.
    """
    from scrapeq.engine.embedded import started_servers

    before = len(started_servers())
    code = _main(sys.argv[1:] if argv is None else list(argv))
    if code in (1, 2):
        _stop_started(started_servers()[before:])
    return code


def _stop_started(data_dirs: tuple[Path, ...]) -> None:
    """Stop the embedded servers this failed command started (SHUTDOWN SAVE: nothing lost)."""
    from scrapeq.engine.embedded import stop_server

    for data_dir in dict.fromkeys(data_dirs):
        try:
            if stop_server(data_dir):
                log.info("stopped the embedded Redis this command started in %s: the command "
                         "failed", data_dir)  # fmt: skip
        except ScrapeqError as exc:
            log.warning("the embedded Redis this command started in %s keeps running: %s",
                        data_dir, exc)  # fmt: skip


def _main(argv: list[str]) -> int:
    args = _bare_unique(argv)
    try:
        rv = command().main(args=args, prog_name="scrapeq", standalone_mode=False)
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


@functools.cache
def command() -> Any:
    """The app as a click command, its flags tidied for ``--help``: a flag (``--json``,
    ``--burst``, ``-v``, ``--help``) takes no value, so it shows no ``<bool>``/``<int>``.
    Built once per process (typer takes tens of ms to build it)."""
    root = typer.main.get_command(app)
    _hide_flag_types(root)
    return root


def _hide_flag_types(cmd: Any) -> None:
    params = list(getattr(cmd, "params", []))
    help_option = getattr(cmd, "get_help_option", None)
    if callable(help_option):
        params.append(help_option(typer.Context(cmd)))
    for param in params:
        if getattr(param, "is_flag", False) or getattr(param, "count", False):
            param.metavar = ""
    for child in getattr(cmd, "commands", {}).values():
        _hide_flag_types(child)


def _bare_unique(argv: list[str]) -> list[str]:
    """``enqueue --unique`` without ``=MODE`` is ``--unique=pending`` (typer options have no
    optional values); ``--unique MODE`` with a mode name is left as it is."""
    if "enqueue" not in argv:
        return argv
    start = argv.index("enqueue") + 1
    out = argv[:start]
    for i, arg in enumerate(argv[start:], start):
        if arg == "--":
            return out + argv[i:]
        bare = arg == "--unique" and (i + 1 == len(argv) or argv[i + 1] not in UNIQUE_MODES)
        out.append("--unique=pending" if bare else arg)
    return out


def _fail(message: str, code: int) -> int:
    _error_line(f"scrapeq: error: {message}")
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
