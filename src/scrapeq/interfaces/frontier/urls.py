"""The URLFrontier calls that go over a crawl's URLs one by one: CountURLs with a filter,
ListURLs and PurgeURLs, and GetURLStatus.

A crawl's URLs are its queue's pending jobs: each domain's ready jobs (most urgent first),
then the delayed ones (soonest due first), then the leased ones (soonest lease end first),
read a page at a time (``AsyncQueue.walk_page``: bounded reads, not a snapshot). A URL
completed (no job holds it) is only a fingerprint in the seen-set: GetURLStatus finds it
there (``AsyncQueue.url_seen``), nothing can list it.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable

from scrapeq.engine.facades.async_queue import AsyncQueue
from scrapeq.engine.model.job import JobInfo
from scrapeq.interfaces.frontier import urlfrontier_pb2 as pb
from scrapeq.interfaces.frontier.crawls import job_info_metadata

__all__ = ["WALK_PAGE", "count_urls", "purge_urls", "url_filter", "url_item", "url_status", "walk"]

#: Entries one read of a walk takes (``walk_page``'s ``count``).
WALK_PAGE = 500
#: Jobs one cancel of PurgeURLs names at most.
PURGE_CHUNK = 500
_DAY_S = 86_400


async def walk(queue: AsyncQueue, key: str = "") -> AsyncIterator[list[JobInfo]]:
    """The pending jobs of the crawl (of ``key``'s queue when given), a page at a time: each
    domain's ready jobs (domains by name), then delayed, then leased ones."""
    if key:
        domains = [key]
    else:
        domains = sorted(r["domain"] for r in await queue.domains_info() if r["ready"])
    for domain in domains:
        async for page in _pages(queue, "ready", domain, None):
            yield page
    parts: list[int | None] = [None] if key else list(range(queue.settings.partitions))
    for state in ("delayed", "inflight"):
        for part in parts:
            async for page in _pages(queue, state, key or None, part):
                yield page


async def _pages(
    queue: AsyncQueue, state: str, domain: str | None, part: int | None
) -> AsyncIterator[list[JobInfo]]:
    start = 0
    while True:
        jobs, read = await queue.walk_page(
            state, domain=domain, part=part, start=start, count=WALK_PAGE
        )
        if jobs:
            yield jobs
        if read < WALK_PAGE:
            return
        start += read


def url_filter(text: str, ignore_case: bool) -> Callable[[str], bool]:
    """The API's URL filter: ``text`` is in the URL (case folded with ``ignore_case``); an
    empty text keeps every URL."""
    if not text:
        return lambda url: True
    if ignore_case:
        folded = text.casefold()
        return lambda url: folded in url.casefold()
    return lambda url: text in url


async def count_urls(queue: AsyncQueue, key: str, keep: Callable[[str], bool]) -> int:
    """The crawl's (``key``'s) queued and leased URLs that ``keep`` keeps, one walk."""
    return sum([sum(1 for info in page if keep(info.job.url)) async for page in walk(queue, key)])


async def purge_urls(queue: AsyncQueue, key: str, days: int) -> int:
    """Remove the crawl's (``key``'s) URLs stored more than ``days`` days ago (0: all), queued
    or leased (a lease of one is ended: its update is refused, FAIL); answers how many. The
    seen-set keeps them: a discovered URL purged is not taken again, a known one is."""
    cutoff_ms = int((time.time() - days * _DAY_S) * 1000)
    ids = [
        info.job.id
        async for page in walk(queue, key)
        for info in page
        if info.job.created_ms < cutoff_ms
    ]
    removed = 0
    for start in range(0, len(ids), PURGE_CHUNK):
        result = await queue.cancel(ids=ids[start : start + PURGE_CHUNK], force=True)
        removed += result.cancelled
    return removed


async def url_status(queue: AsyncQueue, crawl: str, url: str, key: str) -> pb.URLItem | None:
    """GetURLStatus: a queued or leased URL as :func:`url_item`; a URL completed (in the
    seen-set, no job holding it) as a known URL never due again; None for one never seen."""
    found = await queue.url_job(url, domain=key or None)
    if found is not None and found.state in ("ready", "delayed", "inflight"):
        return url_item(found, crawl)
    if not await queue.url_seen(url, domain=key or None):
        return None
    info = pb.URLInfo(url=url, key=key or queue.prepare(url).domain, crawlID=crawl)
    return pb.URLItem(known=pb.KnownURLItem(info=info, refetchable_from_date=0), ID=url)


def url_item(found: JobInfo, crawl: str) -> pb.URLItem:
    """A queued or leased job as GetURLStatus and ListURLs answer it: when it is due (a
    leased one: when its lease ends), its metadata, its creation date."""
    job = found.job
    info = pb.URLInfo(url=job.url, key=job.domain, crawlID=crawl)
    for k, v in job_info_metadata(job, lease=False).items():
        info.metadata[k].values.extend(v)
    due_ms = found.lease_deadline_ms if found.state == "inflight" else found.eligible_ms
    date = max(1, (due_ms or found.now_ms) // 1000)  # 0 would say "never again"
    return pb.URLItem(
        known=pb.KnownURLItem(info=info, refetchable_from_date=date),
        ID=job.url,
        creation_date=job.created_ms // 1000 if job.created_ms else 0,
    )
