"""The CLI's tables read times as people do: :func:`render.human_duration` and friends."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from scrapeq.engine.model.job import Job
from scrapeq.interfaces import render
from scrapeq.interfaces.render import human_delta, human_duration, human_until


@pytest.mark.parametrize(
    "seconds,text",
    [
        (0, "0 s"),
        (0.0004, "1 ms"),
        (0.25, "250 ms"),
        (0.9994, "999 ms"),
        (0.9996, "1.0 s"),
        (1, "1.0 s"),
        (6.44, "6.4 s"),
        (9.94, "9.9 s"),
        (9.96, "10 s"),
        (66, "66 s"),
        (66.4, "66 s"),
        (119.4, "119 s"),
        (119.6, "2 min"),
        (120, "2 min"),
        (125, "2 min 5 s"),
        (599, "9 min 59 s"),
        (599.6, "10 min"),
        (754, "13 min"),
        (3569, "59 min"),
        (3599, "1 h"),
        (3600, "1 h"),
        (5400, "1 h 30 min"),
        (35_960, "9 h 59 min"),
        (35_980, "10 h"),
        (10_800, "3 h"),
        (47 * 3600, "47 h"),
        (48 * 3600, "2 d"),
        (52 * 3600, "2 d 4 h"),
        (30 * 86400, "30 d"),
        (-6.44, "6.4 s"),
    ],
)
def test_human_duration(seconds: float, text: str) -> None:
    assert human_duration(seconds) == text


def test_no_unit_rounds_up_to_its_next() -> None:
    """Never ``1 min 60 s``, ``60 min`` or ``1 d 24 h``: each part stays below its unit."""
    for tenths in range(0, 2_000_000, 7):
        parts = human_duration(tenths / 10).split()
        limits = {
            "s": 120 if len(parts) == 2 else 60,
            "min": 60,
            "h": 48 if len(parts) == 2 else 24,
        }
        for number, unit in zip(parts[::2], parts[1::2], strict=True):
            assert float(number) < limits.get(unit, 1e9), (tenths, parts)


@pytest.mark.parametrize(
    "ms,text",
    [
        (66_000, "in 66 s"),
        (-12_000, "12 s ago"),
        (6_400, "in 6.4 s"),
        (125_000, "in 2 min 5 s"),
        (-3 * 3600 * 1000, "3 h ago"),
        (400, "now"),
        (-499, "just now"),
        (0, "just now"),
    ],
)
def test_human_delta(ms: int, text: str) -> None:
    assert human_delta(ms) == text


def test_human_until_reads_iso_times() -> None:
    now = datetime(2026, 12, 3, 20, 0, tzinfo=UTC)
    assert human_until((now + timedelta(seconds=66)).isoformat(), now) == "in 66 s"
    assert human_until((now - timedelta(minutes=5)).isoformat(), now) == "5 min ago"
    assert human_until(None, now) == ""


def test_tables_show_durations_for_people() -> None:
    from rich.console import Console

    console = Console(width=200, record=True)
    info = {
        "domain": "a.example.com", "state": "open", "ready": 1, "delayed": 0, "inflight": 0,
        "done": 0, "dead": 0, "enqueued": 1, "consecutive_failures": 5, "window": "11111",
        "window_failures": 5, "window_calls": 5, "open_until": 2_000_000_000_000, "trips": 1,
        "delay_ms": 2500, "concurrency": 2, "next_ms": 0, "dead_last_hour": 0, "dead_baseline": 0,
    }  # fmt: skip
    console.print(render.domains_table([info]))
    console.print(render.breakers_table([info]))
    job = Job("b1f", "https://a.example.com/", "a.example.com", "normal", 5, 5,
              dead_reason="http_404", died_ms=1_000_000)  # fmt: skip
    console.print(render.dead_table([job], total=1, now_ms=1_012_000))
    text = console.export_text()
    assert "2.5 s" in text  # the domain's delay
    assert "in " in text and " d" in text  # open until, years away
    assert "12 s ago" in text  # died
