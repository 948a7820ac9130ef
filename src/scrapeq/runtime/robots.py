"""robots.txt for the worker (``respect_robots``): :class:`Robots`, the rules per origin,
fetched once through the worker's :class:`~.fetch.Fetcher` and shared through Redis. Split
from :mod:`.fetch`, which re-exports it."""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import aiohttp
from protego import Protego
from redis.exceptions import RedisError

from scrapeq.engine.model.urls import parse_target
from scrapeq.engine.server.connection import AsyncClient
from scrapeq.errors import InvalidURL
from scrapeq.runtime.classify import BlockedAddress, BodyTooLarge, RobotsDisallowed

if TYPE_CHECKING:
    from scrapeq.runtime.fetch import Fetcher

__all__ = ["Robots"]

log = logging.getLogger("scrapeq.runtime.fetch")


@dataclass(frozen=True, slots=True)
class _Entry:
    rules: Protego
    expires: float  # time.monotonic()


def _origin(url: str) -> str:
    """``scheme://host[:port]`` of a URL: robots.txt is per origin (RFC 9309)."""
    target = parse_target(url, allow_private=True)
    scheme = urlsplit(target.url).scheme
    return f"{scheme}://{target.domain}"


class Robots:
    """robots.txt rules per origin, fetched once and shared by every worker through Redis.

    Policy (RFC 9309, adapted to a queue that isolates failures):

    * 2xx: the file is parsed (protego) and cached, in Redis for ``ttl`` seconds
      (``SET key text EX ttl``) and in this process.
    * 4xx (404, 403, 410 ...), or a redirect chain that never ends: "unavailable", allow all;
      cached like a file (an empty file).
    * 5xx, 429, a timeout, a connection error, a too-large file: "unreachable". RFC 9309 says
      disallow all; here that would dead-letter jobs for a passing outage. Instead the fetch
      is **allowed** (fail open: the page fetch itself will meet the outage and be retried and
      charged to the domain), and nothing is written to Redis; this process remembers it for
      ``unreachable_ttl`` seconds so it does not hammer a failing site's robots.txt.
    * a :class:`.classify.BlockedAddress` or :class:`~scrapeq.errors.InvalidURL`
      propagates: the page fetch would be refused the same way.
    * Redis failures are logged and skipped: the cache is an optimisation.

    Rules are matched against ``settings.user_agent`` (protego matches the product token,
    e.g. ``scrapeq`` in ``scrapeq/0.1.0``). Concurrent questions about one origin share one
    fetch.

    Args:
        fetcher: fetches robots.txt (with its timeouts, size limit and SSRF guard).
        redis: an async Redis client (``decode_responses`` either way), or ``None`` for an
            in-process cache only.
        prefix: key prefix, e.g. ``sq:{Q}:robots:``; the key is prefix + origin.
        ttl: seconds a fetched file is cached (Redis and in-process).
        unreachable_ttl: seconds an unreachable robots.txt is taken as allow-all in-process.
        user_agent: the name to match; default ``fetcher.settings.user_agent``.
        max_entries: origins kept in the in-process cache (least recently used dropped).
    """

    def __init__(
        self,
        fetcher: Fetcher,
        redis: AsyncClient | None,
        prefix: str,
        *,
        ttl: float = 3600.0,
        unreachable_ttl: float = 60.0,
        user_agent: str | None = None,
        max_entries: int = 10_000,
    ) -> None:
        self._fetcher = fetcher
        self._redis = redis
        self._prefix = prefix
        self._ttl = ttl
        self._unreachable_ttl = unreachable_ttl
        self._user_agent = user_agent or fetcher.settings.user_agent
        self._max_entries = max_entries
        self._cache: OrderedDict[str, _Entry] = OrderedDict()
        self._pending: dict[str, asyncio.Task[_Entry]] = {}

    async def allowed(self, url: str) -> tuple[bool, float | None]:
        """Whether ``url`` may be fetched, and the origin's crawl delay in seconds (or None).

        The crawl delay is ``Crawl-delay``, else derived from ``Request-rate``
        (seconds / requests).
        """
        rules = await self._rules(_origin(url))
        allowed = rules.can_fetch(url, self._user_agent)
        return allowed, self._delay(rules)

    async def check(self, url: str) -> float | None:
        """Like :meth:`allowed`, raising :class:`.classify.RobotsDisallowed`.

        Returns:
            The crawl delay in seconds, or ``None``.
        """
        allowed, delay = await self.allowed(url)
        if not allowed:
            raise RobotsDisallowed(f"robots.txt disallows {url}")
        return delay

    async def sitemaps(self, url: str) -> list[str]:
        """The ``Sitemap:`` URLs of the robots.txt of ``url``'s origin, in the file's order
        (none when the file is missing or unreachable: the same policy as :meth:`allowed`)."""
        rules = await self._rules(_origin(url))
        return list(rules.sitemaps)

    def _delay(self, rules: Protego) -> float | None:
        delay = rules.crawl_delay(self._user_agent)
        if delay is not None:
            return float(delay)
        rate = rules.request_rate(self._user_agent)
        if rate is not None and rate.requests > 0:
            return float(rate.seconds) / rate.requests
        return None

    async def _rules(self, origin: str) -> Protego:
        entry = self._cache.get(origin)
        if entry is not None and entry.expires > time.monotonic():
            self._cache.move_to_end(origin)
            return entry.rules
        task = self._pending.get(origin)
        if task is None:
            task = asyncio.create_task(self._load(origin))
            self._pending[origin] = task
            task.add_done_callback(functools.partial(self._loaded, origin))
        entry = await asyncio.shield(task)
        self._cache[origin] = entry
        self._cache.move_to_end(origin)
        while len(self._cache) > self._max_entries:
            self._cache.popitem(last=False)
        return entry.rules

    def _loaded(self, origin: str, task: asyncio.Task[_Entry]) -> None:
        self._pending.pop(origin, None)
        if not task.cancelled():
            task.exception()  # retrieved here too: every waiter may have been cancelled

    async def _load(self, origin: str) -> _Entry:
        key = self._prefix + origin
        text = await self._redis_get(key)
        if text is not None:
            return _Entry(Protego.parse(text), time.monotonic() + self._ttl)
        text = await self._download(origin)
        if text is None:
            return _Entry(Protego.parse(""), time.monotonic() + self._unreachable_ttl)
        await self._redis_set(key, text)
        return _Entry(Protego.parse(text), time.monotonic() + self._ttl)

    async def _download(self, origin: str) -> str | None:
        """The file's text, ``""`` for allow-all (4xx), ``None`` when unreachable."""
        try:
            response = await self._fetcher.fetch(origin + "/robots.txt")
        except (BlockedAddress, InvalidURL):
            raise
        except aiohttp.TooManyRedirects:
            return ""
        except (TimeoutError, OSError, aiohttp.ClientError, BodyTooLarge) as exc:
            log.info("robots.txt of %s unreachable (%s): allowing for now", origin, exc)
            return None
        status = response.status
        if 200 <= status < 300:
            return response.text()
        if status == 429 or status >= 500:
            log.info("robots.txt of %s answered HTTP %s: allowing for now", origin, status)
            return None
        return ""  # 3xx without Location, 4xx: unavailable, allow all

    async def _redis_get(self, key: str) -> str | None:
        if self._redis is None:
            return None
        try:
            value = await self._redis.get(key)
        except RedisError as exc:
            log.warning("robots cache read failed: %s", exc)
            return None
        if value is None:
            return None
        if isinstance(value, bytes):
            return value.decode("utf-8", errors="replace")
        return str(value)

    async def _redis_set(self, key: str, text: str) -> None:
        if self._redis is None:
            return
        try:
            await self._redis.set(key, text, ex=max(1, round(self._ttl)))
        except RedisError as exc:
            log.warning("robots cache write failed: %s", exc)
