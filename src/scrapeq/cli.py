"""The ``scrapeq`` command line: thin, it parses, calls the library and renders.

Exit codes: 0 success, 2 bad usage or bad input (one line on stderr), 1 any other error.
No traceback for user errors.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer

from .connection import async_client, check_reachable, resolve_url, sync_client
from .errors import ConfigError, InvalidURL, NotFound, ScrapeqError
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
    """What the global options decided: the settings in force."""

    settings: Settings

    def redis_url(self) -> str:
        return resolve_url(self.settings.redis_url, self.settings.data_dir)

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


def setup_logging(verbose: int) -> None:
    """Structured one-line logs on stderr; per-job lines only with ``-v``."""
    level = logging.DEBUG if verbose > 0 else logging.INFO
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s", "%Y-%m-%dT%H:%M:%S")
    )
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
    setup_logging(verbose)
    ctx.obj = Context(settings)


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
) -> None:
    """Run workers: claim, fetch, classify and settle jobs until stopped.

    Examples:
      scrapeq worker --concurrency 200 --results results.jsonl
      scrapeq worker --processes 4 --burst
    """
    settings = _settings(ctx, allow_private=allow_private)
    options = WorkerOptions(concurrency, burst, max_runtime, str(results) if results else None)
    url = Context(settings).redis_url()
    check_reachable(sync_client(url), url)
    if processes == 1:
        raise typer.Exit(run_worker_process(settings, url, options, 0))
    from .supervisor import supervise

    raise typer.Exit(supervise(run_worker_process, (settings, url, options), processes))


@dataclass(frozen=True)
class WorkerOptions:
    concurrency: int
    burst: bool
    max_runtime: float | None
    results: str | None


def run_worker_process(settings: Settings, url: str, options: WorkerOptions, slot: int) -> int:
    """Body of one worker process (also the target of supervised children)."""
    if slot and not logging.getLogger("scrapeq").handlers:
        setup_logging(0)
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
    added, ids, bad = _enqueue_stream(q, _url_lines(urls or [], file), options)
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


def _enqueue_stream(q: Queue, lines: Any, options: dict[str, Any]) -> tuple[int, list[str], int]:
    batch: list[Any] = []
    added, ids, bad = 0, [], 0

    def flush() -> None:
        nonlocal added
        for r in q.enqueue_many(batch):
            if r.added:
                added += 1
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
) -> None:
    """Counts, lanes, domains and alarms of the queue."""
    q = Context(_settings(ctx)).queue()
    data = q.status()
    if as_json:
        _emit_json(data)
        return
    c = data["counts"]
    typer.echo(
        f"queue {data['queue']}: ready {c['ready']}  delayed {c['delayed']}  "
        f"inflight {c['inflight']}  done {c['done']}  dead {c['dead']}  "
        f"(enqueued {c['enqueued']})"
    )
    for lane, info in data["lanes"].items():
        typer.echo(
            f"  lane {lane}: ready {info['ready']}  delayed {info['delayed']}  "
            f"oldest {info['oldest_ready_age']:.1f}s"
        )
    for alarm in data["alarms"]:
        typer.echo(f"  ALARM {alarm['kind']} {alarm['domain']}: {alarm['message']}")


# --- entry point -------------------------------------------------------------------------------

_USER_ERRORS = (ConfigError, InvalidURL, NotFound)


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; answers the exit code (0, 1 or 2). Never a traceback for user errors.

    typer handles usage errors itself (exit 2 with its message); the library's errors are
    turned into one line on stderr here.
    """
    try:
        app(args=argv, prog_name="scrapeq")
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except _USER_ERRORS as exc:
        typer.echo(f"scrapeq: error: {exc}", err=True)
        return 2
    except ScrapeqError as exc:
        typer.echo(f"scrapeq: error: {exc}", err=True)
        return 1
    except KeyboardInterrupt:
        typer.echo("scrapeq: interrupted", err=True)
        return 130
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
