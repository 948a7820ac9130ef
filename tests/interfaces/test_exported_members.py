"""The public surface is deliberate: changing it must change this test."""

from __future__ import annotations

import scrapeq

EXPECTED = [
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


def test_all_is_sorted_and_exact() -> None:
    assert scrapeq.__all__ == EXPECTED
    assert sorted(scrapeq.__all__) == scrapeq.__all__


def test_every_exported_name_exists() -> None:
    for name in scrapeq.__all__:
        assert hasattr(scrapeq, name), name


def test_errors_share_one_root() -> None:
    for name in ("ConfigError", "InvalidURL", "NotFound", "Permanent", "Retry", "StaleLease"):
        assert issubclass(getattr(scrapeq, name), scrapeq.ScrapeqError)
