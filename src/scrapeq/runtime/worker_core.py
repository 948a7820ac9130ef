"""A worker's state, shared by the phases of its run path.

:class:`WorkerCore` declares what a :class:`~scrapeq.runtime.worker.Worker` holds (set in its
``__init__``); each phase is a mixin over it in its own module: :mod:`.attempt` (fetch,
classify, handle), :mod:`.settler` (the settle buffer), :mod:`.leases` (heartbeats and
``max_job_time``), :mod:`.shutdown` (drain, release, the bounded exit). The results lines
are one composed object, :class:`~scrapeq.runtime.lines.Lines`, not a mixin.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from scrapeq.engine.config.settings import Settings
from scrapeq.engine.lua.scripts import Settled, Settlement
from scrapeq.engine.model.job import Job
from scrapeq.engine.queue import AsyncQueue
from scrapeq.errors import RedisUnavailable, ScriptError
from scrapeq.runtime.bans import BanRules
from scrapeq.runtime.browser import BrowserFetcher
from scrapeq.runtime.browser_notice import BenchNotice
from scrapeq.runtime.deadlines import Deadlines
from scrapeq.runtime.fetch import Fetcher, Response, Robots
from scrapeq.runtime.follow import BodyStore, FollowPolicy
from scrapeq.runtime.gather import Gather
from scrapeq.runtime.handlers import DaemonThreads, Handler
from scrapeq.runtime.isolation import HandlerRunner
from scrapeq.runtime.lines import ClaimPause, Lines
from scrapeq.runtime.metrics import WorkerMetrics
from scrapeq.runtime.reporter import RedisHealth, Reporter
from scrapeq.runtime.sinks import Sink

log = logging.getLogger("scrapeq.worker")

#: Back-off bounds while Redis is unreachable, seconds.
RECONNECT_MIN, RECONNECT_MAX = 0.2, 10.0


@dataclass
class WorkerStats:
    """Counters of one worker (this process only)."""

    claimed: int = 0
    done: int = 0
    retried: int = 0
    throttled: int = 0
    dead: int = 0
    released: int = 0
    stale: int = 0
    abandoned: int = 0  # attempts given up at max_job_time (left to their leases)
    started: float = field(default_factory=time.monotonic)
    #: Per fetcher (http, impersonate, browser): [requests, bytes] (a browser's page counts
    #: its document and every request of the page).
    fetched: dict[str, list[int]] = field(default_factory=dict)
    #: The browser's CPU-seconds (its chromium process trees), read when asked.
    browser_cpu: Callable[[], float] | None = field(default=None, repr=False)

    def cpu_seconds(self) -> dict[str, float]:
        """CPU-seconds: ``browser`` (its chromium process trees, when it ran) and ``process``
        (this process's own, every thread: the http and impersonate fetches are in it)."""
        own = {"process": time.process_time()}
        return own if self.browser_cpu is None else {"browser": self.browser_cpu(), **own}

    def fetched_by(self, fetcher: str, requests: int, size: int) -> None:
        """Count ``requests`` of ``fetcher`` that brought ``size`` bytes."""
        tally = self.fetched.setdefault(fetcher, [0, 0])
        tally[0] += requests
        tally[1] += size

    def count(self, status: str) -> None:
        """Count one settle answer (done, retried, throttled, dead, released, stale)."""
        if status == "done":  # the common case, first
            self.done += 1
        elif status in {"retried", "throttled", "dead", "released", "stale"}:
            setattr(self, status, getattr(self, status) + 1)


#: A buffered settlement: (settlement, job whose answer is counted, future awaiting it).
Pending = tuple[Settlement, Job | None, "asyncio.Future[Settled] | None"]

#: ``Worker(on_claimed=...)``: called with the jobs of each claim that brought some, before
#: their attempts start; sync, or async (then run as a task the worker awaits before it ends).
ClaimedHook: TypeAlias = Callable[[Sequence[Job]], Awaitable[None] | None]
#: ``Worker(on_settled=...)``: called with each job the worker settled, its settlement and the
#: settle script's answer (:class:`~scrapeq.engine.lua.scripts.Settled`: ``done``, ``retried``,
#: ``throttled``, ``released``, ``dead`` with its ``reason``, ``stale``); sync or async.
SettledHook: TypeAlias = Callable[[Job, Settlement, Settled], Awaitable[None] | None]


@dataclass
class Flight:
    """One job this worker holds: its task, when it was claimed, whether it is settled."""

    job: Job
    started: float  # monotonic time of the claim
    task: asyncio.Task[None] | None = None
    submitted: bool = False
    abandoned: bool = False


class WorkerCore:
    """The attributes every phase reads (set by ``Worker.__init__``) and two shared helpers."""

    queue: AsyncQueue
    settings: Settings
    handler: Handler
    concurrency: int
    sink: Sink | None
    burst: bool
    max_runtime: float | None
    tune_gc: bool
    follow_links: bool
    stats: WorkerStats
    metrics: WorkerMetrics | None
    on_claimed: ClaimedHook | None
    on_settled: SettledHook | None
    _hook_tasks: set[asyncio.Future[Any]]
    _fetcher: Fetcher | None
    _own_fetcher: bool
    _impersonator: Fetcher | None
    _browser: BrowserFetcher | None
    _bench_notice: BenchNotice | None = None  # tells Redis when the browsers are benched
    _follow: FollowPolicy
    _bodies: BodyStore | None
    _adapted: bool
    _health: RedisHealth
    _reporter: Reporter | None
    _in_thread: bool
    _call_handler: Callable[[Job, Response], Awaitable[Any]]
    _handlers: HandlerRunner | None
    _handler_deadlines: Deadlines
    _handler_threads: DaemonThreads
    _flights: dict[str, Flight]
    _pending: list[Pending]
    _gather: Gather  # when claims and settles wait for company (runtime/gather.py)
    _flush_lock: asyncio.Lock
    _slot_freed: asyncio.Event
    _queue_moved: asyncio.Event  # a settle of ours landed, urgent work, a stop: claim again
    _stopping: asyncio.Event
    # Set once the run is over, before its background loops are cancelled: each loop also
    # ends on it, so a cancellation a Redis client turns into an error (caught by a loop
    # that must never die) cannot keep the worker from returning.
    _loops_end: asyncio.Event
    _release_now: asyncio.Event
    _stop_at: float | None
    _hurry_at: float | None
    _pause: ClaimPause  # until when claims pause (our network, the sink)
    _lines: Lines  # the results lines: record, write, owe, acknowledge (runtime/lines.py)
    _robots: Robots | None
    _crawl_delays: dict[str, float]
    _grouped: set[str] | None
    _bans: BanRules

    async def _wait_for(self, event: asyncio.Event, timeout: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), timeout)

    def _redis_failed(self, exc: Exception, doing: str) -> None:
        """A call failed: Redis unreachable (or refusing writes for now) is one line per
        outage (:class:`~scrapeq.runtime.reporter.RedisHealth`); anything else, a script refusing
        the call or a bug, is a warning each time."""
        if isinstance(exc, RedisUnavailable):
            self._health.failed(exc, doing)
        else:
            kind = "redis error" if isinstance(exc, ScriptError) else type(exc).__name__
            log.warning("%s while %s, retrying: %s", kind, doing, exc)
