"""A worker's browsers benched or back (issue 42): the call of ``lua/browser_down-1.lua`` and
its operation (on the queue's first partition: ``status`` reads every partition's)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from scrapeq.engine.lua.scripts import Call, Op, _call, _given

if TYPE_CHECKING:
    from scrapeq.engine.partitioned.routers import PartitionRouter

__all__ = ["browser_down", "op_browser_down"]

#: The longest reason kept (the script keeps 300 characters of it).
REASON_MAX = 300


def browser_down(
    worker: str, wait_ms: int | None, *, failures: int = 0, reason: str = ""
) -> Call[int]:
    """``worker``'s browsers benched for ``wait_ms`` (None: usable again); answers how many
    workers are benched (``lua/browser_down-1.lua``)."""
    if wait_ms is None:
        return _call("browser_down", int, worker=worker)
    given = _given(failures=failures, reason=reason[:REASON_MAX])
    return _call("browser_down", int, worker=worker, wait_ms=wait_ms, **given)


def op_browser_down(
    route: PartitionRouter, worker: str, wait: float | None, failures: int, reason: str
) -> Op[int]:
    """Say that ``worker``'s browsers are benched for ``wait`` seconds (None: back)."""
    wait_ms = None if wait is None else max(round(wait * 1000), 0)
    answer: int = yield from route._on(
        _one(browser_down(worker, wait_ms, failures=failures, reason=reason)), 0
    )
    return answer


def _one(call: Call[int]) -> Op[int]:
    answer: int = yield call
    return answer
