"""When a crawl's calls to its queue go (:class:`Pacing`, a base of the frontier).

Scrapy asks for a request each time a slot frees, and on pages that take their time slots
free one at a time: a claim, a give-back and a settle call for nearly every page (2.5 script
calls a page), each about a million instructions of Redis before its first job
(docs/BENCHMARKS.md section 40). So the frontier's calls wait for company as the worker's do,
by the same rule (:class:`~scrapeq.runtime.gather.Gather`): while claims come back full, a
claim waits a little for more free slots, and what a reactor turn leaves to write (the
settlements, the slots given back) waits for others, and a settlement in that wait makes its
job's give-back needless. After a short claim, the next waits for the queue to move (a settle,
a give-back or an enqueue of this process's landing). Requests scheduled with nothing to
settle go at the turn's end, as before.
"""

from __future__ import annotations

import time
from typing import Any

from scrapy.crawler import Crawler
from twisted.internet.base import DelayedCall

from scrapeq.engine.lua.scripts import DownloadSample, Settlement
from scrapeq.engine.model.job import Job
from scrapeq.runtime.gather import Gather


class Pacing:
    """The frontier's timers: its next write (:meth:`_at_turn_end`) and the engine's next
    ask for requests (:meth:`_wake_in`), and the rule they keep (:attr:`_gather`)."""

    crawler: Crawler
    settling: list[Settlement]
    giving_back: dict[str, tuple[Job, DownloadSample]]
    _closed: bool

    def __init__(self, concurrency: int, batch: int) -> None:
        self._gather = Gather(concurrency, batch)
        self._claimed_at: dict[str, float] = {}  # held job id -> when it was claimed
        self._claim_after = 0.0  # no ordinary claim before (monotonic time)
        # One call at a reactor turn's end writes what the turn left (flush_settles: the
        # scheduled requests, the slots given back, the settlements); a second later when
        # Redis did not answer (then _retrying).
        self._turn_call: DelayedCall | None = None
        self._retrying = False
        self._wake_call: DelayedCall | None = None

    def flush_settles(self) -> None:
        raise NotImplementedError

    def _at_turn_end(self) -> None:
        """Have :meth:`flush_settles` write what this reactor turn left, once: at its end, or
        while claims come back full, once the settlements waited for company
        (:meth:`Gather.settle_wait`; scheduled requests alone go at the turn's end); unless it
        is to try again a second after Redis did not answer."""
        n = len(self.settling) + len(self.giving_back)
        wait = self._gather.settle_wait(n, time.monotonic()) if n else 0.0
        call = self._turn_call
        if call is not None and call.active():
            if self._retrying or call.getTime() <= _reactor().seconds() + wait:
                return
            call.cancel()
        self._retrying = False
        self._turn_call = _reactor().callLater(wait, self.flush_settles)

    def _try_again_later(self) -> None:
        """Redis did not answer: what is left is written in a second (not once closed)."""
        if self._closed:
            return
        if self._turn_call is not None and self._turn_call.active():
            self._turn_call.cancel()
        self._retrying = True
        self._turn_call = _reactor().callLater(1.0, self.flush_settles)

    def _slot_ended(self, job: Job) -> None:
        """``job`` left its claim slot (its download is over, or it was settled first)."""
        at = self._claimed_at.pop(job.id, None)
        if at is not None:
            self._gather.ended(time.monotonic() - at)

    def _moved(self) -> None:
        """A settle or a give-back of this process's landed: domain slots are free in the
        queue, so a claim waiting for the queue to move goes now."""
        self._gather.moved()
        self._claim_soon()

    def _claim_soon(self) -> None:
        """Something claimable may be in Redis now (a settlement or a slot given back freed a
        domain slot, an enqueue added a job): claim again at once."""
        self._claim_after = 0.0
        self._wake_in(0)

    def _wake_in(self, seconds: float) -> None:
        """Have the engine ask for requests again in ``seconds`` (its own heartbeat is 5 s)."""
        if self._wake_call is not None and self._wake_call.active():
            if self._wake_call.getTime() <= time.time() + seconds:
                return
            self._wake_call.cancel()
        self._wake_call = _reactor().callLater(max(seconds, 0.0), self._wake)

    def _wake(self) -> None:
        slot = getattr(self.crawler.engine, "_slot", None)
        nextcall = getattr(slot, "nextcall", None)
        if nextcall is not None:
            nextcall.schedule()


def _reactor() -> Any:
    from twisted.internet import reactor  # not at import: Scrapy installs its reactor

    return reactor
