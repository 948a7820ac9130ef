"""The engine's one backoff rule (lua/includes/backoff.lua), table-driven, EVALed directly.

Before issue 39 the shape was written four times: a job's retry delay (jobs.lua), a domain's
breaker cooldown (breaker.lua), an exit's cooldown and an exit's bench after a ban (exits.lua).
:data:`BEFORE` keeps those four expressions as they were, and the test draws both from the
same seeds: the helper answers the same milliseconds, random draw for random draw.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import redis

from scrapeq.engine.lua import scripts

pytestmark = pytest.mark.backends

RULE_LUA = scripts.expand_includes(
    """--@include backoff
local out = {}
for i, c in ipairs(cjson.decode(ARGV[1])) do
  math.randomseed(c.seed or 1)
  out[i] = RULE.backoff(c.base, c.cap, c.n, c.jitter)
end
return cjson.encode(out)
"""
)

#: The four expressions the helper replaced, verbatim but for the CFG names.
BEFORE = """
local function job_retry(base, cap, n)
  n = math.max(n - 1, 0)
  local bound = base * (2 ^ math.min(n, 60))
  if bound > cap then bound = cap end
  return math.floor(math.random() * bound)
end
local function cooldown(base, cap, trips)
  local b = base * (2 ^ math.min(trips - 1, 40))
  if b > cap then b = cap end
  return math.floor(b * (0.8 + 0.4 * math.random()))
end
local function bench(base, cap, strikes)
  local rest = base * (2 ^ math.min(strikes - 1, 40))
  if rest > cap then rest = cap end
  return math.floor(rest)
end
local out = {}
for i, c in ipairs(cjson.decode(ARGV[1])) do
  math.randomseed(c.seed or 1)
  if c.jitter == 'full' then out[i] = job_retry(c.base, c.cap, c.n)
  elseif c.jitter == 'band' then out[i] = cooldown(c.base, c.cap, c.n)
  else out[i] = bench(c.base, c.cap, c.n) end
end
return cjson.encode(out)
"""


def run(client: redis.Redis, source: str, cases: list[dict[str, Any]]) -> list[int]:
    answers: list[int] = json.loads(client.eval(source, 0, json.dumps(cases)))
    return answers


NAMED = [
    # (why, base, cap, n, jitter, answer or (low, high) for a jittered draw)
    ("a bench after the first ban: the base", 300_000, 21_600_000, 1, None, 300_000),
    ("the third ban: x4", 300_000, 21_600_000, 3, None, 1_200_000),
    ("capped", 300_000, 21_600_000, 12, None, 21_600_000),
    ("no failure yet counts as one", 1_000, 3_600_000, 0, None, 1_000),
    ("a huge count: capped, no overflow", 1_000, 3_600_000, 5_000, None, 3_600_000),
    ("full jitter: within [0, bound)", 1_000, 3_600_000, 4, "full", (0, 7_999)),
    ("full jitter of a capped bound", 1_000, 5_000, 9, "full", (0, 4_999)),
    ("band jitter: within +-20%", 120_000, 3_600_000, 2, "band", (192_000, 288_000)),
    ("band jitter of the cap", 120_000, 3_600_000, 9, "band", (2_880_000, 4_320_000)),
]  # fmt: skip


@pytest.mark.parametrize(
    ("why", "base", "cap", "n", "jitter", "want"), NAMED, ids=[c[0] for c in NAMED]
)
def test_named_cases(
    redis_client: redis.Redis,
    why: str,
    base: int,
    cap: int,
    n: int,
    jitter: str | None,
    want: int | tuple[int, int],
) -> None:
    cases = [{"base": base, "cap": cap, "n": n, "jitter": jitter, "seed": s} for s in range(1, 41)]
    got = run(redis_client, RULE_LUA, cases)
    if isinstance(want, int):
        assert set(got) == {want}
    else:
        assert all(want[0] <= g <= want[1] for g in got), got
        assert len(set(got)) > 10, "jittered: the seeds draw different waits"


def test_same_milliseconds_as_the_four_expressions_it_replaced(redis_client: redis.Redis) -> None:
    cases = [
        {"base": base, "cap": cap, "n": n, "jitter": jitter, "seed": seed}
        for base, cap in [(1_000, 3_600_000), (120_000, 3_600_000), (300_000, 21_600_000),
                          (60_000, 3_600_000), (7, 1_000), (1_000, 1_000)]
        for n in range(1, 30)
        for jitter in ("full", "band", None)
        for seed in (1, 2, 99)
    ]  # fmt: skip
    assert run(redis_client, RULE_LUA, cases) == run(redis_client, BEFORE, cases)
