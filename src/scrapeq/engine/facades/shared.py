"""What both facades share beyond a rename.

:class:`~scrapeq.engine.facades.sync_queue.Queue` and
:class:`~scrapeq.engine.facades.async_queue.AsyncQueue` differ only in their I/O. Both
are a :class:`~scrapeq.engine.ops.core._QueueCore` (the settings, ``prepare``, the
settlement builders, the single-partition operations) wrapped by a
:class:`~scrapeq.engine.partitioned.routers.PartitionRouter`, through which every
operation that depends on the partitions goes: the core's own with one partition
(:class:`~scrapeq.engine.partitioned.routers.SinglePartitionRouter`), fanned out and
merged with several (:class:`~scrapeq.engine.partitioned.multi.MultiPartitionRouter`),
chosen here once (:class:`_QueueBase`).

A difference that renaming cannot express lives here too, as pairs of small
per-flavour helpers: ``scripts/unasync.py`` writes ``sync_queue`` from ``async_queue``
by renaming (``AsyncQueue`` to ``Queue``, ``async_<name>`` to ``sync_<name>``,
``redis.asyncio`` to ``redis``...) and dropping ``async`` and ``await``; a helper
``async_<name>`` sits beside its twin ``sync_<name>`` with the same arguments.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Iterable, Sequence
from typing import Any, TypeVar

import redis
import redis.asyncio.cluster
import redis.cluster

from scrapeq.engine.config.settings import Settings
from scrapeq.engine.lua.args import EnqueueSpec
from scrapeq.engine.lua.library import Library, function_miss
from scrapeq.engine.lua.source import map_error
from scrapeq.engine.model.keys import Keys
from scrapeq.engine.ops.batch_prepare import prepare_seen
from scrapeq.engine.ops.core import _QueueCore
from scrapeq.engine.partitioned.multi import MultiPartitionRouter
from scrapeq.engine.partitioned.routers import PartitionRouter, SinglePartitionRouter
from scrapeq.engine.server.connection import AsyncClient, SyncClient
from scrapeq.errors import RedisUnavailable, ScrapeqError

__all__ = ["async_cluster", "async_gather", "sync_cluster", "sync_gather"]


_log = logging.getLogger("scrapeq.queue")


class _QueueBase(_QueueCore):
    """A queue's core with its partition router (``_route``)."""

    #: Whether scripts run as Redis 7 functions (engine/lua/library.py): None until a call
    #: tells, False where the server has none or may not load them (then by EVALSHA).
    _functions: bool | None = None

    def __init__(self, name: str | None = None, *, settings: Settings | None = None) -> None:
        super().__init__(name, settings=settings)
        self._route: PartitionRouter = (
            MultiPartitionRouter(self)
            if self.settings.partitions > 1
            else SinglePartitionRouter(self)
        )

    def _load_refused(self, library: Library, error: redis.ResponseError) -> bool:
        """A FUNCTION LOAD refused: False (the scripts go by EVALSHA from now on). A server
        without functions or a user without the right says so quietly; a refusal for now
        (OOM, LOADING, a failover...) is raised, as the call's own would be; anything else
        is logged, once, since the script then costs its whole chunk a call."""
        if function_miss(error) is None:
            if isinstance(map_error(error), RedisUnavailable):
                raise error
            _log.warning("scrapeq: Redis refused to load %s (%s): scripts run by EVALSHA",
                         library.name, error)  # fmt: skip
        return False

    @property
    def partitions(self) -> int:
        """The number of partitions (hash tags) the queue is spread over."""
        return self._route.partitions

    @property
    def parts(self) -> list[Keys]:
        """The keys of each partition (the queue's own keys with one partition)."""
        return self._route.parts

    def urgent_arrived(self) -> None:
        """Urgent work was enqueued (engine/facades/wake.py): the next claim tries every
        partition."""
        self._route.urgent_arrived()

    def prepare_seen(
        self,
        urls: Sequence[str],
        payloads: Sequence[Any] | None = None,
        extras: Sequence[dict[str, Any] | None] | None = None,
    ) -> list[EnqueueSpec | ScrapeqError]:
        """``prepare(url, unique="seen", payload=...)`` for many plain URLs at once, each
        spec with its ``extras`` fields; a URL refused is its error in its place
        (:mod:`scrapeq.engine.ops.batch_prepare`: each URL validated once)."""
        return prepare_seen(self, urls, payloads, extras)


T = TypeVar("T")


async def async_gather(calls: Iterable[Awaitable[T]]) -> list[T]:
    """The answers of ``calls`` (the steps of a :class:`~scrapeq.engine.lua.scripts.Many`, one a
    partition), in order; awaited concurrently."""
    return list(await asyncio.gather(*calls))


def sync_gather(answers: Iterable[T]) -> list[T]:
    """The answers of the steps of a :class:`~scrapeq.engine.lua.scripts.Many`, in order; each
    step runs as ``answers`` is consumed, one after the other."""
    return list(answers)


async def async_cluster(client: AsyncClient) -> redis.asyncio.cluster.RedisCluster:
    """``client``, a cluster client, with its nodes known: ``redis.asyncio`` learns them on
    its first call (later calls refresh the topology only when an error asked for it)."""
    assert isinstance(client, redis.asyncio.cluster.RedisCluster)
    await client.initialize()
    return client


def sync_cluster(client: SyncClient) -> redis.cluster.RedisCluster:
    """``client``, a cluster client (redis-py's blocking one learns its nodes when built)."""
    assert isinstance(client, redis.cluster.RedisCluster)
    return client
