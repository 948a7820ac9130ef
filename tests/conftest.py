"""Shared fixtures: one real redis-server per test session, flushed between tests."""

from __future__ import annotations

import socket
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from scrapeq.embedded import find_redis_server
from scrapeq.queue import AsyncQueue, Queue
from scrapeq.settings import Settings


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def redis_server() -> Iterator[str]:
    """Start a private redis-server on a free loopback port; yield its URL."""
    binary = find_redis_server()
    workdir = Path(tempfile.mkdtemp(prefix="scrapeq-test-redis-"))
    port = _free_port()
    proc = subprocess.Popen(
        [
            str(binary),
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(workdir),
            "--daemonize",
            "no",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    client = redis.Redis.from_url(url)
    deadline = time.monotonic() + 10
    while True:
        try:
            client.ping()
            break
        except redis.ConnectionError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"redis-server {binary} did not start on port {port}") from None
            time.sleep(0.05)
    client.close()
    try:
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


@pytest.fixture
def redis_url(redis_server: str) -> Iterator[str]:
    """The session server's URL, flushed before each test."""
    client = redis.Redis.from_url(redis_server)
    client.flushall()
    client.close()
    yield redis_server


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    yield client
    client.close()


@pytest.fixture
def make_queue(redis_url: str) -> Iterator[Callable[..., Queue]]:
    """Build sync queues on the test server (settings as keyword arguments); close them after."""
    made: list[Queue] = []

    def make(**settings: Any) -> Queue:
        q = Queue.from_url(redis_url, settings=Settings(**settings))
        made.append(q)
        return q

    yield make
    for q in made:
        q.close()


@pytest.fixture
async def make_async_queue(redis_url: str) -> AsyncIterator[Callable[..., AsyncQueue]]:
    """The asyncio twin of make_queue."""
    made: list[AsyncQueue] = []

    def make(**settings: Any) -> AsyncQueue:
        q = AsyncQueue.from_url(redis_url, settings=Settings(**settings))
        made.append(q)
        return q

    yield make
    for q in made:
        await q.close()
