"""``worker`` and ``crawl``: their options, the checks before a job is claimed, and the body
of one worker process (also the target of supervised children)."""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from scrapeq.engine.config.settings import Settings
from scrapeq.engine.model.exits import ExitPool, read_pool_file
from scrapeq.errors import ConfigError
from scrapeq.interfaces.cli.common import (
    _COUNT,
    _SECONDS,
    AllowPrivate,
    Context,
    FetcherOpt,
    RefusePrivate,
    _bind_problem,
    _confirm,
    _die,
    _error_line,
    _fetcher_name,
    _private,
    _settings,
    log,
    setup_logging,
)
from scrapeq.interfaces.crawl_new import NEW_HELP, new_crawl_line, nothing_to_do_line
from scrapeq.interfaces.parsing import count_option
from scrapeq.interfaces.results_opt import (
    EXTRACT_HELP,
    RESULTS_HELP,
    extract_fields_of,
    results_problem,
    results_sink,
)

if TYPE_CHECKING:  # the engine's queue is imported when a command runs (see common)
    from scrapeq.engine.queue import AsyncQueue, Queue


def _duration(help_text: str) -> Any:
    """A duration option in seconds (>= 0, bounded: ``parsing.seconds_option``)."""
    return typer.Option(parser=_SECONDS, help=help_text)


# The options of worker and crawl, declared once: typer reads them from the signatures.
Concurrency = Annotated[int, typer.Option(parser=_COUNT, help="Fetches at once per process.")]
Processes = Annotated[int, typer.Option(parser=_COUNT, help="Worker processes.")]
Results = Annotated[str | None, typer.Option(metavar="PATH|URL", help=RESULTS_HELP)]
Extract = Annotated[list[str] | None, typer.Option(metavar="FIELDS", help=EXTRACT_HELP)]
SaveBodies = Annotated[
    Path | None, typer.Option(help="Store each body in DIR/ab/abcdef... (its SHA-256).")
]
LogEvery = Annotated[
    float | None, _duration("Seconds between queue progress lines (default 10; 0: none).")
]
Burst = Annotated[bool, typer.Option("--burst", help="Exit 0 once every job is done or dead.")]
MaxRuntime = Annotated[float | None, _duration("Stop gracefully after S seconds.")]
HandlerTimeout = Annotated[float | None, _duration("Seconds a handler may run (default 60).")]
MaxJobTime = Annotated[
    float | None, _duration("Seconds a job may be held before its attempt is given up (600).")
]
WorkerHandler = Annotated[
    str | None,
    typer.Option(help="Your handler, package.module:function (default: page metadata)."),
]
RequestTimeout = Annotated[
    float | None, _duration("Total seconds of one fetch, body included (30).")
]
Lease = Annotated[float | None, _duration("Seconds of a job's lease; heartbeats renew it (60).")]
DomainConcurrency = Annotated[
    str | None,
    typer.Option(help="Jobs in flight per domain: a number, or auto (learned; default)."),
]
DomainDelay = Annotated[float | None, _duration("Seconds between request starts per domain (0).")]
LogFormat = Annotated[
    str | None,
    typer.Option(help="Log lines as 'text' (default) or 'json' (one object a line)."),
]
MetricsPort = Annotated[
    int | None,
    typer.Option(
        min=1,
        max=65535,
        help="Serve this process's /metrics on 127.0.0.1:PORT (process i: PORT+i).",
    ),
]
Seeds = Annotated[list[str], typer.Argument(help="Seed URLs.", show_default=False)]
Scope = Annotated[str | None, typer.Option(help="Links followed: host (default), domain or any.")]
MaxDepth = Annotated[
    int | None,
    typer.Option(parser=count_option(0), help="Links followed from a seed, at most."),
]
MaxPages = Annotated[int | None, typer.Option(parser=_COUNT, help="Pages per domain, at most.")]
CrawlHandler = Annotated[str | None, typer.Option(help="Your handler, package.module:function.")]
New = Annotated[bool, typer.Option("--new", "--fresh", help=NEW_HELP)]
Yes = Annotated[bool, typer.Option("--yes", help="Do not ask for a confirmation.")]
Sitemaps = Annotated[
    bool,
    typer.Option(
        "--sitemaps", help="Also enqueue the pages of the sitemaps each seed's robots.txt lists."
    ),
]


