"""The one backoff shape of the runtime (issue 39): the wait after the n-th failure in a row.

``base * 2^(n-1)`` seconds (``n`` below 1 counts as 1), capped at ``cap``, with no jitter: a
worker's claim pause after its results sink failed (:mod:`.attempt`), a supervisor's restart of
a child that died at once (:mod:`.supervisor`), the claim and settle loops' reconnects to Redis
(:mod:`.worker`, :mod:`.settler`). The engine's own waits (a job's retry, a breaker's cooldown)
have their Lua twin, ``engine/lua/includes/backoff.lua``. Pure: tested table-driven
(tests/runtime/test_backoff.py).
"""

from __future__ import annotations

__all__ = ["backoff"]

#: Exponents past this add nothing (every cap is far below ``base * 2^60``) and keep the
#: arithmetic finite.
_MAX_DOUBLINGS = 60


def backoff(base: float, n: int, cap: float) -> float:
    """The wait after the ``n``-th failure in a row: ``min(cap, base * 2^(n-1))``.

    Doubling by a power of two is exact in binary floating point, so ``backoff(b, n + 1, c)``
    equals ``min(backoff(b, n, c) * 2, c)``: the same figures a loop doubling its own wait
    gets.
    """
    return min(cap, base * 2.0 ** min(max(n, 1) - 1, _MAX_DOUBLINGS))
