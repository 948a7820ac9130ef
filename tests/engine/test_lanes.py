"""Lanes: parsing, strict layout, lookups and the aging rule (pure, no Redis)."""

from __future__ import annotations

import pytest

from scrapeq.engine.model.lanes import STRICT_SPACING, Lane, Lanes
from scrapeq.errors import ConfigError

DAY = 86_400.0


def priority(lanes: Lanes, lane: str, eligible_at: float) -> float:
    """Priority as DESIGN.md defines it: eligible_at + lane offset."""
    return eligible_at + lanes.get(lane).offset


def test_default_lanes() -> None:
    lanes = Lanes.default()
    assert lanes.names == ("critical", "normal", "bulk")
    assert lanes.as_offsets_ms() == {"critical": -3_600_000, "normal": 0, "bulk": 21_600_000}
    assert lanes.strict is False
    assert lanes.default_lane == "normal"
    assert lanes == Lanes.parse("critical=-3600,normal=0,bulk=21600")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "critical=-3600,normal=0,bulk=21600",
            {"critical": -3600.0, "normal": 0.0, "bulk": 21600.0},
        ),
        ("  a = -1.5 ,  b=0 , c = 2e3 ", {"a": -1.5, "b": 0.0, "c": 2000.0}),
        (
            "bulk=21600,critical=-3600,normal=0",
            {"critical": -3600.0, "normal": 0.0, "bulk": 21600.0},
        ),
        ("only=7", {"only": 7.0}),
        ("x_1=-0.25,y-2=0.25", {"x_1": -0.25, "y-2": 0.25}),
    ],
)
def test_parse_good(text: str, expected: dict[str, float]) -> None:
    lanes = Lanes.parse(text)
    assert {lane.name: lane.offset for lane in lanes.lanes} == expected
    assert list(lanes.names) == sorted(expected, key=lambda name: expected[name])
    assert not lanes.strict


