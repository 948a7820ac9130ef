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
import logging
import os
import signal
import time
from collections.abc import Awaitable, Callable
from typing import Any

from scrapeq.engine.model.job import Job
from scrapeq.engine.queue import AsyncQueue
from scrapeq.errors import RedisUnavailable, ScriptError
from scrapeq.runtime.attempt import OURS_PAUSE as OURS_PAUSE
from scrapeq.runtime.attempt import Attempts, ExitSeen
from scrapeq.runtime.backoff import backoff
from scrapeq.runtime.bans import BanRules
from scrapeq.runtime.deadlines import Deadlines
from scrapeq.runtime.fetch import Fetcher, Response, Robots
from scrapeq.runtime.follow import BodyStore, FollowPolicy, adapt_handler
from scrapeq.runtime.gather import Gather
from scrapeq.runtime.gc_tuning import GC_THRESHOLD as GC_THRESHOLD
from scrapeq.runtime.gc_tuning import tuned_gc
from scrapeq.runtime.handlers import DaemonThreads, Handler, handler_caller
from scrapeq.runtime.impersonate import ImpersonateFetcher
from scrapeq.runtime.isolation import HandlerRunner
from scrapeq.runtime.leases import Leases
from scrapeq.runtime.lines import SINK_PAUSE_MAX as SINK_PAUSE_MAX
from scrapeq.runtime.lines import ClaimPause, Lines, waits
from scrapeq.runtime.metrics import WorkerMetrics
from scrapeq.runtime.owed import BURST_POLL, OwedLines
from scrapeq.runtime.records import make_record as make_record
from scrapeq.runtime.reporter import RedisHealth, Reporter
from scrapeq.runtime.settler import SETTLE_EVERY as SETTLE_EVERY
from scrapeq.runtime.settler import SETTLE_MAX as SETTLE_MAX
from scrapeq.runtime.shutdown import EXIT_MARGIN as EXIT_MARGIN
from scrapeq.runtime.shutdown import HURRY_MARGIN as HURRY_MARGIN
from scrapeq.runtime.shutdown import REPORT_MARGIN as REPORT_MARGIN
from scrapeq.runtime.shutdown import Shutdown
from scrapeq.runtime.sinks import Sink
from scrapeq.runtime.wakeup import wake_on_urgent
from scrapeq.runtime.worker_core import (
    RECONNECT_MAX,
    RECONNECT_MIN,
    ClaimedHook,
    Flight,
    Pending,
    SettledHook,
    WorkerStats,
)

__all__ = [
    "ClaimedHook",
    "Handler",
    "SettledHook",
    "Worker",
    "WorkerStats",
    "default_handler",
    "tuned_gc",
]

log = logging.getLogger("scrapeq.worker")


#: Most jobs claimed in one call (a claim script must not hold Redis for long).
BATCH = 256
#: Longest sleep when idle: new enqueues are noticed at least this often.
IDLE_MAX = 1.0
#: Most threads running sync handlers: the size of the executor the worker used before
#: (asyncio's default, ``min(32, cpus + 4)``), as handlers are parsers held by the GIL: more
#: threads add memory, not throughput. They start on demand, so they only add up when calls
#: are stuck; then the calls that find none free time out like the stuck ones.
HANDLER_THREADS = min(32, (os.cpu_count() or 1) + 4)


def default_handler(job: Job, response: Response) -> dict[str, Any]:
    """The result when no handler is given: basic metadata of the response."""
    return {
        "final_url": response.url,
        "content_type": response.headers.get("Content-Type"),
        "redirects": response.redirects,
    }


