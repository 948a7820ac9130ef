"""Retry delays: full jitter (the default) and decorrelated jitter.

Pure functions, no I/O and no clock: the worker asks for a delay after a ``retry`` outcome and
hands it to the retry script, which adds it to the Redis server's clock.

Formulas (``attempts`` = attempts already spent, ``>= 0``)::

    full:          uniform(0, min(cap, base * 2**attempts))
    decorrelated:  min(cap, uniform(base, max(base, previous * 3)))   previous None -> base

Full jitter spreads retries of a burst of failures over the whole window, so a domain that
recovers is not hit by a synchronised wave; it is what DESIGN.md prescribes. Decorrelated
jitter is offered for callers that keep the previous delay.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Literal

from scrapeq.errors import ConfigError

__all__ = ["Backoff", "Strategy", "decorrelated_jitter", "full_jitter"]

Strategy = Literal["full", "decorrelated"]

# Past this exponent ``base * 2**attempts`` overflows for every positive float base, so the
# bound is ``cap``; clamping first keeps ``ldexp`` away from huge Python ints.
_MAX_EXPONENT = 2200


def _check_bounds(base: float, cap: float) -> None:
    if not (math.isfinite(base) and base > 0):
        raise ValueError(f"base must be a finite number > 0 seconds, got {base!r}")
    if not (math.isfinite(cap) and cap >= base):
        raise ValueError(f"cap must be a finite number >= base ({base!r}), got {cap!r}")


def _uniform(a: float, b: float, rng: random.Random | None) -> float:
    return rng.uniform(a, b) if rng is not None else random.uniform(a, b)


def full_jitter(
    attempts: int, *, base: float, cap: float, rng: random.Random | None = None
) -> float:
    """Full-jitter delay: ``uniform(0, min(cap, base * 2**attempts))``.

    Args:
        attempts: attempts already spent (``>= 0``); any size, the bound saturates at ``cap``.
        base: seconds, the bound for ``attempts == 0``; finite and ``> 0``.
        cap: seconds, the largest bound; finite and ``>= base``.
        rng: source of randomness (seed one for reproducible tests); default the
            module-level :mod:`random` generator.

    Returns:
        A delay in seconds, ``0 <= delay <= min(cap, base * 2**attempts)``.

    Raises:
        ValueError: ``attempts < 0`` or bad ``base``/``cap``.
    """
    _check_bounds(base, cap)
    if attempts < 0:
        raise ValueError(f"attempts must be >= 0, got {attempts!r}")
    try:
        bound = min(cap, math.ldexp(base, min(attempts, _MAX_EXPONENT)))
    except OverflowError:
        bound = cap
    return _uniform(0.0, bound, rng)


def decorrelated_jitter(
    previous: float | None, *, base: float, cap: float, rng: random.Random | None = None
) -> float:
    """Decorrelated-jitter delay: ``min(cap, uniform(base, max(base, previous * 3)))``.

    Args:
        previous: the delay returned last time, seconds; ``None`` for the first retry (taken
            as ``base``). A value above ``cap`` is taken as ``cap``.
        base: seconds, the smallest delay; finite and ``> 0``.
        cap: seconds, the largest delay; finite and ``>= base``.
        rng: source of randomness; default the module-level :mod:`random` generator.

    Returns:
        A delay in seconds, ``base <= delay <= cap``.

    Raises:
        ValueError: ``previous`` negative or NaN, or bad ``base``/``cap``.
    """
    _check_bounds(base, cap)
    if previous is None:
        previous = base
    elif not previous >= 0:  # written so that NaN is refused too
        raise ValueError(f"previous must be >= 0 seconds or None, got {previous!r}")
    upper = max(base, min(previous, cap) * 3)
    if not math.isfinite(upper):  # 3 * cap overflowed: the result saturates anyway
        return cap
    return min(cap, _uniform(base, upper, rng))


@dataclass(frozen=True, slots=True)
class Backoff:
    """Retry-delay policy, a small value object (settings ``backoff_base``/``backoff_cap``).

    ``strategy="full"`` (default): ``uniform(0, min(cap, base * 2**attempts))``.
    ``strategy="decorrelated"``: ``min(cap, uniform(base, max(base, previous * 3)))``,
    ``previous`` ``None`` meaning ``base``.

    Args:
        base: seconds, default 15; finite and ``> 0``.
        cap: seconds, default 3600; finite and ``>= base``.
        strategy: ``"full"`` or ``"decorrelated"``.

    Raises:
        ConfigError: (a :class:`ValueError`) a bad ``base``, ``cap`` or ``strategy``.
    """

    base: float = 15.0
    cap: float = 3600.0
    strategy: Strategy = "full"

    def __post_init__(self) -> None:
        if not (math.isfinite(self.base) and self.base > 0):
            raise ConfigError("backoff_base", f"must be a finite number > 0, got {self.base!r}")
        if not (math.isfinite(self.cap) and self.cap >= self.base):
            raise ConfigError(
                "backoff_cap",
                f"must be a finite number >= backoff_base ({self.base!r}), got {self.cap!r}",
            )
        if self.strategy not in ("full", "decorrelated"):
            raise ConfigError(
                "backoff_strategy", f"must be 'full' or 'decorrelated', got {self.strategy!r}"
            )

    def delay(
        self, attempts: int, previous: float | None = None, rng: random.Random | None = None
    ) -> float:
        """The delay before the next attempt, in seconds.

        Args:
            attempts: attempts already spent (``>= 0``).
            previous: the previous delay in seconds (used by ``"decorrelated"`` only).
            rng: source of randomness; default the module-level :mod:`random` generator.

        Returns:
            Seconds to wait, within ``[0, cap]``.

        Raises:
            ValueError: ``attempts < 0``, or a negative/NaN ``previous``.
        """
        if attempts < 0:
            raise ValueError(f"attempts must be >= 0, got {attempts!r}")
        if self.strategy == "decorrelated":
            return decorrelated_jitter(previous, base=self.base, cap=self.cap, rng=rng)
        return full_jitter(attempts, base=self.base, cap=self.cap, rng=rng)
