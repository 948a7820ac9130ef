"""The domain breaker's rule, table-driven: RULE.breaker_step (lua/includes/breaker_rule.lua)
EVALed directly, with states and no queue.

The rule is pure (a domain's breaker fields and one outcome in, the new fields and the
effects the scripts apply out) but for the cooldown's jitter, one draw of the seeded random:
each case seeds it, and a cooldown is checked within its band (base * 2^(trips-1), capped,
times 0.8 to 1.2). tests/engine/test_breaker_transitions.py drives the same transitions
through the queue.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import redis

from scrapeq.engine.lua import scripts

pytestmark = pytest.mark.backends

RULE_LUA = scripts.expand_includes(
    """--@include breaker_rule
local out = {}
for i, c in ipairs(cjson.decode(ARGV[1])) do
  math.randomseed(c.seed or 1)
  local new, effects = RULE.breaker_step(c.state, c.outcome, c.cfg, c.now)
  out[i] = {new = new, effects = effects, same = new == c.state}
end
return cjson.encode(out)
"""
)

CFG = {
    "fails": 5,
    "window": 20,
    "rate": 0.5,
    "min_calls": 10,
    "max_trips": 8,
    "cool_ms": 120_000,
    "cool_max_ms": 3_600_000,
}
NOW = 1_000_000
OPEN = {"state": "open", "fails": "0", "win": "11111", "trips": "1", "probe": ""}

#: why, state, outcome, want: "same" (nothing changes, no effect), or the new state's fields
#: (a subset), "write" (the fields stored, in order), "effects" (keys present), "cool" (ms
#: band of the cooldown), "open_why", "retire", "close", "budget", "probe".
CASES: list[tuple[str, dict[str, Any], dict[str, Any], dict[str, Any]]] = [
    # closed: counting
    (
        "a failure on a fresh domain counts",
        {},
        {"ev": "result", "failed": True, "job": "j"},
        {"new": {"fails": 1, "win": "1"}, "write": ["fails", 1, "win", "1"]},
    ),
    (
        "a success resets the consecutive count, not the window",
        {"state": "closed", "fails": "3", "win": "0111"},
        {"ev": "result", "failed": False, "job": "j"},
        {"new": {"fails": 0, "win": "01110"}, "write": ["fails", 0, "win", "01110"]},
    ),
    (
        "the window keeps the last `window` outcomes",
        {"fails": "0", "win": "0" * 20},
        {"ev": "result", "failed": True, "job": "j"},
        {"new": {"fails": 1, "win": "0" * 19 + "1"}},
    ),
    (
        "a success on a full spotless window changes nothing",
        {"state": "closed", "fails": "0", "win": "0" * 20},
        {"ev": "result", "failed": False, "job": "j"},
        {"same": True, "effects": ["spotless"]},
    ),
    (
        "a success on a short window is still counted",
        {"fails": "0", "win": "0" * 19},
        {"ev": "result", "failed": False, "job": "j"},
        {"new": {"win": "0" * 20}, "effects": ["write"]},
    ),
    (
        "a failure during a global pause is not held against the site",
        {"fails": "4", "win": "1111"},
        {"ev": "result", "failed": True, "job": "j", "paused": True},
        {"same": True, "effects": []},
    ),
    # closed -> open
    (
        "the fails-th consecutive failure trips, from closed: the guard looks",
        {"fails": "4", "win": "01111", "trips": "0"},
        {"ev": "result", "failed": True, "job": "j"},
        {
            "new": {"state": "open", "fails": 0, "win": "011111", "trips": 1, "probe": ""},
            "effects": ["write", "open", "guard"],
            "open_why": "5 consecutive failures",
            "cool": (96_000, 144_000),
        },
    ),
    (
        "the failure rate trips at min_calls",
        {"fails": "0", "win": "010101010"},
        {"ev": "result", "failed": True, "job": "j"},
        {
            "new": {"state": "open", "win": "0101010101", "trips": 1},
            "open_why": "5 of the last 10 calls failed",
        },
    ),
    (
        "no rate trip below min_calls",
        {"fails": "0", "win": "01010101"},
        {"ev": "result", "failed": True, "job": "j"},
        {"new": {"state": None, "fails": 1, "win": "010101011"}, "effects": ["write"]},
    ),
    (
        "the n-th consecutive trip cools down base * 2^(n-1)",
        {"fails": "4", "win": "1111", "trips": "2"},
        {"ev": "result", "failed": True, "job": "j"},
        {"new": {"state": "open", "trips": 3}, "cool": (384_000, 576_000)},
    ),
    (
        "the cooldown is capped",
        {"fails": "4", "win": "1111", "trips": "6"},
        {"ev": "result", "failed": True, "job": "j"},
        {"new": {"trips": 7}, "cool": (2_880_000, 4_320_000)},
    ),
    (
        "the max_trips-th trip retires, the counts kept",
        {"fails": "4", "win": "1111", "trips": "7"},
        {"ev": "result", "failed": True, "job": "j"},
        {
            "new": {"state": "retired", "trips": 8, "fails": 5, "win": "11111", "probe": ""},
            "write": ["state", "retired", "trips", 8, "probe", "", "fails", 5, "win", "11111"],
            "retire": "5 consecutive failures; retired after 8 consecutive trips",
        },
    ),
    # open
    (
        "an outcome while open changes nothing",
        {**OPEN, "open_until": str(NOW + 5)},
        {"ev": "result", "failed": True, "job": "j"},
        {"same": True, "effects": []},
    ),
    (
        "open stays open before its cooldown ends",
        {**OPEN, "open_until": str(NOW + 1)},
        {"ev": "due"},
        {"same": True, "effects": []},
    ),
    (
        "open -> half-open when the cooldown ends",
        {**OPEN, "open_until": str(NOW)},
        {"ev": "due"},
        {
            "new": {"state": "half_open", "probe": "", "trips": "1"},
            "write": ["state", "half_open", "probe", ""],
            "effects": ["write", "half_open"],
        },
    ),
    (
        "a closed domain is never made half-open",
        {"state": None, "open_until": "0"},
        {"ev": "due"},
        {"same": True, "effects": []},
    ),
    # half-open: the probe
    (
        "a claim of a closed domain has no breaker bound",
        {"state": "closed"},
        {"ev": "claim"},
        {"same": True, "effects": []},
    ),
    (
        "a claim of a half-open domain: a budget of one probe",
        {"state": "half_open", "probe": ""},
        {"ev": "claim"},
        {"same": True, "budget": 1, "probe": True, "effects": ["budget", "probe"]},
    ),
    (
        "the probe leased is recorded",
        {"state": "half_open", "probe": ""},
        {"ev": "claim", "job": "p1"},
        {"new": {"probe": "p1"}, "write": ["probe", "p1"]},
    ),
    (
        "the probe's success closes and resets",
        {"state": "half_open", "fails": "0", "win": "11111", "trips": "3", "probe": "p1"},
        {"ev": "result", "failed": False, "job": "p1"},
        {
            "new": {"state": "closed", "fails": 0, "win": "", "trips": 0, "open_until": 0},
            "write": [
                "state",
                "closed",
                "fails",
                0,
                "win",
                "",
                "trips",
                0,
                "open_until",
                0,
                "probe",
                "",
            ],
            "close": ["recovered", "probe succeeded: breaker closed"],
        },
    ),
    (
        "the probe's failure reopens with the cooldown doubled, no guard",
        {"state": "half_open", "fails": "0", "win": "11111", "trips": "1", "probe": "p1"},
        {"ev": "result", "failed": True, "job": "p1"},
        {
            "new": {"state": "open", "trips": 2, "win": "11111", "probe": ""},
            "effects": ["write", "open"],
            "open_why": "probe failed",
            "cool": (192_000, 288_000),
        },
    ),
    (
        "another job's outcome while half-open changes nothing",
        {"state": "half_open", "trips": "1", "probe": "p1"},
        {"ev": "result", "failed": True, "job": "j"},
        {"same": True, "effects": []},
    ),
    (
        "the probe ending with no answer frees the probe",
        {"state": "half_open", "trips": "1", "probe": "p1"},
        {"ev": "ended", "job": "p1"},
        {"new": {"state": "half_open", "probe": ""}, "write": ["probe", ""]},
    ),
    (
        "another job ending changes nothing",
        {"state": "half_open", "probe": "p1"},
        {"ev": "ended", "job": "j"},
        {"same": True, "effects": []},
    ),
    # the global-fault guard
    (
        "a pause pardons a trip: closed, one trip fewer",
        {"state": "open", "trips": "3"},
        {"ev": "pardon"},
        {
            "new": {"state": "closed", "fails": 0, "win": "", "trips": 2, "open_until": 0},
            "effects": ["write"],
        },
    ),
    (
        "a pardon never goes below zero trips",
        {"state": "half_open"},
        {"ev": "pardon"},
        {"new": {"state": "closed", "trips": 0}},
    ),
    (
        "a retirement stands a pause",
        {"state": "retired", "trips": "8"},
        {"ev": "pardon"},
        {"same": True, "effects": []},
    ),
    # by hand
    (
        "a reset closes, even a retired domain",
        {"state": "retired", "trips": "8"},
        {"ev": "reset"},
        {"new": {"state": "closed", "trips": 0}, "close": ["reset", "breaker reset by hand"]},
    ),
    (
        "a trip by hand opens for the given cooldown",
        {"state": "closed", "trips": "0"},
        {"ev": "trip", "cool": 5000},
        {"new": {"state": "open", "trips": 1, "open_until": NOW + 5000}, "cool": (5000, 5000)},
    ),
    (
        "a trip by hand never retires",
        {"state": "open", "trips": "7"},
        {"ev": "trip"},
        {"new": {"state": "open", "trips": 7}, "open_why": "tripped by hand"},
    ),
]


def run(client: redis.Redis, cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    answers: list[dict[str, Any]] = json.loads(client.eval(RULE_LUA, 0, json.dumps(cases)))
    return answers


def _check_effects(
    why: str, want: dict[str, Any], new: dict[str, Any], effects: dict[str, Any]
) -> None:
    if "write" in want:
        assert effects["write"] == want["write"], why
    if "effects" in want:
        assert sorted(effects) == sorted(want["effects"]), (why, effects)
    if "cool" in want:
        lo, hi = want["cool"]
        cool = effects["open"]["cool"]
        assert lo <= cool <= hi, (why, cool)
        assert new["open_until"] == NOW + cool, why
    if "open_why" in want:
        assert effects["open"]["why"] == want["open_why"], why
    for key in ("retire", "close", "budget", "probe"):
        if key in want:
            assert effects[key] == want[key], (why, key)


def _check_stored(why: str, state: dict[str, Any], new: dict[str, Any], write: list[Any]) -> None:
    """The new state is what the writes leave stored."""
    stored = dict(state)
    for i in range(0, len(write), 2):
        stored[write[i]] = write[i + 1]
    for key in ("state", "fails", "win", "trips", "open_until", "probe"):
        if key in stored or key in new:
            assert str(stored.get(key)) == str(new.get(key)), (why, key, stored, new)


def test_table(redis_client: redis.Redis) -> None:
    cases = [{"state": s, "outcome": o, "cfg": CFG, "now": NOW, "seed": 7} for _, s, o, _ in CASES]
    answers = run(redis_client, cases)
    assert len(answers) == len(CASES)
    for (why, state, _, want), got in zip(CASES, answers, strict=True):
        effects = got["effects"] if isinstance(got["effects"], dict) else {}
        new = got["new"] if isinstance(got["new"], dict) else {}
        assert got["same"] is ("same" in want), why
        for key, value in want.get("new", {}).items():
            assert new.get(key) == value, (why, key, new)
        _check_effects(why, want, new, effects)
        _check_stored(why, state, new, effects.get("write", []))


def test_cooldowns_draw_the_band(redis_client: redis.Redis) -> None:
    """Seeds spread the first cooldown over base * (0.8 .. 1.2), never outside it."""
    trip = {"fails": "4", "win": "1111", "trips": "0"}
    outcome = {"ev": "result", "failed": True, "job": "j"}
    cases = [
        {"state": trip, "outcome": outcome, "cfg": CFG, "now": NOW, "seed": seed}
        for seed in range(1, 41)
    ]
    cools = [a["effects"]["open"]["cool"] for a in run(redis_client, cases)]
    assert all(96_000 <= c <= 144_000 for c in cools)
    assert max(cools) - min(cools) > 20_000


def test_an_unknown_outcome_is_an_error(redis_client: redis.Redis) -> None:
    with pytest.raises(redis.ResponseError, match="unknown outcome"):
        run(redis_client, [{"state": {}, "outcome": {"ev": "x"}, "cfg": CFG, "now": NOW}])


SUCCESS_LUA = scripts.expand_includes(
    """--@include breaker_rule
