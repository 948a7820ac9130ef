"""scrapeq: a Redis-backed job queue for web scraping built around failure isolation.

The package is layered, and imports point one way: :mod:`scrapeq.interfaces` (the CLI and
the dashboard) and :mod:`scrapeq.demo` use :mod:`scrapeq.runtime` (worker, fetcher, sinks),
which uses :mod:`scrapeq.engine` (the Redis data model, its Lua scripts, the queue API).
:mod:`scrapeq.errors` is shared by all. What is imported here is the stable public surface.
"""

from __future__ import annotations

from scrapeq.engine.audit import AuditProblem, AuditReport
from scrapeq.engine.job import Job, JobError, JobInfo
from scrapeq.engine.lanes import Lane, Lanes
from scrapeq.engine.queue import (
    AsyncQueue,
    CancelResult,
    Claimed,
    EnqueueResult,
    Queue,
    ReplayResult,
)
from scrapeq.engine.request import Request
from scrapeq.engine.scripts import Settlement
from scrapeq.engine.settings import Settings, load_settings
from scrapeq.errors import (
    Banned,
    ConfigError,
    InvalidURL,
    NotFound,
    PayloadTooLarge,
    Permanent,
    RedisUnavailable,
    Retry,
    ScrapeqError,
    StaleLease,
)
from scrapeq.runtime.fetch import Response
from scrapeq.runtime.follow import Content, Follow, HandlerContext
from scrapeq.runtime.sinks import (
    CallableSink,
    CsvSink,
    JsonlSink,
    PostgresSink,
    RedisStreamSink,
    Sink,
    SqliteSink,
    sink_from_url,
)
from scrapeq.runtime.worker import Worker

__version__ = "0.1.0"

__all__ = [
    "AsyncQueue",
    "AuditProblem",
    "AuditReport",
    "Banned",
    "CallableSink",
    "CancelResult",
    "Claimed",
    "ConfigError",
    "Content",
    "CsvSink",
    "EnqueueResult",
    "Follow",
    "HandlerContext",
    "InvalidURL",
    "Job",
    "JobError",
    "JobInfo",
    "JsonlSink",
    "Lane",
    "Lanes",
    "NotFound",
    "PayloadTooLarge",
    "Permanent",
    "PostgresSink",
    "Queue",
    "RedisStreamSink",
    "RedisUnavailable",
    "ReplayResult",
    "Request",
    "Response",
    "Retry",
    "ScrapeqError",
    "Settings",
    "Settlement",
    "Sink",
    "SqliteSink",
    "StaleLease",
    "Worker",
    "__version__",
    "load_settings",
    "sink_from_url",
]
