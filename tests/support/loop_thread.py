"""An asyncio event loop served by a daemon thread, for servers a synchronous test steers:
the loopback sites (:class:`support.sites.SiteThread`), the proxy fleet
(:class:`support.proxy_fleet.Fleet`) and the TCP proxy (:class:`support.tcpproxy.TcpProxy`)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class LoopThread:
    """An event loop run by its own daemon thread: :meth:`call` runs a coroutine in it and
    waits for its value; :meth:`stop` runs a shutdown there, cancels every task left, stops
    the loop and closes it."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def start(self) -> None:
        self.thread.start()

    def call(self, coro: Coroutine[Any, Any, T], timeout: float = 10.0) -> T:
        """Run ``coro`` in the loop; its value, or its exception raised here."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self, shutdown: Callable[[], Awaitable[None]] | None = None) -> None:
        """``shutdown()`` in the loop (its errors ignored), then every task left cancelled;
        the loop stopped, its thread joined and the loop closed. Harmless twice."""
        if not self.thread.is_alive():
            return
        with contextlib.suppress(Exception):
            self.call(_finish(shutdown))
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        if not self.thread.is_alive():
            self.loop.close()


async def _finish(shutdown: Callable[[], Awaitable[None]] | None) -> None:
    if shutdown is not None:
        with contextlib.suppress(Exception):
            await shutdown()
    me = asyncio.current_task()
    rest = [t for t in asyncio.all_tasks() if t is not me]
    for task in rest:
        task.cancel()
    await asyncio.gather(*rest, return_exceptions=True)