def worker(
    ctx: typer.Context, concurrency: Concurrency = 100, processes: Processes = 1,
    burst: Burst = False, max_runtime: MaxRuntime = None, results: Results = None,
    allow_private: AllowPrivate = False, no_allow_private: RefusePrivate = False,
    handler_timeout: HandlerTimeout = None, max_job_time: MaxJobTime = None,
    handler: WorkerHandler = None, extract: Extract = None, save_bodies: SaveBodies = None,
    request_timeout: RequestTimeout = None, lease: Lease = None,
    domain_concurrency: DomainConcurrency = None, domain_delay: DomainDelay = None,
    log_format: LogFormat = None, log_every: LogEvery = None, metrics_port: MetricsPort = None,
    fetcher: FetcherOpt = None,
) -> None:  # fmt: skip
    """Run workers: claim, fetch, classify and settle jobs until stopped.

    Examples:
      scrapeq worker --concurrency 200 --results results.jsonl
      scrapeq worker --processes 4 --burst --handler myproject.parse:product
      scrapeq worker --fetcher impersonate  # a browser's TLS handshake
      scrapeq worker --fetcher browser --burst  # rendered pages (chromium)
    """
    settings = _settings(
        ctx, allow_private=_private(allow_private, no_allow_private),
        fetcher=_fetcher_name(fetcher),
        handler_timeout=handler_timeout, max_job_time=max_job_time, handler=handler,
        log_format=log_format, log_every=log_every, request_timeout=request_timeout,
        lease=lease, domain_concurrency=domain_concurrency, domain_delay=domain_delay,
    )  # fmt: skip
    root: Context = ctx.obj
    if log_format is not None:
        setup_logging(root.verbose, settings.log_format)
    options = _worker_options(
        settings, concurrency, burst, max_runtime, results, save_bodies, verbose=root.verbose,
        extract=extract,
    )  # fmt: skip
    if metrics_port is not None:
        options = _with_metrics_port(options, metrics_port, processes)
    _run_workers(settings, options, processes)


def _with_metrics_port(options: WorkerOptions, port: int, processes: int) -> WorkerOptions:
    """``--metrics-port``: process i serves on ``port + i``, so the last port must exist."""
    if port + processes - 1 > 65535:
        _die(f"--metrics-port {port}: ports up to {port + processes - 1}", 2)
    return dataclasses.replace(options, metrics_port=port)


def crawl(
    ctx: typer.Context, urls: Seeds, scope: Scope = None, max_depth: MaxDepth = None,
    max_pages: MaxPages = None, results: Results = None, handler: CrawlHandler = None,
    extract: Extract = None, concurrency: Concurrency = 100, processes: Processes = 1,
    save_bodies: SaveBodies = None, allow_private: AllowPrivate = False,
    no_allow_private: RefusePrivate = False, log_every: LogEvery = None, new: New = False,
    yes: Yes = False, sitemaps: Sitemaps = False, fetcher: FetcherOpt = None,
) -> None:  # fmt: skip
    """Crawl from the seeds: follow links in scope until none is left, then exit 0.

    Every page is fetched once (the seen-set), its links resolved, canonicalised,
    kept in scope and enqueued with the page's settlement. Stops like
    `worker --burst`. Obeys robots.txt unless respect_robots is set false
    (SCRAPEQ_RESPECT_ROBOTS=false).

    Examples:
      scrapeq crawl https://shop.example.com/ --max-depth 3 --results p.jsonl
      scrapeq crawl https://example.com/ --scope domain --handler my.parse:page
      scrapeq crawl https://shop.example.com/ --new --yes  # from the start
      scrapeq crawl https://shop.example.com/ --sitemaps
    """
    root: Context = ctx.obj
    # a crawl obeys robots.txt by default, as Scrapy's project template does
    settings = root.with_defaults(respect_robots=True).replace(**_given(
        allow_private=_private(allow_private, no_allow_private), handler=handler,
        scope=scope, max_depth=max_depth, max_pages=max_pages, log_every=log_every,
        fetcher=_fetcher_name(fetcher),
    ))  # fmt: skip
    options = _worker_options(
        settings, concurrency, True, None, results, save_bodies, follow_links=True,
        verbose=ctx.obj.verbose, extract=extract,
    )  # fmt: skip
    _seed(settings, urls, new=new, yes=yes, sitemaps=sitemaps)
    _run_workers(settings, options, processes)


