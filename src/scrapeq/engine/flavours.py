"""What differs between the two facades beyond a rename: pairs of small per-flavour helpers.

:mod:`scrapeq.engine.async_queue` is written by hand and ``scripts/unasync.py`` writes
:mod:`scrapeq.engine.sync_queue` from it: it renames (``AsyncQueue`` to ``Queue``,
``async_<name>`` to ``sync_<name>``, ``redis.asyncio`` to ``redis``...) and drops ``async``
and ``await``. A difference that renaming cannot express lives here, as a helper
``async_<name>`` beside its twin ``sync_<name>`` with the same arguments.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterable
from typing import TypeVar

import redis.asyncio.cluster
import redis.cluster

from scrapeq.engine.connection import AsyncClient, SyncClient

__all__ = ["async_cluster", "async_gather", "sync_cluster", "sync_gather"]

T = TypeVar("T")


async def async_gather(calls: Iterable[Awaitable[T]]) -> list[T]:
    """The answers of ``calls`` (the steps of a :class:`~scrapeq.engine.scripts.Many`, one a
    partition), in order; awaited concurrently."""
    return list(await asyncio.gather(*calls))


def sync_gather(answers: Iterable[T]) -> list[T]:
    """The answers of the steps of a :class:`~scrapeq.engine.scripts.Many`, in order; each
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
