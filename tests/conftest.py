"""Shared fixtures: one real redis-server per test session, flushed between tests.

Every temporary folder of the session is under one root (``tempfile.tempdir`` and ``TMPDIR``
point there) or under pytest's base temporary folder. A redis-server works in its data folder
(``--dir``), so at the end of the session no redis-server may be working under either: every
server the tests started, directly, through scrapeq or daemonized, was stopped.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from scrapeq.engine.config.settings import Settings
from scrapeq.engine.queue import AsyncQueue, Queue
from scrapeq.engine.server.connection import close_client
from scrapeq.engine.server.embedded import stop_server
from scrapeq.engine.server.launcher import RedisProcess
from support import redis_proc
from support.cluster_proc import RedisCluster
from support.processes import redis_servers_under
from support.proxy_proc import TinyproxySet, require_tinyproxy
from support.redis7 import need_redis7
from support.sites import NotRedis

#: ``--dist loadgroup`` grouping ``xdist_group`` tests under pytest 9, and the slowest modules
#: first (see the modules).
pytest_plugins = ["support.xdist_groups", "support.slow_first"]


@pytest.fixture(scope="session", autouse=True)
def no_redis_server_left_behind(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """One short temporary root for the session; at its end, no redis-server working there.

    Set up before any other fixture (autouse, session scope), so torn down after them all:
    the session's own servers are stopped by then. The root is short: unix socket paths in
    it must stay under ~104 bytes. Leftovers are killed after the check.
    """
    root = Path(tempfile.mkdtemp(prefix="sq", dir="/tmp"))
    before = tempfile.tempdir, os.environ.get("TMPDIR")
    tempfile.tempdir = str(root)
    os.environ["TMPDIR"] = str(root)  # for the processes the tests start, too
    roots = (root, tmp_path_factory.getbasetemp())
    try:
        yield
    finally:
        tempfile.tempdir = before[0]
        if before[1] is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = before[1]
    deadline = time.monotonic() + 5  # a server told to stop may take a moment
    while (left := redis_servers_under(*roots)) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    shutil.rmtree(root, ignore_errors=True)
    assert not left, f"redis-server processes the tests started are still running: {left}"


@pytest.fixture
def data_dir() -> Iterator[Path]:
    """A not-yet-existing data folder with a short path (in the session's short root: unix
    socket paths stay short); its embedded server is stopped and the folder removed afterwards.
    """
    root = Path(tempfile.mkdtemp(prefix="sq"))
    path = root / "data"
    try:
        yield path
    finally:
        stop_server(path)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def redis_server() -> Iterator[str]:
    """Start a private redis-server on a free loopback port, no persistence; yield its URL."""
    server = RedisProcess(Path(tempfile.mkdtemp(prefix="scrapeq-test-redis-"))).start(10.0)
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture(scope="session")
def redis7_server() -> Iterator[str]:
    """A private Redis 7 (``support.redis7``: Debian's, from PATH) for the session: the
    scripts as function libraries (ADR 0061), where ``redis_server`` runs them by EVALSHA."""
    server = RedisProcess(Path(tempfile.mkdtemp(prefix="scrapeq-test-redis7-")),
                          binary=need_redis7()).start(10.0)  # fmt: skip
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[RedisCluster]:
    """A real Redis Cluster for the session (3 masters, one replica each), started the first
    time a test asks for it; every node stopped at the end."""
    cluster = RedisCluster(Path(tempfile.mkdtemp(prefix="scrapeq-test-cluster-")))
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def cluster_url(redis_cluster: RedisCluster) -> str:
    """The session cluster's URL (a master), every node flushed before the test."""
    redis_cluster.wait_ready()
    redis_cluster.flush()
    return redis_cluster.url


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Tests marked ``backends`` that use ``redis_url`` run twice: on the single server and
    on the session's Redis Cluster (``Queue.from_url`` detects it). ``backends("single")``
    on a test of such a module keeps it to the single server (it reads one server's INFO)."""
    marker = metafunc.definition.get_closest_marker("backends")
    if marker and "redis_url" in metafunc.fixturenames:
        chosen = list(marker.args) or ["single", "cluster"]
        metafunc.parametrize("backend", chosen, indirect=True)


@pytest.fixture
def backend(request: pytest.FixtureRequest) -> str:
    """``single`` or ``cluster``: the server ``redis_url`` names (see pytest_generate_tests)."""
    return str(getattr(request, "param", "single"))


@pytest.fixture
def redis_url(request: pytest.FixtureRequest, backend: str) -> Iterator[str]:
    """The session server's URL, flushed before each test (with ``backend`` ``cluster``: the
    session cluster's)."""
    if backend == "cluster":
        yield request.getfixturevalue("cluster_url")
        return
    redis_server = request.getfixturevalue("redis_server")
    client = redis.Redis.from_url(redis_server)
    client.flushall()
    client.close()
    yield redis_server


@pytest.fixture
def redis_client(redis_url: str, backend: str) -> Iterator[redis.Redis]:
    """A plain client of the test server (on the cluster: redis-py's cluster client)."""
    client: Any
    if backend == "cluster":
        client = redis.RedisCluster.from_url(redis_url, decode_responses=True)
    else:
        client = redis.Redis.from_url(redis_url, decode_responses=True)
    yield client
    close_client(client)


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


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """A private PostgreSQL cluster for the session (tests/support/pg_proc.py); yields its URL."""
    from support.pg_proc import postgres_cluster

    with postgres_cluster() as url:
        yield url


@pytest.fixture
def postgres_url(postgres_server: str) -> str:
    """The session's cluster with a table of this test's own: ``...?table=t_<hex>``."""
    import uuid

    return f"{postgres_server}?table=t_{uuid.uuid4().hex[:12]}"


@pytest.fixture
def tinyproxies() -> Iterator[TinyproxySet]:
    """Start real tinyproxy exits: ``tinyproxies("127.0.0.2", auth=("u", "p"))`` answers a
    started :class:`proxy_proc.Tinyproxy` whose connections come from that address; every one
    is stopped after the test. Skipped without tinyproxy (a failure under ``CI=true``)."""
    made = TinyproxySet(require_tinyproxy())
    try:
        yield made
    finally:
        made.close()


@pytest.fixture
def aof_redis(tmp_path: Path) -> Iterator[redis_proc.RedisProcess]:
    """A private redis-server with an append-only file (tests/support/redis_proc.py), to kill,
    cut back and restart; killed after the test."""
    server = redis_proc.RedisProcess(tmp_path).start()
    try:
        yield server
    finally:
        server.stop(signal.SIGKILL)


@pytest.fixture(scope="module")
def not_redis_url() -> Iterator[str]:
    """A loopback port where something other than Redis answers (an HTTP server's reply)."""
    with NotRedis() as url:
        yield url
