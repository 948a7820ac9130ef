"""scrapeq: a Redis-backed job queue for web scraping built around failure isolation.

The package is layered, and imports point one way: :mod:`scrapeq.interfaces` (the CLI and
the dashboard) and :mod:`scrapeq.demo` use :mod:`scrapeq.runtime` (worker, fetcher, sinks),
which uses :mod:`scrapeq.engine` (the Redis data model, its Lua scripts, the queue API).
:mod:`scrapeq.errors` is shared by all. What is imported here is the stable public surface.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from scrapeq.engine.config.settings import Settings, load_settings
    from scrapeq.engine.lua.scripts import Settlement
    from scrapeq.engine.model.job import Job, JobError, JobInfo
    from scrapeq.engine.model.lanes import Lane, Lanes
    from scrapeq.engine.model.request import Request
    from scrapeq.engine.ops.audit import AuditProblem, AuditReport
    from scrapeq.engine.queue import (
        AsyncQueue,
        CancelResult,
        Claimed,
        EnqueueResult,
        Queue,
        ReplayResult,
    )
    from scrapeq.errors import (
        Banned,
        ConfigError,
        InvalidURL,
        NeedsBrowser,
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

#: Where each public name lives. They are imported on first use (PEP 562), so a command
#: that needs none of them (``scrapeq --version``, ``status``) does not load aiohttp and the
#: worker: ``from scrapeq import Queue`` is unchanged.
_EXPORTS: dict[str, tuple[str, ...]] = {
    "scrapeq.engine.ops.audit": ("AuditProblem", "AuditReport"),
    "scrapeq.engine.model.job": ("Job", "JobError", "JobInfo"),
    "scrapeq.engine.model.lanes": ("Lane", "Lanes"),
    "scrapeq.engine.queue": (
        "AsyncQueue", "CancelResult", "Claimed", "EnqueueResult", "Queue", "ReplayResult",
    ),
    "scrapeq.engine.model.request": ("Request",),
    "scrapeq.engine.lua.scripts": ("Settlement",),
    "scrapeq.engine.config.settings": ("Settings", "load_settings"),
    "scrapeq.errors": (
        "Banned", "ConfigError", "InvalidURL", "NeedsBrowser", "NotFound", "PayloadTooLarge",
        "Permanent",
        "RedisUnavailable", "Retry", "ScrapeqError", "StaleLease",
    ),
    "scrapeq.runtime.fetch": ("Response",),
    "scrapeq.runtime.follow": ("Content", "Follow", "HandlerContext"),
    "scrapeq.runtime.sinks": (
        "CallableSink", "CsvSink", "JsonlSink", "PostgresSink", "RedisStreamSink", "Sink",
        "SqliteSink", "sink_from_url",
    ),
    "scrapeq.runtime.worker": ("Worker",),
}  # fmt: skip
_WHERE: dict[str, str] = {name: module for module, names in _EXPORTS.items() for name in names}


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module 'scrapeq' has no attribute {name!r}")
    value = getattr(importlib.import_module(where), name)
    globals()[name] = value  # the next look-up is a plain global
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


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
    "NeedsBrowser",
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
