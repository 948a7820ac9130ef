"""The results line's one owner (runtime/lines.py, issue 39): whether a line waits for the
settle's answer applies the claim's flag (``Job.line_waits``, the rule of
lua/includes/lines.lua) without knowing why; table-driven."""

from __future__ import annotations

import dataclasses

import pytest

from scrapeq.engine.lua.scripts import EnqueueSpec, Settlement
from scrapeq.engine.model.job import Job
from scrapeq.runtime.lines import waits

JOB = Job.from_dict({"id": "a1", "url": "https://shop.example/p", "domain": "shop.example"})
FOLLOW = (EnqueueSpec("https://shop.example/q", "shop.example", "normal", 0, 0, 5, parent="a1"),)

CASES = [
    # (why, the claim's flag, outcome, follow-ups, waits)
    ("a plain done page: before the settle", None, "done", (), False),
    ("a plain done page with follow-ups, no budget", None, "done", FOLLOW, False),
    ("a dead job by the worker's verdict", None, "fail", (), False),
    ("a dead job by verdict, revisit on: no content to say", "always", "fail", (), False),
    ("a retry: the settle says whether it ends dead", None, "retry", (), True),
    ("a throttle", None, "throttle", (), True),
    ("a release", "follow", "release", (), True),
    ("revisit on: the settle says whether it changed", "always", "done", (), True),
    ("a budget and follow-ups: the settle may cut them", "follow", "done", FOLLOW, True),
    ("a budget and no follow-up: nothing to cut", "follow", "done", (), False),
]  # fmt: skip


@pytest.mark.parametrize(
    ("why", "flag", "outcome", "follow", "want"), CASES, ids=[c[0] for c in CASES]
)
def test_waits(
    why: str, flag: str | None, outcome: str, follow: tuple[EnqueueSpec, ...], want: bool
) -> None:
    job = dataclasses.replace(JOB, line_waits=flag)
    settlement = Settlement(JOB.id, 1, outcome, follow=follow)
    assert waits(job, settlement) is want, why
