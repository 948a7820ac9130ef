"""Classification to settlement, in one place: what becomes of a job whose attempt got a verdict
(:mod:`.classify`). Used by the worker (:mod:`.attempt`) and by ``scrapeq.contrib.scrapy``.

``ok`` is done, ``fail`` dead at once, ``throttled`` a throttle (no attempt spent), ``ours``
(our proxy or network) a release spending a release, anything else a retry. Whether a retry
or a release ends the job dead is the settle script's to decide (``includes/jobs.lua``).
:func:`timed` adds what the attempt taught of its site: the fetch's latency, and whether the
site signalled overload, for the domain's adaptive limit (``includes/adaptive.lua``).
"""

from __future__ import annotations

from dataclasses import fields
from operator import attrgetter

from scrapeq.engine.lua.scripts import DownloadSample, Settlement
from scrapeq.engine.model.job import Job
from scrapeq.engine.queue import AsyncQueue, Queue
from scrapeq.runtime.classify import OVERLOAD_REASONS, Classification, Outcome

__all__ = ["download_sample", "latency", "settlement_for", "timed"]

#: A settlement's fields in order, read at once: :func:`timed` copies one per attempt, and
#: ``dataclasses.replace`` (which looks the fields up on every call) cost twice the copy.
_NAMES = tuple(f.name for f in fields(Settlement))
_VALUES = attrgetter(*_NAMES)
_LATENCY, _OVERLOAD = _NAMES.index("latency_ms"), _NAMES.index("overload")


def settlement_for(
    queue: Queue | AsyncQueue, job: Job, verdict: Classification, message: str | None = None
) -> Settlement:
    """The settlement of ``job`` for ``verdict`` (``message``: default the verdict's own, or
    its reason)."""
    message = message or verdict.message or verdict.reason
    counts = verdict.counts_against_domain
    if verdict.outcome is Outcome.OK:
        return queue.done(job, domain_failed=counts)
    if verdict.outcome is Outcome.FAIL:
        return queue.failing(job, verdict.reason, message, domain_failed=counts or None)
    if verdict.outcome is Outcome.THROTTLED:
        return queue.throttling(
            job, verdict.retry_after, kind=verdict.reason, message=message, domain_failed=counts
        )
    if verdict.outcome is Outcome.OURS:
        return queue.releasing(job, kind=f"released:{verdict.reason}", message=message)
    return queue.retrying(
        job,
        kind=verdict.reason,
        message=message,
        retry_after=verdict.retry_after,
        domain_failed=counts,
    )


def timed(settlement: Settlement, verdict: Classification, seconds: float) -> Settlement:
    """``settlement`` with the fetch's latency (``seconds``) and whether the site signalled
    overload, for the domain's adaptive limit; an attempt that ended by our own fault (or is
    released) teaches nothing of the site: unchanged."""
    if verdict.outcome is Outcome.OURS or settlement.outcome == "release":
        return settlement
    values = list(_VALUES(settlement))  # dataclasses.replace(settlement, ...), as one call
    values[_LATENCY], values[_OVERLOAD] = latency(verdict, seconds)
    return Settlement(*values)


def latency(verdict: Classification, seconds: float) -> tuple[int, bool]:
    """The latency (ms) and the overload flag :func:`timed` puts on a settlement, for a
    settlement built with them at once (a worker's done job: ``queue.done(latency_ms=...,
    overload=...)``)."""
    return max(round(seconds * 1000), 0), verdict.reason in OVERLOAD_REASONS


def download_sample(verdict: Classification, seconds: float) -> DownloadSample:
    """What a download over taught of its site, for ``Queue.downloaded`` (Scrapy on scrapeq):
    the latency, breaker input and overload flag its settlement will carry (:func:`timed`).
    Whether it charges its domain, so that its slot waits for the settle, is the script's to
    decide (``lua/downloaded-1.lua``: the breaker input, the overload, and the adaptive
    rule's latency cut), not the worker's."""
    latency_ms, overload = latency(verdict, seconds)
    return DownloadSample(
        latency_ms=latency_ms, domain_failed=verdict.counts_against_domain, overload=overload
    )
