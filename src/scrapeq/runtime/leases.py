"""The lease phase: leases of long jobs are renewed every third of a lease, up to
``max_job_time``: an attempt held longer is abandoned and its lease left to expire."""

from __future__ import annotations

import asyncio
import logging
import time

from scrapeq.runtime.records import about
from scrapeq.runtime.worker_core import Flight, WorkerCore

log = logging.getLogger("scrapeq.worker")


class Leases(WorkerCore):
    """Heartbeats of the jobs a worker holds."""

    async def _heartbeat_loop(self) -> None:
        period = max(self.settings.lease / 3, 0.05)
        while not self._loops_end.is_set():
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
                                extra=about(flight.job, "lease_lost"))  # fmt: skip
                    self.stats.stale += 1
                    flight.task.cancel()

    def _renewable(self) -> list[Flight]:
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

    def _abandon(self, flight: Flight) -> None:
        log.warning(
            "job %s: held over max_job_time (%g s): abandoning the attempt, its lease will expire",
            flight.job.id,
            self.settings.max_job_time,
            extra=about(flight.job, "max_job_time"),
        )
        flight.abandoned = True
        self.stats.abandoned += 1
        if self._handlers is not None:  # a handler still running is to blame: marked
            self._handlers.abandoned(flight.job)
        if flight.task is not None:
            flight.task.cancel()
