"""The URLFrontier service (``scrapeq frontier serve``): the API's calls on scrapeq queues.

Each call is a thin mapping onto the engine: PutURLs is an enqueue (discovered URLs, and
known URLs without a lease: ``EnqueueSpec.at_ms``) or a settle (a known URL that carries
back the lease GetURLs gave it), GetURLs a claim whose lease is ``delay_requestable``,
GetStats and ListQueues read what ``status`` and ``domains`` read, SetDelay is
``domain_set``. Every rule (de-duplication, politeness, breakers, leases) is the engine's.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import AsyncIterator, Sequence
from typing import Any, TypeVar

import grpc

from scrapeq.engine.facades.async_queue import AsyncQueue
from scrapeq.engine.lua.args import EnqueueSpec, Settlement
from scrapeq.engine.ops.core import MAX_CLAIM
from scrapeq.errors import NotFound, PayloadTooLarge, ScrapeqError
from scrapeq.interfaces.frontier import urlfrontier_pb2 as pb
from scrapeq.interfaces.frontier import urlfrontier_pb2_grpc as pb_grpc
from scrapeq.interfaces.frontier.crawls import (
    DEFAULT_CRAWL,
    BadItem,
    Crawls,
    check_key,
    job_info_metadata,
    lease_of,
    metadata_payload,
)
from scrapeq.interfaces.frontier.urls import (
    count_urls,
    purge_urls,
    url_filter,
    url_item,
    url_status,
    walk,
)

__all__ = ["FrontierService"]

log = logging.getLogger("scrapeq.frontier")

M = TypeVar("M")
OK, SKIPPED, FAIL = pb.AckMessage.OK, pb.AckMessage.SKIPPED, pb.AckMessage.FAIL
#: Items of a PutURLs stream written in one engine call at most.
PUT_BATCH = 256
#: The lease of a GetURLs that asks for none (``delay_requestable`` = 0), seconds.
DEFAULT_LEASE_S = 30.0
#: The latest BlockQueueUntil time kept (a later one blocks until then): the year 5138.
MAX_EPOCH_S = 99_999_999_999


@dataclasses.dataclass
class _Pending:
    """One PutURLs item on its way: its ack's ID and, once decided, its status."""

    ack_id: str
    status: pb.AckMessage.Status = OK


@dataclasses.dataclass
class _Item:
    """One PutURLs item read: its ack, crawl, URL, payload, spec fields and lease."""

    pending: _Pending
    crawl: str
    url: str
    payload: dict[str, list[str]] | None = None
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)
    lease: tuple[str, int] | None = None
    at: int | None = None


@dataclasses.dataclass
class _Batch:
    """The engine calls of a run of PutURLs items, per crawl, and who waits on each."""

    enqueue: dict[str, list[tuple[EnqueueSpec, _Pending]]] = dataclasses.field(default_factory=dict)
    settle: dict[str, list[tuple[Settlement, _Pending]]] = dataclasses.field(default_factory=dict)


