"""What both facades share: each is the queue's core and routes its operations over partitions.

:class:`~scrapeq.engine.sync_queue.Queue` and :class:`~scrapeq.engine.async_queue.AsyncQueue`
differ only in their I/O. Both are a :class:`~scrapeq.engine.core._QueueCore` (the settings,
``prepare``, the settlement builders, the single-partition operations) wrapped by a
:class:`~scrapeq.engine.partitions.PartitionRouter`, through which every operation that
depends on the partitions goes: the core's own with one partition
(:class:`~scrapeq.engine.partitions.SinglePartitionRouter`), fanned out and merged with
several (:class:`~scrapeq.engine.multi_partition.MultiPartitionRouter`), chosen here once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from scrapeq.engine.batch_prepare import prepare_seen
from scrapeq.engine.core import _QueueCore
from scrapeq.engine.keys import Keys
from scrapeq.engine.multi_partition import MultiPartitionRouter
from scrapeq.engine.partitions import PartitionRouter, SinglePartitionRouter
from scrapeq.engine.script_args import EnqueueSpec
from scrapeq.engine.settings import Settings
from scrapeq.errors import ScrapeqError


class _QueueBase(_QueueCore):
    """A queue's core with its partition router (``_route``)."""

    def __init__(self, name: str | None = None, *, settings: Settings | None = None) -> None:
        super().__init__(name, settings=settings)
        self._route: PartitionRouter = (
            MultiPartitionRouter(self)
            if self.settings.partitions > 1
            else SinglePartitionRouter(self)
        )

    @property
    def partitions(self) -> int:
        """The number of partitions (hash tags) the queue is spread over."""
        return self._route.partitions

    @property
    def parts(self) -> list[Keys]:
        """The keys of each partition (the queue's own keys with one partition)."""
        return self._route.parts

    def urgent_arrived(self) -> None:
        """Urgent work was enqueued (engine/wake.py): the next claim tries every partition."""
        self._route.urgent_arrived()

    def prepare_seen(
        self,
        urls: Sequence[str],
        payloads: Sequence[Any] | None = None,
        extras: Sequence[dict[str, Any] | None] | None = None,
    ) -> list[EnqueueSpec | ScrapeqError]:
        """``prepare(url, unique="seen", payload=...)`` for many plain URLs at once, each
        spec with its ``extras`` fields; a URL refused is its error in its place
        (:mod:`scrapeq.engine.batch_prepare`: each URL validated once)."""
        return prepare_seen(self, urls, payloads, extras)
