"""The asyncio worker: claim in batches, fetch concurrently, settle in batches.

One :class:`Worker` runs in one event loop. Its run path is split into named phases:

- **claim** (:meth:`Worker._claim_loop`): claims as many jobs as it has free slots, in one
  round trip, and sleeps until the next due time the claim reports when nothing is ready;
- **fetch** (:meth:`Worker._attempt`): one total deadline per request (body included);
- **classify**: status, exception and timing become an outcome (``scrapeq.runtime.classify``);
- **settle** (:meth:`Worker._settle_loop`): finished jobs are settled many per script call,
  flushed every few milliseconds;
- **heartbeat** (:meth:`Worker._heartbeat_loop`): leases of long jobs are renewed, up to
  ``max_job_time``: an attempt held longer is abandoned and its lease left to expire;
- **report** (:class:`.reporter.Reporter`): takes its turn as the queue's log leader,
  which logs each breaker transition and global pause once across all workers, and the
  queue's progress every ``log_every`` seconds.

A handler runs for at most ``handler_timeout`` seconds: an async one is cancelled then, a sync
one (on the worker's own daemon threads, :mod:`.handlers`) is abandoned to its thread;
either way the job is retried with the error kind ``handler_timeout``.

Graceful shutdown: the first SIGTERM/SIGINT stops claiming and gives in-flight jobs
``shutdown_grace`` seconds; what is left is released without spending an attempt. A second
signal releases at once. Whatever Redis does, the exit is bounded: the last settlements and
releases get what is left of the grace period plus :data:`EXIT_MARGIN` seconds
(:data:`HURRY_MARGIN` after a second signal); what Redis has not taken by then is left to the
jobs' leases, which expire, so any worker's claim reaps the jobs.

While it runs, a worker tunes CPython's cyclic garbage collector (``tune_gc``, on by default;
see :func:`tuned_gc`): a claim brings a burst of objects that live for the tens of
milliseconds a fetch takes, and with the default first threshold (700 net allocations) nearly
every burst ran a collection that pushed live jobs into older generations, ending in a full
collection every couple of thousand jobs: a quarter of the worker's CPU in the end-to-end
benchmark (docs/BENCHMARKS.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import logging
import os
import signal
import time
import traceback
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

import orjson

from scrapeq.engine.job import Job
from scrapeq.engine.queue import AsyncQueue
from scrapeq.engine.scripts import EnqueueSpec, Settlement
from scrapeq.engine.urls import parse_target, redact_text, redact_url
from scrapeq.errors import InvalidURL, Permanent, RedisUnavailable, Retry, ScriptError
from scrapeq.runtime import progress
from scrapeq.runtime.classify import (
    OVERLOAD_REASONS,
    Classification,
    Outcome,
    classify_exception,
    classify_response,
)
from scrapeq.runtime.deadlines import Deadlines
from scrapeq.runtime.fetch import Fetcher, Response, Robots
from scrapeq.runtime.follow import BodyStore, Follow, FollowPolicy, Handled, adapt_handler
from scrapeq.runtime.handlers import (
    DaemonThreads,
    Handler,
    HandlerAborted,
    HandlerTimeout,
    handler_caller,
)
from scrapeq.runtime.isolation import HandlerRunner
from scrapeq.runtime.links import extract_counted
from scrapeq.runtime.metrics import WorkerMetrics
from scrapeq.runtime.reporter import SEED_DEFERRED, RedisHealth, Reporter, log_seed_deferred
from scrapeq.runtime.sinks import Sink
from scrapeq.runtime.wakeup import wake_on_urgent

__all__ = ["Handler", "Worker", "WorkerStats", "default_handler", "tuned_gc"]

log = logging.getLogger("scrapeq.worker")


#: Most jobs claimed in one call (a claim script must not hold Redis for long).
BATCH = 256
#: Longest sleep when idle: new enqueues are noticed at least this often.
IDLE_MAX = 1.0
#: Most settlements sent in one script call.
SETTLE_MAX = 500
#: Settle buffer flush period, seconds.
SETTLE_EVERY = 0.005
#: Back-off bounds while Redis is unreachable, seconds.
RECONNECT_MIN, RECONNECT_MAX = 0.2, 10.0
#: Pause of claiming after our own network failed (proxy down), seconds.
OURS_PAUSE = 2.0
#: Longest pause of claiming while the sink keeps failing (a database gone away): the pause
#: doubles from OURS_PAUSE with each failure in a row, and a write that works ends it.
SINK_PAUSE_MAX = 60.0
#: The collector's first threshold while a worker runs (CPython's default: 700).
GC_THRESHOLD = 10_000
#: Seconds past the grace period the last settlements and releases may take. A healthy Redis
#: takes them in milliseconds; one that does not answer must not hold the exit (a supervisor or
#: an orchestrator kills a worker that overstays), and what it never took is safe with the
#: jobs' leases.
EXIT_MARGIN = 3.0
#: After a second signal, the seconds the releases get: enough for a healthy Redis to take the
#: jobs back at once, short enough to be "now" when it does not answer.
HURRY_MARGIN = 1.0
#: Most seconds a stopping worker gives its reporter to log the last events and hand on the
#: log leader's lease (within the exit deadline).
REPORT_MARGIN = 1.0
#: Most threads running sync handlers: the size of the executor the worker used before
#: (asyncio's default, ``min(32, cpus + 4)``), as handlers are parsers held by the GIL: more
#: threads add memory, not throughput. They start on demand, so they only add up when calls
#: are stuck; then the calls that find none free time out like the stuck ones.
HANDLER_THREADS = min(32, (os.cpu_count() or 1) + 4)

_gc_users = 0  # workers of this process inside tuned_gc()
_gc_before: tuple[int, ...] = ()


@contextlib.contextmanager
def tuned_gc() -> Iterator[None]:
    """Tune the cyclic garbage collector for a worker's allocation pattern, then restore it.

    On entry (the first of nested or concurrent uses): ``gc.freeze()`` moves every object alive
    now (modules, settings, the caller's data) to the permanent generation, so collections
    never walk them again, and the first threshold is raised to :data:`GC_THRESHOLD` (a
    higher one is kept). Objects that die young are freed by reference counting anyway; what
    the collector is for, garbage cycles, is still collected, every 10,000 net allocations
    instead of 700. On exit (the last use): the thresholds are put back and the frozen
    objects returned to the oldest generation. Nothing happens while the collector is
    disabled.
    """
    global _gc_users, _gc_before
    if not gc.isenabled() and _gc_users == 0:
        yield
        return
    if _gc_users == 0:
        _gc_before = gc.get_threshold()
        gc.freeze()
        gc.set_threshold(max(_gc_before[0], GC_THRESHOLD), *_gc_before[1:])
    _gc_users += 1
    try:
        yield
    finally:
        _gc_users -= 1
        if _gc_users == 0:
            gc.set_threshold(*_gc_before)
            gc.unfreeze()


def default_handler(job: Job, response: Response) -> dict[str, Any]:
    """The result when no handler is given: basic metadata of the response."""
    return {
        "final_url": response.url,
        "content_type": response.headers.get("Content-Type"),
        "redirects": response.redirects,
    }


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

    def count(self, status: str) -> None:
        """Count one settle answer (done, retried, throttled, dead, released, stale)."""
        if status == "done":  # the common case, first
            self.done += 1
        elif status in {"retried", "throttled", "dead", "released", "stale"}:
            setattr(self, status, getattr(self, status) + 1)


#: A buffered settlement: (settlement, job whose answer is counted, future awaiting it).
_Pending = tuple[Settlement, Job | None, "asyncio.Future[str] | None"]


@dataclass
class _Flight:
    """One job this worker holds: its task, when it was claimed, whether it is settled."""

    job: Job
    started: float  # monotonic time of the claim
    task: asyncio.Task[None] | None = None
    submitted: bool = False
    abandoned: bool = False


class Worker:
    """Run jobs from a queue.

    Args:
        queue: the :class:`AsyncQueue` to work.
        handler: ``handler(job, response) -> result``, sync (run in a thread) or async; may
            raise :class:`~scrapeq.Retry` or :class:`~scrapeq.Permanent`. Default: metadata.
            It may run ``handler_timeout`` seconds (a setting): then an async handler is
            cancelled, a sync one abandoned to its thread, and the job retried.
        concurrency: jobs fetched at once by this worker (default 100).
        sink: where result records go (default: nowhere).
        fetcher: the :class:`~scrapeq.runtime.fetch.Fetcher` (default: one built from the settings).
        burst: stop once every job of the queue is done or dead.
        max_runtime: stop gracefully after this many seconds.
        handler_in_thread: run a sync handler in a thread (default: yes for a user
            handler, no for the built-in one); ``False`` suits cheap parsers (which then run
            on the event loop, with no ``handler_timeout``).
        tune_gc: tune the garbage collector while running (:func:`tuned_gc`; default yes).
            It is process-wide: pass ``False`` when the worker shares its process with code
            that sets the collector itself.
        report: take turns as the queue's log leader (:mod:`scrapeq.runtime.reporter`): one worker
            of all logs each breaker transition, global pause and its end once, and every
            ``log_every`` seconds (a setting) the queue's progress. Default yes.
        metrics: count settles by lane and outcome, fetch durations, claim sizes and
            durations into these :class:`~scrapeq.runtime.metrics.WorkerMetrics` (default:
            none; ``scrapeq worker --metrics-port`` serves them).
    """

    def __init__(
        self,
        queue: AsyncQueue,
        *,
        handler: Handler | None = None,
        concurrency: int = 100,
        sink: Sink | None = None,
        fetcher: Fetcher | None = None,
        burst: bool = False,
        max_runtime: float | None = None,
        handler_in_thread: bool | None = None,
        tune_gc: bool = True,
        follow_links: bool = False,
        save_bodies: str | os.PathLike[str] | None = None,
        report: bool = True,
        metrics: WorkerMetrics | None = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be >= 1")
        self.queue = queue
        self.settings = queue.settings
        self.handler: Handler = handler or default_handler
        self.concurrency = concurrency
        self.sink = sink
        self._fetcher = fetcher
        self._own_fetcher = fetcher is None
        self.burst = burst
        self.max_runtime = max_runtime
        self.tune_gc = tune_gc
        self.follow_links = follow_links
        self._follow = FollowPolicy(queue)
        self._bodies = None if save_bodies is None else BodyStore(save_bodies)
        # A user's handler (or a crawl's, or one whose bodies are kept) is adapted to take a
        # context and give follow-ups; the built-in handler alone stays as is, on the hot path.
        self._adapted = handler is not None or follow_links or save_bodies is not None
        self._health = RedisHealth()  # this process's Redis lost / back lines
        self._reporter = (
            Reporter(queue, log_every=self.settings.log_every, health=self._health)
            if report
            else None
        )
        # A sync handler runs in a thread so a blocking parser cannot stall the event loop;
        # the built-in handler is trivial and runs inline, unless links are extracted after
        # it (CPU work: a thread too). Decided once, not per job.
        default_in_thread = self._adapted
        self._in_thread = default_in_thread if handler_in_thread is None else handler_in_thread
        # Set per run (_open_resources): a run's threads and timer end with it.
        self._call_handler: Callable[[Job, Response], Awaitable[Any]]
        self._handlers: HandlerRunner | None = None  # a user's handler: run alone when due
        self._handler_deadlines: Deadlines
        self._handler_threads: DaemonThreads
        self.stats = WorkerStats()
        self.metrics = metrics
        self._flights: dict[str, _Flight] = {}
        # Settlements waiting for the next settle call: the job, when its answer is only
        # counted and logged; a future, when a caller awaits it.
        self._pending: list[_Pending] = []
        self._flush_lock = asyncio.Lock()
        self._slot_freed = asyncio.Event()
        self._stopping = asyncio.Event()
        self._release_now = asyncio.Event()
        self._stop_at: float | None = None  # monotonic time the stop began
        self._hurry_at: float | None = None  # monotonic time of the second stop
        self._claim_pause_until = 0.0
        self._sink_failures = 0  # pauses for sink failures in a row (each one is longer)
        self._robots: Robots | None = None
        self._crawl_delays: dict[str, float] = {}  # domain -> next local start (monotonic)
        # politeness = ip: hosts this process has filed under their address's group
        self._grouped: set[str] | None = set() if self.settings.politeness == "ip" else None

    @property
    def redis_down(self) -> bool:
        """Whether this worker's last Redis call failed (Redis lost and not back yet)."""
        return self._health.down

    # --- lifecycle -----------------------------------------------------------------------------

    def run(self) -> WorkerStats:
        """Run in a new event loop until stopped; returns the counters."""
        return asyncio.run(self.run_async())

    def stop(self) -> None:
        """Stop claiming; in-flight jobs get ``shutdown_grace`` seconds, then are released.

        A second call releases them at once, giving Redis :data:`HURRY_MARGIN` seconds.
        """
        now = time.monotonic()
        if self._stopping.is_set():
            if self._hurry_at is None:
                self._hurry_at = now
            self._release_now.set()
        elif self._stop_at is None:
            self._stop_at = now
        self._stopping.set()
        self._slot_freed.set()  # wakes the claim loop and the drain

    async def run_async(self) -> WorkerStats:
        """Run in the current event loop until stopped."""
        with tuned_gc() if self.tune_gc else contextlib.nullcontext():
            return await self._run()

    async def _run(self) -> WorkerStats:
        loop = asyncio.get_running_loop()
        await self._open_sink()  # a store it cannot use stops us before any claim
        self._install_signals(loop)
        self._open_resources()
        log.info("worker started queue=%s concurrency=%d", self.queue.name, self.concurrency)
        await self._warn_eviction()
        settler = asyncio.create_task(self._settle_loop(), name="scrapeq-settle")
        beater = asyncio.create_task(self._heartbeat_loop(), name="scrapeq-heartbeat")
        claimer = asyncio.create_task(self._claim_loop(), name="scrapeq-claim")
        waker = asyncio.create_task(
            wake_on_urgent(self.queue, self._slot_freed.set, self._stopping), name="scrapeq-wake"
        )
        reporting = None
        if self._reporter is not None:
            reporting = asyncio.create_task(self._reporter.run(), name="scrapeq-report")
        try:
            await self._until_stopped(claimer)
            await self._drain(claimer)
        finally:
            self._stopping.set()
            self._slot_freed.set()  # an idle claim loop sees the stop now (run cancelled)
            await self._stop_claiming(claimer)
            await self._finish()
            for task in (settler, beater, waker):
                task.cancel()
            await asyncio.gather(settler, beater, waker, return_exceptions=True)
            await self._close_reporter(reporting)
            self._report_unsent()
            await self._close_resources()
            self._remove_signals(loop)
        # What this process settled: jobs a retirement drained are the queue's (cli's summary).
        log.info(
            "worker stopped; this process settled done=%d retried=%d dead=%d released=%d",
            self.stats.done,
            self.stats.retried,
            self.stats.dead,
            self.stats.released,
        )
        return self.stats

    async def _warn_eviction(self) -> None:
        """Warn when Redis may evict keys: an evicted job key is a lost job."""
        try:
            policy = await self.queue.eviction_policy()
        except RedisUnavailable:
            return  # the claim loop reports an unreachable Redis and retries
        if policy not in (None, "noeviction"):
            log.warning(
                "Redis maxmemory-policy is %r: under memory pressure it may evict job keys "
                "and lose jobs; set it to 'noeviction'",
                policy,
            )

    def _install_signals(self, loop: asyncio.AbstractEventLoop) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                if signal.getsignal(sig) == signal.SIG_IGN:
                    continue  # ignored on purpose (a supervised child): keep it ignored
                loop.add_signal_handler(sig, self._on_signal, sig)

    def _remove_signals(self, loop: asyncio.AbstractEventLoop) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.remove_signal_handler(sig)

    def _on_signal(self, sig: signal.Signals) -> None:
        again = self._stopping.is_set()
        log.info("shutdown %s: %s", sig.name, "releasing now" if again else "draining")
        self.stop()

    def _open_resources(self) -> None:
        if self._fetcher is None:
            self._fetcher = Fetcher(self.settings)
        if self.settings.respect_robots:
            self._robots = Robots(
                self._fetcher, self.queue.client, self.queue.keys.prefix + "robots:"
            )
        self._handler_deadlines = Deadlines(self.settings.handler_timeout)
        self._handler_threads = DaemonThreads(HANDLER_THREADS, "scrapeq-handler")
        self._call_handler = handler_caller(
            adapt_handler(self.handler, self._finish_page) if self._adapted else self.handler,
            in_thread=self._in_thread,
            plain=not self._adapted,
            deadlines=self._handler_deadlines,
            threads=self._handler_threads,
        )
        if self._adapted:  # user code may kill the process: see runtime/isolation.py
            self._handlers = HandlerRunner(self.queue, self._call_handler)
            self._call_handler = self._handlers.call

    async def _open_sink(self) -> None:
        """Await the sink's optional ``open()`` (create or check its file, its table)."""
        opener = getattr(self.sink, "open", None)
        if opener is not None:
            await opener()

    async def _close_resources(self) -> None:
        self._handler_deadlines.close()
        self._handler_threads.shutdown()  # never waits: a stuck handler's thread ends with us
        if self._own_fetcher and self._fetcher is not None:
            await self._fetcher.close()
        if self.sink is not None:
            await self.sink.close()

    # --- claim -----------------------------------------------------------------------------------

    async def _until_stopped(self, claimer: asyncio.Task[None]) -> None:
        """Return when a stop is asked or the claim loop ends (burst done, max runtime)."""
        stopped = asyncio.create_task(self._stopping.wait())
        try:
            await asyncio.wait({claimer, stopped}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopped.cancel()
        if claimer.done():
            claimer.result()  # a bug of the claim loop is raised here

    async def _stop_claiming(self, claimer: asyncio.Task[None]) -> None:
        """End the claim loop: a claim in flight has until the exit deadline to answer.

        Jobs it answers are released with the others; past the deadline it is abandoned.
        """
        if not claimer.done():
            await asyncio.wait({claimer}, timeout=max(self._exit_deadline() - time.monotonic(), 0))
        if not claimer.done():
            # Redis may have run it: its jobs, if any, come back when their leases expire.
            log.warning("a claim got no answer from redis in time: abandoning it")
            self._health.unanswered()
            claimer.cancel()
        (outcome,) = await asyncio.gather(claimer, return_exceptions=True)
        if isinstance(outcome, Exception):
            log.error("claim loop failed", exc_info=outcome)

    async def _claim_loop(self) -> None:
        try:
            await self._claim_until_stopped()
        finally:
            self._slot_freed.set()  # the drain waits for a claim in flight too

    async def _claim_until_stopped(self) -> None:
        deadline = None if self.max_runtime is None else time.monotonic() + self.max_runtime
        reconnect = RECONNECT_MIN
        while not self._stopping.is_set():
            self._slot_freed.clear()
            if deadline is not None and time.monotonic() >= deadline:
                log.info("max runtime reached: stopping")
                self._stopping.set()
                break
            free = self.concurrency - len(self._flights)
            if free <= 0:
                await self._wait_for(self._slot_freed, IDLE_MAX)
                continue
            wait = self._claim_pause_until - time.monotonic()
            if wait > 0:
                await self._wait_for(self._stopping, wait)
                continue
            sent = time.monotonic()
            try:
                claimed = await self.queue.claim(min(free, BATCH))
            except (RedisUnavailable, ScriptError) as exc:  # away, or refusing writes
                self._redis_failed(exc, "claiming")
                await self._wait_for(self._stopping, reconnect)
                reconnect = min(reconnect * 2, RECONNECT_MAX)
                continue
            reconnect = RECONNECT_MIN
            self._health.ok(sent)
            now = time.monotonic()
            if self.metrics is not None:
                self.metrics.claimed(len(claimed.jobs), now - sent)
            for job in claimed.jobs:
                self._start(job, now)
            if claimed.jobs:
                continue
            if self.burst and not self._flights and claimed.next_due is None:
                log.info("burst: every job is done or dead")
                break
            idle = IDLE_MAX if claimed.next_due is None else min(claimed.next_due, IDLE_MAX)
            await self._wait_for(self._slot_freed, max(idle, 0.001))

    async def _wait_for(self, event: asyncio.Event, timeout: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), timeout)

    def _start(self, job: Job, now: float) -> None:
        self.stats.claimed += 1
        flight = _Flight(job, now)
        self._flights[job.id] = flight
        flight.task = asyncio.create_task(self._run_job(flight))

    # --- fetch, classify -------------------------------------------------------------------------

    async def _run_job(self, flight: _Flight) -> None:
        job = flight.job
        try:
            settlement, record = await self._attempt(job)
            if record is not None and self.sink is not None and _may_be_excused(settlement, record):
                # An overload on the job's last attempt: the settle script may excuse it
                # (adaptive politeness: a throttle, the job queued again), so its line is
                # written once the queue says the job is dead, never for a job that goes on.
                flight.submitted = True
                if await self._submit(settlement, job) == "dead":
                    await self._write_dead_line(job, record)
                return
            if record is not None and self.sink is not None:
                settlement = await self._write_result(job, settlement, record)
            # The fetch slot is free once the settlement is buffered: settling is batched,
            # and its answer is only counted and logged (by the settle loop), so the task
            # ends here; unless its handler ran alone, when no handler may run before the
            # settlement (which clears its lease's mark) is answered.
            flight.submitted = True
            if self._handlers is not None and self._handlers.alone(job):
                await self._submit(settlement, job)
                return
            self._pending.append((settlement, job, None))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug of ours: never lose the job, never loop on it either
            log.exception("job %s: internal error; retrying it", job.id)
            if not flight.submitted:
                flight.submitted = True
                await self._submit(self._internal_error(job, exc))
        finally:
            if self._handlers is not None:
                self._handlers.settled(job)
            self._flights.pop(job.id, None)
            self._slot_freed.set()

    def _internal_error(self, job: Job, exc: Exception) -> Settlement:
        """Settle a job whose attempt failed in our own code (a settlement that could not be
        built, say): a retry with the reason kept. It keeps the attempt the claim spent, so a
        job that always fails here ends dead (``max_attempts``) instead of going round."""
        message = _traceback_summary(exc)
        return self.queue.retrying(job, kind="internal_error", message=message, domain_failed=None)

    async def _attempt(self, job: Job) -> tuple[Settlement, dict[str, Any] | None]:
        """Fetch, classify and handle one job; answers its settlement and result record."""
        started = fetched = time.monotonic()
        fetching = 0.0  # when the fetch started (0: not yet), for the metrics
        try:
            if self._robots is not None:
                allowed, crawl_delay = await self._robots.allowed(job.url)
                if not allowed:
                    return self._dead(job, "robots_disallowed", "disallowed by robots.txt", None)
                await self._apply_crawl_delay(job.domain, crawl_delay)
            assert self._fetcher is not None
            fetched = fetching = time.monotonic()
            response = await self._fetch(job)
            if self.metrics is not None:
                self.metrics.fetched(job.lane, time.monotonic() - fetching)
            if self._grouped is not None and job.domain not in self._grouped:
                await self._learn_group(job)
        except Exception as exc:
            if self.metrics is not None and fetching:
                self.metrics.fetched(job.lane, time.monotonic() - fetching)
            verdict = classify_exception(exc)
            out = self._from_classification(job, verdict, None, started, exc)
            if not verdict.counts_against_domain:  # no answer of the site's to learn from
                return out
            return _timed(out, verdict, time.monotonic() - fetched)
        verdict = classify_response(
            response.status, response.headers, response.elapsed, slow_call=self.settings.slow_call
        )
        if verdict.outcome is not Outcome.OK:
            out = self._from_classification(job, verdict, response, started, None)
            return _timed(out, verdict, response.elapsed)
        return _timed(
            await self._handle(job, response, verdict, started), verdict, response.elapsed
        )

    async def _fetch(self, job: Job) -> Response:
        """Fetch a job's URL, sending its request when it has one (a plain GET is called
        as before requests existed, so a fetcher subclass without ``request=`` still works)."""
        assert self._fetcher is not None
        if job.request_text is None:
            return await self._fetcher.fetch(job.url, normalised=True)
        return await self._fetcher.fetch(job.url, normalised=True, request=job.request)

    async def _learn_group(self, job: Job) -> None:
        """``politeness = ip``: after a host's first fetch in this process, file the host
        under its address's group (``ip:<address>``, host_group-1.lua; the first worker's
        stands): its jobs enqueued from then on share that group's limits and breaker."""
        assert self._grouped is not None and self._fetcher is not None
        self._grouped.add(job.domain)
        if job.domain.startswith("ip:"):
            return
        name = urlsplit(job.url).hostname
        address = await self._fetcher.address(name) if name else None
        if address is None:
            return
        try:
            await self.queue.host_group(job.domain, address)
        except Exception as exc:  # learned again on the host's next fetch
            self._grouped.discard(job.domain)
            log.warning("could not file %s under ip:%s: %s", job.domain, address, exc)

    async def _apply_crawl_delay(self, domain: str, crawl_delay: float | None) -> None:
        """Honour robots.txt's Crawl-delay.

        The first time a process learns a domain's delay it raises the domain's politeness
        delay in Redis (so every worker's later claims respect it); jobs of the domain this
        worker already holds are spaced locally by the same delay before they start.
        """
        if crawl_delay is None or crawl_delay <= self.settings.domain_delay:
            return
        if domain not in self._crawl_delays:
            self._crawl_delays[domain] = time.monotonic()
            await self.queue.domain_set(domain, delay=crawl_delay)
            log.info("crawl-delay domain=%s delay=%.1fs (robots.txt)", domain, crawl_delay)
        slot = self._crawl_delays[domain]
        now = time.monotonic()
        self._crawl_delays[domain] = max(slot, now) + crawl_delay
        if slot > now:
            await asyncio.sleep(slot - now)

    async def _handle(
        self, job: Job, response: Response, verdict: Classification, started: float
    ) -> tuple[Settlement, dict[str, Any] | None]:
        try:
            result = await self._call_handler(job, response)
        except Retry as exc:
            settlement = self.queue.retrying(
                job, kind="retry_requested", message=exc.reason, delay=exc.delay, domain_failed=None
            )
            return self._maybe_dead(job, settlement, response, started, exc.reason)
        except Permanent as exc:
            return self._dead(job, exc.reason, str(exc), response, started)
        except HandlerTimeout as exc:
            log.warning("job %s: %s", job.id, exc, extra=_about(job, "handler_timeout"))
            settlement = self.queue.retrying(
                job, kind="handler_timeout", message=str(exc), domain_failed=None
            )
            return self._maybe_dead(job, settlement, response, started, str(exc))
        except Exception as exc:  # HandlerAborted too: a SystemExit is the handler's error
            message = _traceback_summary(exc.original if isinstance(exc, HandlerAborted) else exc)
            settlement = self.queue.retrying(
                job, kind="handler_error", message=message, domain_failed=None
            )
            return self._maybe_dead(job, settlement, response, started, message)
        follow: list[EnqueueSpec] = []
        links = body_path = None
        if isinstance(result, Handled):
            result, follow, links, body_path = (
                result.result, result.follow, result.links, result.body_path
            )  # fmt: skip
        settlement = self.queue.done(
            job,
            domain_failed=verdict.counts_against_domain,
            follow=follow,
            final_url=response.url if response.redirects else None,
        )
        if self.sink is None:
            return settlement, None
        problem = _not_json(result)
        if problem is not None:
            # The handler's error, not the sink's: a retry spending an attempt (so it ends
            # dead), never a release of ours, and no str() of it written in its place.
            settlement = self.queue.retrying(
                job, kind="handler_result", message=problem, domain_failed=None
            )
            return self._maybe_dead(job, settlement, response, started, problem)
        record = _record(job, "done", response, started, None, result)
        if links is not None:
            record["links"] = links.as_dict()
        if body_path is not None:
            record["body_path"] = body_path
        return settlement, record

    def _finish_page(
        self, job: Job, response: Response, result: Any, follows: list[Follow]
    ) -> Handled:
        """After the handler, where it ran (a thread for a sync one): the job specs of the
        page's follow-ups (the handler's; with ``follow_links`` every link of the page), and
        the body stored when ``save_bodies`` is set."""
        skipped: Mapping[str, int] = {}
        if self.follow_links:
            page = extract_counted(response, respect_nofollow=self.settings.respect_robots)
            follows = follows + [Follow(url) for url in page.links]
            skipped = page.skipped
        specs, counts = self._follow.specs(job, response.url, follows, skipped)
        body_path = self._bodies.put(response.body) if self._bodies is not None else None
        return Handled(result, specs, counts, body_path)

    def _from_classification(
        self,
        job: Job,
        verdict: Classification,
        response: Response | None,
        started: float,
        exc: BaseException | None,
    ) -> tuple[Settlement, dict[str, Any] | None]:
        message = verdict.message or (str(exc) if exc else verdict.reason)
        counts = verdict.counts_against_domain
        if verdict.outcome is Outcome.FAIL:
            return self._dead(job, verdict.reason, message, response, started, counts or None)
        if verdict.outcome is Outcome.THROTTLED:
            s = self.queue.throttling(
                job, verdict.retry_after, kind=verdict.reason, message=message, domain_failed=counts
            )
            return s, None
        if verdict.outcome is Outcome.OURS:
            # Our proxy or network: pause claiming, and give the job back with a backoff over
            # its releases (spending a release, not an attempt; max_releases bounds them).
            self._claim_pause_until = time.monotonic() + OURS_PAUSE
            s = self.queue.releasing(job, kind=f"released:{verdict.reason}", message=message)
            if job.releases < self.settings.max_releases:
                return s, None
            return s, _record(job, "dead", response, started, f"max_releases: {message}", None)
        settlement = self.queue.retrying(
            job,
            kind=verdict.reason,
            message=message,
            retry_after=verdict.retry_after,
            domain_failed=counts,
        )
        return self._maybe_dead(job, settlement, response, started, message)

    def _maybe_dead(
        self,
        job: Job,
        settlement: Settlement,
        response: Response | None,
        started: float,
        message: str,
    ) -> tuple[Settlement, dict[str, Any] | None]:
        if job.attempts < job.max_attempts:
            return settlement, None
        return settlement, _record(job, "dead", response, started, message, None)

    def _dead(
        self,
        job: Job,
        reason: str,
        message: str,
        response: Response | None,
        started: float | None = None,
        domain_failed: bool | None = None,
    ) -> tuple[Settlement, dict[str, Any] | None]:
        settlement = self.queue.failing(job, reason, message, domain_failed=domain_failed)
        begun = started if started is not None else time.monotonic()
        return settlement, _record(job, "dead", response, begun, f"{reason}: {message}", None)

    async def _write_result(
        self, job: Job, settlement: Settlement, record: dict[str, Any]
    ) -> Settlement:
        assert self.sink is not None
        try:
            await self.sink.write(record)
        except Exception as exc:
            # Our fault, not the job's nor the site's: give the job back (no attempt spent)
            # and pause claiming, longer with each failure in a row (2, 4 ... 60 s), so a sink
            # that is down (a database gone away) does not fetch the queue through and back.
            if time.monotonic() >= self._claim_pause_until:  # claims had resumed: longer
                self._sink_failures += 1
            pause = min(OURS_PAUSE * 2 ** min(max(self._sink_failures, 1) - 1, 8), SINK_PAUSE_MAX)
            log.warning("job %s: sink failed, releasing it; pausing claims %.1f s: %s", job.id,
                        pause, exc, extra=_about(job, "sink_failed"))  # fmt: skip
            self._claim_pause_until = max(self._claim_pause_until, time.monotonic() + pause)
            return self.queue.releasing(job, delay=pause)
        self._sink_failures = 0
        return settlement

    def _log_outcome(self, job: Job, settlement: Settlement, status: str) -> None:
        self.stats.count(status)
        if self.metrics is not None:
            self.metrics.settled(job.lane, status)
        if status == "done":  # the common case: one cached level check
            if log.isEnabledFor(logging.DEBUG):
                where = {"job_id": job.id, "domain": job.domain}
                log.debug("done job=%s domain=%s", job.id, job.domain, extra=where)
        elif status == "dead":
            reason = _dead_reason(settlement)
            log.info(
                "dead letter job=%s domain=%s reason=%s kind=%s",
                job.id, job.domain, reason, settlement.kind,
                extra={"job_id": job.id, "domain": job.domain, "kind": settlement.kind,
                       "reason": reason},
            )  # fmt: skip
        elif status == "stale":
            log.warning("job %s: lease lost before settling (stale token)", job.id,
                        extra={"job_id": job.id, "domain": job.domain})  # fmt: skip
        elif self.follow_links and job.depth == 0 and status in SEED_DEFERRED:
            log_seed_deferred(job, settlement, status)  # a crawl waits on it: say why
        elif log.isEnabledFor(logging.DEBUG):
            _log_deferred(job, settlement, status)

    # --- settle ----------------------------------------------------------------------------------

    async def _submit(self, settlement: Settlement, job: Job | None = None) -> str:
        """Buffer a settlement and wait for its answer (counted and logged with ``job``)."""
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._pending.append((settlement, job, future))
        return await future

    async def _write_dead_line(self, job: Job, record: dict[str, Any]) -> None:
        """The results line of a job already dead: a sink failure cannot give it back, and the
        dead letter holds it (``scrapeq dead list``), so it is logged, not retried."""
        assert self.sink is not None
        try:
            await self.sink.write(record)
        except Exception as exc:
            log.warning("job %s: dead letter kept, but its results line failed: %s", job.id, exc,
                        extra=_about(job, "sink_failed"))  # fmt: skip

    def _answer(self, item: _Pending, status: str) -> None:
        settlement, job, future = item
        if job is not None:
            self._log_outcome(job, settlement, status)
        if future is not None and not future.done():
            future.set_result(status)

    async def _settle_loop(self) -> None:
        while True:
            await asyncio.sleep(SETTLE_EVERY)
            await self._flush()

    async def _flush(self) -> None:
        # One flush at a time: the exit path's last flush waits for the settle loop's call in
        # flight (its answers counted) before the loop is cancelled, never in mid-call.
        async with self._flush_lock:
            await self._flush_pending()

    async def _flush_pending(self) -> None:
        reconnect = RECONNECT_MIN
        while self._pending:
            batch, self._pending = self._pending[:SETTLE_MAX], self._pending[SETTLE_MAX:]
            sent = time.monotonic()
            try:
                statuses = await self.queue.settle_many([item[0] for item in batch])
            except asyncio.CancelledError:  # unanswered: still ours (and counted at exit)
                self._pending = batch + self._pending
                raise
            except ScriptError as exc:  # a deterministic refusal: never let it block the rest
                await self._settle_singly(batch, exc)
                continue
            except Exception as exc:  # keep the batch: this task must never die
                self._pending = batch + self._pending
                self._redis_failed(exc, "settling")
                await asyncio.sleep(reconnect)
                reconnect = min(reconnect * 2, RECONNECT_MAX)
                continue
            self._health.ok(sent)
            progress.settled(len(batch))
            for item, status in zip(batch, statuses, strict=True):
                self._answer(item, status)
            self._slot_freed.set()  # settled jobs freed their domains' slots in Redis

    async def _settle_singly(self, batch: list[_Pending], exc: Exception) -> None:
        """Settle a refused batch item by item; an item refused alone is left to its lease."""
        log.warning("settle batch refused (%s): settling its %d items one by one", exc, len(batch))
        for item in batch:
            settlement = item[0]
            try:
                (status,) = await self.queue.settle_many([settlement])
            except ScriptError as one:
                log.error("job %s: settlement refused, its lease will expire: %s",
                          settlement.job_id, one)  # fmt: skip
                status = "error"
            except Exception:
                self._pending.insert(0, item)
                continue
            progress.settled(1)
            self._answer(item, status)

    # --- heartbeat -------------------------------------------------------------------------------

    async def _heartbeat_loop(self) -> None:
        period = max(self.settings.lease / 3, 0.05)
        while True:
            await asyncio.sleep(period)
            flights = self._renewable()
            if self._handlers is not None:
                await self._handlers.mark_abandoned()
            if not flights:
                continue
            sent = time.monotonic()
            try:
                renewed = await self.queue.heartbeat([f.job for f in flights])
            except Exception as exc:  # this task must never die
                self._redis_failed(exc, "renewing leases")
                continue
            self._health.ok(sent)
            for flight, ok in zip(flights, renewed, strict=True):
                if not ok and flight.task is not None and not flight.task.done():
                    log.warning("job %s: lease lost; abandoning the attempt", flight.job.id,
                                extra=_about(flight.job, "lease_lost"))  # fmt: skip
                    self.stats.stale += 1
                    flight.task.cancel()

    def _renewable(self) -> list[_Flight]:
        """The flights whose leases are renewed; those held past ``max_job_time`` are given up.

        A given-up attempt is cancelled and its lease no longer renewed: it expires, and any
        worker's claim reaps the job (which spends the attempt), as if this worker had crashed.
        """
        oldest = time.monotonic() - self.settings.max_job_time
        renewable = []
        for flight in self._flights.values():
            if flight.started > oldest:
                renewable.append(flight)
            elif not flight.abandoned:
                self._abandon(flight)
        return renewable

    def _abandon(self, flight: _Flight) -> None:
        log.warning(
            "job %s: held over max_job_time (%g s): abandoning the attempt, its lease will expire",
            flight.job.id,
            self.settings.max_job_time,
            extra=_about(flight.job, "max_job_time"),
        )
        flight.abandoned = True
        self.stats.abandoned += 1
        if self._handlers is not None:  # a handler still running is to blame: marked
            self._handlers.abandoned(flight.job)
        if flight.task is not None:
            flight.task.cancel()

    # --- shutdown --------------------------------------------------------------------------------

    async def _drain(self, claimer: asyncio.Task[None]) -> None:
        """Wait for in-flight jobs (and a claim in flight) up to the grace period.

        A second stop ends the wait at once.
        """
        if self._stop_at is None:  # stopped by itself (burst, max runtime)
            self._stop_at = time.monotonic()
        grace = float(self.settings.shutdown_grace)
        if self._flights:
            log.info("draining %d in-flight jobs (grace %.0f s)", len(self._flights), grace)
        deadline = self._stop_at + grace
        while (self._flights or not claimer.done()) and not self._release_now.is_set():
            left = deadline - time.monotonic()
            if left <= 0:
                break
            self._slot_freed.clear()
            await self._wait_for(self._slot_freed, left)

    def _exit_deadline(self) -> float:
        """When the exit stops waiting for Redis (monotonic time)."""
        if self._stop_at is None:  # the run itself was cancelled
            self._stop_at = time.monotonic()
        deadline = self._stop_at + float(self.settings.shutdown_grace) + EXIT_MARGIN
        if self._hurry_at is not None:
            deadline = min(deadline, self._hurry_at + HURRY_MARGIN)
        return deadline

    async def _finish(self) -> None:
        """Release the jobs still held and send every settlement, until the exit deadline.

        What Redis has not answered by then stays in the buffer, counted by
        :meth:`_report_unsent`.
        """
        held = self._release_held()
        final = asyncio.create_task(self._flush_releases(held))
        hurried = asyncio.create_task(self._release_now.wait())
        try:
            while not final.done():
                left = self._exit_deadline() - time.monotonic()
                if left <= 0:
                    break
                waits = {final} if hurried.done() else {final, hurried}
                await asyncio.wait(waits, timeout=left, return_when=asyncio.FIRST_COMPLETED)
        finally:
            hurried.cancel()
            final.cancel()
            await asyncio.gather(final, return_exceptions=True)

    async def _close_reporter(self, reporting: asyncio.Task[None] | None) -> None:
        """Stop the reporter and hand the log leader's lease on, having logged the last
        events: within the exit deadline, and at most :data:`REPORT_MARGIN` seconds (it is
        only logs). What Redis does not answer by then is left to the lease's expiry."""
        if self._reporter is None or reporting is None:
            return
        deadline = min(self._exit_deadline(), time.monotonic() + REPORT_MARGIN)
        self._reporter.stop()  # a flag: see Reporter.run for why not a cancel
        await asyncio.wait({reporting}, timeout=max(deadline - time.monotonic(), 0))
        if not reporting.done():
            reporting.cancel()
            self._health.unanswered()
            return
        left = deadline - time.monotonic()
        try:
            await asyncio.wait_for(self._reporter.close(), max(left, 0))
        except TimeoutError:
            self._health.unanswered()

    def _redis_failed(self, exc: Exception, doing: str) -> None:
        """A call failed: Redis unreachable (or refusing writes for now) is one line per
        outage (:class:`~scrapeq.runtime.reporter.RedisHealth`); anything else, a script refusing
        the call or a bug, is a warning each time."""
        if isinstance(exc, RedisUnavailable):
            self._health.failed(exc, doing)
        else:
            kind = "redis error" if isinstance(exc, ScriptError) else type(exc).__name__
            log.warning("%s while %s, retrying: %s", kind, doing, exc)

    def _release_held(self) -> list[_Flight]:
        """Cancel every attempt that has not reached the settle buffer; buffer its release."""
        held = [f for f in self._flights.values() if not f.submitted]
        for flight in held:
            flight.submitted = True
            if flight.task is not None:
                flight.task.cancel()
        # Stopping is nobody's fault: no release budget spent, no backoff.
        self._pending.extend(
            (self.queue.releasing(f.job, shutdown=True), f.job, None) for f in held
        )
        return held

    async def _flush_releases(self, held: list[_Flight]) -> None:
        await self._flush()
        await asyncio.gather(*(f.task for f in held if f.task is not None), return_exceptions=True)
        if held:
            log.info("released %d jobs without spending an attempt", len(held))

    def _report_unsent(self) -> None:
        """Log the settlements Redis never answered: their jobs are left to their leases."""
        if not self._pending:
            return
        self._health.unanswered()
        log.warning(
            "redis did not answer in time: %d settlements left to their leases "
            "(the jobs come back when the leases expire)",
            len(self._pending),
        )


def _timed(
    out: tuple[Settlement, dict[str, Any] | None], verdict: Classification, seconds: float
) -> tuple[Settlement, dict[str, Any] | None]:
    """The settlement with the fetch's latency and whether the site signalled overload, for
    the domain's adaptive limit; an attempt that ended by our own fault teaches nothing."""
    settlement, record = out
    if verdict.outcome is Outcome.OURS or settlement.outcome == "release":
        return out
    timed = replace(
        settlement,
        latency_ms=max(round(seconds * 1000), 0),
        overload=verdict.reason in OVERLOAD_REASONS,
    )
    return timed, record


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


def _about(job: Job, kind: str) -> dict[str, str]:
    """The structured fields of a line about one job (:mod:`scrapeq.runtime.logs`)."""
    return {"job_id": job.id, "domain": job.domain, "kind": kind}


def _dead_reason(settlement: Settlement) -> str:
    """The dead-letter reason a settlement that answered ``dead`` was given (settle-1.lua)."""
    if settlement.reason:
        return settlement.reason
    budgets = {"retry": "max_attempts", "throttle": "max_throttles", "release": "max_releases"}
    return budgets.get(settlement.outcome, settlement.kind or "failed")


def _log_deferred(job: Job, settlement: Settlement, status: str) -> None:
    """The ``-v`` line of a retried, throttled or released job: its error kind and delay."""
    delay = max(settlement.delay_ms, settlement.retry_after_ms) / 1000
    kind = settlement.kind or ("shutdown" if settlement.shutdown else status)
    log.debug(
        "%s job=%s domain=%s kind=%s delay=%.2fs attempt=%d/%d",
        status, job.id, job.domain, kind, delay, job.attempts, job.max_attempts,
        extra={"job_id": job.id, "domain": job.domain, "kind": kind, "delay": delay,
               "status": status},
    )  # fmt: skip


def _traceback_summary(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)[-3:]
    where = "; ".join(f"{f.filename.rsplit('/', 1)[-1]}:{f.lineno} in {f.name}" for f in frames)
    text = f"{type(exc).__name__}: {exc}"
    return f"{text} ({where})" if where else text


def _not_json(result: Any) -> str | None:
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


def _may_be_excused(settlement: Settlement, record: dict[str, Any]) -> bool:
    """A retry the worker judged the job's last (its line says dead) for an overload the
    settle script may excuse on an adaptive domain (``includes/adaptive.lua``)."""
    return settlement.outcome == "retry" and settlement.overload and record["outcome"] == "dead"


def _record(
    job: Job,
    outcome: str,
    response: Response | None,
    started: float,
    error: str | None,
    result: Any,
) -> dict[str, Any]:
    """A results line in the docs/INTERFACE.md format."""
    return {
        "id": job.id,
        "url": redact_url(job.url),
        "final_url": redact_url(response.url) if response is not None else None,
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
        "meta": job.meta,
        "parent_url": redact_url(job.parent_url) if job.parent_url else None,
    }
