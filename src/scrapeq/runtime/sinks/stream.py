"""Append results to a Redis stream."""

from __future__ import annotations

import json
from typing import Any

import redis.asyncio

__all__ = ["RedisStreamSink"]


class RedisStreamSink:
    """``XADD`` each record, as one JSON field ``record``, to a capped stream.

    Args:
        client: an async redis client (``decode_responses=True``).
        key: the stream key.
        maxlen: approximate cap of the stream (oldest entries are trimmed); None: no cap.
        owns_client: :meth:`close` closes ``client`` (the sink made it: ``sink_from_url``).
    """

    def __init__(
        self,
        client: redis.asyncio.Redis,
        key: str,
        *,
        maxlen: int | None = 1_000_000,
        owns_client: bool = False,
    ) -> None:
        self._client = client
        self.key = key
        self.maxlen = maxlen
        self._owns_client = owns_client

    async def write(self, record: dict[str, Any]) -> None:
        data = json.dumps(record, ensure_ascii=False, separators=(",", ":"), default=str)
        await self._client.xadd(self.key, {"record": data}, maxlen=self.maxlen, approximate=True)

    async def check(self) -> None:
        """Ping the stream's server (``--results redis-stream://`` checks it at start)."""
        await self._client.ping()

    async def close(self) -> None:
        if self._owns_client:
            await self._client.aclose()
