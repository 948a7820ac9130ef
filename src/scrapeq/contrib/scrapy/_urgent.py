"""Urgent work for Scrapy on scrapeq: a thread that watches the queue's wake streams.

The frontier keeps a share of its claim slots for jobs of the most urgent lane
(``SCRAPEQ_URGENT_SLOTS``) and fills it with urgent-only claims, made only when urgent work
may be ready: never as a poll. An enqueue that makes urgent work ready adds an entry to the
queue's wake stream (``engine/facades/wake.py``); the worker blocks on it in its event loop, and
here a daemon thread does the same with the worker's own loop (``runtime/wakeup.py``), then hands
the news to the reactor thread. Twisted's reactor thread never blocks on Redis for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable

from scrapeq.engine.config.settings import Settings
from scrapeq.engine.queue import AsyncQueue
from scrapeq.runtime.wakeup import wake_on_urgent

__all__ = ["UrgentListener"]

log = logging.getLogger("scrapeq.scrapy")

#: Seconds :meth:`UrgentListener.stop` waits for the thread (a read blocks for 1 s at most).
JOIN_TIMEOUT = 3.0


class UrgentListener:
    """Calls ``on_urgent`` (from its own thread) each time urgent work is enqueued."""

    def __init__(self, url: str, settings: Settings, on_urgent: Callable[[], None]) -> None:
        self._url = url
        self._settings = settings
        self._on_urgent = on_urgent
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="scrapeq-urgent", daemon=True)

    def start(self) -> None:
        self._thread.start()
        self._ready.wait(JOIN_TIMEOUT)

    def stop(self) -> None:
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(stop.set)
        if self._thread.is_alive():
            self._thread.join(JOIN_TIMEOUT)

    def _run(self) -> None:
        try:
            asyncio.run(self._watch())
        except Exception as exc:  # the share is then filled by ordinary claims only
            log.warning("scrapeq: watching for urgent work stopped: %s", exc)
        finally:
            self._ready.set()

    async def _watch(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        queue = AsyncQueue.from_url(self._url, settings=self._settings)
        self._ready.set()
        try:
            await wake_on_urgent(queue, self._on_urgent, self._stop)
        finally:
            await queue.close()
