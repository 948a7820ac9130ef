"""What a worker tells: the queue's transitions and progress once, its own Redis connection.

**Queue-wide lines, logged by one worker of all.** Every worker process runs a
:class:`Reporter`; they elect a *log leader* with a lease in Redis (``sq:{Q}:log-leader``,
``lua/log_leader-1.lua``): each asks every :data:`TICK` seconds, the holder renews its lease
of :data:`LEASE` seconds. The leader tails the queue's events stream (``XREAD`` after the id
of the last event it logged, kept in memory) and logs each transition once, on the logger
``scrapeq.worker.events``: a breaker that trips, goes half-open, recovers, is reset or retires
(with the number of queued jobs its retirement sends to the dead letters), a global pause and
its end, a lost job. Every ``log_every`` seconds it also logs one progress line on
``scrapeq.worker.progress``: done/s and the queue's counts (those of ``scrapeq status``) with
the breakers not closed, and, while every exit of the pool is down, how many and when the
first is back (``exits_down=2/2 (all proxies resting: next back in 12 s)``).

Each renewal stores the leader's cursor in Redis (``sq:{Q}:log-cursor``, kept
:data:`CURSOR_TTL` seconds). A new leader starts after that cursor, so a handover (the leader
stopping, or crashing: its lease lapses within :data:`LEASE` seconds) skips nothing; after a
crash the events it logged since its last renewal (one tick) are logged again. With no cursor
stored (no leader for :data:`CURSOR_TTL`, a new queue) a leader starts from the stream's
newest event: older transitions are history, not news. A stopping worker takes the lease if
it can (waiting up to :data:`CLOSE_WAIT` while events wait to be logged and another holds
it), logs what is left and releases it, so the last worker of a burst logs the last events.

**A crawl's seeds, per process.** A seed that fails and is tried again is logged at INFO
with its error (:func:`log_seed_deferred`): a crawl whose seeds cannot be fetched has nothing
else to do, and its progress lines alone said only ``retried=3``.

**Redis lines, per process.** Each process has its own connections, so each logs when it
loses Redis and when it has it back (:class:`RedisHealth`): one line each, however many calls
fail in between.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import secrets
import socket
import time
from datetime import UTC, datetime
from typing import Any

from scrapeq.engine.lua.scripts import Settlement
from scrapeq.engine.model.job import Job
from scrapeq.engine.model.urls import redact_text, redact_url
from scrapeq.engine.queue import AsyncQueue
from scrapeq.errors import RedisUnavailable, ScriptError

__all__ = [
    "CLOSE_WAIT",
    "CURSOR_TTL",
    "LEASE",
    "LOST_AFTER",
    "SEED_DEFERRED",
    "SUMMARY_TIMEOUT",
    "TICK",
    "RedisHealth",
    "Reporter",
    "log_seed_deferred",
    "log_summary",
]

log = logging.getLogger("scrapeq.worker")
events_log = logging.getLogger("scrapeq.worker.events")
progress_log = logging.getLogger("scrapeq.worker.progress")

#: Seconds between a reporter's turns (lease renewal, events read, progress check).
TICK = 1.0
#: The leader's lease, seconds: four missed renewals before another worker takes over.
LEASE = 5.0
#: Seconds a stored cursor outlives the last leader: a fleet restarted within it goes on
#: where it stopped; after it, the events in between are history.
CURSOR_TTL = 600.0
#: Seconds a stopping worker waits for the lease while events wait to be logged.
CLOSE_WAIT = 0.5
#: Events read per XREAD, and most reads per turn (the stream holds about 10,000).
READ_COUNT, READ_PAGES = 500, 20
#: A progress line costs at most 1/PROGRESS_COST of the time: reading every domain's breaker
#: is O(domains), so on a queue with very many the lines come less often than log_every.
PROGRESS_COST = 20
#: An event logged more than this many seconds after it happened says when it happened.
LATE = 10.0
#: Seconds the summary at the end of a run may wait for Redis.
SUMMARY_TIMEOUT = 3.0
#: Failed calls in a row (any loop's) that make Redis lost: a lone one is no outage.
LOST_AFTER = 2

#: Settle answers of a job that will be tried again (what :func:`log_seed_deferred` tells).
SEED_DEFERRED = frozenset({"retried", "throttled", "released"})

#: kind -> (level, line); ``%(domain)s`` and ``%(message)s`` are the event's, ``%(jobs)s``
#: the jobs a retirement drains. Other kinds (dead letters: each worker logs its own) are
#: not logged by the leader.
_LINES: dict[str, tuple[int, str]] = {
    "trip": (logging.INFO, "breaker tripped domain=%(domain)s: %(message)s"),
    "half_open": (logging.INFO, "breaker half-open domain=%(domain)s: %(message)s"),
    "recovered": (logging.INFO, "breaker recovered domain=%(domain)s: %(message)s"),
    "reset": (logging.INFO, "breaker reset domain=%(domain)s: %(message)s"),
    "retired": (
        logging.INFO,
        "domain retired domain=%(domain)s jobs_drained=%(jobs)s: %(message)s; its %(jobs)s "
        "queued jobs go to the dead letters (domain_unavailable)",
    ),
    "global_pause": (
        logging.INFO,
        "global pause: %(message)s; the breakers that tripped together are closed again",
    ),
    "global_resume": (logging.INFO, "global pause over: %(message)s"),
    "lost": (logging.WARNING, "job lost domain=%(domain)s: %(message)s"),
}


class RedisHealth:
    """This process's view of Redis: one line when it is lost, one when it is back.

    Every loop of a worker that calls Redis reports here: :meth:`failed` after a call that
    found Redis unavailable, :meth:`ok` after one that succeeded. Redis is *lost* at the
    :data:`LOST_AFTER`-th failure in a row, counted from the first: one failure alone is a
    connection the pool had kept open across a restart, say, that redis-py replaces at the
    next call, not an outage worth a line (it is a ``-v`` line).
    """

    def __init__(self) -> None:
        self._down_since: float | None = None  # the first failure in a row
        self._failures = 0
        self._announced = False

    @property
    def down(self) -> bool:
        """Whether the last call failed."""
        return self._down_since is not None

    def failed(self, exc: BaseException, doing: str) -> None:
        """A call found Redis unreachable, or refusing writes for now (``RedisUnavailable``;
        ``doing``: what the call was for, ``claiming``, ``settling``...)."""
        self._failures += 1
        if self._down_since is None:
            self._down_since = time.monotonic()
        if self._announced or self._failures < LOST_AFTER:
            log.debug("redis unavailable while %s, retrying: %s", doing, exc)
            return
        self._announced = True
        log.warning(
            "redis unavailable while %s: %s; retrying until it answers",
            doing, exc, extra={"kind": "redis_lost", "error": str(exc)},
        )  # fmt: skip

    def unanswered(self) -> None:
        """Calls got no answer in time and were given up (a stopping worker says which)."""
        if self._down_since is None:
            self._down_since = time.monotonic()

    def ok(self, sent: float) -> None:
        """A call sent at ``sent`` (monotonic) succeeded: Redis is back if it was lost.

        A call sent before the first failure says nothing about now: its answer may have been
        on its way (or read) when another loop's call failed.
        """
        if self._down_since is None or sent <= self._down_since:
            return
        outage = time.monotonic() - self._down_since
        if self._announced:
            log.info(
                "redis reachable again after %.1f s (%d calls failed meanwhile)",
                outage, self._failures,
                extra={"kind": "redis_back", "outage": round(outage, 3),
                       "failures": self._failures},
            )  # fmt: skip
        else:
            log.debug("redis answered again after %d failed call(s)", self._failures)
        self._down_since = None
        self._failures = 0
        self._announced = False


def worker_id() -> str:
    """``host:pid:random``: unique per reporter, readable in ``sq:{Q}:log-leader``."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


