"""Start requests: taken by one process of a crawl, through a leased once-flag.

The first process to open takes the queue's flag ``scrapy-start`` for one ``lease`` (scrapeq's
setting) and renews it while its spider's ``start()`` runs. Once ``start()`` is exhausted (every
start request scheduled) the flag is kept for good: later processes of the crawl only claim,
until a new crawl (``SCRAPEQ_NEW_CRAWL``, ``scrapeq crawl --new``, ``scrapeq queue clear``). A
start whose every request was refused scheduled nothing: its flag is released, as below.
If ``start()`` raises or the process stops before its end, the flag is released (a killed
process's lease runs out), so the next process to open takes the start requests again; the
seen-set drops those already scheduled. A process that finds the flag leased by another
waits (:meth:`StartFlag.wait_turn`, its spider's ``start()`` not read meanwhile, so Scrapy
does not call it idle) until the flag is kept, and then works on what those start requests
made, instead of finding the queue empty and closing; if the other's lease runs out first
(it died), it takes the start requests itself.
"""

from __future__ import annotations

import logging

from scrapeq.engine.lua.scripts import OnceFlag
from scrapeq.engine.queue import Queue

__all__ = ["START_FLAG", "StartFlag", "sleep"]

log = logging.getLogger("scrapeq.scrapy")

#: The queue's once-flag held by the process whose start requests are taken.
START_FLAG = "scrapy-start"
#: Seconds between two looks at another process's flag, at least and at most.
WAIT_MIN, WAIT_MAX = 0.05, 1.0


class StartFlag:
    """This process's side of the crawl's start flag.

    Attributes:
        mine: this process takes the start requests (it won :meth:`take`).
        reading: it holds the flag's lease: its start requests are still being read.
    """

    def __init__(self, queue: Queue, holder: str) -> None:
        self.queue = queue
        self.holder = holder
        self.mine = False
        self.reading = False

    def take(self) -> OnceFlag:
        """Take the flag for one lease if nobody holds it; the flag as it is now."""
        flag = self._call("take", self.queue.settings.lease)
        self.mine = self.reading = flag.won
        return flag

    def renew(self) -> None:
        """Extend this process's lease while its start requests are being read."""
        if self.reading and not self._call("renew", self.queue.settings.lease).won:
            log.warning(
                "scrapeq queue=%s: the start flag's lease ran out while start() was read; "
                "another process may take the start requests too (the seen-set drops repeats)",
                self.queue.name,
            )

    def finish(self) -> None:
        """``start()`` is exhausted: keep the flag for good."""
        if self.reading:
            self.reading = False
            self._call("renew", 0.0)

    def abandon(self) -> None:
        """``start()`` raised, or the process stops before its end: release the flag, so
        that the next process to open takes the start requests again."""
        if self.reading:
            self.reading = False
            self._call("release", 0.0)

    async def wait_turn(self) -> None:
        """Until this process holds the flag, or another has kept it (every start request
        scheduled): while another holds its lease, wait; once the lease is gone, take it."""
        while not self.mine:
            flag = self.take()
            if flag.won:
                log.info(
                    "scrapeq queue=%s: the start requests were left unfinished; this process "
                    "takes them", self.queue.name,
                )  # fmt: skip
                return
            if flag.kept:
                return
            await sleep(min(max(flag.ttl_ms / 1000, WAIT_MIN), WAIT_MAX))

    def _call(self, op: str, lease: float) -> OnceFlag:
        return self.queue.once_flag(START_FLAG, self.holder, op=op, lease=lease)


async def sleep(seconds: float) -> None:
    """Sleep on the reactor Scrapy runs (asyncio's or another)."""
    from scrapy.utils.defer import maybe_deferred_to_future
    from twisted.internet import reactor, task

    await maybe_deferred_to_future(task.deferLater(reactor, seconds))
