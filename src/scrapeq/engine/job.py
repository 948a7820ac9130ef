"""The job model: what a worker receives from a claim and what a dead letter holds."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import orjson

from scrapeq.engine.urls import redact_text, redact_url

__all__ = ["Job", "JobError", "JobInfo", "ms_to_datetime", "ms_to_iso"]


def ms_to_datetime(ms: int | float | None) -> datetime | None:
    """Milliseconds since the epoch (Redis server clock) to an aware UTC datetime."""
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


@dataclass(frozen=True, slots=True)
class JobError:
    """One entry of a job's bounded error history (the last 10 are kept).

    Attributes:
        at_ms: when it happened, ms since the epoch on the Redis clock.
        kind: a short tag (``http_503``, ``timeout``, ``lease_expired``).
        message: a human-readable detail, at most 500 characters.
    """

    at_ms: int
    kind: str
    message: str

    def as_dict(self) -> dict[str, Any]:
        """A JSON-friendly view; a URL password in the message is redacted."""
        return {"at": self.at_ms, "kind": self.kind, "message": redact_text(self.message)}


@dataclass(frozen=True, slots=True)
class Job:
    """A job as stored in Redis.

    Attributes:
        id: short id, unique within its queue.
        url: the normalised URL to fetch.
        domain: ``host[:port]``, the unit of failure isolation.
        lane: the priority lane's name; a retried job keeps it.
        attempts: attempts spent, counting the one in flight after a claim.
        max_attempts: the job's attempt budget.
        payload: the user's JSON payload (``None`` when not given).
        token: the lease's fencing token from the last claim (0 before any claim).
        created_ms, eligible_ms: enqueue time and when the job is (or was) eligible.
        expires_ms: a not-yet-claimed job dies as ``expired`` at this time, if set.
        throttles: Retry-After deferrals taken (they spend no attempt).
        releases: releases for our own faults taken (they spend no attempt; a worker
            stopping does not count).
        errors: the bounded error history, oldest first.
        dead_reason, died_ms: set on dead letters.
        claimed_ms: time of the last claim.
        raw: for a corrupt dead letter, the stored text that could not be read.
        depth: links followed from a seed to reach this job (a seed is 0).
        parent: the id of the job whose page linked this one (None for a seed).
    """

    id: str
    url: str
    domain: str
    lane: str
    attempts: int
    max_attempts: int
    payload: Any = None
    token: int = 0
    created_ms: int = 0
    eligible_ms: int = 0
    expires_ms: int | None = None
    throttles: int = 0
    releases: int = 0
    errors: tuple[JobError, ...] = field(default=())
    dead_reason: str | None = None
    died_ms: int | None = None
    claimed_ms: int | None = None
    raw: str | None = None
    depth: int = 0
    parent: str | None = None

    @classmethod
    def from_json(cls, text: str) -> Job:
        """Build a Job from the JSON text a script returned.

        Runs once per claimed job: orjson reads it (about 4x faster than ``json``); the rare
        text orjson refuses and ``json`` accepts (an integer over 64 bits) is read by ``json``.
        """
        try:
            data = orjson.loads(text)
        except orjson.JSONDecodeError:
            data = json.loads(text)
        return cls.from_dict(data)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Job:
        """Build a Job from the decoded stored form (see ``lua/includes/jobs.lua``).

        Numbers come from the scripts as JSON integers, so no conversion is needed; this
        runs once per claimed job and is kept lean on purpose.
        """
        get = data.get
        errors = get("errors")
        payload_text = get("payload")
        return cls(
            str(data["id"]),
            get("url", ""),
            get("domain", ""),
            get("lane", ""),
            get("attempts", 0),
            get("max_attempts", 0),
            json.loads(payload_text) if isinstance(payload_text, str) else None,
            get("token", 0),
            get("created", 0),
            get("eligible", 0),
            get("expires"),
            get("throttles", 0),
            get("releases", 0),
            _errors(errors) if errors else (),
            get("dead_reason"),
            get("died"),
            get("claimed"),
            get("corrupt"),
            get("depth", 0),
            get("parent"),
        )

    @property
    def last_error(self) -> JobError | None:
        """The most recent error, if any."""
        return self.errors[-1] if self.errors else None

    @property
    def budget_left(self) -> int:
        """Attempts the job may still spend."""
        return max(self.max_attempts - self.attempts, 0)

    def as_dict(self) -> dict[str, Any]:
        """A JSON-friendly view (used by ``dead list --json``); a password in the URL or an
        error message is shown as ``***``."""
        return {
            "id": self.id,
            "url": redact_url(self.url),
            "domain": self.domain,
            "lane": self.lane,
            "attempts": self.attempts,
            "max_attempts": self.max_attempts,
            "payload": self.payload,
            "created_at": ms_to_iso(self.created_ms),
            "expires_at": ms_to_iso(self.expires_ms),
            "throttles": self.throttles,
            "releases": self.releases,
            "depth": self.depth,
            "parent": self.parent,
            "dead_reason": self.dead_reason,
            "died_at": ms_to_iso(self.died_ms),
            "last_error": self.last_error.as_dict() if self.last_error else None,
            "errors": [e.as_dict() for e in self.errors],
        }


@dataclass(frozen=True, slots=True)
class JobInfo:
    """Where a job is and what it holds: the answer of ``Queue.job_info`` (one atomic look).

    Times are ms since the epoch on the Redis clock.

    Attributes:
        job: the stored job (attempts, lane, URL, payload, error history...).
        state: ``ready``, ``delayed``, ``inflight``, ``dead``, ``done`` (kept by
            ``keep_done``) or ``unplaced`` (a job key no structure names: see ``audit``).
        now_ms: the Redis clock when it looked.
        position, depth: ``ready`` only: 1-based place in its domain's queue, and how many
            jobs that queue holds.
        eligible_ms: when it may be claimed (for ``delayed``: the time it waits for).
        lease_deadline_ms: ``inflight`` only: when its lease expires unless renewed.
        worker: the worker holding it: always None, claims do not record one (docs/DESIGN.md).
        done_ms, kept_until_ms: ``done`` only: when it was done, and when its key expires.
    """

    job: Job
    state: str
    now_ms: int
    position: int | None = None
    depth: int | None = None
    eligible_ms: int | None = None
    lease_deadline_ms: int | None = None
    worker: str | None = None
    done_ms: int | None = None
    kept_until_ms: int | None = None

    def as_dict(self, queue: str | None = None) -> dict[str, Any]:
        """The ``job show --json`` document: ISO 8601 times with ``_ms`` twins."""
        job = self.job
        out: dict[str, Any] = {"id": job.id}
        if queue is not None:
            out["queue"] = queue
        out.update(
            state=self.state,
            url=redact_url(job.url),
            domain=job.domain,
            lane=job.lane,
            attempts=job.attempts,
            max_attempts=job.max_attempts,
            throttles=job.throttles,
            releases=job.releases,
            payload=job.payload,
            position=self.position,
            depth=self.depth,
        )
        _times(out, created_at=job.created_ms, eligible_at=self.eligible_ms,
               expires_at=job.expires_ms)  # fmt: skip
        lease = None
        if self.state == "inflight":
            lease = {"token": job.token, "worker": self.worker}
            _times(lease, deadline_at=self.lease_deadline_ms, claimed_at=job.claimed_ms)
        out["lease"] = lease
        out["dead_reason"] = job.dead_reason
        _times(out, died_at=job.died_ms, done_at=self.done_ms, kept_until=self.kept_until_ms)
        out["errors"] = [
            {
                "at": ms_to_iso(e.at_ms),
                "at_ms": e.at_ms,
                "kind": e.kind,
                "message": redact_text(e.message),
            }
            for e in job.errors
        ]
        if job.raw is not None:
            out["raw"] = redact_text(job.raw)
        _times(out, now=self.now_ms)
        return out


def _times(out: dict[str, Any], **times: int | None) -> None:
    """``name``: ISO 8601 text and ``name_ms``: the number, for each time given."""
    for name, ms in times.items():
        out[name] = ms_to_iso(ms)
        out[f"{name}_ms"] = ms


def _errors(errors: Any) -> tuple[JobError, ...]:
    if not isinstance(errors, list):
        return ()
    return tuple(
        JobError(int(e.get("at", 0)), str(e.get("kind", "")), str(e.get("message", "")))
        for e in errors
        if isinstance(e, dict)
    )


def ms_to_iso(ms: int | float | None) -> str | None:
    """Milliseconds since the epoch (Redis clock) to ISO-8601 UTC text; None stays None."""
    when = ms_to_datetime(ms)
    return when.isoformat() if when else None