class Reporter:
    """Takes its turn as the queue's log leader; see the module docstring.

    Args:
        queue: the worker's queue.
        log_every: seconds between progress lines (0: none).
        health: where Redis failures and successes are reported (default: a new one).
    """

    def __init__(
        self, queue: AsyncQueue, *, log_every: float, health: RedisHealth | None = None
    ) -> None:
        self.queue = queue
        self.log_every = log_every
        self.health = health or RedisHealth()
        self.id = worker_id()
        self.leading = False
        self._cursor: str | None = None  # the last event logged, while leading
        self._sample: tuple[float, dict[str, int]] | None = None  # progress: when, figures
        self._next_progress = 0.0
        self._stop = asyncio.Event()
        self._error: str | None = None  # the last turn's failure, said once

    async def run(self) -> None:
        """Take turns until :meth:`stop`; never raises.

        Stopped by a flag, not by cancelling: on Python 3.11 a cancel that lands as a Redis
        call completes can be lost (``asyncio.wait_for``, which redis-py uses for its socket
        timeout, swallows it), and the loop would go on.
        """
        while not self._stop.is_set():
            await self.turn()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), TICK)

    def stop(self) -> None:
        """End :meth:`run` after its current turn."""
        self._stop.set()

    async def turn(self) -> None:
        """One turn: renew or take the lease; when leading, log new events and progress."""
        try:
            await self._turn()
        except RedisUnavailable as exc:
            self.health.failed(exc, "reporting")
        except Exception as exc:  # a refusal (an ACL without +xread), a bug: said once
            if str(exc) != self._error:
                log.warning(
                    "the queue's events cannot be logged: %s: %s; trying every %g s",
                    type(exc).__name__, exc, TICK,
                    exc_info=not isinstance(exc, ScriptError),  # a bug: its traceback
                )  # fmt: skip
            self._error = str(exc)
        else:
            self._error = None

    async def close(self) -> None:
        """Log what is left if this process can lead, then release the lease.

        The caller bounds the time (Redis may not answer).
        """
        deadline = time.monotonic() + CLOSE_WAIT
        with contextlib.suppress(RedisUnavailable, ScriptError):
            while True:
                behind = await self._turn(progress=False)
                if self.leading or not behind or time.monotonic() >= deadline:
                    break
                await asyncio.sleep(0.1)
            if self.leading:
                await self.queue.log_leader(
                    self.id, lease=LEASE, cursor_ttl=CURSOR_TTL, cursor=self._cursor, release=True
                )
                self.leading = False

    async def _turn(self, *, progress: bool = True) -> bool:
        """Renew or take the lease and do the leader's work; answers whether events wait
        for another leader."""
        cursor = self._cursor if self.leading else None
        sent = time.monotonic()
        answer = await self.queue.log_leader(
            self.id, lease=LEASE, cursor_ttl=CURSOR_TTL, cursor=cursor
        )
        self.health.ok(sent)
        if answer.state == 0:
            if self.leading:
                log.debug("no longer the log leader")
            self.leading = False
            return answer.behind
        if answer.state == 2:
            self._lead(answer.start)
        await self._log_events()
        if progress and self.log_every > 0:
            await self._progress()
        return False

    def _lead(self, start: str) -> None:
        known = self._cursor
        self._cursor = start if known is None or _id_key(start) > _id_key(known) else known
        self.leading = True
        self._sample = None
        log.debug("log leader from event %s on (%s)", self._cursor, self.id)

    async def _log_events(self) -> None:
        assert self._cursor is not None
        for _ in range(READ_PAGES):
            entries = await self.queue.events_after(self._cursor, READ_COUNT)
            for entry in entries:
                _log_event(entry, self.id)
                self._cursor = entry["id"]
            if len(entries) < READ_COUNT:
                return

    async def _progress(self) -> None:
        now = time.monotonic()
        if now < self._next_progress:
            return
        figures = await self.queue.figures()
        cost = time.monotonic() - now
        self._next_progress = now + max(self.log_every, PROGRESS_COST * cost)
        sample, self._sample = self._sample, (now, figures)
        if sample is None:  # the first sample of a lead: a rate needs two
            return
        rate = (figures["done"] - sample[1]["done"]) / max(now - sample[0], 1e-9)
        note = _exits_down_note(self.queue, figures) + _browsers_down_note(figures)
        shown = " ".join(f"{name}={value}" for name, value in figures.items())
        progress_log.info(
            "progress done/s=%.1f %s%s", rate, shown, note,
            extra={"done_per_s": round(rate, 2), **figures, "leader": self.id},
        )  # fmt: skip


