"""The error tree's control-flow signals refuse values that could never become a settlement."""

from __future__ import annotations

import math

import pytest

from scrapeq.errors import ConfigError, Retry


@pytest.mark.parametrize("delay", [math.inf, -math.inf, math.nan, -0.5, -1, 10**400])
def test_retry_refuses_a_non_finite_or_negative_delay(delay: float) -> None:
    with pytest.raises(ConfigError, match=r"Retry delay must be a finite number of seconds >= 0"):
        Retry(delay=delay)


@pytest.mark.parametrize("delay", [1e20, 10**12, 3_155_760_001])
def test_retry_refuses_a_delay_over_the_duration_bound(delay: float) -> None:
    """A delay past 100 years (engine/config/limits.py) is a typo: refused where it is written, not
    an internal error at each attempt's settle."""
    with pytest.raises(ConfigError, match=r"Retry delay must be <= 3155760000 seconds"):
        Retry(delay=delay)


@pytest.mark.parametrize("delay", [True, "5", [1]])
def test_retry_refuses_a_delay_that_is_not_a_number(delay: object) -> None:
    with pytest.raises(ConfigError, match="Retry delay"):
        Retry(delay=delay)  # type: ignore[arg-type]


def test_a_refused_retry_delay_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        Retry(delay=math.inf)


@pytest.mark.parametrize("delay", [None, 0, 0.0, 2.5, 86_400, 3_155_760_000])
def test_retry_keeps_a_valid_delay(delay: float | None) -> None:
    assert Retry(delay=delay, reason="later").delay == delay