class Worker(Shutdown, Leases, Attempts):
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
        on_claimed: ``on_claimed(jobs)``, called with the jobs of each claim that brought
            some, before their attempts start (:data:`ClaimedHook`).
        on_settled: ``on_settled(job, settlement, answer)``, called once the queue answered
            a job's settlement; ``answer`` is the status (``done``, ``retried``,
            ``throttled``, ``released``, ``dead``, ``stale``), a
            :class:`~scrapeq.engine.lua.scripts.Settled` whose ``reason`` is a dead job's
            dead-letter reason (:data:`SettledHook`).

        A hook may be sync or async: a coroutine it returns runs as a task the worker awaits
        before its run ends. It runs on the worker's event loop, so it should be quick; an
        exception it raises is logged and the worker goes on. Hooks observe: the worker's
        decisions do not wait for them.
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
        on_claimed: ClaimedHook | None = None,
        on_settled: SettledHook | None = None,
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
        self._impersonator = None  # the impersonate fetcher, made when first needed
        self._browser = None  # the browser fetcher (its pool of chromium processes), too
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
        self.on_claimed = on_claimed
        self.on_settled = on_settled
        self._init_run_state()

    def _init_run_state(self) -> None:
        """The state the phases share while running (flights, the settle buffer, stops)."""
        self._flights: dict[str, Flight] = {}
        # Settlements waiting for the next settle call: the job, when its answer is only
        # counted and logged; a future, when a caller awaits it.
        self._pending: list[Pending] = []
        self._gather = Gather(self.concurrency, BATCH)
        self._flush_lock = asyncio.Lock()
        self._hook_tasks: set[asyncio.Future[Any]] = set()  # async hooks' calls running
        self._slot_freed = asyncio.Event()
        self._queue_moved = asyncio.Event()  # a settle of ours landed, urgent work, a stop
        self._stopping = asyncio.Event()
        self._loops_end = asyncio.Event()
        self._release_now = asyncio.Event()
        self._stop_at: float | None = None  # monotonic time the stop began
        self._hurry_at: float | None = None  # monotonic time of the second stop
        self._pause = ClaimPause()  # claims pause after our network or the sink failed
        # the results lines (runtime/lines.py), with the owed-lines ledger (runtime/owed.py)
        ledger = OwedLines(self.queue, self.sink, self.settings, self._health,
                           self._redis_failed, self._loops_end)  # fmt: skip
        self._lines = Lines(self.queue, self.sink, ledger, self._pause, self._stopping)
        self._robots: Robots | None = None
        self._crawl_delays: dict[str, float] = {}  # domain -> next local start (monotonic)
        # politeness = ip: hosts this process has filed under their address's group
        self._grouped: set[str] | None = set() if self.settings.politeness == "ip" else None
        self._bans = BanRules(self.settings)  # with an exit pool: what a ban looks like

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
        self._queue_moved.set()

    async def run_async(self) -> WorkerStats:
        """Run in the current event loop until stopped."""
        with tuned_gc() if self.tune_gc else contextlib.nullcontext():
            return await self._run()

    async def _run(self) -> WorkerStats:
        loop = asyncio.get_running_loop()
        await self._open_sink()  # a store it cannot use stops us before any claim
        await self._lines.name_crawl()
        self._install_signals(loop)
        self._open_resources()
        log.info("worker started queue=%s concurrency=%d", self.queue.name, self.concurrency)
        await self._warn_eviction()
        settler = asyncio.create_task(self._settle_loop(), name="scrapeq-settle")
        beater = asyncio.create_task(self._heartbeat_loop(), name="scrapeq-heartbeat")
        claimer = asyncio.create_task(self._claim_loop(), name="scrapeq-claim")
        waker = asyncio.create_task(
            wake_on_urgent(self.queue, self._urgent_arrived, self._stopping), name="scrapeq-wake"
        )
        reporting = None
        if self._reporter is not None:
            reporting = asyncio.create_task(self._reporter.run(), name="scrapeq-report")
        tasks = [settler, beater, waker]
        if self.sink is not None:  # lines owed: acknowledged, taken over (runtime/owed.py)
            tasks.append(asyncio.create_task(self._lines.ledger.loop(), name="scrapeq-owed"))
        try:
            await self._until_stopped(claimer)
            await self._drain(claimer)
        finally:
            self._stopping.set()
            self._slot_freed.set()  # an idle claim loop sees the stop now (run cancelled)
            self._queue_moved.set()
            await self._stop_claiming(claimer)
            await self._finish()
            self._loops_end.set()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self._lines.ledger.close(self._exit_deadline())
            await self._end_hooks()
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

    async def _end_hooks(self) -> None:
        """Await the async hooks' calls still running, until the exit deadline."""
        if not self._hook_tasks:
            return
        left = max(self._exit_deadline() - time.monotonic(), 0)
        _, late = await asyncio.wait(set(self._hook_tasks), timeout=left)
        for task in late:
            task.cancel()
        if late:
            log.warning("%d hook calls still running at exit: cancelled", len(late))

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
            self._fetcher = Fetcher(self.settings, pool=self.queue.exit_pool)
        default = self._fetcher
        if self.settings.fetcher == "impersonate":  # refused here, at start, without curl_cffi
            default = self._impersonator = ImpersonateFetcher(
                self.settings, pool=self.queue.exit_pool
            )
        elif self.settings.fetcher == "browser":  # refused here, at start, without Playwright
            self._browser = self._new_browser()
        if self.settings.respect_robots:  # robots.txt through the setting's fetcher
            self._robots = Robots(default, self.queue.client, self.queue.keys.prefix + "robots:")
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
        if self._impersonator is not None:
            await self._impersonator.close()
        if self._browser is not None:
            await self._browser.close()
        if self._bench_notice is not None:
            await self._bench_notice.close()
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
        failures = 0  # claims failed in a row: the reconnect's backoff
        while not self._stopping.is_set():
            self._slot_freed.clear()
            self._queue_moved.clear()
            if deadline is not None and time.monotonic() >= deadline:
                log.info("max runtime reached: stopping")
                self._stopping.set()
                break
            free = self.concurrency - len(self._flights)
            # no slot free; or calls wait for company (runtime/gather.py): woken by the queue
            # moving, not by each job of ours that ends
            event, wait = (self._slot_freed, IDLE_MAX) if free <= 0 else (
                self._queue_moved, self._gather.claim_wait(free, time.monotonic()))  # fmt: skip
            if wait > 0:
                await self._wait_for(event, wait)
                continue
            wait = self._pause.until - time.monotonic()
            if wait > 0:
                await self._wait_for(self._stopping, wait)
                continue
            sent, asked, moves = time.monotonic(), min(free, BATCH), self._gather.moves
            try:
                claimed = await self.queue.claim(asked)
            except (RedisUnavailable, ScriptError) as exc:  # away, or refusing writes
                self._redis_failed(exc, "claiming")
                failures += 1
                wait = backoff(RECONNECT_MIN, failures, RECONNECT_MAX)
                await self._wait_for(self._stopping, wait)
                continue
            failures = 0
            self._health.ok(sent)
            now = time.monotonic()
            idle = IDLE_MAX if claimed.next_due is None else min(claimed.next_due, IDLE_MAX)
            self._gather.claimed(asked, len(claimed.jobs), moves, now, idle)
            if self.metrics is not None:
                self.metrics.claimed(len(claimed.jobs), now - sent)
            if self.on_claimed is not None and claimed.jobs:
                self._call_hook(self.on_claimed, claimed.jobs)
            loop = asyncio.get_running_loop()  # once a claim, not once a job
            for job in claimed.jobs:
                self._start(job, now, loop)
            if claimed.jobs:
                continue
            if self.burst and not self._flights and claimed.next_due is None:
                if await self._lines.ledger.settled():
                    log.info("burst: every job is done or dead")
                    break
                # lines owed by a worker: written by it, or taken over once overdue
                await self._wait_for(self._stopping, min(self.settings.lease / 3, BURST_POLL))
                continue
            await self._wait_for(self._slot_freed, max(idle, 0.001))

    def _urgent_arrived(self) -> None:
        """Urgent work was enqueued: the claim loop claims now, without gathering."""
        self._gather.urgent = True
        self._slot_freed.set()
        self._queue_moved.set()

    def _start(self, job: Job, now: float, loop: asyncio.AbstractEventLoop) -> None:
        self.stats.claimed += 1
        flight = Flight(job, now)
        self._flights[job.id] = flight
        flight.task = loop.create_task(self._run_job(flight))  # asyncio.create_task's

    # --- fetch, classify -------------------------------------------------------------------------

    async def _run_job(self, flight: Flight) -> None:
        job = flight.job
        try:
            seen = ExitSeen()  # self._attempt(job), one coroutine less a job
            settlement, record = self._with_seen(job, seen, await self._attempt_seen(job, seen))
            if record is not None and self.sink is not None:
                record = self._lines.record(record)
                if waits(job, settlement):  # written from the settle's answer (lines.py)
                    flight.submitted = True
                    await self._lines.write_settled(job, settlement, record, self._submit)
                    return
                # done, or dead by the worker's own verdict: the line before the ack
                settlement = await self._lines.write(job, settlement, record)
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
            self._gather.ended(time.monotonic() - flight.started)
            self._slot_freed.set()
