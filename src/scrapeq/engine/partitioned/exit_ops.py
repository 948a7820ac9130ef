"""The exit pool's reads over a queue's partitions (engine/model/exits.py shapes them): each exit's
state summed over the partitions, and one domain's exit state on its partition; and the one
write by hand, ending exits' rests on every partition (``lua/exit_probe-1.lua``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from scrapeq.engine.lua import scripts
from scrapeq.engine.lua.scripts import Op
from scrapeq.engine.model.exits import shape_domain_exits, shape_exits
from scrapeq.errors import NotFound

if TYPE_CHECKING:
    from scrapeq.engine.partitioned.routers import PartitionRouter

__all__ = ["op_domain_exits", "op_exits_info", "op_exits_probe"]


def op_exits_info(route: PartitionRouter) -> Op[list[dict[str, Any]]]:
    """Each exit of the pool with its state and counts (``Queue.exits_info``)."""
    core = route.core
    pool = core.exit_pool
    ids = [e.id for e in pool.exits]
    raws = yield from route._on_all(lambda: core._op_exits_raw(ids))
    now_ms = yield from core._op_now_ms()
    return shape_exits(pool, raws, now_ms)


def op_domain_exits(route: PartitionRouter, domain: str) -> Op[dict[str, Any]]:
    """A domain's tier, benched exits and use per tier (``Queue.domain_exits``)."""
    core = route.core
    pool = core.exit_pool
    raw = yield from route._on(core._op_domain_exits_raw(domain), route._part(domain))
    now_ms = yield from core._op_now_ms()
    return shape_domain_exits(pool, raw, now_ms)


def op_exits_probe(route: PartitionRouter, ids: list[str]) -> Op[dict[str, bool]]:
    """End the rest of exits ``ids`` on every partition (``Queue.exits_probe``): each id and
    whether it was down on any partition (the next claim there may send it a probe).

    Raises:
        NotFound: an id that is no exit of the queue's pool (nothing changed).
    """
    unknown = [i for i in ids if route.core.exit_pool.by_id(i) is None]
    if unknown or not ids:
        raise NotFound(f"no exit {unknown[0]!r} in the pool" if unknown else "no exit given")

    def one() -> Op[list[str]]:
        answer: list[str] = yield scripts.exit_probe(ids)
        return answer

    answers = yield from route._on_all(one)
    return {i: any(part[n] == "probe" for part in answers) for n, i in enumerate(ids)}
