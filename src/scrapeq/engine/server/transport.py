"""Transport helpers: connection and Redis error mapping, cluster command routing."""

from __future__ import annotations

import re
from typing import Any

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster

from scrapeq.engine.config.settings import Settings
from scrapeq.engine.lua.scripts import (
    Call,
    Step,
)
from scrapeq.engine.server.connection import (
    resolve_url,
)
from scrapeq.errors import (
    ConfigError,
    PayloadTooLarge,
    RedisUnavailable,
)


def _url_or_embedded(url: str | None, settings: Settings) -> str:
    """``url``, or for None the embedded server's (started if needed), as the CLI finds it."""
    return url if url is not None else resolve_url(None, settings.data_dir)


def _wrap_connection_error(exc: Exception) -> RedisUnavailable:
    return RedisUnavailable(f"Redis connection failed: {exc}")


#: Redis's smallest ``proto-max-bulk-len``: a call this large may be refused for its size.
_MIN_BULK_LIMIT = 1024 * 1024
_BULK_LIMIT_QUERY = ("CONFIG", "GET", "proto-max-bulk-len")


def _maybe_oversized(step: Step) -> bool:
    return isinstance(step, Call) and len(step.args) >= _MIN_BULK_LIMIT // 4


def _oversized(step: Step, limit_reply: Any) -> PayloadTooLarge | None:
    """When Redis cut the connection on ``step``: the error if its argument was over the
    server's ``proto-max-bulk-len`` (``limit_reply``: CONFIG GET's answer, None if refused;
    Redis then answers the error, or resets the connection while the call is still sent)."""
    assert isinstance(step, Call)
    limit = 512 * 1024 * 1024
    if isinstance(limit_reply, dict) and str(limit_reply.get("proto-max-bulk-len", "")).isdigit():
        limit = int(limit_reply["proto-max-bulk-len"])
    size = len(step.args.encode("utf-8", "replace"))
    if size <= limit:
        return None
    return PayloadTooLarge(
        f"payload too large: a {step.script} call of {size:,} bytes is over Redis's "
        f"proto-max-bulk-len ({limit:,} bytes)"
    )


def _moved(exc: redis.ResponseError) -> ConfigError | None:
    """A MOVED/ASK reply reaching a single-server client: the server is a cluster node."""
    if not isinstance(exc, redis.exceptions.AskError):
        return None
    return ConfigError(
        "cluster",
        f"this server is a cluster node; the queue's slot {exc.slot_id} is served by "
        f"{exc.node_addr[0]}:{exc.node_addr[1]}: set cluster = auto (or on) to follow the cluster",
    )


#: What a cluster client raises while the cluster cannot serve a slot (a failover under way,
#: a node unreachable): transient, like a lost connection.
_CLUSTER_TRANSIENT = (
    redis.exceptions.ClusterError,
    redis.exceptions.RedisClusterException,
    redis.exceptions.TryAgainError,
)


def _cluster_unavailable(exc: Exception) -> RedisUnavailable:
    return RedisUnavailable(f"Redis Cluster cannot serve the call now: {exc or type(exc).__name__}")


#: Commands a cluster client must send to the node that owns the queue's slot: TIME (the
#: audit's clock, the one the scripts read) and SCAN of the queue's own keys (a MATCH with
#: its hash tag). A SCAN of every queue (no tag) goes to every primary.
_TAGGED_SCAN = re.compile(r"\{[^*?\[\]{}]+\}")


def _cluster_target(args: tuple[Any, ...], prefix: str) -> str | None:
    """For a cluster client: a key whose node runs the command (TIME: the queue's prefix; a
    SCAN whose MATCH has a hash tag: that tag, a partition's for a partitioned queue),
    ``"all"`` (a SCAN of every primary) or None (redis-py routes it by its keys)."""
    name = str(args[0]).upper()
    if name == "TIME":
        return prefix
    if name != "SCAN":
        return None
    pattern = next(
        (str(args[i + 1]) for i, a in enumerate(args[:-1]) if str(a).upper() == "MATCH"), ""
    )
    tag = _TAGGED_SCAN.search(pattern)
    return tag.group(0) if tag else "all"


def _split_cursor(cursor: Any, primaries: list[str]) -> dict[str, int]:
    """A cluster SCAN cursor (``node=cursor;...``, or ``0`` to start) by node name."""
    text = str(cursor)
    if text == "0":
        return dict.fromkeys(primaries, 0)
    pairs = (part.rpartition("=") for part in text.split(";") if part)
    return {name: int(value) for name, _, value in pairs}


def _join_cursor(cursors: dict[str, int]) -> str:
    return ";".join(f"{name}={c}" for name, c in cursors.items() if int(c) != 0) or "0"
