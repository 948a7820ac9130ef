"""The bounds of what the queue keeps: durations, counts and JSON nesting, one home each.

Every layer checks against these: the scripts before their first write
(``lua/includes/check.lua``: ``MAX_MS``, ``MAX_INT``, kept equal to the constants here by a
test), the settings table where it parses (:mod:`scrapeq.engine.config.settings`), the queue for
library callers, and the command line and the dashboard where a value is typed
(:mod:`scrapeq.interfaces.parsing`), so a bad value is refused before anything reaches Redis
(a script that stored it could not be rolled back, and every reader would meet it after).

* :data:`MAX_DURATION_S`: a duration (a delay, an expiry, a cooldown, a lease, an age) is at
  most 100 years. Past that it is a typo, not a plan: ``1e12`` seconds is the year 33,715,
  which no date type shows, and ``1e308`` has no millisecond count at all. A time in Redis is
  ``now + duration`` in ms and must stay an integer Lua writes back exactly; Python's clocks
  (``time.sleep``, thread waits) take at most ~292 years and ``datetime`` the year 9999.
* :data:`MAX_SCRIPT_INT`: the largest integer a script takes. Lua's numbers are doubles and
  Redis writes them back as text (``cjson`` with 14 significant digits): an integer of at most
  14 digits is written exactly everywhere; a bigger one may come back as ``1e+20``, which
  ``SET ... PX``, ``PEXPIRE``, ``HINCRBY`` and ``LIMIT`` refuse half-way through a script.
* :data:`MAX_COUNT`: a count typed by a user (a concurrency, an attempt budget, a limit) is at
  most a billion (``99999999999999999999`` was stored as ``-9223372036854775808``).
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
    "MAX_DURATION_MS",
    "MAX_DURATION_S",
    "MAX_JSON_DEPTH",
    "MAX_OWED_LINE",
    "MAX_SCRIPT_INT",
    "check_count",
    "check_json_depth",
    "check_seconds",
    "duration_error",
    "json_depth",
]

MAX_DURATION_S: Final = 3_155_760_000
"""The longest duration accepted anywhere, in seconds: 100 years of 365.25 days."""
MAX_DURATION_MS: Final = MAX_DURATION_S * 1000
"""The same in milliseconds, the scripts' unit (``MAX_MS`` in ``lua/includes/check.lua``)."""
MAX_SCRIPT_INT: Final = 10**14 - 1
"""The largest integer the scripts take (``MAX_INT`` in ``lua/includes/check.lua``)."""
MAX_COUNT: Final = 1_000_000_000
"""The largest count accepted from a user."""
MAX_JSON_DEPTH: Final = 100
"""The deepest nesting of arrays and objects accepted in JSON from users."""
MAX_OWED_LINE: Final = 4 * 1024 * 1024
"""The largest results record a settle item may carry into the owed-lines ledger, bytes of
UTF-8 (``OWED.MAX_LINE`` in ``lua/includes/owed.lua``; a larger one is not kept there)."""

#: How :func:`duration_error` names the bound in its message.
_BOUND_TEXT: Final = f"must be <= {MAX_DURATION_S} seconds (100 years)"
#: A JSON string (skipped whole: brackets in it are text) or one bracket.
_JSON_TOKEN: Final = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]', re.DOTALL)


def duration_error(seconds: object) -> str | None:
    """Why ``seconds`` is no duration a queue can keep, or None when it is one.

    Args:
        seconds: a number of seconds (an int or a float; a bool is no number).

    Returns:
        None for a finite number in ``[0, MAX_DURATION_S]``; else a message without the
        name of the value (``"must be <= 3155760000 seconds (100 years), got 1e+20"``).
    """
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        return f"expected a number of seconds, got {seconds!r}"
    try:
        value = float(seconds)
    except OverflowError:  # an int too large for a float
        return f"{_BOUND_TEXT}, got an integer of {int(seconds).bit_length()} bits"
    if not math.isfinite(value):
        return f"expected a finite number of seconds, got {seconds!r}"
    if value < 0:
        return f"must be >= 0 seconds, got {_shown(seconds)}"
    if value > MAX_DURATION_S:
        return f"{_BOUND_TEXT}, got {_shown(seconds)}"
    return None


def check_seconds(name: str, value: object) -> float:
    """``value`` as a duration: a finite number of seconds in ``[0, MAX_DURATION_S]``.

    Args:
        name: what the value is (``delay``, ``cooldown``), for the message.
        value: the number given.

    Returns:
        ``value``, unchanged.

    Raises:
        ConfigError: not a number (booleans and text are not), not finite, negative or over
            :data:`MAX_DURATION_S` (the message is :func:`duration_error`'s).
    """
    why = duration_error(value)
    if why is not None:
        raise ConfigError(name, why)
    assert isinstance(value, int | float)
    return value


def _shown(value: object) -> str:
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
