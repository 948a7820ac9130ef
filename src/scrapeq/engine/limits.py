"""The bounds of what callers hand the queue: durations, counts and JSON nesting.

Each bound has its home here. The queue checks them for library callers; the command line and
the dashboard parse with them (:mod:`scrapeq.interfaces.parsing`), so a bad value is refused
where it is typed, before anything reaches Redis (a script that stored it could not be rolled
back, and every reader would meet it after).

* :data:`MAX_SECONDS`: a duration (a delay, an expiry, a cooldown, an age) is at most 100
  years. Past that it is a typo, not a plan: ``1e12`` seconds is the year 33,715, which no
  date type shows, and ``1e308`` has no millisecond count at all.
* :data:`MAX_COUNT`: a count (a concurrency, an attempt budget, a limit) is at most a
  billion: it stays an exact integer in Redis and in Lua (``99999999999999999999`` was
  stored as ``-9223372036854775808``).
* :data:`MAX_JSON_DEPTH`: JSON from users (a payload, a dashboard request) nests at most 100
  levels, far below the depth at which a JSON parser runs out of stack (about 1,000 in
  Python and in Redis's cjson), wherever it is read later.
"""

from __future__ import annotations

import math
import re
from typing import Final

from scrapeq.errors import ConfigError

__all__ = [
    "MAX_COUNT",
    "MAX_JSON_DEPTH",
    "MAX_SECONDS",
    "check_count",
    "check_json_depth",
    "check_seconds",
    "json_depth",
]

MAX_SECONDS: Final = 100 * 365 * 86_400
"""The longest duration accepted anywhere, in seconds (100 years of 365 days)."""
MAX_COUNT: Final = 1_000_000_000
"""The largest count accepted from a caller."""
MAX_JSON_DEPTH: Final = 100
"""The deepest nesting of arrays and objects accepted in JSON from users."""

#: A JSON string (skipped whole: brackets in it are text) or one bracket.
_JSON_TOKEN: Final = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]', re.DOTALL)


def check_seconds(name: str, value: object) -> float:
    """``value`` as a duration: a finite number of seconds in ``[0, MAX_SECONDS]``.

    Args:
        name: what the value is (``delay``, ``cooldown``), for the message.
        value: the number given.

    Returns:
        ``value``, unchanged.

    Raises:
        ConfigError: not a number (booleans and text are not), not finite, negative or over
            :data:`MAX_SECONDS`.
    """
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(name, f"expected a number of seconds, got {value!r}")
    if value < 0:
        raise ConfigError(name, f"must be >= 0 seconds, got {_shown(value)}")
    if value > MAX_SECONDS:
        raise ConfigError(
            name, f"must be at most {MAX_SECONDS} seconds (100 years), got {_shown(value)}"
        )
    return value


def _shown(value: float) -> str:
    """A number as people write it: ``1000000000000`` (not ``1000000000000.0``), ``1e+308``."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e16:
        return str(int(value))
    return repr(value)


def check_count(name: str, value: object, *, minimum: int = 1, maximum: int = MAX_COUNT) -> int:
    """``value`` as a count: an integer in ``[minimum, maximum]``.

    Raises:
        ConfigError: not an integer (booleans are not), or out of range.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(name, f"expected an integer, got {value!r}")
    if value < minimum:
        raise ConfigError(name, f"must be >= {minimum}, got {value}")
    if value > maximum:
        raise ConfigError(name, f"must be at most {maximum}, got {value}")
    return value


def json_depth(text: str) -> int:
    """How deep arrays and objects nest in JSON ``text`` (0 for a scalar); brackets inside
    strings do not count. Without recursion, so any depth is measured. Text that is not JSON
    gets a number too (its parser will refuse it)."""
    depth = deepest = 0
    for token in _JSON_TOKEN.finditer(text):
        char = token.group()
        if char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def check_json_depth(name: str, text: str, limit: int = MAX_JSON_DEPTH) -> None:
    """Refuse JSON ``text`` that nests arrays and objects deeper than ``limit`` levels.

    Raises:
        ConfigError: nested too deeply.
    """
    if text.count("[") + text.count("{") <= limit:
        return  # cheap, and the common case: no deeper than it has brackets
    depth = json_depth(text)
    if depth > limit:
        raise ConfigError(name, f"nested {depth} levels deep (JSON may nest at most {limit})")
