"""From redis_url to a client: validation, redaction, client defaults, reachability."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio

from scrapeq.engine.queue import AsyncQueue, Queue
from scrapeq.engine.server.connection import (
    CLIENT_NAME,
    SOCKET_TIMEOUT,
    acheck_reachable,
    async_client,
    check_reachable,
    redact,
    resolve_url,
    sync_client,
)
from scrapeq.errors import ConfigError, RedisUnavailable

SECRET = "hunter2"


def _closed_port_url() -> str:
    """A URL with credentials pointing at a loopback port nobody listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"redis://alice:{SECRET}@127.0.0.1:{port}/0"


def _with_credentials(url: str) -> str:
    return url.replace("redis://", f"redis://nobody:{SECRET}@", 1)


def _database(url: str, db: int) -> str:
    """``url`` (ending in ``/0``) pointed at database ``db``."""
    return url.removesuffix("/0") + f"/{db}"


@pytest.mark.parametrize(
    "url",
    [
        "redis://localhost:6379/0",
        "redis://localhost",
        "redis://user:pass@host:6379/0",
        "redis://:pass@host:6379",
        "rediss://default:s%40cret@redis.example.com:6380/2",
        "redis://[::1]:6379/0",
        "unix:///tmp/redis.sock",
        "unix:///tmp/redis.sock?db=3",
    ],
)
def test_resolve_url_returns_a_valid_url_unchanged(url: str, tmp_path: Path) -> None:
    assert resolve_url(url, tmp_path / "unused") == url
    assert not (tmp_path / "unused").exists()  # no embedded server for a given URL


@pytest.mark.parametrize(
    "url",
    [
        "",
        "localhost:6379",
        "http://localhost:6379/0",
        "tcp://localhost:6379",
        "redis://",
        "redis:///0",
        f"rediss://:{SECRET}@/0",
        "redis://host:notaport/0",
        "redis://host:99999/0",
        "redis://host:0/0",
        "unix://",
        "unix://relative.sock",
        "redis://[::1/0",
        "redis://localhost:6379/0?db=x",
        "redis://localhost:6379/0?socket_timeout=soon",
        f"redis://:{SECRET}@localhost:6379/0?colour=blue",
        f"rediss://:{SECRET}@localhost:6380/0?ssl_cert_reqs=maybe",
        "unix:///tmp/redis.sock?db=one",
    ],
)
def test_resolve_url_refuses_a_bad_url_naming_the_setting(url: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        resolve_url(url, tmp_path)

    assert caught.value.name == "redis_url"
    assert "redis_url" in str(caught.value)
    assert SECRET not in str(caught.value)


def test_resolve_url_without_a_url_starts_the_embedded_server(data_dir: Path) -> None:
    url = resolve_url(None, data_dir)

    assert url == f"unix://{data_dir}/redis.sock"
    client = sync_client(url)
    try:
        check_reachable(client, url)
    finally:
        client.close()


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://user:pass@host:6379/0", "redis://user:***@host:6379/0"),
        ("redis://:pass@host:6379/0", "redis://:***@host:6379/0"),
        ("rediss://u:p%40ss%3Aw@h:6380/1", "rediss://u:***@h:6380/1"),
        ("redis://user@host:6379/0", "redis://user@host:6379/0"),
        ("redis://host:6379/0", "redis://host:6379/0"),
        ("unix:///tmp/r.sock", "unix:///tmp/r.sock"),
        ("unix:///tmp/r.sock?password=pw&db=1", "unix:///tmp/r.sock?password=***&db=1"),
        ("redis://u:pw@[::1/0", "redis://u:***@[::1/0"),
    ],
)
def test_redact_hides_only_the_password(url: str, shown: str) -> None:
    assert redact(url) == shown


def test_sync_client_defaults(redis_url: str) -> None:
    client = sync_client(redis_url)
    try:
        options = client.connection_pool.connection_kwargs
        assert options["socket_connect_timeout"] == 5
        assert options["health_check_interval"] == 30
        client.set("k", "v")
        assert client.get("k") == "v"  # decoded to str
        assert client.client_getname() == CLIENT_NAME
    finally:
        client.close()


def test_check_reachable_passes_for_a_live_server(redis_url: str) -> None:
    client = sync_client(redis_url)
    try:
        check_reachable(client, redis_url)
    finally:
        client.close()


def test_check_reachable_on_a_closed_port_names_the_redacted_url() -> None:
    url = _closed_port_url()
    client = sync_client(url)
    try:
        with pytest.raises(RedisUnavailable) as caught:
            check_reachable(client, url)
    finally:
        client.close()

    message = str(caught.value)
    assert message.startswith(f"cannot reach Redis at {redact(url)}: ")
    assert "alice:***@" in message
    assert SECRET not in message


