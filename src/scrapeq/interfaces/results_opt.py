"""``--results PATH|URL``: where a worker's results go, checked before any job is claimed."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from scrapeq.errors import ConfigError

if TYPE_CHECKING:
    from scrapeq.runtime.sinks import Sink

__all__ = [
    "EXTRACT_HELP",
    "RESULTS_HELP",
    "extract_fields_of",
    "results_problem",
    "results_sink",
]

EXTRACT_HELP = (
    "Without a handler, each result holds these page fields (repeatable): any of "
    "title, description, canonical, text (comma-separated), or a named selector: "
    "'price=.price::text' (CSS), 'sku=//@data-sku' (XPath), 'tags[]=.tag::text' (every "
    "match, a list)."
)

RESULTS_HELP = (
    "Where results go: a file (.jsonl: JSON Lines; .csv: CSV; .json: a JSON array), or a "
    "URL: sqlite:///FILE, "
    "postgresql://HOST/DB (one row per job) or redis-stream://HOST/DB "
    "(see docs/guide/results.md)."
)


def results_problem(target: str, fields: Sequence[str] | None = None) -> str | None:
    """What is wrong with ``--results target`` (one line), or None once its sink was opened
    (a file created or its header checked, a table created or its layout checked).
    ``fields``: ``--extract``'s (a CSV file's columns, :func:`results_sink`)."""
    shown = _shown(target)
    try:
        sink = results_sink(target, fields)
    except ConfigError as exc:
        return f"--results {shown}: {exc.reason}"
    import asyncio  # asyncio and redis here, not with the module: tens of ms to import

    from redis.exceptions import RedisError

    path = _file_of(sink)
    if path is not None and not path.parent.is_dir():
        return f"--results {shown}: folder {path.parent} does not exist"
    try:
        asyncio.run(_open_and_close(sink))
    except OSError as exc:
        return f"--results {shown}: {exc.strerror or exc}"
    except RedisError as exc:
        return f"--results {shown}: {exc}"
    except ConfigError as exc:
        return f"--results {shown}: {exc.reason}"
    return None


def results_sink(target: str, fields: Sequence[str] | None = None) -> Sink:
    """The sink of ``--results target``; with ``--extract``'s ``fields``, a new CSV file has a
    column for each of the result's fields. ConfigError: a target it cannot use."""
    from scrapeq.runtime.sinks import sink_from_url  # the CLI starts without the sinks

    names: tuple[str, ...] = ()
    if fields:
        from scrapeq.runtime.extract import field_names

        names = field_names(fields)
    return sink_from_url(target, names)


async def _open_and_close(sink: Sink) -> None:
    from scrapeq.runtime.sinks import JsonlSink, RedisStreamSink

    try:
        opener = getattr(sink, "open", None)
        if opener is not None:
            await opener()
        elif isinstance(sink, RedisStreamSink):
            await sink.check()
        elif isinstance(sink, JsonlSink):
            with sink.path.open("a", encoding="utf-8"):
                pass  # appendable, as the worker will open it
    finally:
        await sink.close()


def _file_of(sink: Sink) -> Path | None:
    from scrapeq.runtime.sinks import CsvSink, JsonArraySink, JsonlSink, SqliteSink

    if isinstance(sink, JsonlSink | CsvSink | JsonArraySink | SqliteSink):
        return sink.path
    return None


def _shown(target: str) -> str:
    """``target`` without a password."""
    from scrapeq.engine.model.urls import redact_url

    return redact_url(target) if "://" in target else target


def extract_fields_of(
    extract: str | list[str] | None, handler: str | None
) -> tuple[tuple[str, ...] | None, str | None]:
    """(the fields of ``--extract``, or None; what is wrong with it, one line, or None)."""
    if not extract:
        return None, None
    if handler is not None:
        return None, "--extract and --handler: choose one (a handler gives its own result)"
    from scrapeq.runtime.extract import parse_fields

    try:
        return parse_fields(extract), None
    except ConfigError as exc:
        shown = extract if isinstance(extract, str) else " ".join(extract)
        return None, f"--extract {shown[:60]}: {exc.reason}"
