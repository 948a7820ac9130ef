"""The asyncio queue's steps (:class:`AsyncSteps`): how it runs its scripts, its commands and
the steps of several partitions at once. Its public operations are :class:`AsyncQueue`'s.
"""

from __future__ import annotations

from typing import Any, TypeVar

import redis.asyncio
import redis.asyncio.cluster

from scrapeq.engine.config.settings import Settings
from scrapeq.engine.facades.shared import _QueueBase, async_cluster, async_gather
from scrapeq.engine.lua import scripts
from scrapeq.engine.lua.library import Library, function_miss, library_source
from scrapeq.engine.lua.scripts import Call, Command, Many, Op, Step
from scrapeq.engine.server.connection import AsyncClient
from scrapeq.engine.server.transport import (
    _BULK_LIMIT_QUERY,
    _CLUSTER_TRANSIENT,
    _cluster_target,
    _cluster_unavailable,
    _join_cursor,
    _maybe_oversized,
    _moved,
    _oversized,
    _split_cursor,
    _wrap_connection_error,
)

T = TypeVar("T")


class AsyncSteps(_QueueBase):
    """A queue's core that runs its operations' steps
    over an asyncio redis-py client: for workers
    (its operations are :class:`AsyncQueue`'s)."""

    def __init__(
        self, client: AsyncClient, name: str | None = None, *, settings: Settings | None = None
    ) -> None:
        super().__init__(name, settings=settings)
        self.client = client
        self._cluster = isinstance(client, redis.asyncio.cluster.RedisCluster)
        self._scripts = {n: client.register_script(scripts.load_source(n)) for n in scripts.SCRIPTS}

    async def _drive(self, op: Op[T]) -> T:
        try:
            step = next(op)
            while True:
                step = op.send(await self._step(step))
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]

    async def _step(self, step: Step) -> Any:
        if isinstance(step, Many):  # to several partitions (see async_gather)
            return await async_gather(self._step(s) for s in step.steps)
        try:
            if isinstance(step, Command):
                if self._cluster:
                    return await self._cluster_command(step.args)
                return await self.client.execute_command(*step.args)
            raw = await self._script(step)
        except redis.ResponseError as exc:
            moved = _moved(exc)
            if moved is not None:
                raise moved from None
            if isinstance(exc, _CLUSTER_TRANSIENT):
                raise _cluster_unavailable(exc) from exc
            if isinstance(step, Command) and step.tolerant:
                return None
            raise scripts.map_error(exc, getattr(step, "script", "a script")) from None
        except _CLUSTER_TRANSIENT as exc:
            raise _cluster_unavailable(exc) from exc
        except (redis.ConnectionError, redis.TimeoutError) as exc:
            if _maybe_oversized(step):
                limit = await self._step(Command(_BULK_LIMIT_QUERY, True))
                too_large = _oversized(step, limit)
                if too_large is not None:
                    raise too_large from None
            raise _wrap_connection_error(exc) from exc
        return step.parse(raw)

    async def _script(self, step: Call[Any]) -> Any:
        """Run a script as its Redis 7 function (``engine/lua/library.py``), loaded first where
        the server lacks it; by EVALSHA where the server has no functions (``function_miss``)."""
        keys = [step.prefix or self.keys.prefix]
        args: list[str | int] = [self.testing_clock_offset_ms, self._config_json, step.args]
        if self._functions is not False:
            library = library_source(step.script)
            for _ in range(2):  # a library loaded by this call is called once more
                try:
                    return await self.client.execute_command("FCALL", library.name, 1, *keys, *args)
                except redis.RedisError as exc:  # a cluster client refuses an unknown command
                    miss = function_miss(exc)
                    if miss is None:
                        raise
                    self._functions = miss == "load" and await self._load(library)
                    if not self._functions:
                        break
        return await self._scripts[step.script](keys=keys, args=args)

    async def _load(self, library: Library) -> bool:
        """Load ``library`` (on every primary of a cluster); whether it could be."""
        try:
            await self.client.execute_command("FUNCTION", "LOAD", "REPLACE", library.code)
        except redis.ResponseError as exc:
            return self._load_refused(library, exc)
        return True

    async def _cluster_command(self, args: tuple[Any, ...]) -> Any:
        """Run a read on a cluster: on the queue's node, every primary, or as redis-py routes."""
        target = _cluster_target(args, self.keys.prefix)
        if target is None:
            return await self.client.execute_command(*args)
        client = await async_cluster(self.client)
        if target != "all":
            node = client.get_node_from_key(target)
            reply = await client.execute_command(*args, target_nodes=node)
            if str(args[0]).upper() == "SCAN":
                cursors, batch = reply
                return [next(iter(cursors.values()), 0), batch]
            return reply
        names = [n.name for n in client.get_primaries()]
        after: dict[str, int] = {}
        found: list[str] = []
        for name, cursor in _split_cursor(args[1], names).items():
            node = client.get_node(node_name=name)
            if node is None:  # gone since the last call (a failover): its keys moved
                continue
            got, batch = await client.execute_command("SCAN", cursor, *args[2:], target_nodes=node)
            after[name] = int(next(iter(got.values()), 0))
            found.extend(batch)
        return [_join_cursor(after), found]