def _exits_down_note(queue: AsyncQueue, figures: dict[str, int]) -> str:
    """The end of a progress line while every exit of the pool is down (``figures``'
    ``exits_down_ms``, taken out): `` exits_down=2/2 (all proxies resting: next back in 12
    s)``; else nothing. Nothing is claimed meanwhile: without it the line said only
    ``done/s=0.0`` (issue 38 item 16)."""
    wait = figures.pop("exits_down_ms", None)
    if wait is None:
        return ""
    n = len(queue.exit_pool)
    return f" exits_down={n}/{n} (all proxies resting: next back in {math.ceil(wait / 1000)} s)"


def _browsers_down_note(figures: dict[str, int]) -> str:
    """The end of a progress line while some worker's browsers are benched (``figures``'
    ``browsers_down``, taken out): `` browsers_down=1 (browser jobs wait: no usable browser
    in 1 worker(s))``; else nothing."""
    n = figures.pop("browsers_down", None)
    if n is None:
        return ""
    return f" browsers_down={n} (browser jobs wait: no usable browser in {n} worker(s))"


def log_seed_deferred(job: Job, settlement: Settlement, status: str) -> None:
    """A crawl's seed that failed and will be tried again (``status``: ``retried``,
    ``throttled`` or ``released``), at INFO: its attempt, when it comes back, and its error."""
    delay = max(settlement.delay_ms, settlement.retry_after_ms) / 1000
    kind = settlement.kind or status
    error = redact_text(settlement.message or "")
    log.info(
        "seed %s job=%s url=%s attempt %d/%d, next try in %.1f s: %s%s",
        status, job.id, redact_url(job.url), job.attempts, job.max_attempts, delay, kind,
        f": {error}" if error else "",
        extra={"job_id": job.id, "domain": job.domain, "kind": kind, "delay": delay,
               "status": status, "error": error},
    )  # fmt: skip


