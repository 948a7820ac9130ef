"""The revisit rule, table-driven: RV (lua/includes/revisit_rule.lua) EVALed directly.

The rule is pure (a page's and its domain's state and one visit in, the new states and the
interval to the next visit out), so a test gives it states with no queue or site.
tests/engine/data/revisit_rule_cases.json holds the estimator's, the freshness function's and the
allocation's answers worked out independently (Cho & Garcia-Molina's closed form; the
marginal equation solved to 200 bisection steps; the price over a histogram solved to 200
steps by tests/engine/data/revisit_price_cases.py, whose answers are the file's last cases: a
case's ``rel_tol`` is the bisection's precision); the tests below check RV.step's
bookkeeping.
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
            tol = case.get("rel_tol", 1e-9)
            assert math.isclose(got, want, rel_tol=tol, abs_tol=1e-12), (case["why"], got)


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


def test_the_price_is_solved_at_once_not_stepped(redis_client: redis.Redis) -> None:
    page = {"n": 5, "x": 2, "tc": 7200, "tu": 10800, "last": 0, "due": 3600}
    # a domain of 100 such pages, its budget 10 an hour, at a
    # stale price far off
    lam = math.log(23400 / 16200)  # its estimate after this visit (0.37 an hour)
    h = {"-2": [99, 99.0, 99 * lam]}
    dom = {"n": 100, "load": 10.0, "mu": 1000.0, "h": h}
    one = step(redis_client, page, dom, 3600, False)
    # one visit: each page at its share, a tenth of a visit an hour (not 2% off the old price)
    assert 0.9 * 36000 <= one["interval"] <= 1.1 * 36000
    again = step(redis_client, page, {**dom, "mu": 1e-6}, 3600, False)
    assert math.isclose(again["dom"]["mu"], one["dom"]["mu"], rel_tol=1e-6)
    # with spare budget (all 100 at cfg.min take 6,000 an hour): the lowest price, and every
    # estimated page at the shortest interval
    rich = step(redis_client, page, dom, 3600, False, budget=10_000.0)
    assert rich["interval"] == 60 and rich["dom"]["mu"] == 1e-9
    # what the pages with no estimate take (l0) is not the estimated pages' to spend, beyond
    # their fair share
    busy = step(redis_client, page, {**dom, "l0": 9.0}, 3600, False)
    assert busy["interval"] > one["interval"]


def test_a_page_seen_changing_fast_gets_the_budget_not_the_floor(redis_client: redis.Redis) -> None:
    # every visit a minute apart saw a change: the live failure of issue 37 sent it 30 days
    hot = {"n": 20, "x": 20, "tc": 1200, "tu": 0, "last": 0, "due": 60}
    alone = step(redis_client, hot, {"n": 1, "load": 60.0, "mu": 1.0}, 60, True,
                 budget=60.0, max=30 * 86400)  # fmt: skip
    assert alone["interval"] == 60  # the whole budget, a visit a minute
    # among 10 such pages, a tenth of it each
    lam = 3600 * 20 / 1200 * math.log(41)  # its estimate: 223 an hour
    h = {"7": [9, 9.0, 9 * lam]}
    shared = step(redis_client, hot, {"n": 10, "load": 60.0, "mu": 1.0, "h": h}, 60, True,
                  budget=60.0, max=30 * 86400)  # fmt: skip
    assert 450 <= shared["interval"] <= 750
    # the same pages 60 times slower (an hour apart) and a budget 60 times smaller: the same
    # allocation, 60 times the interval (no time scale assumed)
    slow = {"n": 20, "x": 20, "tc": 72000, "tu": 0, "last": 0, "due": 3600}
    hs = {"1": [9, 9.0, 9 * lam / 60]}
    scaled = step(redis_client, slow, {"n": 10, "load": 1.0, "h": hs}, 3600, True,
                  budget=1.0, min=3600, max=60 * 30 * 86400)  # fmt: skip
    assert abs(scaled["interval"] - 60 * shared["interval"]) <= 60


def test_a_page_the_price_leaves_out_keeps_half_a_fair_share(redis_client: redis.Redis) -> None:
    # one page seen changing at every visit a minute apart, among 99 slow ones that take the
    # budget: it is worth less than them, but is still watched (its estimate may move)
    hot = {"n": 20, "x": 20, "tc": 1200, "tu": 0, "last": 0, "due": 60}
    h = {"-5": [99, 99.0, 99 * 0.04]}
    got = step(redis_client, hot, {"n": 100, "load": 10.0, "h": h}, 60, True)
    assert got["interval"] == round(3600 / (0.5 * 10.0 / 100))


def test_bounds_and_the_floor(redis_client: redis.Redis) -> None:
    # a page that never changed backs off: next interval as long as it was watched unchanged
    young = {"n": 2, "x": 0, "tc": 0, "tu": 1200, "last": 0, "due": 600}
    assert step(redis_client, young, {"n": 1, "load": 6.0}, 600, False)["interval"] == 1800
    # up to the floor
    never = {"n": 20, "x": 0, "tc": 0, "tu": 72000, "last": 0, "due": 3600}
    assert step(redis_client, never, {"n": 1, "load": 1.0}, 3600, False)["interval"] == 75600
    assert step(redis_client, never, {"n": 1, "load": 1.0}, 20000, False)["interval"] == 86400
    # never more often than cfg.min
    hot = {"n": 20, "x": 20, "tc": 1200, "tu": 0, "last": 0, "due": 60}
    cheap = step(redis_client, hot, {"n": 1, "load": 1.0}, 60, True, min=600, budget=1e6)
    assert cheap["interval"] == 600