def _given(**flags: Any) -> dict[str, Any]:
    return {name: value for name, value in flags.items() if value is not None}


def _seed(settings: Settings, urls: list[str], *, new: bool, yes: bool, sitemaps: bool) -> None:
    """Enqueue the crawl's seeds (with ``--new``, after forgetting what was seen) and, with
    ``--sitemaps``, the pages of their robots.txt's sitemaps; exit 0 when there is nothing to
    crawl."""
    q = Context(settings).queue()
    if new:
        if not yes:
            refusal = f"refusing to start a new crawl of queue {q.name!r} without --yes"
            _confirm(f"forget what queue {q.name!r} has seen and crawl again?", refusal)
        typer.echo(new_crawl_line(q.name, q.new_crawl()), err=True)
    seeds = q.enqueue_many(urls, unique="seen")
    added = sum(r.added for r in seeds)
    typer.echo(f"crawl: {added} seeds enqueued ({len(seeds) - added} seen before)", err=True)
    if sitemaps:
        added += _seed_sitemaps(settings, q, urls)
    if not added and _nothing_to_do(settings, Context(settings).checked_url()):
        typer.echo(nothing_to_do_line(len(seeds), len(seeds) - added), err=True)
        raise typer.Exit(0)


def _seed_sitemaps(settings: Settings, q: Queue, seeds: list[str]) -> int:
    """``--sitemaps``: the pages of the sitemaps the seeds' robots.txt files list, enqueued as
    seeds are (``unique=seen``); a sitemap that cannot be read is a warning, not the end of the
    crawl. Answers the jobs added."""
    import asyncio

    from scrapeq.interfaces.enqueue_sitemaps import (
        SitemapRun,
        read_robots_sitemaps,
        summary_line,
    )
    from scrapeq.runtime.sitemaps import Problem

    def problem(p: Problem) -> None:
        _error_line(f"crawl: warning: {p.line()}")

    def refused(line: str) -> None:
        _error_line(f"crawl: warning: invalid URL skipped: {line}")

    run = SitemapRun(q, {"unique": "seen"}, refused)
    tally = asyncio.run(read_robots_sitemaps(run, settings, seeds, problem))
    if not tally.files and not tally.problems:
        typer.echo("crawl: sitemaps: the seeds' robots.txt files list none", err=True)
    else:
        typer.echo(f"crawl: sitemaps: {summary_line(tally, run, 'seen')}", err=True)
    return run.added


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
    extract: list[str] | None = None,
) -> WorkerOptions:
    """Check what a worker needs before any job is claimed: the results file, the bodies'
    folder, the handler (imported here, so a typo is one line and exit 2)."""
    fields, problem = extract_fields_of(extract, settings.handler)
    if problem is not None:
        _die(problem, 2)
    problem = results_problem(results, fields) if results is not None else None
    if problem is not None:
        _die(problem, 2)
    if settings.fetcher != "http":  # one line naming the extra, before any claim
        from scrapeq.runtime.browser_pool import require_fetcher

        try:
            require_fetcher(settings)
        except ConfigError as exc:
            _die(str(exc), 2)
    if save_bodies is not None and not save_bodies.is_dir():
        _die(f"--save-bodies {save_bodies}: not a folder", 2)
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
    if options.burst and _nothing_to_do(settings, url, options.results is not None):
        typer.echo(f"scrapeq: queue {settings.queue!r} is empty: nothing to do", err=True)
        raise typer.Exit(0)
    if processes == 1:
        # The last line is the queue's summary: logged by the only process, or by the
        # supervisor once its children are gone.
        one = dataclasses.replace(options, summary=True)
        raise typer.Exit(run_worker_process(settings, url, one, 0))
    import asyncio  # asyncio and the engine here, not with the module: see common

    from scrapeq.engine.facades.async_queue import AsyncQueue
    from scrapeq.engine.server.connection import async_client
    from scrapeq.runtime.supervisor import KILL_MARGIN, SUMMARY_MARGIN, supervise

    # Built now, while Redis answers: building a client asks the server whether it is a
    # cluster node, a blocking probe (5 s) that no timer bounds, and at the end Redis may be
    # gone (the children have bounded their exits by then; the summary must not undo that).
    queue = AsyncQueue(async_client(url, settings.cluster), settings=settings)
    kill_after = settings.shutdown_grace + KILL_MARGIN
    keeper = PoolKeeper(settings)
    code = supervise(
        run_worker_process, (settings, url, options), processes, kill_after=kill_after,
        refresh=lambda: (keeper.settings(), url, options),
    )  # fmt: skip
    asyncio.run(_log_summary(queue, SUMMARY_MARGIN))
    raise typer.Exit(code)


