"""Script calls a server ran, whichever way they went: EVALSHA (Redis 6, and a server or
user without functions) or FCALL (a Redis 7 function library: scrapeq/engine/lua/library.py).
"""

from __future__ import annotations

from typing import Any

#: The commands a scrapeq script call is, by ``INFO commandstats`` name.
SCRIPT_COMMANDS = ("cmdstat_evalsha", "cmdstat_eval", "cmdstat_fcall")


def script_calls(stats: dict[str, Any]) -> int:
    """The script calls ``stats`` (``INFO commandstats``) counts."""
    return sum(int(stats[name]["calls"]) for name in SCRIPT_COMMANDS if name in stats)
