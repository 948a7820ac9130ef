"""Read-only looks at one partition of a queue: its jobs by state (``scrapeq job list``) and a
domain's recent failures (the dashboard's domain view).

Nothing here changes Redis, so these are plain commands (:class:`Command` steps of an
operation), not scripts. Each is bounded by what it is asked for, never by the size of the
queue: a job listing reads the sorted sets with ``LIMIT`` and the named jobs' texts, and a
queue-wide sorted set filtered by domain (delayed, in flight) is read at most
:data:`SCAN_LIMIT` entries deep. :class:`~scrapeq.engine.queue.Queue` routes them to the
partition of a domain, or runs them on every partition and merges.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from scrapeq.engine.lua.scripts import Command, Op, server_ms_op
from scrapeq.engine.model.job import Job, JobError, JobInfo
from scrapeq.engine.model.keys import Keys

__all__ = [
    "JOB_STATES",
    "PENDING_STATES",
    "SCAN_LIMIT",
    "JobListing",
    "merge_listings",
    "op_job_list",
    "op_recent_errors",
    "op_walk_page",
    "parse_recent_errors",
]

#: The states ``job list`` reads; the pending ones are its default.
JOB_STATES = ("ready", "delayed", "inflight", "dead")
PENDING_STATES = ("ready", "delayed", "inflight")
#: Entries of a queue-wide sorted set (delayed, in flight) read at most to filter by domain.
SCAN_LIMIT = 10_000
_PAGE = 500


@dataclass(frozen=True, slots=True)
class JobListing:
    """Jobs of one state, in their order (ready: most urgent first; delayed: soonest due;
    in flight: soonest lease deadline; dead: newest first).

    Attributes:
        state: the state listed.
        jobs: at most the limit asked for, each as ``job show`` sees it (no place in line).
        partial: a domain's delayed or in-flight jobs were looked for among the first
            :data:`SCAN_LIMIT` entries only, and there were more.
    """

    state: str
    jobs: list[JobInfo]
    partial: bool = False


def op_recent_errors(keys: Keys, domain: str) -> Op[list[dict[str, Any]]]:
    """The last failures charged to ``domain``'s breaker, newest first (see
    :func:`parse_recent_errors`)."""
    text = yield Command(("HGET", keys.domain(domain), "errs"))
    return parse_recent_errors(text)


def parse_recent_errors(text: str | None) -> list[dict[str, Any]]:
    """The ``errs`` field of a domain's hash (``lua/includes/breaker.lua``: ``note_failure``)
    as ``[{"id", "at", "at_ms", "kind", "message"}]``, newest first; unreadable text is no
    error (an empty list)."""
    try:
        items = json.loads(text) if text else []
    except ValueError:
        return []
    out = [
        {"id": str(e.get("id", "")), **_error(e).as_dict()}
        for e in (items if isinstance(items, list) else [])
        if isinstance(e, dict)
    ]
    out.reverse()
    return out


def _error(entry: dict[str, Any]) -> JobError:
    at = entry.get("at")
    return JobError(int(at) if isinstance(at, int | float) else 0, str(entry.get("kind", "")),
                    str(entry.get("msg", "")))  # fmt: skip


def op_job_list(
    keys: Keys, state: str, domain: str | None, limit: int, clock_offset_ms: int = 0
) -> Op[JobListing]:
    """At most ``limit`` jobs in ``state`` (of ``domain`` when given) on the partition of
    ``keys``, in the order of :class:`JobListing`."""
    now_ms = yield from server_ms_op(clock_offset_ms)
    partial = False
    if state == "ready":
        scored = yield from _ready(keys, domain, limit)
    elif state == "dead":
        key = keys.dead if domain is None else keys.domain_dead(domain)
        scored = _scores((yield Command(("ZREVRANGE", key, 0, limit - 1, "WITHSCORES"))))
    else:
        key = keys.delayed if state == "delayed" else keys.inflight
        if domain is None:
            scored = _scores((yield Command(("ZRANGE", key, 0, limit - 1, "WITHSCORES"))))
        else:
            scored, partial = yield from _scan_for(keys, key, domain, limit)
    jobs = yield from _load(keys, scored)
    infos = [_info(job, state, score, now_ms) for job, score in jobs]
    return JobListing(state, infos, partial)


def op_walk_page(
    keys: Keys, state: str, domain: str | None, start: int, count: int, clock_offset_ms: int = 0
) -> Op[tuple[list[JobInfo], int]]:
    """One page of a walk over every pending job: ``count`` entries from index ``start`` of
    ``domain``'s ready queue (``state`` ready), or of the partition's delayed or in-flight
    set, kept to ``domain``'s jobs when given. Answers the jobs (a job settled since the
    range was read is left out) and how many entries were read: fewer than ``count`` is the
    end. Not a snapshot: a job that moves while a walk goes on may be met twice or missed."""
    now_ms = yield from server_ms_op(clock_offset_ms)
    if state == "ready":
        assert domain is not None
        key = keys.domain_queue(domain)
    else:
        key = keys.delayed if state == "delayed" else keys.inflight
    scored = _scores((yield Command(("ZRANGE", key, start, start + count - 1, "WITHSCORES"))))
    jobs = yield from _load(keys, scored)
    kept = [_info(job, state, score, now_ms) for job, score in jobs
            if domain is None or job.domain == domain]  # fmt: skip
    return kept, len(scored)


def merge_listings(listings: Sequence[JobListing], limit: int) -> JobListing:
    """The listings of one state from every partition as one, in its order, cut at ``limit``."""
    state = listings[0].state
    jobs = [j for listing in listings for j in listing.jobs]
    jobs.sort(key=lambda info: _order(info, state))
    return JobListing(state, jobs[:limit], any(listing.partial for listing in listings))


def _order(info: JobInfo, state: str) -> tuple[float, str]:
    if state == "dead":
        return (-(info.job.died_ms or 0), info.job.id)
    if state == "inflight":
        return (info.lease_deadline_ms or 0, info.job.id)
    return (info.eligible_ms or 0, info.job.id)


def _scores(reply: Any) -> list[tuple[str, float]]:
    """A ``WITHSCORES`` reply (flat RESP2 list, or RESP3 pairs) as (member, score) pairs."""
    items = list(reply or [])
    if items and isinstance(items[0], list | tuple):
        return [(str(m), float(s)) for m, s in items]
    return [(str(m), float(s)) for m, s in zip(items[::2], items[1::2], strict=True)]


def _ready(keys: Keys, domain: str | None, limit: int) -> Op[list[tuple[str, float]]]:
    """Ready jobs, most urgent first: a domain's own queue; without a domain, those of the
    domains next in line (that may dispatch, then waiting for a time, then at their cap with
    jobs in flight), at most ``limit`` domains of each kind, the most urgent of each first."""
    if domain is not None:
        return _scores((yield Command(("ZRANGE", keys.domain_queue(domain), 0, limit - 1,
                                       "WITHSCORES"))))  # fmt: skip
    found: list[tuple[str, float]] = []
    for name in (yield from _domains_in_line(keys, limit)):
        if len(found) >= limit:
            break
        page = yield Command(("ZRANGE", keys.domain_queue(name), 0, limit - len(found) - 1,
                              "WITHSCORES"))  # fmt: skip
        found.extend(_scores(page))
    found.sort(key=lambda pair: pair[1])
    return found


def _domains_in_line(keys: Keys, limit: int) -> Op[list[str]]:
    ready = yield Command(("ZRANGE", keys.domains_ready, 0, limit - 1))
    waiting = yield Command(("ZRANGE", keys.domains_wait, 0, limit - 1))
    held = _scores((yield Command(("ZRANGE", keys.inflight, 0, limit - 1, "WITHSCORES"))))
    busy = [job.domain for job, _ in (yield from _load(keys, held))]
    return list(dict.fromkeys([*ready, *waiting, *busy]))


def _scan_for(
    keys: Keys, key: str, domain: str, limit: int
) -> Op[tuple[list[tuple[str, float]], bool]]:
    """The first ``limit`` members of the sorted set ``key`` whose job is ``domain``'s, looked
    for among its first :data:`SCAN_LIMIT` members; and whether more were left unread."""
    found: list[tuple[str, float]] = []
    for start in range(0, SCAN_LIMIT, _PAGE):
        page = _scores((yield Command(("ZRANGE", key, start, start + _PAGE - 1, "WITHSCORES"))))
        for job, score in (yield from _load(keys, page)):
            if job.domain == domain:
                found.append((job.id, score))
                if len(found) == limit:
                    return found, False
        if len(page) < _PAGE:
            return found, False
    more = int((yield Command(("ZCARD", key)))) > SCAN_LIMIT
    return found, more


def _load(keys: Keys, scored: list[tuple[str, float]]) -> Op[list[tuple[Job, float]]]:
    """The jobs of ``scored`` (member, score) whose key still holds a readable job."""
    if not scored:
        return []
    texts = yield Command(("MGET", *[keys.job(member) for member, _ in scored]))
    out: list[tuple[Job, float]] = []
    for (member, score), text in zip(scored, texts, strict=True):
        if text is None:
            continue  # settled or cancelled since the range was read
        try:
            out.append((Job.from_json(text, member), score))
        except (ValueError, KeyError, TypeError, AttributeError):
            out.append((Job(member, "", "", "", 0, 0, raw=text), score))
    return out


def _info(job: Job, state: str, score: float, now_ms: int) -> JobInfo:
    if state == "inflight":
        return JobInfo(job, state, now_ms, eligible_ms=job.eligible_ms or None,
                       lease_deadline_ms=int(score))  # fmt: skip
    if state == "delayed":
        return JobInfo(job, state, now_ms, eligible_ms=int(score))
    return JobInfo(job, state, now_ms, eligible_ms=job.eligible_ms or None)
