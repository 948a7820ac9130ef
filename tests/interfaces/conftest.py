"""What the tests of the CLI and the dashboard share: a clean environment for commands run in
this process, the dashboard app of a module's ``queue``, and a redis-server with a password."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from scrapeq import AsyncQueue
from scrapeq.engine.server.embedded import find_redis_server
from scrapeq.engine.server.launcher import free_port
from scrapeq.interfaces.web import create_app
from support.cli_helpers import scrub_env
from support.secured_redis import PASSWORD, Server, running


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No SCRAPEQ_* setting of the caller's; the test's own working folder (a module asks for
    it with ``pytestmark = pytest.mark.usefixtures("clean_env")``)."""
    scrub_env(monkeypatch, tmp_path)


@pytest.fixture
async def client(queue: AsyncQueue) -> AsyncIterator[TestClient[web.Request, web.Application]]:
    """The dashboard app of the module's ``queue`` fixture, behind a test client."""
    async with TestClient(TestServer(create_app(queue))) as c:
        yield c


@pytest.fixture(scope="module")
def passworded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A redis-server whose default user has a password (``requirepass``)."""
    port = free_port()
    admin_url = f"redis://:{quote(PASSWORD, safe='')}@127.0.0.1:{port}/0"
    args = ["--port", str(port), "--requirepass", PASSWORD]
    workdir = tmp_path_factory.mktemp("pw")
    with running(find_redis_server(), port, args, admin_url, workdir) as srv:
        yield srv


@pytest.fixture(scope="session")
def frontier_loop() -> Iterator[Any]:
    """The event loop thread the URLFrontier services of the session run on."""
    from support.frontier import LoopThread

    loop = LoopThread()
    yield loop
    loop.close()


@pytest.fixture
def frontier(redis_url: str, frontier_loop: Any) -> Iterator[Any]:
    """A URLFrontier service on a free loopback port over the test Redis (restartable), with
    short backoffs so a lease that expired serves its URL again at once."""
    from scrapeq.engine.config.settings import Settings
    from support.frontier import FrontierProcess

    settings = Settings(redis_url=redis_url, backoff_base=0.001, backoff_cap=0.001)
    service = FrontierProcess(frontier_loop, redis_url, settings)
    yield service
    service.close()


@pytest.fixture
def fclient(frontier: Any) -> Iterator[Any]:
    """A blocking client of the ``frontier`` service."""
    from support.frontier import Client

    client = Client(frontier.target)
    yield client
    client.close()
