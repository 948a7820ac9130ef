"""Retry delays: full jitter bounds and mean, decorrelated bounds, the Backoff value object."""

from __future__ import annotations

import dataclasses
import math
import random
import statistics
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from scrapeq.engine.backoff import Backoff, decorrelated_jitter, full_jitter
from scrapeq.errors import ConfigError

bases = st.floats(min_value=1e-3, max_value=1e4, allow_nan=False, allow_infinity=False)
factors = st.floats(min_value=1.0, max_value=1e6, allow_nan=False, allow_infinity=False)
seeds = st.integers(min_value=0, max_value=2**32)


def _exact_bound(attempts: int, base: float, cap: float) -> Fraction:
    """min(cap, base * 2**attempts) without float overflow."""
    return Fraction(min(Fraction(cap), Fraction(base) * 2**attempts))


# --- full jitter ---------------------------------------------------------------------------


@given(attempts=st.integers(min_value=0, max_value=10_000), base=bases, factor=factors, seed=seeds)
def test_full_jitter_within_bound(attempts: int, base: float, factor: float, seed: int) -> None:
    cap = base * factor
    delay = full_jitter(attempts, base=base, cap=cap, rng=random.Random(seed))
    assert 0 <= delay <= _exact_bound(attempts, base, cap)
    assert math.isfinite(delay)


@pytest.mark.parametrize("attempts", [0, 1, 3, 7])
def test_full_jitter_mean_is_half_the_bound(attempts: int) -> None:
    rng = random.Random(1234)
    base, cap = 15.0, 3600.0
    bound = min(cap, base * 2**attempts)
    samples = [full_jitter(attempts, base=base, cap=cap, rng=rng) for _ in range(20_000)]
    assert statistics.fmean(samples) == pytest.approx(bound / 2, rel=0.02)
    assert min(samples) < bound * 0.01  # full jitter reaches down to zero
    assert max(samples) > bound * 0.99


@pytest.mark.parametrize("attempts", [1100, 2200, 10**6, 10**100])
def test_full_jitter_huge_attempts_saturate_at_cap(attempts: int) -> None:
    rng = random.Random(7)
    samples = [full_jitter(attempts, base=15.0, cap=60.0, rng=rng) for _ in range(2_000)]
    assert all(0 <= s <= 60.0 for s in samples)
    assert statistics.fmean(samples) == pytest.approx(30.0, rel=0.05)


def test_full_jitter_attempt_zero_is_bounded_by_base() -> None:
    rng = random.Random(3)
    assert all(0 <= full_jitter(0, base=2.0, cap=100.0, rng=rng) <= 2.0 for _ in range(1_000))


def test_full_jitter_seeded_is_reproducible_and_default_rng_works() -> None:
    first = full_jitter(4, base=1.0, cap=100.0, rng=random.Random(42))
    again = full_jitter(4, base=1.0, cap=100.0, rng=random.Random(42))
    assert first == again
    assert 0 <= full_jitter(4, base=1.0, cap=100.0) <= 16.0


def test_full_jitter_refuses_negative_attempts() -> None:
    with pytest.raises(ValueError, match="attempts"):
        full_jitter(-1, base=1.0, cap=10.0)


