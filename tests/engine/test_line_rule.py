"""When a done page's results line waits for its settle's answer (lua/includes/lines.lua,
RULE.line_waits and RULE.line_notes), table-driven, EVALed; and what a claim hands the worker.

Before issue 39 the worker predicted it from its settings (``records.line_before_settle``):
revisit on, or a per-domain budget with follow-ups. The rule is now the settle script's, the
claim answers it per job (``Job.line_waits``), and a settle answers notes only for a line that
waited for them."""

from __future__ import annotations

import json
from typing import Any

import pytest
import redis

from scrapeq import Queue
from scrapeq.engine.lua import scripts

pytestmark = pytest.mark.backends

RULE_LUA = scripts.expand_includes(
    """--@include lines
local out = {}
for i, c in ipairs(cjson.decode(ARGV[1])) do
  local notes = RULE.line_notes(c.cfg, c.it, {changed = 1})
  out[i] = {RULE.line_waits(c.cfg) or 'none', notes and 'notes' or 'none'}
end
return cjson.encode(out)
"""
)

NULL: Any = None  # cjson.null in the config, as ScriptConfig sends an unset budget

CASES = [
    # (why, config, the item's follow-ups, waits, notes answered)
    ("plain: nothing to add", {"rv": False, "max_pages": NULL, "max_bytes": NULL}, None,
     "none", "none"),
    ("revisit on: always", {"rv": True, "max_pages": NULL, "max_bytes": NULL}, None,
     "always", "notes"),
    ("revisit on and a budget: always", {"rv": True, "max_pages": 5, "max_bytes": NULL}, None,
     "always", "notes"),
    ("max_pages, no follow-up", {"rv": False, "max_pages": 5, "max_bytes": NULL}, None,
     "follow", "none"),
    ("max_pages, follow-ups", {"rv": False, "max_pages": 5, "max_bytes": NULL}, [{"u": 1}],
     "follow", "notes"),
    ("max_bytes, follow-ups", {"rv": False, "max_pages": NULL, "max_bytes": 9}, [{"u": 1}],
     "follow", "notes"),
    ("no budget, follow-ups", {"rv": False, "max_pages": NULL, "max_bytes": NULL}, [{"u": 1}],
     "none", "none"),
]  # fmt: skip


def test_the_rule_table(redis_client: redis.Redis) -> None:
    cases = [{"cfg": cfg, "it": {} if f is None else {"follow": f}} for _, cfg, f, _, _ in CASES]
    got = json.loads(redis_client.eval(RULE_LUA, 0, json.dumps(cases)))
    want = [[waits, notes] for *_, waits, notes in CASES]
    assert dict(zip([c[0] for c in CASES], got, strict=True)) == dict(
        zip([c[0] for c in CASES], want, strict=True)
    )


@pytest.mark.parametrize(
    ("settings", "want"),
    [
        ({}, None),
        ({"max_pages": 10}, "follow"),
        ({"max_bytes": 10_000}, "follow"),
        ({"revisit": "on"}, "always"),
        ({"revisit": "on", "max_pages": 10}, "always"),
    ],
)
def test_a_claim_hands_each_job_the_rule(
    make_queue: Any, settings: dict[str, Any], want: str | None
) -> None:
    q: Queue = make_queue(queue="lw", **settings)
    q.enqueue_many(["https://a.example/1", "https://b.example/2"])
    jobs = q.claim(10).jobs
    assert len(jobs) == 2
    assert [j.line_waits for j in jobs] == [want, want]


def test_a_plain_claim_answers_no_field(make_queue: Any, redis_client: redis.Redis) -> None:
    """The plain case costs no byte: the claimed text has no ``line_waits``."""
    q: Queue = make_queue(queue="lw")
    q.enqueue("https://a.example/1")
    (job,) = q.claim(1).jobs
    assert job.line_waits is None
    stored = redis_client.get(q.keys.job(job.id))
    assert isinstance(stored, str)
    assert not {"line_waits", "lw"} & set(json.loads(stored))