async def log_summary(queue: AsyncQueue, *, timeout: float = SUMMARY_TIMEOUT) -> None:
    """Log the queue's counts once a run is over: the line ``scrapeq worker`` ends with.

    They are the queue's, as ``scrapeq status`` shows them, not the sum of what each process
    settled: the jobs a retirement sends to the dead letters are drained by claims and
    promotions, never settled by a worker.
    """
    try:
        figures = await asyncio.wait_for(queue.figures(), timeout)
    except (TimeoutError, RedisUnavailable, ScriptError) as exc:
        log.warning("no summary: %s", str(exc) or f"redis did not answer within {timeout:g} s")
        return
    figures.pop("exits_down_ms", None)  # a state of the moment, not a count
    figures.pop("browsers_down", None)
    shown = " ".join(f"{name}={value}" for name, value in figures.items())
    log.info("summary queue=%s %s (the queue's counts, as scrapeq status shows them)",
             queue.name, shown, extra=figures)  # fmt: skip


def _id_key(entry_id: str) -> tuple[int, int]:
    """A stream id as a comparable pair (``1718000000000-3`` → (1718000000000, 3))."""
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def _log_event(entry: dict[str, str], leader: str) -> None:
    kind = entry.get("kind", "")
    line = _LINES.get(kind)
    if line is None:
        return
    level, template = line
    values: dict[str, Any] = {
        "domain": entry.get("domain", ""),
        "message": entry.get("message", ""),
        "jobs": int(entry.get("jobs") or 0),
    }
    text = template % values
    at_ms = float(entry.get("at") or 0)
    at = datetime.fromtimestamp(at_ms / 1000, tz=UTC)
    if time.time() - at_ms / 1000 > LATE:
        text += f" (at {at.isoformat(timespec='seconds')})"
    extra: dict[str, Any] = {
        "kind": kind,
        "event_id": entry["id"],
        "event_at": at.isoformat(timespec="milliseconds"),
        "leader": leader,
    }
    if values["domain"]:
        extra["domain"] = values["domain"]
    if kind == "retired":
        extra["jobs_drained"] = values["jobs"]
    events_log.log(level, "%s", text, extra=extra)
