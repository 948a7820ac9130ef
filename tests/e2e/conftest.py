"""What the end-to-end tests share: loopback sites served by a thread of their own (a worker
subprocess or a killed Redis never takes them down), a queue to watch the run through, and a
private redis-server to kill and restart."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from scrapeq import Queue, Settings
from support.redis_proc import RedisProc
from support.sites import SiteThread


@pytest.fixture
def site_thread() -> Iterator[SiteThread]:
    st = SiteThread()
    yield st
    st.close()


@pytest.fixture
def q(redis_url: str) -> Iterator[Queue]:
    queue = Queue.from_url(redis_url, settings=Settings(allow_private=True))
    yield queue
    queue.close()


@pytest.fixture
def own_redis() -> Iterator[RedisProc]:
    server = RedisProc()
    server.start()
    yield server
    server.close()
