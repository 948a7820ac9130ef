"""Partition routing helpers: which partition a domain or job lives in, and moving steps there."""

from __future__ import annotations

import zlib
from typing import Any

from scrapeq.engine.lua.scripts import (
    Call,
    Command,
    Many,
    Step,
)
from scrapeq.engine.ops.oputil import _names

#: Seconds a partition that had nothing to claim is left alone, at most: its answer said when
#: something is next due there, but another producer may enqueue to it meanwhile.
PARTITION_RECHECK = 1.0


def partition_of(domain: str, partitions: int) -> int:
    """The partition of a domain (its politeness key): a stable hash (CRC-32) of its name."""
    if partitions <= 1:
        return 0
    return zlib.crc32(domain.encode("utf-8")) % partitions


def partition_of_id(job_id: str, partitions: int) -> int:
    """The partition a job id names (ids of a partitioned queue end in ``.<i>``); 0 else."""
    _, dot, tail = job_id.rpartition(".")
    if not dot or not tail.isdigit() or int(tail) >= partitions:
        return 0
    return int(tail)


def _stream_key(entry_id: str) -> tuple[int, int]:
    ms, _, seq = str(entry_id).partition("-")
    return int(ms or 0), int(seq or 0)


def _merge_status(raws: list[dict[str, Any]]) -> dict[str, Any]:
    """One ``status-1.lua`` answer for the whole queue from its partitions' answers."""
    out: dict[str, Any] = {"stats": {}, "lanes": {}, "lane_order": [], "retired": []}
    for name in ("ready", "delayed", "inflight", "dead", "domains", "open_breakers", "owed"):
        out[name] = sum(int(r.get(name) or 0) for r in raws)
    out["retired_domains"] = sum(int(r.get("retired_domains") or 0) for r in raws)
    # each partition picked its own domains worth a look: their union, round-robin so that
    # every partition's first choices come first when the caller cuts it to status_top
    picks = [_names(r.get("top")) for r in raws]
    union: list[str] = []
    for rank in range(max((len(p) for p in picks), default=0)):
        union += [p[rank] for p in picks if rank < len(p) and p[rank] not in union]
    out["top"] = union
    out["now"] = max(int(r.get("now") or 0) for r in raws)
    for raw in raws:
        for field_name, value in (raw.get("stats") or {}).items():
            out["stats"][field_name] = out["stats"].get(field_name, 0) + value
        for lane in raw.get("lane_order") or []:
            if lane not in out["lane_order"]:
                out["lane_order"].append(lane)
        for lane, fig in (raw.get("lanes") or {}).items():
            have = out["lanes"].setdefault(lane, {"ready": 0, "delayed": 0, "oldest_ready_ms": 0})
            have["ready"] += int(fig["ready"])
            have["delayed"] += int(fig["delayed"])
            have["oldest_ready_ms"] = max(have["oldest_ready_ms"], fig["oldest_ready_ms"])
        out["retired"] += list(raw.get("retired") or [])
    paused = [r for r in raws if r.get("paused_until")]
    latest = max(paused, key=lambda r: int(r["paused_until"]), default=None)
    out["paused_until"] = None if latest is None else latest["paused_until"]
    out["pause_reason"] = None if latest is None else latest.get("pause_reason")
    # every exit down in some partition: its domains claim nothing until the latest comes back
    down = [int(r["exits_down_until"]) for r in raws if r.get("exits_down_until")]
    out["exits_down_until"] = max(down) if down else None
    out["browsers_down"] = [b for r in raws for b in (r.get("browsers_down") or [])]
    return out


def _retarget(step: Step, base: str, prefix: str) -> Step:
    """``step`` moved from the queue's own keys (``base``) to a partition's (``prefix``)."""
    if isinstance(step, Call):
        return step if step.prefix is not None else step.on(prefix)
    if isinstance(step, Command):
        args = tuple(
            prefix + a[len(base) :] if isinstance(a, str) and a.startswith(base) else a
            for a in step.args
        )
        return Command(args, step.tolerant)
    return Many(tuple(_retarget(s, base, prefix) for s in step.steps))  # type: ignore[misc]