class FrontierService(pb_grpc.URLFrontierServicer):
    """The URLFrontier API over scrapeq queues (one per crawl ID, see :class:`Crawls`).

    Args:
        crawls: the crawls' queues.
        max_unacked: items of one PutURLs stream read ahead of their acks at most (the
            stream's bound: gRPC's flow control holds the client back past it).
        node: this service's address, for ListNodes.
    """

    def __init__(self, crawls: Crawls, *, max_unacked: int = 1024, node: str = "") -> None:
        if max_unacked < 2:
            raise ValueError("max_unacked must be at least 2")
        self.crawls = crawls
        self.max_unacked = max_unacked
        self.node = node
        self.active = True  # SetActive: this process's, as the API says (not a crawl's)

    # --- PutURLs ------------------------------------------------------------------------------

    async def PutURLs(
        self, request_iterator: AsyncIterator[pb.URLItem], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.AckMessage]:
        batch_max = max(1, min(PUT_BATCH, self.max_unacked // 2))
        ahead: asyncio.Queue[pb.URLItem | None] = asyncio.Queue(self.max_unacked - batch_max)
        reader = asyncio.ensure_future(_read_into(request_iterator, ahead))
        # a batch is planned (validated, fingerprinted: CPU) while the one before it is in
        # Redis; it is written only once that one is done, so writes keep the stream's order
        running: tuple[asyncio.Future[None], list[_Pending]] | None = None
        try:
            ended = False
            while not ended:
                if running is not None and ahead.empty():  # nothing to plan: ack first
                    for ack in await _acks(running):
                        yield ack
                    running = None
                items, ended = await _take(ahead, batch_max)
                batch = _Batch()
                pending = self._plan_all(items, batch)
                if running is not None:
                    for ack in await _acks(running):
                        yield ack
                running = (asyncio.ensure_future(self._run(batch)), pending)
            if running is not None:
                for ack in await _acks(running):
                    yield ack
        finally:
            reader.cancel()
            if running is not None:
                running[0].cancel()

    async def _put(self, items: Sequence[pb.URLItem]) -> list[pb.AckMessage]:
        batch = _Batch()
        pending = self._plan_all(items, batch)
        await self._run(batch)
        return [pb.AckMessage(ID=p.ack_id, status=p.status) for p in pending]

    async def _run(self, batch: _Batch) -> None:
        for crawl, entries in batch.enqueue.items():
            await self._run_enqueue(crawl, entries)
        for crawl, settles in batch.settle.items():
            await self._run_settle(crawl, settles)

    async def PutDiscovered(
        self,
        request_iterator: AsyncIterator[pb.DiscoveredBatch],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[pb.BatchAck]:
        # a batch is one message: the stream's bound counts batches, acked as wholes
        ahead: asyncio.Queue[pb.DiscoveredBatch | None] = asyncio.Queue(
            max(1, self.max_unacked // PUT_BATCH)
        )
        reader = asyncio.ensure_future(_read_into(request_iterator, ahead))
        try:
            while (message := await ahead.get()) is not None:
                batch = _Batch()
                pending = self._plan_all(
                    [pb.URLItem(discovered=pb.DiscoveredURLItem(info=i)) for i in message.items],
                    batch,
                )
                await self._run(batch)
                yield pb.BatchAck(ID=message.ID, statuses=[p.status for p in pending])
        finally:
            reader.cancel()

    def _plan_all(self, items: Sequence[pb.URLItem], batch: _Batch) -> list[_Pending]:
        """Each item's pending ack, its engine call added to ``batch``: the items are read
        one by one, then each crawl's URLs prepared at once (``prepare_seen``)."""
        pending: list[_Pending] = []
        by_crawl: dict[str, list[_Item]] = {}
        for item in items:
            entry = self._read(item)
            pending.append(entry.pending)
            if entry.pending.status == OK:
                by_crawl.setdefault(entry.crawl, []).append(entry)
        for crawl, entries in by_crawl.items():
            queue = self.crawls.queue(crawl)
            specs = queue.prepare_seen(
                [e.url for e in entries], [e.payload for e in entries], [e.extra for e in entries]
            )
            limit = queue.settings.max_payload  # one item too large is its own, not the batch's
            for entry, spec in zip(entries, specs, strict=True):
                if not isinstance(spec, ScrapeqError) and len(spec.payload_json or "") > limit:
                    spec = PayloadTooLarge(f"metadata over max_payload ({limit:,} bytes)")
                if isinstance(spec, ScrapeqError):
                    _skip(entry.pending, spec)
                elif entry.lease is None:
                    batch.enqueue.setdefault(crawl, []).append((spec, entry.pending))
                else:
                    job_id, token = entry.lease
                    follow = () if entry.at == 0 else (spec,)
                    settle = Settlement(job_id, token, "done", follow=follow)
                    batch.settle.setdefault(crawl, []).append((settle, entry.pending))
        return pending

    def _read(self, item: pb.URLItem) -> _Item:
        """What an item asks for: a discovered URL (``at`` None), or a known one due at
        ``at`` (an import, or a leased URL's next visit: ``lease``); SKIPPED when bad."""
        kind = item.WhichOneof("item")
        info = item.known.info if kind == "known" else item.discovered.info
        entry = _Item(_Pending(item.ID or info.url), info.crawlID or DEFAULT_CRAWL, info.url)
        try:
            if kind is None:
                raise BadItem("neither discovered nor known")
            self.crawls.name(entry.crawl)
            meta = {k: list(v.values) for k, v in info.metadata.items()}
            entry.payload = metadata_payload(meta)
            if kind == "known":
                entry.lease = lease_of(meta)
                entry.at = item.known.refetchable_from_date
                entry.extra = {"at_ms": min(entry.at, MAX_EPOCH_S) * 1000}
                if entry.lease is not None:
                    entry.extra["succeeds"] = entry.lease[0]
            else:  # a new URL counts against its queue's crawl limit
                entry.extra = {"capped": True}
            if info.key:
                entry.extra["domain"] = check_key(info.key)
        except (BadItem, ScrapeqError) as exc:
            _skip(entry.pending, exc)
        return entry

    async def _run_enqueue(self, crawl: str, entries: list[tuple[EnqueueSpec, _Pending]]) -> None:
        queue = self.crawls.queue(crawl)
        try:
            results = await queue.enqueue_many([spec for spec, _ in entries])
        except ScrapeqError as exc:
            log.warning("PutURLs: %d items of crawl %s failed: %s", len(entries), crawl, exc)
            for _, pending in entries:
                pending.status = FAIL
            return
        for (spec, pending), result in zip(entries, results, strict=True):
            if result.status == "duplicate" and spec.at_ms is not None:
                # a known URL held by a pending job: its lease's update settles it
                log.info("PutURLs: %s refused: queued as job %s", spec.url, result.id)
                pending.status = FAIL

    async def _run_settle(self, crawl: str, entries: list[tuple[Settlement, _Pending]]) -> None:
        queue = self.crawls.queue(crawl)
        try:
            answers = await queue.settle_many([s for s, _ in entries])
        except ScrapeqError as exc:
            log.warning("PutURLs: %d updates of crawl %s failed: %s", len(entries), crawl, exc)
            for _, pending in entries:
                pending.status = FAIL
            return
        for (settle, pending), answer in zip(entries, answers, strict=True):
            if answer == "stale":
                log.info(
                    "PutURLs: %s refused: lease of job %s expired", pending.ack_id, settle.job_id
                )
                pending.status = FAIL

    # --- GetURLs ------------------------------------------------------------------------------

    async def GetURLs(
        self, request: pb.GetParams, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.URLInfo]:
        if not self.active:
            return
        lease = float(request.delay_requestable) or DEFAULT_LEASE_S
        per, queues = request.max_urls_per_queue, request.max_queues
        if request.key:
            want = per or MAX_CLAIM
        else:
            want = per * queues if per and queues else (per or queues) * 10 or MAX_CLAIM
        crawls = await self._crawls_of(request, context)
        for crawl in crawls:
            queue = self.crawls.queue(crawl, lease)
            claimed = await queue.claim(min(want, MAX_CLAIM), domain=request.key or None)
            for job in claimed.jobs:
                info = pb.URLInfo(url=job.url, key=job.domain, crawlID=crawl)
                for k, v in job_info_metadata(job).items():
                    info.metadata[k].values.extend(v)
                yield info
            want -= len(claimed.jobs)
            if want <= 0:
                return

    async def _crawls_of(
        self, request: pb.GetParams, context: grpc.aio.ServicerContext
    ) -> list[str]:
        if request.WhichOneof("item") == "anyCrawlID":
            return await self.crawls.ids()
        crawl = request.crawlID or DEFAULT_CRAWL
        await self._check(context, self.crawls.name, crawl)
        return [crawl]

    @staticmethod
    async def _check(context: grpc.aio.ServicerContext, check: Any, *args: Any) -> Any:
        try:
            return check(*args)
        except BadItem as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))

    # --- reading ------------------------------------------------------------------------------

    async def GetStats(
        self, request: pb.QueueWithinCrawlParams, context: grpc.aio.ServicerContext
    ) -> pb.Stats:
        crawl = request.crawlID or DEFAULT_CRAWL
        queue = await self._check(context, self.crawls.queue, crawl)
        await queue.reap()  # expired leases back in the queue before they are counted
        rows = await self._domain_rows(queue, request.key)
        size = sum(r["ready"] + r["delayed"] for r in rows)
        stats = pb.Stats(crawlID=crawl, size=size, inProcess=sum(r["inflight"] for r in rows))
        stats.numberOfQueues = sum(1 for r in rows if _active(r))
        if not request.key:
            counts = await queue.counts()
            for name in ("done", "dead", "cancelled", "enqueued"):
                stats.counts[name] = int(counts.get(name, 0))
        return stats

    async def _domain_rows(self, queue: AsyncQueue, key: str) -> list[dict[str, Any]]:
        if key:
            if not await queue.domain_known(key):
                return []
            return await queue.domains_info([key])
        return await queue.domains_info()

    async def ListQueues(
        self, request: pb.Pagination, context: grpc.aio.ServicerContext
    ) -> pb.QueueList:
        crawl = request.crawlID or DEFAULT_CRAWL
        queue = await self._check(context, self.crawls.queue, crawl)
        rows = await queue.domains_info()
        names = sorted(r["domain"] for r in rows if request.include_inactive or _active(r))
        size = request.size or 100
        page = names[request.start : request.start + size]
        return pb.QueueList(
            values=page, total=len(names), start=request.start, size=len(page), crawlID=crawl
        )

    async def ListCrawls(
        self, request: pb.Local, context: grpc.aio.ServicerContext
    ) -> pb.StringList:
        return pb.StringList(values=await self.crawls.ids())

    async def CountURLs(
        self, request: pb.CountUrlParams, context: grpc.aio.ServicerContext
    ) -> pb.Long:
        queue = await self._check(context, self.crawls.queue, request.crawlID or DEFAULT_CRAWL)
        if request.key:
            await self._check(context, check_key, request.key)
        if request.filter:  # each URL read: a walk (urls.walk)
            keep = url_filter(request.filter, request.ignoreCase)
            return pb.Long(value=await count_urls(queue, request.key, keep))
        rows = await self._domain_rows(queue, request.key)  # counters: no URL read
        return pb.Long(value=sum(r["ready"] + r["delayed"] + r["inflight"] for r in rows))

    # --- changing -----------------------------------------------------------------------------

    async def DeleteCrawl(
        self, request: pb.DeleteCrawlMessage, context: grpc.aio.ServicerContext
    ) -> pb.Long:
        queue = await self._check(context, self.crawls.queue, request.value or DEFAULT_CRAWL)
        counts = await queue.counts()
        held = sum(int(counts.get(k, 0)) for k in ("ready", "delayed", "inflight"))
        await queue.clear()
        return pb.Long(value=held)

    async def DeleteQueue(
        self, request: pb.QueueWithinCrawlParams, context: grpc.aio.ServicerContext
    ) -> pb.Long:
        queue = await self._check(context, self.crawls.queue, request.crawlID or DEFAULT_CRAWL)
        await self._check(context, check_key, request.key)
        try:
            result = await queue.cancel(domain=request.key)
        except NotFound:
            return pb.Long(value=0)
        return pb.Long(value=result.cancelled)

    async def SetDelay(
        self, request: pb.QueueDelayParams, context: grpc.aio.ServicerContext
    ) -> pb.Empty:
        queue = await self._check(context, self.crawls.queue, request.crawlID or DEFAULT_CRAWL)
        if not request.key:
            await context.abort(
                grpc.StatusCode.UNIMPLEMENTED,
                "SetDelay for every queue: set domain_delay in the crawl's settings",
            )
        await self._check(context, check_key, request.key)
        await queue.domain_set(request.key, delay=float(request.delay_requestable))
        return pb.Empty()

    async def SetCrawlLimit(
        self, request: pb.CrawlLimitParams, context: grpc.aio.ServicerContext
    ) -> pb.Empty:
        queue = await self._check(context, self.crawls.queue, request.crawlID or DEFAULT_CRAWL)
        await self._check(context, check_key, request.key)
        # the API's limit counts URLs completed (fetched), not enqueued: the domain's done
        await queue.domain_set(request.key, crawl_limit=request.limit or -1)
        return pb.Empty()

    async def BlockQueueUntil(
        self, request: pb.BlockQueueParams, context: grpc.aio.ServicerContext
    ) -> pb.Empty:
        queue = await self._check(context, self.crawls.queue, request.crawlID or DEFAULT_CRAWL)
        await self._check(context, check_key, request.key)
        until = min(request.time, MAX_EPOCH_S)
        await queue.domain_set(request.key, blocked_until=until)
        return pb.Empty()

    async def GetURLStatus(
        self, request: pb.URLStatusRequest, context: grpc.aio.ServicerContext
    ) -> pb.URLItem:
        crawl = request.crawlID or DEFAULT_CRAWL
        queue = await self._check(context, self.crawls.queue, crawl)
        if request.key:
            await self._check(context, check_key, request.key)
        try:
            item = await url_status(queue, crawl, request.url, request.key)
        except ScrapeqError as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        if item is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, "a URL this crawl never took")
            raise AssertionError  # abort raises
        return item

    async def ListURLs(
        self, request: pb.ListUrlParams, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.URLItem]:
        crawl = request.crawlID or DEFAULT_CRAWL
        queue = await self._check(context, self.crawls.queue, crawl)
        if request.key:
            await self._check(context, check_key, request.key)
        keep = url_filter(request.filter, request.ignoreCase)
        skip, left = request.start, request.size or 100
        async for page in walk(queue, request.key):  # read until the page is full
            for info in page:
                if not keep(info.job.url):
                    continue
                if skip:
                    skip -= 1
                    continue
                yield url_item(info, crawl)
                left -= 1
                if not left:
                    return

    async def PurgeURLs(
        self, request: pb.PurgeUrlParams, context: grpc.aio.ServicerContext
    ) -> pb.Long:
        queue = await self._check(context, self.crawls.queue, request.crawlID or DEFAULT_CRAWL)
        if request.key:
            await self._check(context, check_key, request.key)
        return pb.Long(value=await purge_urls(queue, request.key, request.days))

    async def SetActive(self, request: pb.Active, context: grpc.aio.ServicerContext) -> pb.Empty:
        self.active = request.state
        return pb.Empty()

    async def GetActive(self, request: pb.Local, context: grpc.aio.ServicerContext) -> pb.Boolean:
        return pb.Boolean(state=self.active)

    async def ListNodes(
        self, request: pb.Empty, context: grpc.aio.ServicerContext
    ) -> pb.StringList:
        return pb.StringList(values=[self.node] if self.node else [])

    async def SetLogLevel(
        self, request: pb.LogLevelParams, context: grpc.aio.ServicerContext
    ) -> pb.Empty:
        level = pb.LogLevelParams.Level.Name(request.level)
        python_level = {"TRACE": "DEBUG", "WARN": "WARNING"}.get(level, level)
        logging.getLogger(request.package or None).setLevel(python_level)
        return pb.Empty()


def _skip(pending: _Pending, why: Exception) -> None:
    log.warning("PutURLs: %s skipped: %s", pending.ack_id[:200], why)
    pending.status = SKIPPED


async def _acks(running: tuple[asyncio.Future[None], list[_Pending]]) -> list[pb.AckMessage]:
    """The acks of a batch once its engine calls are done."""
    await running[0]
    return [pb.AckMessage(ID=p.ack_id, status=p.status) for p in running[1]]


def _active(row: dict[str, Any]) -> bool:
    """A queue the API calls active: it holds URLs not completed yet."""
    return bool(row["ready"] + row["delayed"] + row["inflight"])


async def _read_into(requests: AsyncIterator[M], ahead: asyncio.Queue[M | None]) -> None:
    """Read a stream into ``ahead`` (bounded: a full queue stops the reading), then None."""
    try:
        async for item in requests:
            await ahead.put(item)
    except grpc.aio.AioRpcError as exc:  # the client went away: what was read is still acked
        log.info("PutURLs: stream ended: %s", exc.code())
    await ahead.put(None)


async def _take(
    ahead: asyncio.Queue[pb.URLItem | None], most: int
) -> tuple[list[pb.URLItem], bool]:
    """The items read so far, at least one unless the stream ended (up to ``most``), and
    whether the stream ended."""
    first = await ahead.get()
    if first is None:
        return [], True
    items = [first]
    while len(items) < most and not ahead.empty():
        item = ahead.get_nowait()
        if item is None:
            return items, True
        items.append(item)
    return items, False
