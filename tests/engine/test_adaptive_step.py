"""The adaptive rule, table-driven: adaptive_step (lua/includes/adaptive_rule.lua) EVALed directly.

The rule is pure (a state and one settled attempt's sample in, the new state and whether an
overload is excused out), so a test gives it states and samples with no domain, queue or
site. tests/engine/data/adaptive_step_cases.json holds cases whose answers were captured from the
rule as it was before it became pure (one function that read, decided and wrote through
Redis): the refactor keeps every decision.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import redis

from scrapeq.engine.lua import scripts

pytestmark = pytest.mark.backends

CASES = json.loads((Path(__file__).parent / "data" / "adaptive_step_cases.json").read_text())

STEP_LUA = scripts.expand_includes(
    """--@include adaptive_rule
local out = {}
for i, c in ipairs(cjson.decode(ARGV[1])) do
  local new, excused = adaptive_step(c.state, c.sample)
  out[i] = {new = new or false, excused = excused}
end
return cjson.encode(out)
"""
)

NOW = 1_800_000_000_500
#: A domain answering fine: its state before the answer (the fields adaptive_rule.lua names).
STEADY = {"limit": 4, "interval": 0, "base": 100, "avg": 100, "ok_at": NOW - 100,
          "sec": NOW // 1000, "sec_n": 3, "prev_n": 5, "count": 10, "inflight": 4}  # fmt: skip


def sample(**fields: Any) -> dict[str, Any]:
    return {"now": NOW, "lat": 100, "overload": False, "outcome": "done", "min": 1,
            "max": 32, "claimed": NOW - 200, **fields}  # fmt: skip


def step(client: redis.Redis, cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    answers: list[dict[str, Any]] = json.loads(client.eval(STEP_LUA, 0, json.dumps(cases)))
    return answers


def same_state(got: dict[str, Any] | bool, want: dict[str, Any] | None) -> bool:
    if want is None or got is False:
        return want is None and got is False
    assert isinstance(got, dict)
    return got.keys() == want.keys() and all(
        math.isclose(got[k], want[k], rel_tol=1e-12, abs_tol=1e-9) for k in want
    )


def test_captured_decisions_are_kept(redis_client: redis.Redis) -> None:
    answers = step(redis_client, [{"state": c["state"], "sample": c["sample"]} for c in CASES])
    assert len(answers) == len(CASES) > 100
    for i, (case, got) in enumerate(zip(CASES, answers, strict=True)):
        assert same_state(got["new"], case["new"]), (i, case, got)
        assert got["excused"] is case["excused"], (i, case, got)


def test_the_captured_cases_cover_every_branch() -> None:
    overloads = [c for c in CASES if c["sample"]["overload"]]
    assert any(c["excused"] for c in overloads) and not all(c["excused"] for c in overloads)
    assert any(c["new"] is None for c in CASES)
    grown = [c for c in CASES if c["new"] and c["new"]["limit"] > c["state"]["limit"]]
    cut = [c for c in CASES if c["new"] and c["new"]["limit"] < c["state"]["limit"]]
    assert grown and cut


NAMED = [
    # (why, state, sample, the new state's fields expected (None: unchanged), excused)
    ("a good answer at a limit in use, in slow start: +1", STEADY, sample(),
     {"limit": 5, "sec_n": 4, "count": 11, "ok_at": NOW}, False),
    ("a slow overload, fresh, answering lately: halved, ceiling at the limit less one, excused",
     {**STEADY, "limit": 8}, sample(overload=True, lat=900, outcome="retry", failed=True),
     {"limit": 4, "threshold": 4, "cap": 7, "cut_at": NOW, "count": 0}, True),
    ("an overload from a site that never answered: cut, not excused",
     {**STEADY, "limit": 8, "ok_at": None}, sample(overload=True, lat=900, failed=True),
     {"limit": 4, "ok_at": 0}, False),
    ("a failure charged to the domain without overload: nothing changes",
     STEADY, sample(outcome="retry", failed=True), None, False),
    ("a latency past BAD x base, fresh: x LAT_CUT",
     {**STEADY, "avg": 400}, sample(lat=400), {"limit": 3, "cut_at": NOW, "count": 0}, False),
]  # fmt: skip


@pytest.mark.parametrize(("why", "state", "x", "want", "excused"), NAMED, ids=[n[0] for n in NAMED])
def test_named_cases(
    redis_client: redis.Redis,
    why: str,
    state: dict[str, Any],
    x: dict[str, Any],
    want: dict[str, Any] | None,
    excused: bool,
) -> None:
    state = {k: v for k, v in state.items() if v is not None}
    (got,) = step(redis_client, [{"state": state, "sample": x}])
    assert got["excused"] is excused
    if want is None:
        assert got["new"] is False
        return
    for field, value in want.items():
        assert got["new"][field] == pytest.approx(value), field
