"""A sink from a path or URL: what ``--results`` takes."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit, urlunsplit

from scrapeq.errors import ConfigError

from ._base import Sink
from .csvfile import CsvSink
from .jsonarray import JsonArraySink
from .jsonl import JsonlSink
from .sqlite import SqliteSink
from .stream import RedisStreamSink

__all__ = ["sink_from_url"]

_SCHEMES = ("sqlite", "postgresql", "redis-stream")
#: A results file's extension (lower case) -> the sink writing it; a path without one is JSON
#: Lines (``results``, ``/dev/stdout``).
_FILES: dict[str, type[JsonlSink] | type[CsvSink] | type[JsonArraySink]] = {
    "": JsonlSink, ".jsonl": JsonlSink, ".ndjson": JsonlSink, ".jl": JsonlSink,
    ".csv": CsvSink, ".json": JsonArraySink,
}  # fmt: skip
#: What the files' extensions write, in a refusal's words.
FILE_FORMATS = (
    ".jsonl, .ndjson or .jl (JSON Lines), .csv (CSV), .json (a JSON array); "
    "no extension: JSON Lines"
)


def sink_from_url(url: str | Path, result_fields: Sequence[str] = ()) -> Sink:
    """The sink ``url`` names.

    - a path: by its extension, JSON Lines (``.jsonl``, ``.ndjson``, ``.jl``, or none), CSV
      with a header (``.csv``; ``result_fields``: the result's field names, a column each),
      a JSON array (``.json``); another extension is refused;
    - ``sqlite:///relative/path.db`` or ``sqlite:////absolute/path.db`` (``?table=NAME``,
      default ``results``);
    - ``postgresql://user@host:port/db?table=NAME`` (psycopg 3: ``scrapeq[postgres]``);
    - ``redis-stream://[user:password@]host:port/db?key=KEY[&maxlen=N]`` (``rediss-stream``:
      TLS): XADD to a stream (``key`` default ``scrapeq:results``, ``maxlen`` 1,000,000).

    Raises:
        ConfigError: an unknown scheme or file extension, a missing path, a bad table name.
    """
    text = str(url)
    scheme, sep, _ = text.partition("://")
    if not sep or (len(scheme) == 1 and scheme.isalpha()):  # a path (C:// is a drive)
        path = Path(text)
        suffix = path.suffix.lower()
        kind = _FILES.get(suffix)
        if kind is None:
            raise ConfigError("results", f"{suffix} files are not written: {FILE_FORMATS}")
        return CsvSink(path, result_fields) if kind is CsvSink else kind(path)
    scheme = scheme.lower()
    if scheme == "sqlite":
        return _sqlite(text)
    if scheme in ("postgresql", "postgres"):
        return _postgres(text)
    if scheme in ("redis-stream", "rediss-stream"):
        return _stream(text)
    raise ConfigError(
        "results",
        f"unknown scheme {scheme!r} (a path, or {', '.join(s + '://' for s in _SCHEMES)})",
    )


def _sqlite(text: str) -> SqliteSink:
    parts = urlsplit(text)
    if parts.netloc:
        raise ConfigError("results", "a SQLite URL has no host (sqlite:///path/results.db)")
    path = unquote(parts.path)[1:]  # sqlite:///rel.db -> rel.db, sqlite:////abs.db -> /abs.db
    if not path:
        raise ConfigError("results", "no file (sqlite:///path/results.db)")
    query = parse_qs(parts.query, keep_blank_values=True)  # ?table= is refused, not "results"
    unknown = sorted(set(query) - {"table"})
    if unknown:
        raise ConfigError("results", f"unknown parameter {unknown[0]!r} (only table=NAME)")
    return SqliteSink(path, table=query.get("table", ["results"])[-1])


def _postgres(text: str) -> Sink:
    try:
        import psycopg  # noqa: F401
    except ImportError:
        raise ConfigError(
            "results", "a postgresql:// URL needs psycopg: pip install 'scrapeq[postgres]'"
        ) from None
    from .postgres import PostgresSink

    return PostgresSink(text)


def _stream(text: str) -> Sink:
    import redis.asyncio

    parts = urlsplit(text)
    query = parse_qs(parts.query)
    unknown = sorted(set(query) - {"key", "maxlen"})
    if unknown:
        raise ConfigError("results", f"unknown parameter {unknown[0]!r} (key=, maxlen=)")
    key = query.get("key", ["scrapeq:results"])[-1]
    maxlen_text = query.get("maxlen", ["1000000"])[-1]
    if not key or not maxlen_text.isdigit() or len(maxlen_text) > 12:
        raise ConfigError("results", "key must not be empty, maxlen must be a whole number")
    scheme = "rediss" if parts.scheme.lower() == "rediss-stream" else "redis"
    url = urlunsplit((scheme, parts.netloc, parts.path, "", ""))
    client = redis.asyncio.Redis.from_url(url, decode_responses=True)
    maxlen = int(maxlen_text) or None
    return RedisStreamSink(client, key, maxlen=maxlen, owns_client=True)
