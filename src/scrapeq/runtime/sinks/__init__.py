"""Where results go: a JSONL, JSON or CSV file, a SQLite or PostgreSQL table, a Redis
stream, or any callable.

A sink receives one record (a dict in the INTERFACE.md results format) per attempt that
ended its job. ``write`` must not return before the record is durable enough for the job to
be acked: the worker acks only after it returns, and a sink error makes the worker release
the job (no attempt spent) and pause claiming; a :class:`RecordRefused` (the store refused
that record for its content) makes it write the job's line without its result instead, once.
A sink may have an ``async open()``: the worker awaits it before claiming any job (it creates
or checks the file's header, the table), and a ConfigError it raises stops the worker before
anything is claimed.
"""

from __future__ import annotations

from ._base import CallableSink, RecordRefused, Sink
from .csvfile import CsvSink
from .jsonarray import JsonArraySink
from .jsonl import JsonlSink
from .postgres import PostgresSink
from .sqlite import SqliteSink
from .stream import RedisStreamSink
from .url import sink_from_url

__all__ = [
    "CallableSink",
    "CsvSink",
    "JsonArraySink",
    "JsonlSink",
    "PostgresSink",
    "RecordRefused",
    "RedisStreamSink",
    "Sink",
    "SqliteSink",
    "sink_from_url",
]