@pytest.mark.parametrize(
    ("base", "cap", "match"),
    [
        (0.0, 10.0, "base"),
        (-1.0, 10.0, "base"),
        (math.nan, 10.0, "base"),
        (math.inf, math.inf, "base"),
        (10.0, 5.0, "cap"),
        (1.0, math.inf, "cap"),
        (1.0, math.nan, "cap"),
    ],
)
def test_jitter_functions_validate_bounds(base: float, cap: float, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        full_jitter(1, base=base, cap=cap)
    with pytest.raises(ValueError, match=match):
        decorrelated_jitter(None, base=base, cap=cap)


# --- decorrelated jitter -------------------------------------------------------------------


@given(
    previous=st.none() | st.floats(min_value=0, max_value=1e9, allow_nan=False),
    base=bases,
    factor=factors,
    seed=seeds,
)
def test_decorrelated_jitter_within_bounds(
    previous: float | None, base: float, factor: float, seed: int
) -> None:
    cap = base * factor
    delay = decorrelated_jitter(previous, base=base, cap=cap, rng=random.Random(seed))
    assert base <= delay <= cap
    prev = base if previous is None else previous
    # uniform(a, b) may round onto b, never meaningfully past it
    assert delay <= max(base, prev * 3) * (1 + 1e-12)


@given(base=bases, factor=factors, seed=seeds, steps=st.integers(min_value=1, max_value=50))
def test_decorrelated_jitter_chain_stays_within_bounds(
    base: float, factor: float, seed: int, steps: int
) -> None:
    cap = base * factor
    rng = random.Random(seed)
    previous: float | None = None
    for _ in range(steps):
        delay = decorrelated_jitter(previous, base=base, cap=cap, rng=rng)
        assert base <= delay <= cap
        previous = delay


def test_decorrelated_jitter_first_retry_is_base() -> None:
    # previous None -> uniform(base, max(base, 3 * base)) = uniform(base, 3 * base)
    rng = random.Random(5)
    samples = [decorrelated_jitter(None, base=10.0, cap=1000.0, rng=rng) for _ in range(5_000)]
    assert all(10.0 <= s <= 30.0 for s in samples)
    assert statistics.fmean(samples) == pytest.approx(20.0, rel=0.03)


def test_decorrelated_jitter_saturates_at_cap() -> None:
    rng = random.Random(9)
    assert decorrelated_jitter(1e308, base=1.0, cap=1e308, rng=rng) == 1e308
    assert decorrelated_jitter(math.inf, base=1.0, cap=50.0, rng=rng) <= 50.0


@pytest.mark.parametrize("previous", [-1.0, math.nan])
def test_decorrelated_jitter_refuses_bad_previous(previous: float) -> None:
    with pytest.raises(ValueError, match="previous"):
        decorrelated_jitter(previous, base=1.0, cap=10.0)


# --- Backoff -------------------------------------------------------------------------------


def test_backoff_defaults_follow_the_settings() -> None:
    policy = Backoff()
    assert (policy.base, policy.cap, policy.strategy) == (15.0, 3600.0, "full")


def test_backoff_is_frozen() -> None:
    policy = Backoff()
    with pytest.raises(dataclasses.FrozenInstanceError):
        policy.base = 1.0  # type: ignore[misc]


def test_backoff_full_matches_full_jitter() -> None:
    policy = Backoff(base=2.0, cap=100.0)
    for attempts in range(12):
        expected = full_jitter(attempts, base=2.0, cap=100.0, rng=random.Random(attempts))
        assert policy.delay(attempts, rng=random.Random(attempts)) == expected
    assert 0 <= policy.delay(3) <= 16.0


def test_backoff_decorrelated_matches_decorrelated_jitter() -> None:
    policy = Backoff(base=2.0, cap=100.0, strategy="decorrelated")
    expected = decorrelated_jitter(7.0, base=2.0, cap=100.0, rng=random.Random(1))
    assert policy.delay(3, previous=7.0, rng=random.Random(1)) == expected
    assert 2.0 <= policy.delay(0) <= 6.0


def test_backoff_delay_refuses_negative_attempts() -> None:
    for strategy in ("full", "decorrelated"):
        with pytest.raises(ValueError, match="attempts"):
            Backoff(strategy=strategy).delay(-1)


@pytest.mark.parametrize(
    ("kwargs", "setting"),
    [
        ({"base": 0.0}, "backoff_base"),
        ({"base": -5.0}, "backoff_base"),
        ({"base": math.nan}, "backoff_base"),
        ({"base": math.inf, "cap": math.inf}, "backoff_base"),
        ({"base": 10.0, "cap": 9.0}, "backoff_cap"),
        ({"cap": math.inf}, "backoff_cap"),
        ({"cap": math.nan}, "backoff_cap"),
        ({"strategy": "exponential"}, "backoff_strategy"),
    ],
)
def test_backoff_validation(kwargs: dict[str, object], setting: str) -> None:
    with pytest.raises(ConfigError, match=setting) as info:
        Backoff(**kwargs)  # type: ignore[arg-type]
    assert isinstance(info.value, ValueError)
    assert info.value.name == setting


def test_backoff_cap_equal_to_base_is_allowed() -> None:
    policy = Backoff(base=5.0, cap=5.0)
    rng = random.Random(0)
    assert all(0 <= policy.delay(n, rng=rng) <= 5.0 for n in range(50))
