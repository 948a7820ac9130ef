"""``prepare`` for many plain URLs at once, for ingestion (the URLFrontier service's PutURLs).

``_QueueCore.prepare`` checks every option of one job and fingerprints its URL by
:func:`~scrapeq.engine.model.urls.fingerprint64`, which validates the URL a second time
(``canonical_url`` runs ``parse_target`` again on the text it was given). For a batch of
plain GETs with ``unique = seen`` and every other option at its default, the options are
checked once for the batch and each URL is validated once: its canonical form is w3lib's
``canonicalize_url`` of the URL ``parse_target`` already normalised, which is what
``canonical_url`` computes (``parse_target``'s output does not depend on ``allow_private``,
which only refuses). Each spec is built whole, extra fields included, instead of copied by
``dataclasses.replace``. The specs are equal to ``prepare``'s (tests/engine/
test_batch_prepare.py compares them); with ``canonical_keep_fragments`` on, ``prepare``
itself is used (the fragment is not in the normalised URL).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from scrapeq.engine.lua.args import EnqueueSpec
from scrapeq.engine.model.urls import parse_target
from scrapeq.engine.ops.oputil import _payload_json
from scrapeq.errors import ScrapeqError

if TYPE_CHECKING:
    from scrapeq.engine.ops.core import _QueueCore

__all__ = ["prepare_seen"]

_MASK64 = 0xFFFF_FFFF_FFFF_FFFF


def prepare_seen(
    core: _QueueCore,
    urls: Sequence[str],
    payloads: Sequence[Any] | None = None,
    extras: Sequence[dict[str, Any] | None] | None = None,
) -> list[EnqueueSpec | ScrapeqError]:
    """A spec with ``unique = seen`` for each URL, as ``core.prepare(url, unique="seen",
    payload=payloads[i])`` then ``dataclasses.replace(spec, **extras[i])`` would make it;
    a URL or payload refused is its error in its place (the others go on)."""
    if core.settings.canonical_keep_fragments:
        return [_slow(core, u, _at(payloads, i), _at(extras, i)) for i, u in enumerate(urls)]
    from w3lib.url import canonicalize_url

    settings = core.settings
    allow_private = settings.allow_private
    keep_blank = settings.canonical_keep_blank_values
    lane = settings.lanes.default_lane
    off_ms = settings.lanes.offset_ms(lane)
    attempts = core._max_attempts(None)
    seen_arg = core._dedup.seen.arg
    politeness = core._politeness_domain
    sha1 = hashlib.sha1
    out: list[EnqueueSpec | ScrapeqError] = []
    for i, url in enumerate(urls):
        try:
            target = parse_target(url, allow_private=allow_private)
            payload = _at(payloads, i)
            payload_json = None if payload is None else _payload_json(payload)
            canonical = canonicalize_url(target.url, keep_blank_values=keep_blank)
            digest = sha1(canonical.encode("utf-8"), usedforsecurity=False).digest()[:8]
            fp64 = int.from_bytes(digest, "big", signed=True)
        except ScrapeqError as exc:
            out.append(exc)
            continue
        fields: dict[str, Any] = {
            "url": target.url,
            "domain": politeness(target.domain),
            "lane": lane,
            "off_ms": off_ms,
            "delay_ms": 0,
            "max_attempts": attempts,
            "payload_json": payload_json,
            "fingerprint": format(fp64 & _MASK64, "016x"),
            "unique": "seen",
            "seen": seen_arg(fp64),
        }
        extra = _at(extras, i)
        if extra:
            fields.update(extra)
        out.append(EnqueueSpec(**fields))
    return out


def _at(values: Sequence[Any] | None, i: int) -> Any:
    return None if values is None else values[i]


def _slow(
    core: _QueueCore, url: str, payload: Any, extra: dict[str, Any] | None
) -> EnqueueSpec | ScrapeqError:
    import dataclasses

    try:
        spec = core.prepare(url, unique="seen", payload=payload)
    except ScrapeqError as exc:
        return exc
    return dataclasses.replace(spec, **extra) if extra else spec
