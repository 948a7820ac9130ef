"""What a worker writes and logs about one attempt: the results line's shape
(docs/INTERFACE.md: built, from the settle's answer, refused), the attempt's timing for the
adaptive limit, and the small helpers of its log lines. Who writes a line, when, and owes it
is :mod:`.lines`'s."""

from __future__ import annotations

import json
import logging
import time
import traceback
from datetime import UTC, datetime
from typing import Any

import orjson

from scrapeq.engine.lua.scripts import Settled, Settlement
from scrapeq.engine.model.job import Job
from scrapeq.engine.model.request import redact_value
from scrapeq.engine.model.urls import parse_target, redact_text, redact_url
from scrapeq.errors import InvalidURL
from scrapeq.runtime.classify import Classification
from scrapeq.runtime.fetch import Response
from scrapeq.runtime.outcomes import timed
from scrapeq.runtime.sinks import RecordRefused, Sink

log = logging.getLogger("scrapeq.worker")

#: The queue's once-per-crawl flag (``Queue.once_flag``) whose value names the crawl: the time
#: its first worker with a sink started. ``crawl --new`` forgets it with the other flags, so
#: the next worker names a new crawl. Every results line carries it as ``crawl_id``.
CRAWL_FLAG = "crawl_id"
#: The dead-letter reason of a job whose results record the sink refused for its content.
SINK_REFUSED = "sink_refused"


def with_latency(
    out: tuple[Settlement, dict[str, Any] | None], verdict: Classification, seconds: float
) -> tuple[Settlement, dict[str, Any] | None]:
    """The settlement with the fetch's latency and whether the site signalled overload
    (:func:`scrapeq.runtime.outcomes.timed`), beside the attempt's results line."""
    settlement, record = out
    return timed(settlement, verdict, seconds), record


def _host_of(job: Job) -> str:
    """The job's own host (``host[:port]``): its domain, unless ``politeness = domain`` filed
    it under its registrable domain (a results line names the host it was fetched from)."""
    d = job.domain
    if job.url.startswith((f"http://{d}/", f"https://{d}/")):
        return d  # job URLs are normalised: their host is the domain (politeness = host)
    try:
        target = parse_target(job.url, allow_private=True)
    except InvalidURL:
        return job.domain
    return target.domain


def about(job: Job, kind: str) -> dict[str, str]:
    """The structured fields of a line about one job (:mod:`scrapeq.runtime.logs`)."""
    return {"job_id": job.id, "domain": job.domain, "kind": kind}


def log_deferred(job: Job, settlement: Settlement, status: str) -> None:
    """The ``-v`` line of a retried, throttled or released job: its error kind and delay."""
    delay = max(settlement.delay_ms, settlement.retry_after_ms) / 1000
    kind = settlement.kind or ("shutdown" if settlement.shutdown else status)
    log.debug(
        "%s job=%s domain=%s kind=%s delay=%.2fs attempt=%d/%d",
        status, job.id, job.domain, kind, delay, job.attempts, job.max_attempts,
        extra={"job_id": job.id, "domain": job.domain, "kind": kind, "delay": delay,
               "status": status},
    )  # fmt: skip


def traceback_summary(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)[-3:]
    where = "; ".join(f"{f.filename.rsplit('/', 1)[-1]}:{f.lineno} in {f.name}" for f in frames)
    text = f"{type(exc).__name__}: {exc}"
    return f"{text} ({where})" if where else text


def not_json(result: Any) -> str | None:
    """Why a handler's result cannot be a results record's ``result``; None when it can.

    JSON is what orjson or ``json`` writes without a ``default`` (so datetimes and dataclasses
    pass, as orjson writes them, and integers over 64 bits as ``json`` does); a set, an
    arbitrary object, a dict with tuple keys or a cycle do not. orjson first: it answers in
    about a microsecond for a small result, and most results are small dicts.
    """
    try:
        orjson.dumps(result)
        return None
    except TypeError:
        pass
    try:
        json.dumps(result)
    except (TypeError, ValueError) as exc:
        return f"handler result is not JSON: {type(exc).__name__}: {exc}"
    return None


