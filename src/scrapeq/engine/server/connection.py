"""From the ``redis_url`` setting to a connected client.

A ``redis_url`` naming any node of a Redis Cluster gets redis-py's cluster client (which
follows MOVED and ASK, and learns the new topology after a failover); see
:func:`cluster_mode` and the ``cluster`` setting (``auto``, ``on``, ``off``).

:func:`resolve_url` validates a configured URL (or starts the embedded server when none is
set), :func:`sync_client` / :func:`async_client` build clients with scrapeq's defaults (every
client of the package, ``Queue.from_url`` included, is built by them), and
:func:`check_reachable` / :func:`acheck_reachable` turn every way the first exchange can fail
into one :class:`~scrapeq.errors.RedisUnavailable` with the password hidden (:func:`redact`):
nothing listening, refused credentials, a database the server lacks, a port where something
other than Redis answers.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster

from scrapeq.engine.server.embedded import ensure_server
from scrapeq.errors import ConfigError, RedisUnavailable

__all__ = [
    "CLIENT_NAME",
    "SOCKET_TIMEOUT",
    "AsyncClient",
    "SyncClient",
    "acheck_reachable",
    "aclose_client",
    "async_client",
    "check_reachable",
    "close_client",
    "cluster_mode",
    "is_cluster",
    "redact",
    "resolve_url",
    "sync_client",
]

CLIENT_NAME = "scrapeq"
_SCHEMES = ("redis", "rediss", "unix")
_MASK = "***"
_CA_HINT = " (name the server's CA in the URL: ?ssl_ca_certs=/path/to/ca.pem)"
_UNKNOWN_ARGUMENT = re.compile(r"unexpected keyword argument '([^']+)'")
_USERINFO_PASSWORD = re.compile(r"^((?:[A-Za-z][A-Za-z0-9+.-]*://)?)([^:/@?#]*):[^@]*@")
# What PING can raise on a fresh client: the handshake (AUTH, CLIENT SETNAME, SELECT) runs first,
# so a refused login or database arrives as a ResponseError, a non-Redis peer as InvalidResponse.
_UNREACHABLE = (redis.RedisError, redis.exceptions.RedisClusterException, OSError)
#: Seconds a Redis call may wait for its answer before it fails. Without one, a connection
#: whose peer vanished without a reset (a dead route, a frozen server) waits forever, and so
#: does the worker. Every scrapeq script bounds its work (about 100 items a call: a claim or a
#: settle of a few hundred jobs answers in milliseconds), so 15 s ends only calls that will
#: never be answered, with room for a server busy with a fork or a slow disk.
SOCKET_TIMEOUT = 15.0
_CLIENT_OPTIONS: dict[str, Any] = {
    "decode_responses": True,
    "socket_timeout": SOCKET_TIMEOUT,
    "socket_connect_timeout": 5.0,
    "health_check_interval": 30,
    "client_name": CLIENT_NAME,
}
#: TCP only: a unix socket connection refuses the option. Keepalive probes find a peer that
#: is gone while the connection idles (an idle worker's pool), before a call waits for it.
_TCP_OPTIONS: dict[str, Any] = {"socket_keepalive": True}

#: A client of a queue: one server, or a Redis Cluster (any node of it named by the URL).
SyncClient = redis.Redis | redis.cluster.RedisCluster
AsyncClient = redis.asyncio.Redis | redis.asyncio.cluster.RedisCluster


def resolve_url(redis_url: str | None, data_dir: Path) -> str:
    """Return the Redis URL to use.

    Args:
        redis_url: the configured URL (``redis://``, ``rediss://`` or ``unix://``; user and
            password allowed), or None for the embedded server.
        data_dir: where the embedded server keeps its files (used only when ``redis_url``
            is None).

    Returns:
        ``redis_url`` unchanged when given, else the embedded server's ``unix://`` URL.

    Raises:
        ConfigError: ``redis_url`` is malformed (names the setting ``redis_url``).
        RedisUnavailable: no URL given and the embedded server cannot be started.
    """
    if redis_url is None:
        return ensure_server(data_dir)
    problem = _url_problem(redis_url)
    if problem:
        raise ConfigError("redis_url", f"{redact(redis_url)!r}: {problem}")
    return redis_url


def _url_problem(url: str) -> str | None:
    """What is wrong with ``url`` as a Redis URL, or None if nothing."""
    try:
        parts = urlsplit(url)
        port = parts.port  # raises ValueError on a non-numeric or out-of-range port
    except ValueError as exc:
        return f"not a valid URL ({exc})"
    if parts.scheme not in _SCHEMES:
        return "the scheme must be redis://, rediss:// or unix://"
    if parts.scheme == "unix" and not parts.path:
        return "a unix:// URL needs a socket path (unix:///path/to.sock)"
    if parts.scheme != "unix" and not parts.hostname:
        return f"a {parts.scheme}:// URL needs a host ({parts.scheme}://host:6379/0)"
    if port == 0:
        return "port 0 is not a valid port"
    return _option_problem(url)


def _option_problem(url: str) -> str | None:
    """What redis-py refuses among the URL's options (``?db=x``), found without connecting.

    redis-py reads the query into connection arguments: a bad value fails when the pool is
    made, an unknown name only when the first connection is, so one connection is built
    (not opened) here.
    """
    try:
        pool = redis.ConnectionPool.from_url(url)
        pool.connection_class(**pool.connection_kwargs)
    except TypeError as exc:
        unknown = _UNKNOWN_ARGUMENT.search(str(exc))
        return f"unknown option {unknown.group(1)!r} in the query" if unknown else str(exc)
    except (ValueError, redis.RedisError) as exc:
        return str(exc)
    return None


def redact(url: str) -> str:
    """Return ``url`` with any password replaced by ``***``.

    Covers the password in the user info (``redis://user:***@host:6379/0``) and a
    ``password`` query parameter (which redis-py also honours). A URL without a password is
    returned unchanged.
    """
    try:
        parts = urlsplit(url)
    except ValueError:  # e.g. an unbalanced IPv6 bracket
        parts = None
    if parts is None or "://" not in url:
        return _USERINFO_PASSWORD.sub(rf"\1\2:{_MASK}@", url)
    netloc, query = _mask_netloc(parts.netloc), _mask_query(parts.query)
    if (netloc, query) == (parts.netloc, parts.query):
        return url
    tail = (f"?{query}" if query else "") + (f"#{parts.fragment}" if parts.fragment else "")
    return f"{parts.scheme}://{netloc}{parts.path}{tail}"


def _mask_netloc(netloc: str) -> str:
    """``user:secret@host`` → ``user:***@host``; anything else unchanged."""
    userinfo, at, hostport = netloc.rpartition("@")
    if not at or ":" not in userinfo:
        return netloc
    return f"{userinfo.partition(':')[0]}:{_MASK}@{hostport}"


def _mask_query(query: str) -> str:
    """Mask the value of a ``password`` query parameter; anything else unchanged."""
    pairs = parse_qsl(query, keep_blank_values=True)
    if not any(key == "password" for key, _ in pairs):
        return query
    return urlencode([(k, _MASK if k == "password" else v) for k, v in pairs], safe="*/")


def sync_client(url: str, cluster: str = "auto") -> SyncClient:
    """A redis-py client for ``url`` with scrapeq's defaults.

    Responses are decoded to ``str``; connecting times out after 5 s and a call after
    :data:`SOCKET_TIMEOUT` (15 s) without an answer; TCP connections use keepalive; idle
    connections are health-checked after 30 s; connections are named ``scrapeq``
    (``CLIENT LIST``).

    Args:
        url: the server (for a cluster: any of its nodes).
        cluster: ``auto`` (default) asks the server whether it is a cluster node and builds
            a cluster client if so; ``on`` requires a cluster; ``off`` a single server.

    Raises:
        ConfigError: ``cluster`` contradicts what the server is (one line naming it).
    """
    if cluster_mode(url, cluster):
        return redis.cluster.RedisCluster.from_url(url, **_cluster_options(url))
    return redis.Redis.from_url(url, **_options(url))


def async_client(url: str, cluster: str = "auto") -> AsyncClient:
    """The asyncio twin of :func:`sync_client` (the server is asked with a blocking probe)."""
    if cluster_mode(url, cluster):
        return redis.asyncio.cluster.RedisCluster.from_url(url, **_cluster_options(url))
    return redis.asyncio.Redis.from_url(url, **_options(url))


def close_client(client: SyncClient) -> None:
    """Close ``client`` and its connections. redis-py's ``RedisCluster.close`` leaves each
    node's pool connected (the nodes' clients do not own their pools): they are
    disconnected here."""
    client.close()
    if isinstance(client, redis.cluster.RedisCluster):
        for node in client.get_nodes():  # type: ignore[no-untyped-call]
            if node.redis_connection is not None:
                node.redis_connection.connection_pool.disconnect()


async def aclose_client(client: AsyncClient) -> None:
    """The asyncio twin of :func:`close_client`: close ``client`` and its connections."""
    await client.aclose()


def _options(url: str) -> dict[str, Any]:
    if urlsplit(url).scheme == "unix":
        return _CLIENT_OPTIONS
    return {**_CLIENT_OPTIONS, **_TCP_OPTIONS}


def _cluster_options(url: str) -> dict[str, Any]:
    # A cluster has database 0 only; redis-py's cluster client refuses the option.
    return {k: v for k, v in _options(url).items() if k != "health_check_interval"}


def is_cluster(url: str) -> bool | None:
    """Whether the server at ``url`` is a Redis Cluster node (``INFO cluster``), or None when
    it cannot be asked (unreachable, or INFO refused)."""
    probe = redis.Redis.from_url(url, **{**_options(url), "socket_timeout": 5.0})
    try:
        info = probe.info("cluster")
    except _UNREACHABLE:
        return None
    finally:
        probe.close()
    return bool(int(info.get("cluster_enabled", 0)))


def cluster_mode(url: str, cluster: str = "auto") -> bool:
    """Whether to serve ``url`` with a cluster client, by the ``cluster`` setting.

    ``auto``: when the server says it is a cluster node (a server that cannot be asked gets
    the single-server client: the first call then reports why). ``on``/``off``: as told,
    after checking the server agrees when it answers.

    Raises:
        ConfigError: ``off`` against a cluster node, ``on`` against a single server, or
            ``on`` with a ``unix://`` URL or a database other than 0.
    """
    if cluster == "off":
        if is_cluster(url):
            raise ConfigError(
                "cluster",
                f"this server is a cluster node ({redact(url)}); the queue's keys may live on "
                "another node: set cluster = auto (or on) to follow the cluster",
            )
        return False
    found = is_cluster(url)
    if cluster == "on":
        if urlsplit(url).scheme == "unix":
            raise ConfigError("cluster", "a cluster is named by host:port, not a unix:// URL")
        if found is False:
            raise ConfigError(
                "cluster",
                f"cluster = on, but {redact(url)} is not a cluster node (cluster_enabled:0): "
                "set cluster = auto (or off) for a single server",
            )
    elif not found:
        return False
    db = redis.ConnectionPool.from_url(url).connection_kwargs.get("db", 0)
    if int(db or 0) != 0:
        raise ConfigError("cluster", f"a cluster has database 0 only; {redact(url)} names {db}")
    return True


def check_reachable(client: SyncClient, url: str) -> None:
    """PING through ``client``.

    Args:
        client: a client built for ``url``.
        url: the URL, used (redacted) in the error message.

    Raises:
        RedisUnavailable: the server cannot be reached, refuses the login or the database,
            or what answers is not Redis; one line naming the URL, its password hidden.
    """
    try:
        client.ping()
    except _UNREACHABLE as exc:
        raise _unavailable(url, exc, _db(client)) from exc


async def acheck_reachable(client: AsyncClient, url: str) -> None:
    """The asyncio twin of :func:`check_reachable`."""
    try:
        await client.ping()
    except _UNREACHABLE as exc:
        raise _unavailable(url, exc, _db(client)) from exc


def _db(client: SyncClient | AsyncClient) -> object:
    """The database number the client selects (from the URL's path or ``?db=``)."""
    pool = getattr(client, "connection_pool", None)
    return 0 if pool is None else pool.connection_kwargs.get("db", 0)


def _unavailable(url: str, exc: BaseException, db: object) -> RedisUnavailable:
    """Build the one-line error for a ``url`` that cannot be used, never showing its password.

    Args:
        url: the URL as configured.
        exc: what the first exchange raised.
        db: the database number the client asked for.
    """
    reason, where = _masked_reason(url, exc), redact(url)
    if isinstance(exc, redis.AuthenticationError):  # before ConnectionError: it is one
        return RedisUnavailable(f"Redis at {where} refused the login: {reason}")
    if isinstance(exc, redis.ConnectionError | redis.TimeoutError | OSError):
        hint = _CA_HINT if "CERTIFICATE_VERIFY_FAILED" in reason else ""
        return RedisUnavailable(f"cannot reach Redis at {where}: {reason}{hint}")
    if isinstance(exc, redis.exceptions.InvalidResponse):
        return RedisUnavailable(
            f"{where} does not answer like a Redis server ({reason}): check the host and port"
        )
    if not isinstance(exc, redis.ResponseError):  # failed on this side, e.g. a TLS option
        return RedisUnavailable(f"cannot use Redis at {where}: {reason}")
    if "DB index is out of range" in reason:
        return RedisUnavailable(
            f"Redis at {where} has no database {db} ({reason}): "
            "pick one below the server's 'databases' setting"
        )
    return RedisUnavailable(f"Redis at {where} refused the connection: {reason}")


def _masked_reason(url: str, exc: BaseException) -> str:
    """``exc``'s text with the URL's password (raw or percent-decoded) replaced by ``***``."""
    reason = str(exc) or type(exc).__name__
    try:
        password = urlsplit(url).password
    except ValueError:
        password = None
    for secret in {password, unquote(password or "")} - {None, ""}:
        reason = reason.replace(str(secret), _MASK)
    return reason
