"""How a queue's jobs are told apart: a job's de-duplication fields, built by ``prepare``.

A job carries its ``fingerprint`` (the 8 bytes of the 64-bit one, in hex), its uniqueness mode
(``unique``: ``pending`` or ``seen``) and, under ``seen``, the argument the enqueue script
checks and adds to the queue's seen-set (``seen``,
:meth:`~scrapeq.engine.model.seen.SeenLayout.arg`). The fingerprint is the URL's (``canonical_*``
settings), a stored request's (method, URL, body), or one the caller brings (Scrapy on scrapeq:
Scrapy's request fingerprint).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from scrapeq.engine.config.settings import UNIQUE_MODES, Settings
from scrapeq.engine.model.request import Request, request_fingerprint64
from scrapeq.engine.model.seen import SeenLayout
from scrapeq.engine.model.urls import fingerprint, fingerprint64
from scrapeq.errors import ConfigError

__all__ = ["Dedup"]

#: The 64-bit fingerprints a caller may bring (``prepare(fingerprint64=)``), least and
#: greatest: signed ones as scrapeq's, unsigned ones as Scrapy's.
_FP64_MIN, _FP64_MAX = -(1 << 63), (1 << 64) - 1
_MASK64 = 0xFFFF_FFFF_FFFF_FFFF


@dataclass(frozen=True, slots=True)
class Dedup:
    """A queue's de-duplication rules (module docstring).

    Attributes:
        default_mode: the ``unique`` setting: the mode of a job that names none.
        seen: the queue's seen-set layout.
        canonical: how URLs are compared (:func:`~scrapeq.engine.model.urls.canonical_url`'s
            options).
    """

    default_mode: str
    seen: SeenLayout
    canonical: dict[str, bool]

    @classmethod
    def from_settings(cls, settings: Settings) -> Dedup:
        return cls(
            default_mode=settings.unique,
            seen=SeenLayout.from_settings(settings),
            canonical={
                "keep_fragments": settings.canonical_keep_fragments,
                "keep_blank_values": settings.canonical_keep_blank_values,
            },
        )

    def fields(
        self,
        url: str,
        request: Request | None,
        unique: bool | str | None,
        stored: bool,
        given: int | None = None,
    ) -> dict[str, Any]:
        """A spec's de-duplication fields: ``fingerprint``, ``unique`` and ``seen``
        (``stored``: the job carries a request's stored form; ``given``: the caller's own
        64-bit fingerprint, in place of the URL's).

        Raises:
            ConfigError: ``unique`` or ``given`` is bad (names it).
        """
        mode = self.mode(unique)
        if given is not None:
            whole = isinstance(given, int) and not isinstance(given, bool)
            if not whole or not _FP64_MIN <= given <= _FP64_MAX:
                raise ConfigError("fingerprint64", f"must be a 64-bit integer, got {given!r}")
            fp64: int | None = given if mode == "seen" else None
            fingerprint = format(given & _MASK64, "016x")
        else:
            # From the URL as given, not the job's: parse_target drops the fragment, which
            # canonical_keep_fragments may keep.
            fp64 = self._fp64(url, request) if mode == "seen" else None
            fingerprint = None
        return {
            # a request's fingerprint is not its URL's: always carried (_with_fingerprint
            # knows only URLs); the script takes it only when it would take a URL's
            "fingerprint": (fingerprint or self._fingerprint(url, fp64, request))
            if mode != "off" or stored
            else None,
            "unique": None if mode == "off" else mode,
            "seen": None if fp64 is None else self.seen.arg(fp64),
        }

    def mode(self, unique: bool | str | None) -> str:
        """The uniqueness mode ``unique`` asks for (None: the setting's)."""
        if unique is None:
            return self.default_mode
        if isinstance(unique, bool):
            return "pending" if unique else "off"
        if unique not in UNIQUE_MODES:
            raise ConfigError("unique", f"expected off, pending or seen, got {unique!r}")
        return unique

    def _fp64(self, url: str, request: Request | None) -> int:
        """The 64-bit fingerprint of what a job sends: its URL's for a plain GET."""
        if request is None:
            return fingerprint64(url, **self.canonical)
        return request_fingerprint64(url, request.method, request.body, **self.canonical)

    def _fingerprint(self, url: str, fp64: int | None, request: Request | None) -> str:
        """The request's fingerprint; from its 64-bit form (the same 8 bytes in hex)."""
        if fp64 is None:
            if request is None or request.plain:
                return fingerprint(url, **self.canonical)
            fp64 = self._fp64(url, request)
        return format(fp64 & _MASK64, "016x")