def test_check_reachable_on_bad_credentials(redis_url: str) -> None:
    url = _with_credentials(redis_url)
    client = sync_client(url)
    try:
        with pytest.raises(RedisUnavailable) as caught:
            check_reachable(client, url)
    finally:
        client.close()

    assert redact(url) in str(caught.value)
    assert SECRET not in str(caught.value)


async def test_async_client_defaults_and_reachable(redis_url: str) -> None:
    client = async_client(redis_url)
    try:
        await acheck_reachable(client, redis_url)
        await client.set("k", "v")
        assert await client.get("k") == "v"
        assert await client.client_getname() == CLIENT_NAME
    finally:
        await client.aclose()


async def test_acheck_reachable_on_a_closed_port_names_the_redacted_url() -> None:
    url = _closed_port_url()
    client = async_client(url)
    try:
        with pytest.raises(RedisUnavailable) as caught:
            await acheck_reachable(client, url)
    finally:
        await client.aclose()

    message = str(caught.value)
    assert message.startswith(f"cannot reach Redis at {redact(url)}: ")
    assert SECRET not in message


async def test_acheck_reachable_on_bad_credentials(redis_url: str) -> None:
    url = _with_credentials(redis_url)
    client = async_client(url)
    try:
        with pytest.raises(RedisUnavailable) as caught:
            await acheck_reachable(client, url)
    finally:
        await client.aclose()

    assert SECRET not in str(caught.value)


def test_check_reachable_on_a_database_the_server_lacks(redis_url: str) -> None:
    # A default server has databases 0-15: SELECT 99 fails during the connection handshake.
    url = _database(redis_url, 99)
    client = sync_client(url)
    try:
        with pytest.raises(RedisUnavailable) as caught:
            check_reachable(client, url)
    finally:
        client.close()

    assert str(caught.value) == (
        f"Redis at {url} has no database 99 (DB index is out of range): "
        "pick one below the server's 'databases' setting"
    )


def test_check_reachable_where_something_else_answers(not_redis_url: str) -> None:
    client = sync_client(not_redis_url)
    try:
        with pytest.raises(RedisUnavailable) as caught:
            check_reachable(client, not_redis_url)
    finally:
        client.close()

    message = str(caught.value)
    assert message.startswith(f"{not_redis_url} does not answer like a Redis server (")
    assert message.endswith("): check the host and port")


async def test_acheck_reachable_on_a_database_the_server_lacks(redis_url: str) -> None:
    url = _database(redis_url, 99)
    client = async_client(url)
    try:
        with pytest.raises(RedisUnavailable) as caught:
            await acheck_reachable(client, url)
    finally:
        await client.aclose()

    assert "has no database 99" in str(caught.value)


async def test_acheck_reachable_where_something_else_answers(not_redis_url: str) -> None:
    client = async_client(not_redis_url)
    try:
        with pytest.raises(RedisUnavailable) as caught:
            await acheck_reachable(client, not_redis_url)
    finally:
        await client.aclose()

    assert "does not answer like a Redis server" in str(caught.value)


# --- client options: a stalled connection must end in an error, not hang ------------------------


def _options(client: redis.Redis | redis.asyncio.Redis) -> dict[str, Any]:
    return dict(client.connection_pool.connection_kwargs)


def test_every_client_has_a_socket_timeout_and_tcp_keepalive(redis_url: str) -> None:
    # The asyncio clients are only built, never connected: nothing of theirs to close.
    sync_queue, plain = Queue.from_url(redis_url), sync_client(redis_url)
    clients = [sync_queue.client, plain, AsyncQueue.from_url(redis_url).client]
    try:
        for client in [*clients, async_client(redis_url)]:
            options = _options(client)
            assert options["socket_timeout"] == SOCKET_TIMEOUT
            assert options["socket_keepalive"] is True
            assert options["socket_connect_timeout"] == 5
            assert options["health_check_interval"] == 30
        assert sync_queue.client.client_getname() == CLIENT_NAME  # the same options
    finally:
        sync_queue.close()
        plain.close()


def test_socket_timeout_outlasts_the_longest_script_call() -> None:
    # A claim or a settle is bounded (about 100 items a call: milliseconds); the timeout only
    # has to end a call that will never be answered, without cutting a slow honest one.
    assert 10 <= SOCKET_TIMEOUT <= 30


def test_unix_socket_clients_work_without_tcp_options(data_dir: Path) -> None:
    url = resolve_url(None, data_dir)
    queue = Queue.from_url(url)
    try:
        assert queue.client.ping()
        options = _options(queue.client)
        assert options["socket_timeout"] == SOCKET_TIMEOUT
        assert "socket_keepalive" not in options  # a unix socket has no TCP keepalive
    finally:
        queue.close()