local out = {}
for i, c in ipairs(cjson.decode(ARGV[1])) do
  local s = {state = c.state, fails = c.fails, win = c.win}
  local _, e = RULE.breaker_step(s, {ev = 'result', failed = false, job = 'j'}, c.cfg, 1000)
  local win = RULE.breaker_success(c.fails or false, c.win or false, c.cfg.window)
  out[i] = {step = e.write or (e.spotless and 'spotless') or 'none', short = win or 'spotless'}
end
return cjson.encode(out)
"""
)


def test_the_success_short_form_answers_as_the_rule(redis_client: redis.Redis) -> None:
    """breaker.lua's settle asks RULE.breaker_success for a success on a closed breaker: it
    answers what RULE.breaker_step does for it (the window written with fails 0, or
    spotless), on every window shape."""
    wins = [None, "", "0", "1", "01", "0" * 19, "0" * 20, "0" * 19 + "1", "1" + "0" * 19]
    wins += ["0" * 25, "10" * 10, "0" * 20 + "1"]
    cases: list[dict[str, Any]] = [
        {
            "cfg": CFG,
            **({"state": state} if state else {}),
            **({"fails": fails} if fails is not None else {}),
            **({"win": win} if win is not None else {}),
        }
        for state in (None, "closed")
        for fails in (None, "0", "1", "4")
        for win in wins
    ]
    cases.append({"fails": "0", "win": "0" * 5, "cfg": {**CFG, "window": 5}})
    cases.append({"fails": "0", "win": "0" * 6, "cfg": {**CFG, "window": 5}})
    answers = json.loads(redis_client.eval(SUCCESS_LUA, 0, json.dumps(cases)))
    spotless = 0
    for case, got in zip(cases, answers, strict=True):
        if got["short"] == "spotless":
            spotless += 1
            assert got["step"] == "spotless", case
        else:
            assert got["step"] == ["fails", 0, "win", got["short"]], case
    assert 0 < spotless < len(cases)
