"""A job's four budgets (lua/includes/budgets.lua, RULE.budget_spent), table-driven, EVALed.

Before issue 39 each budget was its own comparison in its own file: attempts in jobs.lua
(``attempts >= max_attempts`` before a retry), throttles and releases in settle-1.lua (counted
first, then ``> CFG.max_*``), give-backs in housekeeping.lua (``unused >= 2 * max_attempts``
before counting). The rule answers whether none is left *before* the next one is counted:
:func:`test_same_answers_as_the_comparisons_it_replaced` checks it against those four.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

import pytest
import redis

from scrapeq.engine.lua import scripts

pytestmark = pytest.mark.backends

RULE_LUA = scripts.expand_includes(
    """local CFG = cjson.decode(ARGV[1])
--@include budgets
local out = {}
for i, c in ipairs(cjson.decode(ARGV[2])) do
  out[i] = RULE.budget_spent(c.job, c.which)
end
return cjson.encode(out)
"""
)

CFG = {"max_throttles": 3, "max_releases": 2}


def spent(
    client: redis.Redis, cases: list[dict[str, Any]], cfg: dict[str, int] = CFG
) -> list[bool]:
    answers: list[bool] = json.loads(client.eval(RULE_LUA, 0, json.dumps(cfg), json.dumps(cases)))
    return answers


NAMED = [
    # (why, which, the job's fields, spent)
    ("a first attempt failed, four left", "attempts", {"attempts": 1, "max_attempts": 5}, False),
    ("the last attempt failed", "attempts", {"attempts": 5, "max_attempts": 5}, True),
    ("one attempt allowed, spent", "attempts", {"attempts": 1, "max_attempts": 1}, True),
    ("no throttle yet (field absent)", "throttles", {}, False),
    ("throttles below the bound", "throttles", {"throttles": 2}, False),
    ("throttles at the bound: the next is past it", "throttles", {"throttles": 3}, True),
    ("no release yet", "releases", {"releases": 0}, False),
    ("releases at the bound", "releases", {"releases": 2}, True),
    ("no give-back yet", "give_backs", {"max_attempts": 1}, False),
    ("give-backs below twice the attempts", "give_backs", {"unused": 9, "max_attempts": 5}, False),
    ("give-backs at twice the attempts", "give_backs", {"unused": 10, "max_attempts": 5}, True),
]  # fmt: skip


@pytest.mark.parametrize(("why", "which", "job", "want"), NAMED, ids=[c[0] for c in NAMED])
def test_named_cases(
    redis_client: redis.Redis, why: str, which: str, job: dict[str, int], want: bool
) -> None:
    assert spent(redis_client, [{"job": job, "which": which}]) == [want]


def test_a_zero_bound_is_spent_at_once(redis_client: redis.Redis) -> None:
    cases = [{"job": {}, "which": "throttles"}, {"job": {}, "which": "releases"}]
    assert spent(redis_client, cases, {"max_throttles": 0, "max_releases": 0}) == [True, True]


def test_an_unknown_budget_is_an_error(redis_client: redis.Redis) -> None:
    with pytest.raises(redis.ResponseError, match="unknown budget"):
        spent(redis_client, [{"job": {}, "which": "sleeps"}])


def _before(which: str, job: dict[str, int]) -> bool:
    """The comparison each file made before the rule, in Python."""
    if which == "attempts":
        return job["attempts"] >= job["max_attempts"]
    if which == "throttles":  # settle-1.lua: counted, then compared
        return job.get("throttles", 0) + 1 > CFG["max_throttles"]
    if which == "releases":
        return job.get("releases", 0) + 1 > CFG["max_releases"]
    return job.get("unused", 0) >= 2 * job["max_attempts"]


def test_same_answers_as_the_comparisons_it_replaced(redis_client: redis.Redis) -> None:
    cases = [
        {"which": which, "job": {"attempts": a, "max_attempts": m, "throttles": n,
                                 "releases": n, "unused": n * 2}}
        for which in ("attempts", "throttles", "releases", "give_backs")
        for a, m, n in itertools.product(range(0, 7), range(1, 6), range(0, 7))
    ]  # fmt: skip
    assert spent(redis_client, cases) == [_before(c["which"], c["job"]) for c in cases]
