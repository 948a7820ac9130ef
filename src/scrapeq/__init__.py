"""scrapeq: a Redis-backed job queue for web scraping built around failure isolation."""

from __future__ import annotations

from .audit import AuditProblem, AuditReport
from .errors import (
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
from .follow import Follow
from .job import Job, JobError, JobInfo
from .lanes import Lane, Lanes
from .queue import AsyncQueue, CancelResult, Claimed, EnqueueResult, Queue, ReplayResult
from .scripts import Settlement
from .settings import Settings, load_settings

__version__ = "0.1.0"

__all__ = [
    "AsyncQueue",
    "AuditProblem",
    "AuditReport",
    "CancelResult",
    "Claimed",
    "ConfigError",
    "EnqueueResult",
    "Follow",
    "InvalidURL",
    "Job",
    "JobError",
    "JobInfo",
    "Lane",
    "Lanes",
    "NotFound",
    "PayloadTooLarge",
    "Permanent",
    "Queue",
    "RedisUnavailable",
    "ReplayResult",
    "Retry",
    "ScrapeqError",
    "Settings",
    "Settlement",
    "StaleLease",
    "__version__",
    "load_settings",
]
