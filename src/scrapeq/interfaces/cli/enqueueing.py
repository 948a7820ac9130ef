"""``enqueue``: URLs, a file of URLs or a file of requests into the queue."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Annotated, Any

import typer

from scrapeq.engine.config.settings import UNIQUE_MODES, Settings
from scrapeq.engine.model.urls import parse_target
from scrapeq.errors import ConfigError, InvalidURL
from scrapeq.interfaces.cli.common import (
    _COUNT,
    _SECONDS,
    AllowPrivate,
    Context,
    FetcherOpt,
    RefusePrivate,
    _die,
    _emit_json,
    _error_line,
    _fetcher_name,
    _private,
    _settings,
)
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
from scrapeq.interfaces.parsing import json_object

if TYPE_CHECKING:  # the engine's queue is imported when a command runs (see common)
    from scrapeq.engine.queue import Queue
    from scrapeq.runtime.sitemaps import Problem

# The options of enqueue (typer reads them from its signature).
Urls = Annotated[list[str] | None, typer.Argument(help="URLs to add.")]
File = Annotated[
    str | None, typer.Option("--file", help="Read URLs from a file, one a line ('-': stdin).")
]
Lane = Annotated[str | None, typer.Option(help="Lane name (default: normal).")]
Delay = Annotated[float, typer.Option(parser=_SECONDS, help="Seconds before eligible.")]
MaxAttempts = Annotated[int | None, typer.Option(parser=_COUNT, help="Attempt budget.")]
Unique = Annotated[
    str | None,
    typer.Option(
        "--unique",
        metavar="[=MODE]",
        help="Skip duplicates: pending (bare --unique: skip URLs already pending), seen "
        "(skip URLs ever enqueued with seen, or within recrawl_after), off. "
        "Default: the unique setting.",
    ),
]
Payload = Annotated[str | None, typer.Option(help="JSON payload for every job.")]
Expires = Annotated[
    float | None, typer.Option(parser=_SECONDS, help="Unclaimed jobs die after S seconds.")
]
AsJson = Annotated[bool, typer.Option("--json", help="Print the ids as JSON.")]
ResumeFrom = Annotated[
    int | None,
    typer.Option(
        "--resume-from",
        metavar="LINE",
        help="Start at this line of --file or --requests (the line a failed run named).",
    ),
]
Method = Annotated[str | None, typer.Option(help="HTTP method (default GET; POST with a body).")]
Header = Annotated[
    list[str] | None,
    typer.Option("--header", metavar="'NAME: VALUE'", help="A request header (repeatable)."),
]
Data = Annotated[
    str | None,
    typer.Option(metavar="@PATH|TEXT", help="Request body: text, or @PATH for a file's bytes."),
]
JsonBody = Annotated[
    str | None,
    typer.Option("--json-body", metavar="JSON", help="Request body as JSON (--json is output)."),
]
Form = Annotated[
    list[str] | None,
    typer.Option("--form", metavar="NAME=VALUE", help="A form field of the body (repeatable)."),
]
Cookie = Annotated[
    list[str] | None,
    typer.Option("--cookie", metavar="NAME=VALUE", help="A cookie to send (repeatable)."),
]
Meta = Annotated[
    str | None, typer.Option(metavar="JSON", help="Meta for the handler and results line.")
]
SitemapOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--sitemap",
        metavar="URL",
        help="Enqueue the pages of a sitemap (urlset, index, gzip; repeatable).",
    ),
]
Requests = Annotated[
    str | None,
    typer.Option(
        "--requests",
        metavar="PATH",
        help="Read requests from a JSONL file, one object a line ('-': stdin).",
    ),
]


def enqueue(
    ctx: typer.Context, urls: Urls = None, file: File = None, lane: Lane = None,
    delay: Delay = 0.0, max_attempts: MaxAttempts = None, unique: Unique = None,
    payload: Payload = None, expires: Expires = None, allow_private: AllowPrivate = False,
    no_allow_private: RefusePrivate = False, as_json: AsJson = False,
    resume_from: ResumeFrom = None, method: Method = None, header: Header = None,
    data: Data = None, json_body: JsonBody = None, form: Form = None, cookie: Cookie = None,
    meta: Meta = None, requests: Requests = None, sitemap: SitemapOpt = None,
    fetcher: FetcherOpt = None,
) -> None:  # fmt: skip
    """Add jobs; invalid URLs are reported one per line on stderr and not added.

    A refused URL argument fails the command (exit 2): nothing is added.
    A refused line of --file is skipped. A run that fails part-way says how
    many jobs it added and the line to resume from.

    Examples:
      scrapeq enqueue https://shop-43.example.com/p/1 --lane critical
      scrapeq enqueue --file urls.txt --lane bulk --unique
      scrapeq enqueue --file urls.txt --unique=seen --json
      scrapeq enqueue --file urls.txt --unique --resume-from 7001
      scrapeq enqueue https://api.example.com/search --json-body '{"q": "shoes"}'
      scrapeq enqueue --requests requests.jsonl --unique
      scrapeq enqueue --sitemap https://shop.example.com/sitemap.xml --unique
      scrapeq enqueue https://shop.example.com/ --fetcher impersonate
      scrapeq enqueue https://shop.example.com/grid --fetcher browser
    """
    settings = _settings(ctx, allow_private=_private(allow_private, no_allow_private))
    fetcher = _fetcher_name(fetcher)
    flags = RequestFlags(
        method, tuple(header or ()), data, json_body, tuple(form or ()), tuple(cookie or ()), meta
    )
    if sitemap:
        if urls or file is not None or requests is not None or flags.given or resume_from:
            _die("--sitemap URL reads its pages from the sitemap: give it without URLs, "
                 "--file, --requests, --resume-from or request flags", 2)  # fmt: skip
        jobs: dict[str, Any] = dict(
            lane=lane, delay=delay, max_attempts=max_attempts, payload=_payload_object(payload),
            unique=_unique_mode(unique), expires=expires, fetcher=fetcher,
        )  # fmt: skip
        _enqueue_sitemaps(settings, sitemap, jobs, as_json)
        return
    source = _enqueue_source(urls, file, requests, flags)
    problem = resume_problem(urls, source, resume_from)
    if problem is not None:
        _die(problem, 2)
    template = _template(flags)  # bad flags fail before anything connects
    payload_value = _payload_object(payload)
    _unique_mode(unique)
    options: dict[str, Any] = dict(
        lane=lane, delay=delay, max_attempts=max_attempts, payload=payload_value, unique=unique,
        expires=expires, fetcher=fetcher,
    )  # fmt: skip
    _enqueue_input(settings, options, template, urls, source, requests is not None,
                   as_json, resume_from)  # fmt: skip


def _enqueue_input(
    settings: Settings, options: dict[str, Any], template: Callable[[str], Any] | None,
    urls: list[str] | None, source: str | None, requests: bool, as_json: bool,
    resume_from: int | None,
) -> None:  # fmt: skip
    """Send the URL arguments (all checked first), then the file's lines, in batches."""
    q = Context(settings).queue()
    run = _new_run(q, options, template, as_json, resume_from)
    if urls:
        _check_arguments(q, urls, template, options)
    mode = options["unique"] or settings.unique
    with _input(source) as stream:
        try:
            run.run(_items(urls, stream, requests, run.resume_from), _refused)
        except EnqueueFailed as failed:
            raise typer.Exit(say_failure(failed, mode, as_json=as_json)) from None
    _report(run, mode, as_json)


