"""Every script's expansion stays far under Lua 5.1's limit of 200 locals in one function.

The top level of an expanded script is one function: each include's constants and helpers
are its locals. Measured on the server: the most locals that can be declared in front of the
script before it stops compiling ("main function has more than 200 local variables").
"""

from __future__ import annotations

import pytest
import redis

from scrapeq.engine.lua import scripts

pytestmark = pytest.mark.backends

LUA_MAX_LOCALS = 200
#: The most top-level locals an expanded script may use: room for the next includes.
BUDGET = 170


def _compiles(client: redis.Redis, source: str, pad: int) -> bool:
    padding = "".join(f"local _pad{i}\n" for i in range(pad))
    try:
        client.script_load(padding + source)
    except redis.ResponseError as exc:
        assert "local variables" in str(exc), exc
        return False
    return True


def top_level_locals(client: redis.Redis, source: str) -> int:
    """The number of locals the top level of ``source`` declares, measured on the server."""
    lo, hi = 0, LUA_MAX_LOCALS
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if _compiles(client, source, mid):
            lo = mid
        else:
            hi = mid - 1
    return LUA_MAX_LOCALS - lo


@pytest.mark.parametrize("name", sorted(scripts.SCRIPTS))
def test_expanded_script_stays_within_the_locals_budget(
    name: str, redis_client: redis.Redis
) -> None:
    used = top_level_locals(redis_client, scripts.load_source(name))
    assert used <= BUDGET, f"{name}: {used} top-level locals (budget {BUDGET})"