def test_names_are_most_urgent_first() -> None:
    lanes = Lanes.parse("z=5,a=10,m=-5")
    assert lanes.names == ("m", "z", "a")


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("=5", "empty lane name"),
        ("a=1,,b=2", "empty item"),
        ("a=1,", "empty item"),
        ("a=1,a=2", "duplicate lane 'a'"),
        ("Normal=0", "invalid lane name"),
        ("1abc=0", "invalid lane name"),
        ("a b=0", "invalid lane name"),
        ("a" * 33 + "=0", "invalid lane name"),
        ("a=abc", "offset must be a number"),
        ("a=", "offset must be a number"),
        ("a=nan", "finite"),
        ("a=inf", "finite"),
        ("a=-inf", "finite"),
        ("a=1e30", "within"),
        ("a=0,b=0", "same offset"),
        ("a=0,b=0.0", "same offset"),
        ("critical,normal", "expected name=offset"),
        ("strict:", "empty lane name"),
        ("strict:a,,b", "empty lane name"),
        ("strict:a,a", "duplicate lane 'a'"),
        ("strict:A", "invalid lane name"),
        ("strict:a=1", "invalid lane name"),
    ],
)
def test_parse_bad(text: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        Lanes.parse(text)
    assert info.value.name == "lanes"
    assert fragment in str(info.value)
    assert str(info.value).startswith("setting 'lanes': ")


def test_strict_alone_uses_default_names() -> None:
    lanes = Lanes.parse("strict")
    assert lanes.strict
    assert lanes.names == ("critical", "normal", "bulk")
    assert lanes.get("normal").offset == 0.0
    assert lanes.get("critical").offset == -STRICT_SPACING
    assert lanes.get("bulk").offset == STRICT_SPACING
    assert lanes == Lanes.parse("strict:critical,normal,bulk")
    assert lanes == Lanes.parse(" strict : critical , normal , bulk ")


def test_strict_spacing_around_normal() -> None:
    lanes = Lanes.parse("strict:urgent,high,normal,low")
    assert lanes.names == ("urgent", "high", "normal", "low")
    assert lanes.as_offsets_ms() == {
        "urgent": int(-2 * STRICT_SPACING * 1000),
        "high": int(-STRICT_SPACING * 1000),
        "normal": 0,
        "low": int(STRICT_SPACING * 1000),
    }


def test_strict_without_normal_first_gets_zero() -> None:
    lanes = Lanes.parse("strict:hot,warm,cold")
    assert [lane.offset for lane in lanes.lanes] == [0.0, STRICT_SPACING, 2 * STRICT_SPACING]
    assert lanes.default_lane == "hot"


def test_strict_lanes_never_interleave() -> None:
    """A lane-1 job eligible 30 days ago still sorts after a fresh lane-0 job."""
    lanes = Lanes.parse("strict")
    now = 1_700_000_000.0
    stale_normal = priority(lanes, "normal", now - 30 * DAY)
    fresh_critical = priority(lanes, "critical", now)
    assert fresh_critical < stale_normal
    stale_bulk = priority(lanes, "bulk", now - 30 * DAY)
    fresh_normal = priority(lanes, "normal", now)
    assert fresh_normal < stale_bulk


def test_default_lanes_age_so_bulk_does_not_starve() -> None:
    """Non-strict: a bulk job that waited longer than its offset beats fresh normal work."""
    lanes = Lanes.default()
    now = 1_700_000_000.0
    assert priority(lanes, "bulk", now - 21_601) < priority(lanes, "normal", now)
    assert priority(lanes, "bulk", now - 21_599) > priority(lanes, "normal", now)
    assert priority(lanes, "normal", now - 3_601) < priority(lanes, "critical", now)


def test_strict_offsets_stay_exact_as_redis_scores() -> None:
    """eligible_at_ms + offset_ms must be exactly representable as a double."""
    lanes = Lanes.parse("strict:a,b,c,d,e,f,g,h")
    eligible_ms = 1_700_000_000_000 + 123
    for name in lanes.names:
        score = eligible_ms + lanes.offset_ms(name)
        assert int(float(score)) == score


@pytest.mark.parametrize(
    "text",
    [
        "critical=-3600,normal=0,bulk=21600",
        "a=-0.5,b=0.1,c=1e-3,d=123456.789",
        "solo=-7",
        "strict",
        "strict:x,normal,y",
        "strict:hot,warm",
    ],
)
def test_to_text_round_trips(text: str) -> None:
    lanes = Lanes.parse(text)
    again = Lanes.parse(lanes.to_text())
    assert again == lanes
    assert again.as_offsets_ms() == lanes.as_offsets_ms()
    assert again.strict == lanes.strict
    assert str(lanes) == lanes.to_text()


def test_to_text_forms() -> None:
    assert Lanes.default().to_text() == "critical=-3600,normal=0,bulk=21600"
    assert Lanes.parse("strict").to_text() == "strict:critical,normal,bulk"
    assert Lanes.parse("b=0.5,a=-2").to_text() == "a=-2,b=0.5"


def test_unknown_lane() -> None:
    lanes = Lanes.default()
    with pytest.raises(ConfigError) as info:
        lanes.offset_ms("urgent")
    assert info.value.name == "lane"
    assert str(info.value) == (
        "setting 'lane': unknown lane 'urgent'; known: critical, normal, bulk"
    )
    with pytest.raises(ConfigError, match="unknown lane 'x'"):
        lanes.get("x")
    assert "x" not in lanes
    assert "bulk" in lanes


def test_offset_ms_rounds() -> None:
    lanes = Lanes.parse("a=0.0004,b=0.0016,c=-1.2345")
    assert lanes.offset_ms("a") == 0
    assert lanes.offset_ms("b") == 2
    assert lanes.offset_ms("c") == round(-1.2345 * 1000)


def test_offsets_equal_in_milliseconds_are_refused() -> None:
    with pytest.raises(ConfigError, match="same offset"):
        Lanes.parse("a=0.0001,b=0.0002")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("critical=-3600,normal=0,bulk=21600", "normal"),
        ("a=-10,b=5,c=100", "b"),
        ("a=-5,b=5", "a"),  # tie: the more urgent
        ("a=-5,b=5,normal=1000", "normal"),
        ("a=100,b=200", "a"),
        ("a=-200,b=-100", "b"),
        ("strict:high,normal,low", "normal"),
    ],
)
def test_default_lane(text: str, expected: str) -> None:
    assert Lanes.parse(text).default_lane == expected


def test_from_offsets() -> None:
    lanes = Lanes.from_offsets({"normal": 0, "critical": -3600, "bulk": 21600.0})
    assert lanes == Lanes.default()
    with pytest.raises(ConfigError, match="offset must be a number"):
        Lanes.from_offsets({"a": "soon"})  # type: ignore[dict-item]
    with pytest.raises(ConfigError, match="offset must be a number"):
        Lanes.from_offsets({"a": True})
    with pytest.raises(ConfigError, match="no lanes"):
        Lanes.from_offsets({})


def test_direct_construction_is_validated_and_sorted() -> None:
    lanes = Lanes((Lane("b", 10), Lane("a", -10)))
    assert lanes.names == ("a", "b")
    assert isinstance(lanes.lanes[0].offset, float)
    with pytest.raises(ConfigError, match="no lanes"):
        Lanes(())
    with pytest.raises(ConfigError, match="strict lanes"):
        Lanes((Lane("a", 0), Lane("b", 5)), strict=True)
    with pytest.raises(ConfigError, match="finite"):
        Lane("a", float("nan"))


def test_lanes_are_hashable_and_frozen() -> None:
    lanes = Lanes.default()
    assert hash(lanes) == hash(Lanes.default())
    with pytest.raises(AttributeError):
        lanes.strict = True  # type: ignore[misc]
