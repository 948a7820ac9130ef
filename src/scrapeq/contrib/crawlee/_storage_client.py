"""Crawlee's storage client on scrapeq: request queues are scrapeq queues; datasets and
key-value stores are another storage client's (crawlee's memory one by default)."""

from __future__ import annotations

import re
from collections.abc import Hashable
from typing import Any

from crawlee.configuration import Configuration
from crawlee.storage_clients import MemoryStorageClient, StorageClient
from crawlee.storage_clients._base import DatasetClient, KeyValueStoreClient

from scrapeq.contrib.crawlee._navigation import Navigations
from scrapeq.contrib.crawlee._request_queue import ScrapeqRequestQueueClient
from scrapeq.engine.config.settings import Settings
from scrapeq.engine.queue import AsyncQueue
from scrapeq.engine.server.connection import resolve_url
from scrapeq.errors import ConfigError

__all__ = ["ScrapeqStorageClient"]

_NOT_NAME = re.compile(r"[^A-Za-z0-9_.\-]")


class ScrapeqStorageClient(StorageClient):
    """Crawlee storage whose request queues are scrapeq queues.

    Args:
        redis_url: the Redis server (None: ``settings.redis_url``, else the embedded one).
        settings: scrapeq's settings (None: the defaults); ``settings.queue`` names the
            crawler's default request queue.
        others: the storage client of datasets and key-value stores (None: crawlee's
            :class:`~crawlee.storage_clients.MemoryStorageClient`).

    A request queue opened by ``name`` (or ``id``, or ``alias``) is the scrapeq queue of that
    name (letters, digits, ``_.-``; other characters become ``-``); the default one (none
    given) is ``settings.queue``. Every queue is shared by every process on the same Redis:
    it is never purged on start (crawlee purges only unnamed storages, and this client names
    each); ``RequestQueue.purge()`` or ``drop()`` clears it.

    :meth:`watch` a crawler so its requests' failures reach scrapeq's breakers and retries.
    """

    def __init__(
        self,
        redis_url: str | None = None,
        *,
        settings: Settings | None = None,
        others: StorageClient | None = None,
    ) -> None:
        self.settings = settings or Settings()
        self.redis_url = redis_url if redis_url is not None else self.settings.redis_url
        self.others = others or MemoryStorageClient()
        self.navigations = Navigations(self.settings.slow_call)

    def watch(self, crawler: Any) -> Any:
        """Watch ``crawler``'s navigations (crawlee's pre- and post-navigation hooks), so a
        request that failed is charged to its domain's breaker and retried by scrapeq when the
        site failed (a timeout, a refused connection, a 5xx, a 403: a ``retry``; a 429:
        ``throttle``), as scrapeq's worker does (:mod:`._navigation`). Answers ``crawler``.

        A crawler with no navigation hooks (crawlee's ``BasicCrawler``) is refused
        (``TypeError``)."""
        before = getattr(crawler, "pre_navigation_hook", None)
        after = getattr(crawler, "post_navigation_hook", None)
        if not callable(before) or not callable(after):
            raise TypeError(f"{type(crawler).__name__} has no navigation hooks to watch")
        before(self.navigations.before)
        after(self.navigations.after)
        return crawler

    def get_storage_client_cache_key(self, configuration: Configuration) -> Hashable:
        # This client's own: crawlee caches opened storages under this key, and a queue's
        # connection belongs to the event loop and the settings this client was made with.
        return (super().get_storage_client_cache_key(configuration), id(self))

    async def create_dataset_client(
        self,
        *,
        id: str | None = None,
        name: str | None = None,
        alias: str | None = None,
        configuration: Configuration | None = None,
    ) -> DatasetClient:
        return await self.others.create_dataset_client(
            id=id, name=name, alias=alias, configuration=configuration
        )

    async def create_kvs_client(
        self,
        *,
        id: str | None = None,
        name: str | None = None,
        alias: str | None = None,
        configuration: Configuration | None = None,
    ) -> KeyValueStoreClient:
        return await self.others.create_kvs_client(
            id=id, name=name, alias=alias, configuration=configuration
        )

    async def create_rq_client(
        self,
        *,
        id: str | None = None,
        name: str | None = None,
        alias: str | None = None,
        configuration: Configuration | None = None,
    ) -> ScrapeqRequestQueueClient:
        given = [v for v in (id, name, alias) if v is not None]
        if len(given) > 1:
            raise ValueError("only one of id, name and alias may be given")
        wanted = given[0] if given and given[0] != "default" else self.settings.queue
        queue_name = _NOT_NAME.sub("-", wanted)[:64]
        if not queue_name:
            raise ConfigError("queue", f"no queue name can be made of {wanted!r}")
        url = resolve_url(self.redis_url, self.settings.data_dir)
        queue = AsyncQueue.from_url(url, queue_name, settings=self.settings)
        # Named: crawlee's _purge_if_needed leaves it alone (a shared frontier).
        return ScrapeqRequestQueueClient(
            queue, id=queue_name, name=queue_name, navigations=self.navigations
        )