def settled_line(record: dict[str, Any], answer: Settled) -> dict[str, Any] | None:
    """The line written from the settle's answer: a dead job's (:func:`dead_line`), or a
    done page's with what the script decided: ``changed`` and ``not_modified`` (revisit on),
    ``skipped: "budget"`` when a per-domain budget cut a follow-up (counted in
    ``links.skipped`` by budget) or its next visit. None for another answer (stale, retried:
    the job lives on, and its line comes when it ends)."""
    if answer == "dead":
        return dead_line(record, answer.reason)
    if answer != "done":
        return None
    line = dict(record)
    if answer.changed is not None:
        line["changed"] = answer.changed
    if answer.not_modified:
        line["not_modified"] = True
    if answer.over_budget:
        line["skipped"] = "budget"
    links = line.get("links")
    if answer.cut and isinstance(links, dict):
        line["links"] = {**links, "skipped": {**links.get("skipped", {}), **answer.cut}}
    return line


def dead_line(record: dict[str, Any], reason: str | None) -> dict[str, Any]:
    """The results line of a job the settle script made dead with ``reason``: the attempt's
    line, its error prefixed with the reason (``max_attempts`` alone keeps the bare error, the
    results format since the first release)."""
    error = record["error"]
    if reason and reason != "max_attempts":
        error = f"{reason}: {error}" if error else reason
    return {**record, "outcome": "dead", "error": error}


def make_record(
    job: Job,
    outcome: str,
    response: Response | None,
    started: float,
    error: str | None,
    result: Any,
) -> dict[str, Any]:
    """A results line in the docs/INTERFACE.md format."""
    url = redact_url(job.url)
    final_url = None
    if response is not None:  # most pages end where they began: their URL redacted once
        final_url = url if response.url == job.url else redact_url(response.url)
    return {
        "id": job.id,
        "url": url,
        "final_url": final_url,
        "domain": _host_of(job),
        "lane": job.lane,
        "outcome": outcome,
        "status": response.status if response is not None else None,
        "attempts": job.attempts,
        "elapsed_ms": round((time.monotonic() - started) * 1000, 1),
        "bytes": len(response.body) if response is not None else 0,
        "finished_at": datetime.now(tz=UTC).isoformat(),
        "error": None if error is None else redact_text(error),
        "result": result,
        "depth": job.depth,
        "parent": job.parent,
        # a meta["proxy"] URL's credentials as ***; a plain GET has no meta (no request)
        "meta": None if job.request_text is None else redact_value(job.meta),
        "parent_url": redact_url(job.parent_url) if job.parent_url else None,
    }


def _without_nul(value: Any) -> Any:
    """``value`` with every NUL of its texts (keys too) as U+FFFD, the replacement character."""
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd")
    if isinstance(value, dict):
        return {_without_nul(k): _without_nul(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_without_nul(v) for v in value]
    return value


def refused_line(record: dict[str, Any], reason: str, *, dead: bool) -> dict[str, Any]:
    """The line written for ``record`` when the sink refused it for its content (``reason``):
    without its ``result`` (null), NULs of its texts replaced (U+FFFD), the error
    ``sink_refused: <reason>`` (before the line's own error, if any); ``dead``: its outcome
    ``dead`` (the job is then settled dead)."""
    own = record.get("error")
    error = f"{SINK_REFUSED}: {reason}" + (f" (the line's error: {own})" if own else "")
    line = {**record, "result": None, "error": error}
    if dead:
        line["outcome"] = "dead"
    refused: dict[str, Any] = _without_nul(line)
    return refused


async def write_or_refused(sink: Sink, record: dict[str, Any], *, dead: bool) -> dict[str, Any]:
    """Write ``record`` to ``sink`` and answer it; when the sink refuses it for its content
    (:class:`~scrapeq.runtime.sinks.RecordRefused`), write its :func:`refused_line` instead,
    once, and answer that. Raises what the sink raised otherwise (a store down), and
    RecordRefused when even the refused line is refused."""
    try:
        await sink.write(record)
        return record
    except RecordRefused as exc:
        return await write_refused(sink, record, exc, dead=dead)


async def write_refused(
    sink: Sink, record: dict[str, Any], exc: RecordRefused, *, dead: bool
) -> dict[str, Any]:
    """:func:`write_or_refused` once ``sink`` refused ``record`` (``exc``): its
    :func:`refused_line` written, and answered."""
    line = refused_line(record, exc.reason, dead=dead)
    log.warning(
        "job %s: the results sink refused its record (%s): its line is written without "
        "its result%s", record.get("id"), redact_text(exc.reason),
        ", and the job is dead" if dead and record.get("outcome") != "dead" else "",
        extra={"job_id": record.get("id"), "kind": SINK_REFUSED},
    )  # fmt: skip
    await sink.write(line)
    return line
