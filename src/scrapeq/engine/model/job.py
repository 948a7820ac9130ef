"""The job model: what a worker receives from a claim and what a dead letter holds."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson

from scrapeq.engine.model.request import Request, redact_value
from scrapeq.engine.model.urls import redact_text, redact_url
from scrapeq.errors import ConfigError, InvalidRequest

__all__ = [
    "Job",
    "JobError",
    "JobInfo",
    "expand_stored",
    "id_ms",
    "ms_to_datetime",
    "ms_to_iso",
    "url_host",
]


#: A stored job's compact field names (``lua/includes/common.lua``: compact_text) -> full.
_LONG = {
    "u": "url",
    "d": "domain",
    "l": "lane",
    "o": "off",
    "a": "attempts",
    "m": "max_attempts",
    "t": "throttles",
    "k": "token",
    "c": "created",
    "e": "eligible",
    "p": "payload",
    "dp": "depth",
    "pa": "parent",
    "pu": "parent_url",
    "x": "expires",
    "f": "fp",
    "w": "fpw",
    "er": "errors",
    "dr": "dead_reason",
    "di": "died",
    "cl": "claimed",
    "r": "releases",
    "un": "unused",
    "q": "request",
    "xi": "exit",
    "wt": "weight",
    "ve": "etag",
    "vm": "last_modified",
    "rd": "rv_due",
    "sg": "signature",
    "sj": "jar",
    "fe": "fetcher",
    "dfe": "domain_fetcher",
    "dwf": "domain_wait_for",
    "afe": "auto_fetcher",
    "alv": "auto_level",
    "lw": "line_waits",
}  # fmt: skip (sg: written by earlier versions, ignored: Job has no such field now)
#: Values a compact text leaves out, fixed (``max_attempts``: Settings' default, but a
#: client's setting may differ: the stored form must not depend on it). It leaves out a
#: ``domain`` that is the URL's host; its ``created`` is ms after the time its id was issued
#: (:func:`id_ms`), its ``eligible`` ms after ``created`` (left out: 0).
_DEFAULTS: dict[str, Any] = {
    "off": 0, "attempts": 0, "throttles": 0, "token": 0, "depth": 0, "lane": "normal",
    "releases": 0, "unused": 0, "max_attempts": 5,
}  # fmt: skip
#: Counters a claimed job's text (full form) leaves out when 0, as a compact text does:
#: read as 0 (``lua/includes/codec.lua``: ZERO_COUNTERS, the same list).
ZERO_COUNTERS = ("off", "throttles", "releases", "depth", "unused")
_URL_HOST = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*://([^/?#]*)")


_ID = re.compile(r"^[a-z][0-9a-fA-F]+$")
#: Job ids and tokens count 1,000 a ms of the server clock from this time (common.lua).
NUMBERS_EPOCH_MS = 1767225600000


def id_ms(job_id: str) -> int | None:
    """The server time (ms) a job id was issued at, or None for an id of another form."""
    if len(job_id) > 14 or not _ID.fullmatch(job_id):
        return None
    return int(job_id[1:], 16) // 1000 + NUMBERS_EPOCH_MS


def url_host(url: str) -> str | None:
    """The ``host[:port]`` of a URL as the scripts read it (userinfo dropped), or None."""
    found = _URL_HOST.match(url)
    return found.group(1).rpartition("@")[2] if found else None


def expand_stored(data: Any, job_id: str) -> Any:
    """A decoded stored job text in the full form the scripts answer: a compact text (field
    ``u``) gets its long names, its id and the values it left out; anything else is returned
    as it is (a job stored in the full form: claimed, or written before the compact form),
    its :data:`ZERO_COUNTERS` left out read as 0."""
    if not isinstance(data, dict):
        return data
    if "u" not in data:
        for name in ZERO_COUNTERS:
            data.setdefault(name, 0)
        return data
    job: dict[str, Any] = {"id": job_id}
    for key, value in data.items():
        name = str(key)
        job[_LONG.get(name, name)] = value
    for key, value in _DEFAULTS.items():
        job.setdefault(key, value)
    issued = id_ms(job_id)
    if issued is not None:
        offset = data.get("c", 0)
        job["created"] = issued + (offset if isinstance(offset, int | float) else 0)
    created, delta = job.get("created"), data.get("e", 0)
    if isinstance(created, int | float) and isinstance(delta, int | float):
        job["eligible"] = created + delta
    if "domain" not in job:
        job["domain"] = url_host(job["url"]) if isinstance(job["url"], str) else None
    return job


#: The first and the last millisecond a datetime can hold (years 1 and 9999), since the epoch.
_EPOCH = datetime.fromtimestamp(0, UTC)
_FIRST_MS = (datetime.min.replace(tzinfo=UTC) - _EPOCH) // timedelta(milliseconds=1)
_LAST_MS = (datetime.max.replace(tzinfo=UTC) - _EPOCH) // timedelta(milliseconds=1)


def ms_to_datetime(ms: int | float | None) -> datetime | None:
    """Milliseconds since the epoch (Redis server clock) to an aware UTC datetime.

    A time past what a datetime holds (a cooldown of 10^12 s is the year 33,715: written by an
    older version, or by hand) is the last (or the first) millisecond of the range, so that
    every reader shows it instead of failing; NaN is None.
    """
    if ms is None or ms != ms:
        return None
    return _EPOCH + timedelta(milliseconds=min(max(ms, _FIRST_MS), _LAST_MS))


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
        """``at``: ISO 8601 UTC text, ``at_ms``: the number (the JSON outputs' time format); a
        URL password in the message is redacted."""
        return {
            "at": ms_to_iso(self.at_ms),
            "at_ms": self.at_ms,
            "kind": self.kind,
            "message": redact_text(self.message),
        }


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
        unused: expired leases whose attempt was given back (the worker died or stalled
            while this job's handler was not running, or never got the claim's reply); a
            worker runs the handler of such a job alone (decision record docs/adr/0002).
        request_text: the stored form of what the job sends (:mod:`scrapeq.engine.model.request`);
            None for a plain ``GET`` of its URL. Read it as :attr:`request`.
        parent_url: that job's URL (None for a seed).
        exit: with an exit pool, the id of the exit its claim chose (engine/model/exits.py); None
            otherwise.
        jar: with ``session = sticky``, the domain's cookie jar as its claim found it (JSON
            text, cookies as :data:`scrapeq.engine.lua.wire.JAR_COOKIE`; sent by
            :mod:`scrapeq.runtime.session_jar`); None otherwise. Not in the repr.
        weight: the page's weight for revisits (None: 1).
        etag, last_modified: a revisit's validators (includes/revisit.lua): sent as
            ``If-None-Match`` and ``If-Modified-Since``.
        rv_due: a revisit's due time (s): which visit of its URL's chain it is.
        fetcher: the job's own fetcher (``http``, ``impersonate``), as enqueued; None: none.
        domain_fetcher: its domain's fetcher as its claim found it (``domain set
            --fetcher``); None: none set. The worker goes through :attr:`fetcher`, else this,
            else its ``fetcher`` setting.
        domain_wait_for: the CSS selector its domain's browser pages wait for (``domain set
            --browser-wait-for``), as its claim found it; None: none (network idle).
        auto_fetcher, auto_level: a job whose fetcher is ``auto``: the fetcher its claim
            chose for it now, and its domain's auto level then (below it: a re-check);
            ``lua/includes/auto.lua`` decides both. None otherwise.
        line_waits: whether a done attempt's results line waits for its settle's answer,
            as its claim said (``lua/includes/lines.lua``): ``always``, ``follow`` (when it
            has follow-ups), None (written before its settle).
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
    unused: int = 0
    request_text: str | None = None
    parent_url: str | None = None
    exit: str | None = None
    jar: str | None = field(default=None, repr=False)  # cookie values: secrets
    weight: float | None = None
    etag: str | None = None
    last_modified: str | None = None
    rv_due: int | None = None
    fetcher: str | None = None
    domain_fetcher: str | None = None
    domain_wait_for: str | None = None
    auto_fetcher: str | None = None
    auto_level: str | None = None
    line_waits: str | None = None

    @classmethod
    def from_json(cls, text: str, job_id: str | None = None) -> Job:
        """Build a Job from the JSON text a script returned, or a stored one (``job_id``:
        its id, which a compact stored text leaves out; see :func:`expand_stored`).

        Runs once per claimed job: orjson reads it (about 4x faster than ``json``); the rare
        text orjson refuses and ``json`` accepts (an integer over 64 bits) is read by ``json``.
        """
        try:
            data = orjson.loads(text)
        except orjson.JSONDecodeError:
            data = json.loads(text)
        if job_id is not None:
            data = expand_stored(data, job_id)
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
            get("unused", 0),
            get("request"),
            get("parent_url"),
            get("exit"),
            get("jar"),
            get("weight"),
            get("etag"),
            get("last_modified"),
            get("rv_due"),
            get("fetcher"),
            get("domain_fetcher"),
            get("domain_wait_for"),
            get("auto_fetcher"),
            get("auto_level"),
            get("line_waits"),
        )

    @property
    def request(self) -> Request:
        """What the job sends: its stored request, or a plain ``GET`` of its URL.

        Raises:
            ConfigError: the stored request cannot be read (written by hand).
        """
        if self.request_text is None:
            return Request(self.url)
        try:
            return Request.from_text(self.url, self.request_text)
        except ValueError as exc:
            raise InvalidRequest("request", f"stored form is not JSON: {exc}") from None

    @property
    def meta(self) -> Any:
        """The request's ``meta`` (None when it has none)."""
        return None if self.request_text is None else self.request.meta

    def request_shown(self) -> dict[str, Any] | None:
        """The request for listings (secrets as ``***``); None for a plain ``GET``."""
        if self.request_text is None:
            return None
        try:
            return self.request.shown()
        except ConfigError as exc:
            return {"error": str(exc)}

    def payload_shown(self) -> Any:
        """The payload for listings: its secrets as ``***`` (a Scrapy request's ``Authorization``
        header, cookies, ``meta["proxy"]`` credentials: :func:`redact_value`)."""
        return redact_value(self.payload)

    @property
    def last_error(self) -> JobError | None:
        """The most recent error, if any."""
        return self.errors[-1] if self.errors else None

    @property
    def budget_left(self) -> int:
        """Attempts the job may still spend."""
        return max(self.max_attempts - self.attempts, 0)

    def as_dict(self) -> dict[str, Any]:
        """A JSON-friendly view (used by ``dead list --json``): times as ISO 8601 UTC text with
        ``_ms`` twins; credentials in the URL or an error message, and the secrets a payload
        holds (:func:`~scrapeq.engine.model.request.redact_value`), are shown as ``***``."""
        out: dict[str, Any] = {
            "id": self.id,
            "url": redact_url(self.url),
            "domain": self.domain,
            "lane": self.lane,
            "attempts": self.attempts,
            "max_attempts": self.max_attempts,
            "payload": self.payload_shown(),
        }
        out["request"] = self.request_shown()
        _times(out, created_at=self.created_ms, expires_at=self.expires_ms)
        out.update(
            throttles=self.throttles,
            releases=self.releases,
            depth=self.depth,
            parent=self.parent,
            dead_reason=self.dead_reason,
        )
        _times(out, died_at=self.died_ms)
        out["last_error"] = self.last_error.as_dict() if self.last_error else None
        out["errors"] = [e.as_dict() for e in self.errors]
        return out


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
            payload=job.payload_shown(),
            request=job.request_shown(),
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
        out["errors"] = [e.as_dict() for e in job.errors]
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
