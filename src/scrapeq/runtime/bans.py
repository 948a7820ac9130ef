"""What a worker observes about an exit (a proxy) on one attempt, for ``includes/exits.lua``.

The scripts decide what an observation does (bench the pair, trip the exit, move the domain's
tier, charge the domain's breaker); this module only names the observation:

* :class:`BanRules`: whether an answer is a ban of the exit by the site: one of the
  ``ban_statuses`` (403 and 429 by default), or one of the ``ban_markers`` (texts, matched
  case-insensitively) in the first 64 KiB of the body. A handler may also raise
  :class:`scrapeq.Banned`.
* :func:`exit_result`: the settle item's ``exit`` field for a verdict: ``ok`` (an answer),
  ``down`` (the exit itself failed: unreachable, refusing our credentials), ``timeout``, or
  ``error`` (anything else the site did).
"""

from __future__ import annotations

from typing import Final

from scrapeq.engine.config.settings import Settings
from scrapeq.engine.model.exits import parse_statuses
from scrapeq.runtime.classify import Classification, Outcome
from scrapeq.runtime.fetch import Response

__all__ = ["BanRules", "exit_result"]

#: Bytes of a body searched for ban markers.
MARKER_WINDOW: Final = 65_536
#: ``ours`` verdicts that are not the exit's failure (the worker stopping).
_NOT_THE_EXIT: Final = frozenset({"cancelled", "interrupted"})


class BanRules:
    """The settings' ban statuses and markers."""

    def __init__(self, settings: Settings) -> None:
        self.statuses = frozenset(parse_statuses(settings.ban_statuses))
        self.markers = tuple(m.lower().encode() for m in settings.ban_markers if m)

    def why(self, response: Response) -> str | None:
        """Why ``response`` is a ban (``http_403``, ``marker 'captcha'``), or None."""
        if response.status in self.statuses:
            return f"http_{response.status}"
        if self.markers:
            head = response.body[:MARKER_WINDOW].lower()
            for marker in self.markers:
                if marker in head:
                    return f"marker {marker.decode()!r}"
        return None


def exit_result(verdict: Classification) -> str:
    """The settle item's ``exit`` for an attempt that was not a ban."""
    if verdict.outcome is Outcome.OK:
        return "ok"
    if verdict.outcome is Outcome.OURS:
        return "error" if verdict.reason in _NOT_THE_EXIT else "down"
    if verdict.reason == "timeout":
        return "timeout"
    return "error"
