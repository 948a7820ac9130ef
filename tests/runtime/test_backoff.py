"""The runtime's one backoff rule (runtime/backoff.py), table-driven, and its users' figures."""

from __future__ import annotations

import pytest

from scrapeq.runtime.attempt import OURS_PAUSE
from scrapeq.runtime.backoff import backoff
from scrapeq.runtime.lines import SINK_PAUSE_MAX, SINK_PAUSE_MIN
from scrapeq.runtime.supervisor import RESTART_MAX, RESTART_MIN, restart_delay
from scrapeq.runtime.worker_core import RECONNECT_MAX, RECONNECT_MIN

CASES = [
    # (why, base, n, cap, wait)
    ("the first failure waits the base", 0.2, 1, 10.0, 0.2),
    ("n below 1 counts as the first", 0.2, 0, 10.0, 0.2),
    ("a negative count too", 2.0, -3, 60.0, 2.0),
    ("doubling per failure", 0.2, 4, 10.0, 1.6),
    ("capped", 0.2, 7, 10.0, 10.0),
    ("just under the cap", 2.0, 5, 60.0, 32.0),
    ("a huge count stays finite and capped", 2.0, 10_000, 60.0, 60.0),
    ("a zero base stays zero", 0.0, 9, 5.0, 0.0),
]  # fmt: skip


@pytest.mark.parametrize(("why", "base", "n", "cap", "wait"), CASES, ids=[c[0] for c in CASES])
def test_rule(why: str, base: float, n: int, cap: float, wait: float) -> None:
    assert backoff(base, n, cap) == wait


def test_equals_the_doubling_loops_it_replaced() -> None:
    """The reconnects doubled their own wait (``min(w * 2, cap)``): the same floats, exactly."""
    for base, cap in [(RECONNECT_MIN, RECONNECT_MAX), (OURS_PAUSE, SINK_PAUSE_MAX), (0.3, 7.0)]:
        wait = base
        for n in range(1, 40):
            assert backoff(base, n, cap) == wait, (base, n)
            wait = min(wait * 2, cap)


def test_sink_pause_figures() -> None:
    """A results sink failing in a row pauses claims 2, 4 ... 60 s (lines.py), from the
    pause of our own network's failure."""
    assert SINK_PAUSE_MIN == OURS_PAUSE
    assert [backoff(SINK_PAUSE_MIN, n, SINK_PAUSE_MAX) for n in range(1, 8)] == [
        2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0,
    ]  # fmt: skip


def test_restart_delay_goes_through_the_rule() -> None:
    delay, nxt = restart_delay(None, worked=False)
    seen = [delay]
    for _ in range(5):
        delay, nxt = restart_delay(nxt, worked=False)
        seen.append(delay)
    assert seen == [RESTART_MIN, 1.0, 2.0, 4.0, RESTART_MAX, RESTART_MAX]
    assert restart_delay(4.0, worked=True) == (RESTART_MIN, 1.0)
