"""A URLFrontier service in this process, on a free loopback port, restartable; its client."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from collections.abc import Iterable
from concurrent.futures import Future
from typing import Any

import grpc

from scrapeq.engine.config.settings import Settings
from scrapeq.interfaces.frontier import urlfrontier_pb2 as pb
from scrapeq.interfaces.frontier import urlfrontier_pb2_grpc as pb_grpc
from scrapeq.interfaces.frontier.server import Running, ServeOptions, start


class LoopThread:
    """An event loop on a thread of its own, for the services of a test session (one loop:
    grpc's asyncio poller is bound to the first loop that serves)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Any) -> Any:
        future: Future[Any] = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return future.result(timeout=30)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        # not closed: grpc's poller thread may still hand the loop a callback at exit


class FrontierProcess:
    """The service on the session's loop: ``restart()`` drops every bit of its memory (a new
    server and Redis client), keeping the port, so a client reconnects."""

    def __init__(
        self, loop: LoopThread, redis_url: str, settings: Settings, **options: Any
    ) -> None:
        self.loop = loop
        self.redis_url = redis_url
        self.settings = settings
        self.options = ServeOptions(port=0, **options)
        self.running: Running | None = None
        self.port = 0
        self.start()

    def start(self) -> None:
        options = dataclasses.replace(self.options, port=self.port)
        self.running = self.loop.run(start(options, self.settings, self.redis_url))
        self.port = self.running.port

    def stop(self) -> None:
        if self.running is not None:
            self.loop.run(self.running.stop())
            self.running = None

    def restart(self) -> None:
        self.stop()
        self.start()

    close = stop

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"


class Client:
    """A blocking URLFrontier client, as a crawler would hold one."""

    def __init__(self, target: str, credentials: grpc.ChannelCredentials | None = None) -> None:
        if credentials is None:
            self.channel = grpc.insecure_channel(target)
        else:
            self.channel = grpc.secure_channel(target, credentials)
        self.stub = pb_grpc.URLFrontierStub(self.channel)

    def close(self) -> None:
        self.channel.close()

    def put(self, items: Iterable[pb.URLItem], **kw: Any) -> list[pb.AckMessage]:
        return list(self.stub.PutURLs(iter(list(items)), timeout=30, **kw))

    def get(self, **params: Any) -> list[pb.URLInfo]:
        params.setdefault("crawlID", "DEFAULT")
        return list(self.stub.GetURLs(pb.GetParams(**params), timeout=30))

    def stats(self, key: str = "", crawl: str = "") -> pb.Stats:
        return self.stub.GetStats(pb.QueueWithinCrawlParams(key=key, crawlID=crawl), timeout=30)


def discovered(url: str, key: str = "", crawl: str = "", **meta: list[str]) -> pb.URLItem:
    info = pb.URLInfo(url=url, key=key, crawlID=crawl)
    for k, v in meta.items():
        info.metadata[k].values.extend(v)
    return pb.URLItem(discovered=pb.DiscoveredURLItem(info=info))


def known(
    url: str, refetch: int = 0, key: str = "", crawl: str = "", meta: pb.URLInfo | None = None
) -> pb.URLItem:
    """A known URL; ``meta``: a served URLInfo whose metadata (its lease) it carries back."""
    info = pb.URLInfo(url=url, key=key, crawlID=crawl)
    if meta is not None:
        for k, v in meta.metadata.items():
            info.metadata[k].values.extend(v.values)
    return pb.URLItem(known=pb.KnownURLItem(info=info, refetchable_from_date=refetch))
