"""The keyword options of the facades' public methods, typed (PEP 692 ``Unpack``).

``Queue.enqueue(url, **options)`` hands its options to :meth:`~scrapeq.engine.ops.core._QueueCore.
prepare`, ``retry``/``throttle``/``fail``/``release`` theirs to the settlement builders
(:mod:`scrapeq.engine.ops.settlement`): these dicts name each option and its type, so an editor
and mypy check a call's keywords. Each mirrors the keyword-only parameters of the method it
feeds (defaults are that method's).
"""

from __future__ import annotations

from typing import Any, TypedDict


class JobOptions(TypedDict, total=False):
    """The options of one job, as :meth:`~scrapeq.engine.ops.core._QueueCore.prepare`."""

    lane: str | None
    delay: float
    max_attempts: int | None
    payload: Any
    unique: bool | str | None
    expires: float | None
    fingerprint64: int | None
    fetcher: str | None
    sitemap_priority: float | None
    lastmod: float | None


class RetryOptions(TypedDict, total=False):
    """The options of a retry, as
    :meth:`~scrapeq.engine.ops.settlement.SettlementBuilders.retrying`."""

    kind: str
    message: str
    delay: float | None
    retry_after: float | None
    domain_failed: bool | None


class ThrottleOptions(TypedDict, total=False):
    """The options of a throttle, as ``SettlementBuilders.throttling``."""

    kind: str
    message: str
    domain_failed: bool | None


class FailOptions(TypedDict, total=False):
    """The options of a failure, as ``SettlementBuilders.failing``."""

    domain_failed: bool | None


class ReleaseOptions(TypedDict, total=False):
    """The options of a release, as ``SettlementBuilders.releasing``."""

    delay: float | None
    kind: str
    message: str
    shutdown: bool
