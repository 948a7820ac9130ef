"""Fetcher ``auto``'s rule, table-driven: RULE.auto_step and RULE.auto_pick
(lua/includes/auto_rule.lua) EVALed directly, with values and no queue.
tests/runtime/test_fetcher_auto.py drives the same decisions through claims, settles and a
worker."""

from __future__ import annotations

import json
from typing import Any

import pytest
import redis

from scrapeq.engine.lua import scripts

pytestmark = pytest.mark.backends

RULE_LUA = scripts.expand_includes(
    """--@include auto_rule
local out = {}
for i, c in ipairs(cjson.decode(ARGV[1])) do
  if c.pick then
    local use, count = RULE.auto_pick(c.level, c.base or 'http', c.count, c.share)
    out[i] = {use, count}
  elseif c.url then
    out[i] = RULE.auto_pattern(c.url)
  else
    out[i] = RULE.auto_step(c.level, c.used, c.evidence) or false
  end
end
return cjson.encode(out)
"""
)

#: why, level, fetcher used, evidence -> the new level (None: no change)
STEPS: list[tuple[str, str, str, str, str | None]] = [
    ("a block at http moves to impersonate", "http", "http", "block", "impersonate"),
    ("a block of impersonate is not cured by a dearer fetcher", "impersonate", "impersonate",
     "block", None),
    ("a block of a re-check does not move the domain", "impersonate", "http", "block", None),
    ("a block of a stale http job after the move changes nothing", "browser", "http", "block",
     None),
    ("a page that needs rendering at http moves to browser", "http", "http", "render",
     "browser"),
    ("from impersonate too", "impersonate", "impersonate", "render", "browser"),
    ("a render seen by a re-check keeps browser", "browser", "impersonate", "render", None),
    ("a rendered page's own evidence is none", "browser", "browser", "render", None),
    ("a re-check as good comes down one level", "browser", "impersonate", "same", "impersonate"),
    ("from impersonate to http", "impersonate", "http", "same", "http"),
    ("as good at the level itself changes nothing", "impersonate", "impersonate", "same", None),
    ("an unknown fetcher changes nothing", "http", "curl", "block", None),
    ("an unknown evidence changes nothing", "http", "http", "timeout", None),
]  # fmt: skip


def _run(client: redis.Redis, cases: list[dict[str, Any]]) -> list[Any]:
    answers: list[Any] = json.loads(client.eval(RULE_LUA, 0, json.dumps(cases)))  # type: ignore[arg-type]
    return answers


def test_steps(redis_client: redis.Redis) -> None:
    cases = [{"level": lv, "used": u, "evidence": ev} for _, lv, u, ev, _ in STEPS]
    got = [a or None for a in _run(redis_client, cases)]
    assert got == [want for *_, want in STEPS], [s[0] for s in STEPS]


def test_at_http_nothing_is_counted_and_every_job_is_http(redis_client: redis.Redis) -> None:
    cases = [{"pick": True, "level": "http", "count": n, "share": 0.5} for n in (0, 7)]
    assert _run(redis_client, cases) == [["http", 0], ["http", 7]]


@pytest.mark.parametrize(
    ("level", "base", "share", "cheaper", "every"),
    [("browser", "http", 0.1, "http", 10), ("browser", "impersonate", 0.1, "impersonate", 10),
     ("impersonate", "impersonate", 0.25, "http", 4), ("browser", "browser", 1.0,
     "impersonate", 1)],
)  # fmt: skip
def test_the_share_of_rechecks_is_exact(
    redis_client: redis.Redis, level: str, base: str, share: float, cheaper: str, every: int
) -> None:
    """A pattern above its domain re-checks at the domain's level, a domain one level down."""
    cases = [
        {"pick": True, "level": level, "base": base, "count": n, "share": share} for n in range(100)
    ]
    got = _run(redis_client, cases)
    assert [count for _, count in got] == list(range(1, 101))
    rechecks = [n + 1 for n, (use, _) in enumerate(got) if use == cheaper]
    assert rechecks == list(range(every, 101, every))
    assert all(use == level for n, (use, _) in enumerate(got) if n + 1 not in rechecks)


def test_share_zero_never_rechecks(redis_client: redis.Redis) -> None:
    cases = [{"pick": True, "level": "browser", "count": n, "share": 0} for n in range(50)]
    assert {use for use, _ in _run(redis_client, cases)} == {"browser"}


@pytest.mark.parametrize(
    ("url", "pattern"),
    [("https://a.example/p/12", "/p/"), ("https://a.example/p/13?x=1", "/p/"),
     ("https://a.example/static/1/x", "/static/"), ("https://a.example/about", "/about"),
     ("https://a.example/about?x=/y", "/about"), ("https://a.example/", "/"),
     ("https://a.example", "/"), ("http://a.example:8080/p/", "/p/"),
     ("https://a.example/#/p/1", "/")],
)  # fmt: skip
def test_a_urls_pattern_is_its_first_path_segment(
    redis_client: redis.Redis, url: str, pattern: str
) -> None:
    assert _run(redis_client, [{"url": url}]) == [pattern]
