"""The shutdown phase: drain in-flight jobs for ``shutdown_grace`` seconds, release what is
left without spending an attempt, and bound the exit whatever Redis does (see
:mod:`scrapeq.runtime.worker`)."""

from __future__ import annotations

import asyncio
import logging
import time

from scrapeq.runtime.settler import Settler
from scrapeq.runtime.worker_core import Flight

log = logging.getLogger("scrapeq.worker")

#: Seconds past the grace period the last settlements and releases may take. A healthy Redis
#: takes them in milliseconds; one that does not answer must not hold the exit (a supervisor or
#: an orchestrator kills a worker that overstays), and what it never took is safe with the
#: jobs' leases.
EXIT_MARGIN = 3.0
#: Of :data:`EXIT_MARGIN`, the seconds kept for what follows the last wait for Redis:
#: cancelling the loops, closing connections and files, the process's own exit. Quiet, that
#: takes 0.03-0.07 s; under a loaded test run a child was seen still alive 1.05 s past the
#: last wait (its supervisor killed it). Redis gets the margin less this, so the exit itself
#: keeps to ``shutdown_grace`` plus :data:`EXIT_MARGIN`.
TEARDOWN_MARGIN = 0.5
#: After a second signal, the seconds the releases get: enough for a healthy Redis to take the
#: jobs back at once, short enough to be "now" when it does not answer.
HURRY_MARGIN = 1.0
#: Most seconds a stopping worker gives its reporter to log the last events and hand on the
#: log leader's lease (within the exit deadline).
REPORT_MARGIN = 1.0


class Shutdown(Settler):
    """Drain, release and the bounded exit (the settle buffer sends the releases)."""

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
        """When the exit stops waiting for Redis (monotonic time): :data:`TEARDOWN_MARGIN`
        before the bound the exit keeps to."""
        if self._stop_at is None:  # the run itself was cancelled
            self._stop_at = time.monotonic()
        grace = float(self.settings.shutdown_grace)
        deadline = self._stop_at + grace + EXIT_MARGIN - TEARDOWN_MARGIN
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

    def _release_held(self) -> list[Flight]:
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

    async def _flush_releases(self, held: list[Flight]) -> None:
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
