"""The revisit rule, table-driven: RV (lua/includes/revisit_rule.lua) EVALed directly.

The rule is pure (a page's and its domain's state and one visit in, the new states and the
interval to the next visit out), so a test gives it states with no queue or site.
tests/engine/data/revisit_rule_cases.json holds the estimator's, the freshness function's and the
allocation's answers worked out independently (Cho & Garcia-Molina's closed form; the
marginal equation solved to 200 bisection steps); the tests below check RV.step's
bookkeeping.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import redis

from scrapeq.engine import scripts

pytestmark = pytest.mark.backends

CASES = json.loads((Path(__file__).parent / "data" / "revisit_rule_cases.json").read_text())

RULE_LUA = scripts.expand_includes(
    """--@include revisit_rule
local out = {}
for i, c in ipairs(cjson.decode(ARGV[1])) do
  local args = c.args
  if c.fn == 'step' then
    local page = args[1]
    if page == cjson.null then page = nil end
    local p, d, interval = RV.step(page, args[2], args[3], args[4])
    out[i] = {page = p, dom = d, interval = interval}
  else
    local v = RV[c.fn](unpack(args))
    if v == nil then v = cjson.null end
    out[i] = v
  end
end
return cjson.encode(out)
"""
)

CFG = {"budget": 10.0, "min": 60, "max": 86400, "w": 1}


def call(client: redis.Redis, cases: list[dict[str, Any]]) -> list[Any]:
    answers: list[Any] = json.loads(client.eval(RULE_LUA, 0, json.dumps(cases)))
    return answers


def test_table(redis_client: redis.Redis) -> None:
    answers = call(redis_client, [{"fn": c["fn"], "args": c["args"]} for c in CASES])
    assert len(answers) == len(CASES) >= 15
    for case, got in zip(CASES, answers, strict=True):
        want = case["want"]
        if want is None:
            assert got is None, case["why"]
        else:
            assert math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-12), (case["why"], got)


def step(client: redis.Redis, page: Any, dom: dict[str, Any], now: int,
         changed: bool | None, **cfg: Any) -> dict[str, Any]:  # fmt: skip
    obs: dict[str, Any] = {"now": now}
    if changed is not None:
        obs["changed"] = changed
    case = {"fn": "step", "args": [page, dom, obs, {**CFG, **cfg}]}
    answer: dict[str, Any] = call(client, [case])[0]
    return answer


def test_a_new_page_gets_a_fair_share_of_the_budget(redis_client: redis.Redis) -> None:
    got = step(redis_client, None, {"n": 9, "load": 9.0}, 1000, None)
    # tenth page of the domain, 10 fetches an hour: one an hour
    assert got["interval"] == 3600
    assert got["page"] == {"n": 0, "x": 0, "tc": 0, "tu": 0, "last": 1000, "due": 4600}
    assert got["dom"]["n"] == 10 and math.isclose(got["dom"]["load"], 10.0)


def test_a_visit_counts_its_interval_changed_or_not(redis_client: redis.Redis) -> None:
    page = {"n": 2, "x": 1, "tc": 3600, "tu": 3600, "last": 10_000, "due": 13_600}
    changed = step(redis_client, page, {"n": 1, "load": 1.0}, 13_600, True)["page"]
    assert (changed["n"], changed["x"], changed["tc"], changed["tu"]) == (3, 2, 7200, 3600)
    same = step(redis_client, page, {"n": 1, "load": 1.0}, 13_600, False)["page"]
    assert (same["n"], same["x"], same["tc"], same["tu"]) == (3, 1, 3600, 7200)
    # an observation-less visit (a first fetch through another job) counts nothing
    none = step(redis_client, page, {"n": 1, "load": 1.0}, 13_600, None)["page"]
    assert (none["n"], none["x"]) == (2, 1)


def test_the_price_follows_the_load(redis_client: redis.Redis) -> None:
    page = {"n": 5, "x": 2, "tc": 7200, "tu": 10800, "last": 0, "due": 3600}
    over = step(redis_client, page, {"n": 100, "load": 50.0, "mu": 1.0}, 3600, False)
    under = step(redis_client, page, {"n": 100, "load": 2.0, "mu": 1.0}, 3600, False)
    assert over["dom"]["mu"] > 1.0 > under["dom"]["mu"]
    # a higher price, a longer interval for the same page
    dear = step(redis_client, page, {"n": 100, "load": 10.0, "mu": 4.0}, 3600, False)
    cheap = step(redis_client, page, {"n": 100, "load": 10.0, "mu": 0.25}, 3600, False)
    assert dear["interval"] > cheap["interval"]


def test_bounds_and_the_floor(redis_client: redis.Redis) -> None:
    never = {"n": 20, "x": 0, "tc": 0, "tu": 72000, "last": 0, "due": 3600}
    assert step(redis_client, never, {"n": 1, "load": 1.0}, 3600, False)["interval"] == 86400
    hot = {"n": 20, "x": 20, "tc": 1200, "tu": 0, "last": 0, "due": 60}
    # changes every visit a minute apart: worth nothing at mu = 1 h (w / lambda < mu)
    assert step(redis_client, hot, {"n": 1, "load": 1.0, "mu": 1.0}, 60, True)["interval"] == 86400
    # worth a lot at a tiny price, but never more often than cfg.min
    cheap = step(redis_client, hot, {"n": 1, "load": 1.0, "mu": 1e-6}, 60, True, min=600)
    assert cheap["interval"] == 600
