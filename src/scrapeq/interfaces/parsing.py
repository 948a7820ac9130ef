"""Durations, counts and JSON as people type them, on the command line and in the dashboard's
query strings: parsed, then bounded by :mod:`scrapeq.engine.config.limits` (where every bound
lives).

Two faces. :func:`seconds`, :func:`count` and :func:`json_object` take text (or a number) and
raise :class:`~scrapeq.errors.ConfigError` (the dashboard answers 400 with it).
:func:`seconds_option` and :func:`count_option` build a typer ``parser=`` for a CLI option:
a bad value is then click's usage error, one line naming the flag, exit 2, before the command
runs (so before it connects to anything)::

    delay: Annotated[float, typer.Option(parser=seconds_option(), metavar="S")] = 0.0
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any, Final, TypeVar

import typer

from scrapeq.engine.config.limits import MAX_COUNT, check_count, check_json_depth, check_seconds
from scrapeq.errors import ConfigError

__all__ = [
    "concurrency_option",
    "count",
    "count_option",
    "json_object",
    "seconds",
    "seconds_option",
]

_INTEGER: Final = re.compile(r"[+-]?[0-9]+")
_T = TypeVar("_T")


def seconds(name: str, value: str | float, *, minimum: float = 0.0) -> float:
    """A duration in seconds: a finite number, at least ``minimum``, at most
    :data:`~scrapeq.engine.config.limits.MAX_DURATION_S`.

    Args:
        name: the value's name, for the message (``cooldown``, ``--delay``).
        value: text as typed (``"1.5"``, ``"1e3"``) or a number (an option's default).
        minimum: the least value taken (``0`` unless the option says otherwise).

    Raises:
        ConfigError: not a number, not finite, below ``minimum`` or over the bound.
    """
    number = value
    if isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            raise ConfigError(name, f"expected a number of seconds, got {_shown(value)}") from None
    checked = float(check_seconds(name, number))
    if checked < minimum:
        raise ConfigError(name, f"must be >= {minimum:g} seconds, got {checked:g}")
    return checked


def count(name: str, value: str | int, *, minimum: int = 1, maximum: int = MAX_COUNT) -> int:
    """A count: an integer (ASCII digits) in ``[minimum, maximum]``.

    Raises:
        ConfigError: not an integer, or out of range.
    """
    if isinstance(value, str):
        text = value.strip()
        if not _INTEGER.fullmatch(text):
            raise ConfigError(name, f"expected an integer, got {_shown(value)}")
        if len(text.lstrip("+-").lstrip("0")) > 18:  # out of range, and int() may refuse it
            bound = f">= {minimum}" if text.startswith("-") else f"at most {maximum}"
            raise ConfigError(name, f"must be {bound}, got {_shown(text)}")
        value = int(text)
    return check_count(name, value, minimum=minimum, maximum=maximum)


def _shown(text: str) -> str:
    """Text as typed, quoted, cut at 60 characters: an error line stays one short line."""
    return repr(text if len(text) <= 60 else text[:57] + "...")


def json_object(name: str, text: str) -> dict[str, Any]:
    """JSON text that must be an object (``--payload``: the handler reads named fields from
    it), its nesting measured before it is parsed (deep JSON overflows the parser's stack).

    Raises:
        ConfigError: its reason reads after the name: ``--payload`` + ``is not valid JSON:
            ...``, ``must be a JSON object, got an array``, ``is nested 991 levels deep...``.
    """
    try:
        check_json_depth(name, text)
    except ConfigError as exc:
        raise ConfigError(name, f"is {exc.reason}") from None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(name, f"is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ConfigError(name, f"must be a JSON object, got {_json_kind(value)}")
    return value


def _json_kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "an array"
    return "a string" if isinstance(value, str) else "a number"


def seconds_option(minimum: float = 0.0) -> Callable[[str | float], float]:
    """A typer ``parser=`` for a duration option (see :func:`seconds`)."""

    def parse(value: str | float) -> float:
        return _as_option(lambda: seconds("seconds", value, minimum=minimum))

    return parse


def count_option(minimum: int = 1, maximum: int = MAX_COUNT) -> Callable[[str | int], int]:
    """A typer ``parser=`` for a count option (see :func:`count`)."""

    def parse(value: str | int) -> int:
        return _as_option(lambda: count("count", value, minimum=minimum, maximum=maximum))

    return parse


def concurrency_option(value: str) -> str:
    """A typer ``parser=`` for a concurrency: a count (as digits), or ``auto`` (learned)."""
    if value.strip().lower() == "auto":
        return "auto"
    try:
        return str(count("concurrency", value))
    except ConfigError:
        raise typer.BadParameter(
            f"expected a number from 1 to {MAX_COUNT} or auto, got {_shown(value)}"
        ) from None


def _as_option(parse: Callable[[], _T]) -> _T:
    """Run ``parse``; its ConfigError becomes the usage error typer reports for the option."""
    try:
        return parse()
    except ConfigError as exc:
        raise typer.BadParameter(exc.reason) from None
