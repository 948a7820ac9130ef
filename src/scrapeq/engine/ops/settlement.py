"""Settlement builders: what a worker hands to ``settle`` for each way an attempt ends."""

from __future__ import annotations

from collections.abc import Sequence

from scrapeq.engine.config.settings import Settings
from scrapeq.engine.lua.scripts import (
    EnqueueSpec,
    Settlement,
)
from scrapeq.engine.model.job import Job
from scrapeq.engine.ops.oputil import _seconds_ms


class SettlementBuilders:
    """The settlement builders of a queue (mixed into
    :class:`~scrapeq.engine.ops.core._QueueCore`)."""

    settings: Settings

    def done(
        self,
        job: Job,
        *,
        domain_failed: bool = False,
        follow: Sequence[EnqueueSpec] = (),
        final_url: str | None = None,
        latency_ms: int | None = None,
        overload: bool = False,
    ) -> Settlement:
        """A finished job; ``domain_failed`` charges the domain (a slow call); ``follow``:
        job specs (see :meth:`prepare`) enqueued with the settlement, atomically;
        ``final_url``: where the fetch ended after redirects, which joins the seen-set in the
        same call when the queue has one (a link to it is then skipped as seen);
        ``latency_ms``, ``overload``: what the fetch taught of its site, for the domain's
        adaptive limit (``scrapeq.runtime.outcomes.timed``), given here so that a worker's
        done job is one settlement, not one built then copied with them."""
        return Settlement(
            job.id,
            job.token,
            "done",
            domain_failed=domain_failed,
            follow=tuple(follow),
            final=self._final_spec(job, final_url),
            latency_ms=latency_ms,
            overload=overload,
        )

    def _final_spec(self, job: Job, url: str | None) -> EnqueueSpec | None:
        raise NotImplementedError

    def retrying(
        self,
        job: Job,
        *,
        kind: str = "error",
        message: str = "",
        delay: float | None = None,
        retry_after: float | None = None,
        domain_failed: bool | None = True,
    ) -> Settlement:
        """A failed attempt to retry after ``delay`` seconds; by default the settle script
        draws a full-jitter backoff over the attempts spent,
        ``uniform(0, min(backoff_cap, backoff_base * 2**(attempts - 1)))`` (``backoff``)."""
        return Settlement(
            job.id,
            job.token,
            "retry",
            domain_failed=domain_failed,
            delay_ms=_seconds_ms("delay", delay) or 0,
            backoff=delay is None,
            retry_after_ms=_seconds_ms("retry_after", retry_after) or 0,
            kind=kind,
            message=message,
        )

    def throttling(
        self,
        job: Job,
        retry_after: float | None,
        *,
        kind: str = "http_429",
        message: str = "",
        domain_failed: bool | None = True,
    ) -> Settlement:
        """A throttled attempt (429, 503 + Retry-After): the domain parks, no attempt spent."""
        wait = retry_after if retry_after is not None else self.settings.backoff_base
        return Settlement(
            job.id,
            job.token,
            "throttle",
            domain_failed=domain_failed,
            delay_ms=_seconds_ms("retry_after", wait) or 0,
            retry_after_ms=_seconds_ms("retry_after", retry_after) or 0,
            kind=kind,
            message=message,
        )

    def failing(
        self, job: Job, reason: str, message: str = "", *, domain_failed: bool | None = None
    ) -> Settlement:
        """A permanent failure: the job goes to the dead letters with ``reason``."""
        return Settlement(
            job.id,
            job.token,
            "fail",
            domain_failed=domain_failed,
            reason=reason,
            kind=reason,
            message=message,
        )

    def releasing(
        self,
        job: Job,
        *,
        delay: float | None = None,
        kind: str = "released",
        message: str = "",
        shutdown: bool = False,
    ) -> Settlement:
        """Give a job back without spending an attempt or blaming its domain.

        A release is for our own faults (proxy, sink, a bug of ours): it spends one of the
        job's ``max_releases`` and is kept in its error history as ``kind``/``message``; past
        the budget the job dies ``max_releases``. It waits ``delay`` seconds, by default a
        full-jitter backoff over the releases already taken, drawn by the settle script
        (``backoff``): ``uniform(0, min(backoff_cap, backoff_base * 2**releases))``.

        ``shutdown=True`` (a worker stopping) spends and records nothing and, without a
        ``delay``, the job is ready again at once.
        """
        if shutdown:
            delay_ms = _seconds_ms("delay", delay) or 0
            return Settlement(job.id, job.token, "release", delay_ms=delay_ms, shutdown=True)
        return Settlement(
            job.id,
            job.token,
            "release",
            delay_ms=_seconds_ms("delay", delay) or 0,
            backoff=delay is None,
            kind=kind,
            message=message,
        )


# --- partitions ------------------------------------------------------------------------------
