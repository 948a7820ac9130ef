"""Priority lanes with aging.

A lane is a name with an offset in seconds. A job's priority is ``eligible_at + offset``
(lower pops first), so a job in a less urgent lane that has waited longer than the
difference between the two offsets beats fresh work in the more urgent lane: no lane
starves. The default lanes are ``critical`` (-3600 s), ``normal`` (0 s) and ``bulk``
(+21600 s).

*Strict* mode spaces the lanes :data:`STRICT_SPACING` seconds apart (about 31 years), so
they never interleave: a less urgent job only pops once every more urgent lane is empty.

Text forms accepted by :meth:`Lanes.parse` (and by the ``lanes`` setting)::

    critical=-3600,normal=0,bulk=21600     name=offset in seconds, floats allowed
    strict:critical,normal,bulk            strict mode, most urgent first
    strict                                 strict mode with the default names

Every bad specification raises :class:`~scrapeq.errors.ConfigError` naming ``lanes``; an
unknown lane name asked of a valid :class:`Lanes` raises it naming ``lane``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from scrapeq.errors import ConfigError

__all__ = ["DEFAULT_LANES_TEXT", "MAX_OFFSET", "STRICT_SPACING", "Lane", "Lanes"]

STRICT_SPACING = 1e9
"""Seconds between two neighbouring lanes in strict mode (about 31.7 years)."""

MAX_OFFSET = 1e12
"""Largest absolute lane offset in seconds; keeps ``eligible_at_ms + offset_ms`` exact."""

DEFAULT_LANES_TEXT = "critical=-3600,normal=0,bulk=21600"
"""The default lanes in text form."""

_DEFAULT_NAMES = ("critical", "normal", "bulk")
_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")
_SETTING = "lanes"


def _bad(message: str) -> ConfigError:
    return ConfigError(_SETTING, message)


def _format_offset(offset: float) -> str:
    """Shortest text that parses back to exactly ``offset``."""
    if offset.is_integer():
        return str(int(offset))
    return repr(offset)


def _check_name(name: object) -> None:
    if not isinstance(name, str) or not name:
        raise _bad("empty lane name")
    if not _NAME.fullmatch(name):
        raise _bad(
            f"invalid lane name {name!r}: use 1-32 characters of a-z, 0-9, '_' or '-', "
            "starting with a letter"
        )


def _parse_offset(name: str, text: str) -> float:
    try:
        offset = float(text)
    except ValueError:
        raise _bad(f"lane {name!r}: offset must be a number of seconds, got {text!r}") from None
    if not math.isfinite(offset):
        raise _bad(f"lane {name!r}: offset must be finite, got {text!r}")
    return offset


@dataclass(frozen=True, slots=True)
class Lane:
    """One lane: a name and its offset.

    Attributes:
        name: 1-32 characters of ``a-z``, ``0-9``, ``_`` and ``-``, starting with a letter.
        offset: seconds added to a job's eligibility time to give its priority; lower is
            more urgent.
    """

    name: str
    offset: float

    def __post_init__(self) -> None:
        _check_name(self.name)
        offset = self.offset
        if isinstance(offset, bool) or not isinstance(offset, int | float):
            raise _bad(f"lane {self.name!r}: offset must be a number of seconds, got {offset!r}")
        if not math.isfinite(offset):
            raise _bad(f"lane {self.name!r}: offset must be finite, got {offset!r}")
        if abs(offset) > MAX_OFFSET:
            raise _bad(f"lane {self.name!r}: offset must be within ±{MAX_OFFSET:g} seconds")
        object.__setattr__(self, "offset", float(offset))

    @property
    def offset_ms(self) -> int:
        """The offset in whole milliseconds, as added to priorities in Redis."""
        return round(self.offset * 1000)


def _strict_lanes(names: Iterable[str]) -> tuple[Lane, ...]:
    """Lanes spaced :data:`STRICT_SPACING` apart, ``normal`` (or the first) at 0."""
    ordered = list(names)
    anchor = ordered.index("normal") if "normal" in ordered else 0
    return tuple(
        Lane(name, (index - anchor) * STRICT_SPACING) for index, name in enumerate(ordered)
    )


def _check_unique(lanes: tuple[Lane, ...]) -> None:
    seen_names: set[str] = set()
    seen_offsets: dict[int, str] = {}
    for lane in lanes:
        if lane.name in seen_names:
            raise _bad(f"duplicate lane {lane.name!r}")
        seen_names.add(lane.name)
        other = seen_offsets.get(lane.offset_ms)
        if other is not None:
            raise _bad(
                f"lanes {other!r} and {lane.name!r} have the same offset "
                f"{_format_offset(lane.offset)}; offsets must differ"
            )
        seen_offsets[lane.offset_ms] = lane.name


@dataclass(frozen=True, slots=True)
class Lanes:
    """The configured set of lanes, kept sorted most urgent first.

    Attributes:
        lanes: the lanes, sorted by offset (most urgent first) on construction.
        strict: whether the lanes use the strict layout (never interleave).
    """

    lanes: tuple[Lane, ...]
    strict: bool = False

    def __post_init__(self) -> None:
        lanes = tuple(self.lanes)
        if not lanes:
            raise _bad("no lanes given")
        if not all(isinstance(lane, Lane) for lane in lanes):
            raise _bad("lanes must be Lane objects")
        _check_unique(lanes)
        ordered = tuple(sorted(lanes, key=lambda lane: lane.offset))
        if self.strict and ordered != _strict_lanes(lane.name for lane in ordered):
            raise _bad(f"strict lanes must be spaced {STRICT_SPACING:g} seconds apart")
        object.__setattr__(self, "lanes", ordered)

    @classmethod
    def parse(cls, text: str) -> Lanes:
        """Parse a lane specification (see the module docstring for the forms).

        Args:
            text: ``"critical=-3600,normal=0,bulk=21600"``, ``"strict:a,b,c"`` or ``"strict"``.

        Returns:
            The lanes.

        Raises:
            ConfigError: named ``lanes``, when the text is empty or malformed, a name is
                empty, invalid or repeated, or an offset is malformed, non-finite or repeated.
        """
        if not isinstance(text, str) or not text.strip():
            raise _bad("empty lane specification")
        head, colon, rest = text.partition(":")
        if head.strip().lower() == "strict":
            if not colon:
                return cls(_strict_lanes(_DEFAULT_NAMES), strict=True)
            return cls(_strict_lanes(_split_names(rest)), strict=True)
        return cls(tuple(_parse_item(item) for item in _split_items(text)))

    @classmethod
    def from_offsets(cls, offsets: Mapping[str, float]) -> Lanes:
        """Build lanes from a ``{name: offset_seconds}`` mapping (a TOML table).

        Args:
            offsets: lane names to offsets in seconds.

        Returns:
            The lanes (non-strict).

        Raises:
            ConfigError: named ``lanes``, as for :meth:`parse`.
        """
        if not isinstance(offsets, Mapping):
            raise _bad(f"expected a table of name = offset, got {offsets!r}")
        return cls(tuple(Lane(str(name), offset) for name, offset in offsets.items()))

    @classmethod
    def default(cls) -> Lanes:
        """The default lanes: ``critical=-3600,normal=0,bulk=21600``."""
        return cls((Lane("critical", -3600.0), Lane("normal", 0.0), Lane("bulk", 21600.0)))

    def get(self, name: str) -> Lane:
        """Return the lane called ``name``.

        Raises:
            ConfigError: named ``lane``, when no lane has that name; lists the known ones.
        """
        for lane in self.lanes:
            if lane.name == name:
                return lane
        raise ConfigError("lane", f"unknown lane {name!r}; known: {', '.join(self.names)}")

    def offset_ms(self, name: str) -> int:
        """The offset of lane ``name`` in whole milliseconds.

        Raises:
            ConfigError: named ``lane``, when no lane has that name.
        """
        return self.get(name).offset_ms

    def __contains__(self, name: object) -> bool:
        return any(lane.name == name for lane in self.lanes)

    @property
    def names(self) -> tuple[str, ...]:
        """Lane names, most urgent first."""
        return tuple(lane.name for lane in self.lanes)

    @property
    def default_lane(self) -> str:
        """``normal`` if present, else the lane whose offset is closest to 0.

        Ties go to the more urgent lane.
        """
        if "normal" in self:
            return "normal"
        return min(self.lanes, key=lambda lane: abs(lane.offset)).name

    def to_text(self) -> str:
        """The text form; :meth:`parse` of it gives back an equal :class:`Lanes`."""
        if self.strict:
            return "strict:" + ",".join(self.names)
        return ",".join(f"{lane.name}={_format_offset(lane.offset)}" for lane in self.lanes)

    def as_offsets_ms(self) -> dict[str, int]:
        """``{name: offset_ms}``, most urgent first (what the Lua scripts receive)."""
        return {lane.name: lane.offset_ms for lane in self.lanes}

    def __str__(self) -> str:
        return self.to_text()


def _split_items(text: str) -> list[str]:
    items = [item.strip() for item in text.split(",")]
    if any(not item for item in items):
        raise _bad(f"empty item in lane specification {text!r}")
    return items


def _split_names(text: str) -> list[str]:
    names = [name.strip() for name in text.split(",")]
    if any(not name for name in names):
        raise _bad(f"empty lane name in strict specification {text!r}")
    return names


def _parse_item(item: str) -> Lane:
    name, equals, offset = item.partition("=")
    if not equals:
        raise _bad(f"expected name=offset_seconds, got {item!r}")
    name = name.strip()
    if not name:
        raise _bad(f"empty lane name in {item!r}")
    _check_name(name)
    return Lane(name, _parse_offset(name, offset.strip()))
