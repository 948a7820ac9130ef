"""The once-flags' script call (``lua/once-1.lua``): a queue's flag that one holder takes,
renews, releases or keeps for good (a crawl's start requests, its id). Split from
:mod:`scrapeq.engine.lua.scripts`, which re-exports these names."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from scrapeq.engine.lua.scripts import Call, _call

__all__ = ["ONCE_OPS", "OnceFlag", "once"]


@dataclass(frozen=True, slots=True)
class OnceFlag:
    """A once-flag's state after a call (``lua/once-1.lua``).

    Attributes:
        won: this call set the flag (``take``), or the caller holds it (``renew``,
            ``release``).
        holder: the holder's text; ``""`` when the flag is not set.
        ttl_ms: the flag's time left in ms: -1 kept for good, -2 not set.
    """

    won: bool
    holder: str
    ttl_ms: int

    @property
    def kept(self) -> bool:
        """Whether the flag is set for good (its work is complete)."""
        return self.ttl_ms == -1

    @property
    def leased(self) -> bool:
        """Whether the flag is set for a while only (its holder is at work)."""
        return self.ttl_ms >= 0


#: What a call may do to a once-flag (``lua/once-1.lua``).
ONCE_OPS = ("take", "renew", "release", "peek")


def once(name: str, holder: str, *, op: str = "take", lease_ms: int = 0) -> Call[OnceFlag]:
    """Take, renew, release or read the queue's flag ``name`` (``lua/once-1.lua``)."""

    def parse(raw: list[Any]) -> OnceFlag:
        return OnceFlag(bool(int(raw[0])), str(raw[1]), int(raw[2]))

    return _call("once", parse, name=name, holder=holder, op=op, lease_ms=lease_ms)
