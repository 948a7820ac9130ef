"""A sitemap entry's schedule (issue 39): the weight and lastmod rule lives in the engine
(``script_args.sitemap_schedule``, ``Queue.prepare(sitemap_priority=, lastmod=)``), so a library
user enqueuing sitemap entries gets the schedule ``scrapeq enqueue --sitemap`` gives."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from scrapeq import Queue
from scrapeq.engine.lua.args import sitemap_schedule
from scrapeq.errors import ConfigError

CASES = [
    # (why, priority, lastmod, the spec fields)
    ("nothing given: nothing set", None, None, {}),
    ("the protocol's default priority weighs 1", 0.5, None, {"weight": 1.0}),
    ("the top priority weighs 2", 1.0, None, {"weight": 2.0}),
    ("priority 0 still weighs 0.1", 0.0, None, {"weight": 0.1}),
    ("a low priority: twice it", 0.2, None, {"weight": 0.4}),
    ("a priority past 1 is clamped", 7, None, {"weight": 2.0}),
    ("a negative priority is clamped", -3.0, None, {"weight": 0.1}),
    ("a lastmod in range is kept", None, 1_700_000_000, {"lastmod": 1_700_000_000}),
    ("a fractional lastmod: whole seconds", None, 1_700_000_000.9, {"lastmod": 1_700_000_000}),
    ("the epoch is a time", None, 0, {"lastmod": 0}),
    ("before 1970: no visit to compare with", None, -1, {}),
    ("past 2106: the same", None, 2**32, {}),
    ("both", 0.8, 1_600_000_000, {"weight": 1.6, "lastmod": 1_600_000_000}),
]  # fmt: skip


@pytest.mark.parametrize(("why", "priority", "lastmod", "want"), CASES, ids=[c[0] for c in CASES])
def test_rule(why: str, priority: Any, lastmod: Any, want: dict[str, Any]) -> None:
    assert sitemap_schedule(priority, lastmod) == pytest.approx(want)


def test_the_rule_as_the_cli_wrote_it() -> None:
    """The CLI's expression before the move, over the priorities a sitemap can give (parsed
    and clamped to 0.0-1.0) and lastmods around the bounds."""
    for tenth in range(11):
        priority = tenth / 10
        for lastmod in (None, -5, 0, 1_700_000_000, 2**32 - 1, 2**32):
            before_lastmod = lastmod if lastmod is not None and 0 <= lastmod < 2**32 else None
            got = sitemap_schedule(priority, lastmod)
            assert got["weight"] == max(priority, 0.05) * 2
            assert got.get("lastmod") == before_lastmod


@pytest.mark.parametrize(
    ("priority", "lastmod", "named"),
    [("high", None, "sitemap_priority"), (True, None, "sitemap_priority"),
     (float("nan"), None, "sitemap_priority"), (None, "2024-01-01", "lastmod"),
     (None, float("inf"), "lastmod")],
)  # fmt: skip
def test_bad_values_are_refused_naming_them(priority: Any, lastmod: Any, named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        sitemap_schedule(priority, lastmod)


@pytest.mark.backends
def test_a_library_enqueue_carries_the_schedule(make_queue: Callable[..., Queue]) -> None:
    q = make_queue(revisit=True)
    spec = q.prepare("http://sitemap.example/a", sitemap_priority=0.9, lastmod=1_700_000_000)
    assert (spec.weight, spec.lastmod) == (pytest.approx(1.8), 1_700_000_000)
    plain = q.prepare("http://sitemap.example/b")
    assert (plain.weight, plain.lastmod) == (None, None)
    (added,) = q.enqueue_many([spec])
    job = q.claim(1).jobs[0]
    assert job.id == added.id and job.weight == pytest.approx(1.8)
    with pytest.raises(ConfigError, match="sitemap_priority"):
        q.enqueue("http://sitemap.example/c", sitemap_priority="high")  # type: ignore[arg-type]
