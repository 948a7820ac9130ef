"""The queue: a sync :class:`Queue` and an async :class:`AsyncQueue` with the same methods.

Each public method is written once, as an *operation*: a generator that yields
:class:`~scrapeq.engine.lua.scripts.Call` (a Lua script) or :class:`Command` (a read-only Redis
command) and receives each answer. The sync queue drives operations with a blocking client, the
async queue with ``redis.asyncio``; the bookkeeping is shared, the I/O is theirs.

This module is the stable import point; the code lives in focused modules:

- :mod:`scrapeq.engine.ops.results`: the typed results (``EnqueueResult``, ``Claimed``, ...);
- :mod:`scrapeq.engine.ops.core`: argument checks and the single-partition operations;
- :mod:`scrapeq.engine.ops.settlement`: the settlement builders (``done``, ``retrying``, ...);
- :mod:`scrapeq.engine.ops.oputil`: call chunking and reply shaping shared by the operations;
- :mod:`scrapeq.engine.partitioned.routing`, :mod:`scrapeq.engine.partitioned.routers` and
  :mod:`scrapeq.engine.partitioned.multi`: partitioned queues (a ``PartitionRouter`` wraps the
  core and routes each operation to its partitions: one, or several fanned out and merged);
- :mod:`scrapeq.engine.server.transport`: Redis error mapping and cluster command routing;
- :mod:`scrapeq.engine.facades.shared`, :mod:`scrapeq.engine.facades.sync_queue` and
  :mod:`scrapeq.engine.facades.async_queue`: the facades.
"""

from __future__ import annotations

from scrapeq.engine.facades.async_queue import AsyncQueue as AsyncQueue
from scrapeq.engine.facades.shared import _QueueBase as _QueueBase
from scrapeq.engine.facades.sync_queue import Queue as Queue
from scrapeq.engine.lua.scripts import Call as Call
from scrapeq.engine.lua.scripts import Command as Command
from scrapeq.engine.lua.scripts import EnqueueSpec as EnqueueSpec
from scrapeq.engine.lua.scripts import Settlement as Settlement
from scrapeq.engine.ops.core import CANCEL_DELAYED_PASSES as CANCEL_DELAYED_PASSES
from scrapeq.engine.ops.core import CANCEL_SLICE as CANCEL_SLICE
from scrapeq.engine.ops.core import CLEAR_COUNT as CLEAR_COUNT
from scrapeq.engine.ops.core import CLEAR_PASSES as CLEAR_PASSES
from scrapeq.engine.ops.core import MAX_CLAIM as MAX_CLAIM
from scrapeq.engine.ops.core import _QueueCore as _QueueCore
from scrapeq.engine.ops.oputil import CALL_BYTES as CALL_BYTES
from scrapeq.engine.ops.oputil import CALL_ITEMS as CALL_ITEMS
from scrapeq.engine.ops.results import CancelResult as CancelResult
from scrapeq.engine.ops.results import Claimed as Claimed
from scrapeq.engine.ops.results import EnqueueResult as EnqueueResult
from scrapeq.engine.ops.results import KnownQueues as KnownQueues
from scrapeq.engine.ops.results import ReplayResult as ReplayResult
from scrapeq.engine.partitioned.routers import PartitionRouter as PartitionRouter
from scrapeq.engine.partitioned.routing import PARTITION_RECHECK as PARTITION_RECHECK
from scrapeq.engine.partitioned.routing import partition_of as partition_of
from scrapeq.engine.partitioned.routing import partition_of_id as partition_of_id

__all__ = [
    "AsyncQueue",
    "CancelResult",
    "Claimed",
    "EnqueueResult",
    "KnownQueues",
    "Queue",
    "ReplayResult",
]
