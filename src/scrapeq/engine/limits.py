"""The largest numbers a queue keeps in Redis: one home for the bounds every layer checks.

The scripts check their inputs against the same bounds before their first write
(``lua/includes/check.lua``: ``MAX_MS``, ``MAX_INT``); the settings table bounds its durations
and counts with them (:mod:`scrapeq.engine.settings`), and a CLI option or an API argument
that becomes a duration in Redis can use :func:`duration_error` to say why a value is refused.

Why these numbers:
    * Lua's numbers are doubles, and Redis writes them back as text: ``cjson`` with 14
      significant digits, ``redis.call`` arguments with 17 (Redis 6.2) or the shortest exact
      form (7.x). An integer of at most 14 digits (:data:`MAX_SCRIPT_INT`) is written exactly
      everywhere; a bigger one may come back as ``1e+20``, which ``SET ... PX``, ``PEXPIRE``,
      ``HINCRBY`` and ``LIMIT`` refuse half-way through a script.
    * A time in Redis is ``now + duration`` in ms and must stay such an integer; Python's
      clocks (``time.sleep``, thread waits) take at most ~292 years and ``datetime`` the year
      9999. :data:`MAX_DURATION_S`, 100 years, is a round bound well inside all of them.
"""

from __future__ import annotations

import math

__all__ = ["MAX_DURATION_MS", "MAX_DURATION_S", "MAX_SCRIPT_INT", "duration_error"]

#: The longest duration a queue takes, in seconds: 100 years of 365.25 days.
MAX_DURATION_S = 3_155_760_000
#: The same in milliseconds, the scripts' unit (``MAX_MS`` in ``lua/includes/check.lua``).
MAX_DURATION_MS = MAX_DURATION_S * 1000
#: The largest integer the scripts take (``MAX_INT`` in ``lua/includes/check.lua``): every
#: integer of at most 14 digits is written back exactly by Lua.
MAX_SCRIPT_INT = 10**14 - 1

#: How :func:`duration_error` names the bound in its message.
BOUND_TEXT = f"must be <= {MAX_DURATION_S} seconds (100 years)"


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
        return f"{BOUND_TEXT}, got an integer of {int(seconds).bit_length()} bits"
    if not math.isfinite(value):
        return f"expected a finite number of seconds, got {seconds!r}"
    if value < 0:
        return f"must be >= 0 seconds, got {seconds!r}"
    if value > MAX_DURATION_S:
        return f"{BOUND_TEXT}, got {seconds!r}"
    return None