def _check_arguments(
    q: Queue, urls: list[str], template: Callable[[str], Any] | None, options: dict[str, Any]
) -> None:
    """Every URL argument checked before anything is sent: one refused fails the command
    (exit 2, nothing enqueued), with a line for each. (A ``--file`` is read in batches:
    its bad lines are reported and skipped, and the run says where to resume.)"""
    refused = 0
    for i, url in enumerate(urls, 1):
        try:
            q.prepare(template(url) if template is not None else url, **options)
        except (InvalidURL, ConfigError) as exc:  # InvalidRequest is a ConfigError
            refused += 1
            hint = ""
            if url.lstrip().startswith(("{", "[")):
                hint = " (a JSON body? give it with --json-body; --json prints the ids as JSON)"
            _error_line(f"argument {i}: {exc}{hint}")
    if refused == len(urls):
        raise typer.Exit(2)
    if refused:
        _die(f"{refused} of {len(urls)} URL arguments refused: nothing was enqueued", 2)


def _unique_mode(unique: str | None) -> str | None:
    """``--unique``'s mode, checked (exit 2 for an unknown one)."""
    if unique is not None and unique not in UNIQUE_MODES:
        _die(f"--unique takes off, pending or seen (--unique=MODE), got {unique!r}", 2)
    return unique


def _enqueue_sitemaps(
    settings: Settings, urls: list[str], options: dict[str, Any], as_json: bool
) -> None:
    """``--sitemap``: each sitemap's pages (and its index's sitemaps') into the queue; one
    summary line, each refused or cut sitemap on a line of stderr."""
    # the fetcher (aiohttp) is loaded for the sitemaps only: other commands start without it
    import asyncio

    from scrapeq.interfaces.enqueue_sitemaps import (
        SitemapFailed,
        SitemapRun,
        exit_code,
        read_sitemaps,
        summary,
        summary_line,
    )
    from scrapeq.runtime.sitemaps import Source

    sources = []
    for url in urls:
        try:
            parse_target(url, allow_private=True)  # the fetch checks private addresses
        except InvalidURL as exc:
            _die(f"--sitemap {exc}", 2)
        sources.append(Source(url))
    q = Context(settings).queue()
    send_once(q.client)
    q.prepare("https://example.com/", **options)  # bad options fail before any fetch
    run = SitemapRun(q, options, _sitemap_refused, keep_ids=as_json)
    try:
        tally = asyncio.run(read_sitemaps(run, settings, sources, _sitemap_problem))
    except SitemapFailed as exc:
        _die(str(exc), 1)
    if as_json:
        _emit_json(summary(tally, run))
    else:
        typer.echo(summary_line(tally, run, options["unique"] or settings.unique))
    code = exit_code(tally)
    if code:
        raise typer.Exit(code)


def _sitemap_problem(problem: Problem) -> None:
    _error_line(f"scrapeq: {problem.level}: {problem.line()}")


def _sitemap_refused(line: str) -> None:
    _error_line(f"scrapeq: invalid URL skipped: {line}")


def _new_run(
    q: Queue,
    options: dict[str, Any],
    template: Callable[[str], Any] | None,
    as_json: bool,
    resume_from: int | None,
) -> EnqueueRun:
    """The run that sends the input; bad options fail here once, before any input is read."""
    send_once(q.client)
    q.prepare("https://example.com/", **options)
    run = EnqueueRun(q, options, keep_ids=as_json, resume_from=resume_from or 1)
    run.template = template
    return run


def _report(run: EnqueueRun, mode: str, as_json: bool) -> None:
    """What a finished run added and skipped; exit 2 when its input held nothing valid."""
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
