"""What the URLFrontier API's names are in scrapeq: crawls, keys, leases, metadata.

A crawl ID is a queue (``<prefix><crawlID>``, ``frontier.DEFAULT`` for the default crawl), a
queue key a politeness key (the URL's host unless the client names another), a served URL
a claimed job whose lease rides in its metadata (``scrapeq.lease``: ``"<job id> <token>"``),
and the rest of the metadata the job's payload. No state lives here: it is all in Redis.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

from scrapeq.engine.config.settings import Settings
from scrapeq.engine.facades.async_queue import AsyncQueue
from scrapeq.engine.model.job import Job
from scrapeq.engine.model.keys import validate_queue_name

__all__ = [
    "DEFAULT_CRAWL",
    "LEASE_KEY",
    "BadItem",
    "Crawls",
    "lease_of",
    "lease_text",
    "metadata_payload",
]

#: The crawl ID of the default crawl (an empty crawlID names it too).
DEFAULT_CRAWL = "DEFAULT"
#: The metadata key a served URL's lease travels under; an update gives it back.
LEASE_KEY = "scrapeq.lease"
#: A queue key the client names: what a politeness key may be (no blanks, no controls).
_KEY = re.compile(r"^[^\s\x00-\x1f\x7f]{1,255}$")
_LEASE = re.compile(r"^([a-z][0-9a-f]{1,26}(?:\.\d{1,4})?) (\d{1,14})$")


class BadItem(ValueError):
    """A message the service skips (acked SKIPPED, or refused with INVALID_ARGUMENT)."""


def check_key(key: str) -> str:
    """``key`` when it can be a politeness key; else :class:`BadItem`."""
    if not _KEY.match(key):
        raise BadItem(f"queue key {key[:80]!r}: 1-255 characters, no blanks or controls")
    return key


def lease_text(job: Job) -> str:
    """The lease a served URL carries: its job's id and fencing token."""
    return f"{job.id} {job.token}"


def lease_of(metadata: Mapping[str, Sequence[str]]) -> tuple[str, int] | None:
    """The (job id, token) an update carries back, None without one; :class:`BadItem`
    when the value is not one the service wrote."""
    values = metadata.get(LEASE_KEY)
    if values is None:
        return None
    match = _LEASE.match(values[0]) if len(values) == 1 else None
    if match is None:
        raise BadItem(f"metadata {LEASE_KEY}: not a lease this service wrote")
    return match.group(1), int(match.group(2))


def metadata_payload(metadata: Mapping[str, Sequence[str]]) -> dict[str, list[str]] | None:
    """The metadata a job keeps as its payload (the lease left out; None when empty)."""
    kept = {k: list(v) for k, v in metadata.items() if k != LEASE_KEY}
    return kept or None


class Crawls:
    """The queues of the crawls one service fronts, over one Redis client.

    Args:
        client: a ``redis.asyncio`` client (``decode_responses=True``).
        settings: the queues' settings; ``unique`` is forced to ``seen`` (a discovered URL
            is enqueued once) and ``lease`` to each GetURLs' ``delay_requestable``.
        prefix: queue name = prefix + crawl ID.
    """

    def __init__(
        self, client: Redis | RedisCluster, settings: Settings, prefix: str = "frontier."
    ) -> None:
        self.client = client
        self.settings = dataclasses.replace(settings, unique="seen")
        self.prefix = prefix
        self._queues: dict[tuple[str, float], AsyncQueue] = {}

    def name(self, crawl_id: str) -> str:
        """The queue of ``crawl_id`` (empty: the default crawl); :class:`BadItem` when the
        ID cannot make a queue name."""
        name = self.prefix + (crawl_id or DEFAULT_CRAWL)
        try:
            return validate_queue_name(name)
        except ValueError:
            raise BadItem(
                f"crawl ID {crawl_id[:80]!r}: letters, digits, '_', '.' or '-', "
                f"at most {64 - len(self.prefix)} characters"
            ) from None

    def crawl_of(self, queue: str) -> str | None:
        """The crawl ID of a queue name, None for a queue no crawl of this prefix owns."""
        return queue[len(self.prefix) :] if queue.startswith(self.prefix) else None

    def queue(self, crawl_id: str, lease_s: float | None = None) -> AsyncQueue:
        """The queue of ``crawl_id``; its claims lease for ``lease_s`` (None: the setting)."""
        lease = self.settings.lease if lease_s is None else lease_s
        key = (self.name(crawl_id), lease)
        queue = self._queues.get(key)
        if queue is None:
            settings = dataclasses.replace(self.settings, queue=key[0], lease=lease)
            queue = AsyncQueue(self.client, key[0], settings=settings)
            self._queues[key] = queue
        return queue

    async def ids(self) -> list[str]:
        """The crawl IDs with a queue in Redis (a bounded scan)."""
        known = await self.queue(DEFAULT_CRAWL).known_queues()
        names = known.names if known is not None else []
        return [c for c in map(self.crawl_of, names) if c]


def job_info_metadata(job: Job, *, lease: bool = True) -> dict[str, Any]:
    """A job's metadata: its payload's lists, and (a served job's) its lease."""
    payload = job.payload if isinstance(job.payload, dict) else {}
    meta: dict[str, Any] = {k: v for k, v in payload.items() if isinstance(v, list)}
    if lease:
        meta[LEASE_KEY] = [lease_text(job)]
    return meta
