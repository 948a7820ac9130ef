"""Waiting for urgent work: a blocking read of each partition's wake stream.

The enqueue script adds one entry to ``sq:{Q}:wake`` (a stream capped at one entry) in a call
that made a job of the most urgent lane ready (``includes/domain.lua``: ``is_urgent``), so an
idle worker claims it at once instead of at its next poll. The claim path pays nothing; an
enqueue of other lanes writes nothing; a worker keeps one blocking read outstanding.

The read names the last entry seen on each stream, so an entry added between two reads is
never missed. A Redis Cluster queue of several partitions has its streams in several slots,
which one read cannot name: there :attr:`UrgentSignal.usable` is False and workers poll.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import redis.asyncio.cluster

if TYPE_CHECKING:
    from scrapeq.engine.queue import AsyncQueue

__all__ = ["UrgentSignal"]


class UrgentSignal:
    """Blocks until urgent work is enqueued on ``queue`` (any of its partitions)."""

    def __init__(self, queue: AsyncQueue) -> None:
        self._client = queue.client
        self._keys = [part.wake for part in queue.parts]
        self._last: dict[str, str] | None = None  # stream -> id of the last entry seen

    @property
    def usable(self) -> bool:
        """Whether one read can watch every partition's stream (not so on a cluster of many)."""
        cluster = isinstance(self._client, redis.asyncio.cluster.RedisCluster)
        return not (cluster and len(self._keys) > 1)

    async def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds; True when urgent work was enqueued meanwhile (since
        the previous call; the first call only notes where the streams are)."""
        if self._last is None:
            self._last = {key: await self._newest(key) for key in self._keys}
        streams: dict[Any, Any] = dict(self._last)
        got: Any = await self._client.xread(streams, count=1, block=max(1, round(timeout * 1000)))
        for key, entries in got or []:
            self._last[_text(key)] = _text(entries[-1][0])
        return bool(got)

    async def _newest(self, key: str) -> str:
        newest = await self._client.xrevrange(key, count=1)
        return _text(newest[0][0]) if newest else "0-0"


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