class PoolKeeper:
    """The settings each supervised child starts with: the proxy file read again before each
    start (so a pool rewritten well is taken up by the next child), its entries handed to the
    child as ``proxy`` (the child reads no file); when the file no longer reads as a pool (a
    half-written or garbled file), the last pool read well, said in one line once per problem
    (issue 38 item 12: each successor died at start with a traceback, every 1-5 s)."""

    def __init__(self, settings: Settings) -> None:
        self._base = settings
        self._good = self._resolved()  # read well at start: the CLI checked it already
        self._said: str | None = None

    def _resolved(self) -> Settings:
        s = self._base
        if s.proxy_file is None:
            return s
        entries = read_pool_file(Path(s.proxy_file))
        pool = ExitPool.build([(t, "") for t in s.proxy] + entries, s.proxy_tiers,
                              setting="proxy_file")  # fmt: skip
        del pool  # checked: the same entries make the same pool in the child
        return s.replace(proxy=(*s.proxy, *(text for text, _ in entries)), proxy_file=None)

    def settings(self) -> Settings:
        """The settings of the next child to start."""
        try:
            self._good = self._resolved()
        except ConfigError as exc:
            problem = str(exc)
            if problem != self._said:
                self._said = problem
                log.warning("%s; worker processes started from now on keep the last good pool "
                            "(%d exits) until it reads well again", problem,
                            len(self._good.proxy))  # fmt: skip
            return self._good
        if self._said is not None:
            self._said = None
            log.info("proxy_file %s reads well again: new worker processes use it",
                     self._base.proxy_file)  # fmt: skip
        return self._good


def _nothing_to_do(settings: Settings, url: str, results: bool = False) -> bool:
    """No job ready, delayed or in flight (and, with ``results``, no results line owed to a
    sink): a burst worker would stop at once."""
    from scrapeq.engine.facades.sync_queue import Queue
    from scrapeq.engine.server.connection import sync_client

    q = Queue(sync_client(url, settings.cluster), settings=settings)
    try:
        c = q.counts()
        if c["ready"] + c["delayed"] + c["inflight"] > 0:
            return False
        return not results or q.owed_count() == 0
    finally:
        q.close()


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

    import asyncio

    from scrapeq.engine.facades.async_queue import AsyncQueue
    from scrapeq.engine.server.connection import async_client

    async def main() -> int:
        queue = AsyncQueue(async_client(url, settings.cluster), settings=settings)
        sink = results_sink(options.results, options.extract) if options.results else None
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
