"""How a worker process tells its supervisor that it does useful work.

The supervisor restarts a child that died promptly when it had settled jobs (its death was
one job's doing, not a broken start), and backs off only for children that die at once
again and again (:mod:`.supervisor`). A supervised child gets a counter in shared memory
(:func:`install`, called by the supervisor's child body); the worker adds the settlements
Redis answered to it (:func:`settled`). Outside a supervisor nothing is counted.
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["install", "settled"]


class Counter(Protocol):
    """A ``multiprocessing`` shared value (``RawValue('Q')``): one writer, the child."""

    value: int


_counter: Counter | None = None


def install(counter: Counter | None) -> None:
    """Count this process's settlements into ``counter`` (None: stop counting)."""
    global _counter
    _counter = counter


def settled(n: int) -> None:
    """Note ``n`` settlements answered by Redis (a no-op outside a supervisor)."""
    if _counter is not None and n > 0:
        _counter.value += n
