"""The bounds of what callers hand the queue (issue 21, items 10 and 11): durations, counts,
JSON nesting, how typed values are parsed against them, and the environment variables that
are not settings."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from scrapeq import Queue, Settings
from scrapeq.engine.config import settings as settings_module
from scrapeq.engine.config.limits import (
    MAX_COUNT,
    MAX_DURATION_S,
    MAX_JSON_DEPTH,
    check_count,
    check_json_depth,
    check_seconds,
)
from scrapeq.engine.config.settings import load_settings
from scrapeq.errors import ConfigError
from scrapeq.interfaces.parsing import count, seconds


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


# --- durations and counts ---------------------------------------------------------------------


@pytest.mark.parametrize("value", [0, 0.5, 60, MAX_DURATION_S, float(MAX_DURATION_S)])
def test_seconds_within_the_bound_are_taken(value: float) -> None:
    assert check_seconds("delay", value) == value


@pytest.mark.parametrize(
    "value", [-1, MAX_DURATION_S + 1, 1e12, 1e308, float("inf"), float("nan"), True, "5", None]
)
def test_seconds_past_the_bound_or_not_numbers_are_refused(value: Any) -> None:
    with pytest.raises(ConfigError, match="'delay'"):
        check_seconds("delay", value)


def test_counts_are_bounded() -> None:
    assert check_count("limit", MAX_COUNT) == MAX_COUNT
    assert check_count("depth", 0, minimum=0) == 0
    for bad in (0, MAX_COUNT + 1, 10**20, 2.0, True, "3"):
        with pytest.raises(ConfigError, match="'limit'"):
            check_count("limit", bad)


# --- JSON nesting -----------------------------------------------------------------------------


def test_json_up_to_the_depth_is_taken_one_more_is_refused() -> None:
    check_json_depth("payload", json.dumps(nested(MAX_JSON_DEPTH)))
    with pytest.raises(ConfigError, match="nested"):
        check_json_depth("payload", json.dumps(nested(MAX_JSON_DEPTH + 1)))
    with pytest.raises(ConfigError, match="nested"):
        check_json_depth("payload", '{"a":' + "[" * 5000 + "]" * 5000 + "}")


def test_brackets_inside_strings_are_not_nesting() -> None:
    text = json.dumps({"a": "[" * 5000 + '\\"{' * 300, "b": ["]]]", "\\"]})
    check_json_depth("payload", text)


@pytest.mark.backends("single")
def test_a_payload_nested_too_deeply_is_refused_at_enqueue(redis_url: str) -> None:
    q = Queue.from_url(redis_url, settings=Settings(allow_private=False))
    try:
        url = "https://p.example.com/1"
        for depth in (MAX_JSON_DEPTH + 1, 5000):
            with pytest.raises(ConfigError, match="payload"):
                q.enqueue(url, payload={"a": nested(depth)})
        assert q.status()["counts"]["enqueued"] == 0
        q.enqueue(url, payload={"a": nested(MAX_JSON_DEPTH - 1)})
        (job,) = q.claim(1).jobs
        assert job.payload == {"a": nested(MAX_JSON_DEPTH - 1)}
    finally:
        q.close()


# --- environment variables that are not settings ------------------------------------------------


@pytest.fixture
def fresh_warnings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Forget which variables this process already warned about."""
    monkeypatch.setattr(settings_module, "_WARNED_ENV", set())


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def test_a_misspelt_variable_is_named_once_with_the_nearest_setting(
    caplog: pytest.LogCaptureFixture, fresh_warnings: None
) -> None:
    env = {"SCRAPEQ_DOMAIN_CONCURENCY": "4", "SCRAPEQ_LEASE": "30"}
    with caplog.at_level(logging.WARNING, logger="scrapeq"):
        first = load_settings(environ=env)
        load_settings(environ=env)
    (message,) = _warnings(caplog)
    assert "SCRAPEQ_DOMAIN_CONCURENCY" in message
    assert "SCRAPEQ_DOMAIN_CONCURRENCY" in message
    assert first.domain_concurrency == "auto"  # still ignored
    assert first.lease == 30


def test_a_variable_like_no_setting_is_named_without_a_guess(
    caplog: pytest.LogCaptureFixture, fresh_warnings: None
) -> None:
    with caplog.at_level(logging.WARNING, logger="scrapeq"):
        load_settings(environ={"SCRAPEQ_ZZZZZZZZ\x1b]0;x\x07": "1"})
    (message,) = _warnings(caplog)
    assert "did you mean" not in message
    assert "\x1b" not in message and "\\x1b" in message


def test_variables_scrapeq_reads_that_are_not_settings_are_not_warned_about(
    caplog: pytest.LogCaptureFixture, fresh_warnings: None
) -> None:
    env = {
        "SCRAPEQ_CONFIG": "",
        "SCRAPEQ_REDIS_SERVER": "/usr/bin/redis-server",
        "SCRAPEQ_DASHBOARD_TOKEN": "x" * 20,
        "SCRAPEQ_SCREENSHOTS": "docs",
    }
    with caplog.at_level(logging.WARNING, logger="scrapeq"):
        load_settings(environ=env)
    assert _warnings(caplog) == []


# --- parsing what people type (scrapeq.interfaces.parsing) --------------------------------------


@pytest.mark.parametrize(
    "text,needle",
    [
        ("9" * 6000, "at most"),  # past int()'s 4,300 digits: refused without converting it
        ("-" + "9" * 6000, ">= 1"),
        ("1e3", "expected an integer"),
        ("٣", "expected an integer"),  # an Arabic-Indic digit: int() would take it
        ("x" * 6000, "expected an integer"),
    ],
)
def test_typed_counts_are_refused_in_one_short_line(text: str, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle) as info:
        count("--limit", text)
    assert len(str(info.value)) < 200


@pytest.mark.parametrize("text", ["9" * 6000, "x" * 6000, "1e308", "-0.5", "nan"])
def test_typed_durations_are_refused_in_one_short_line(text: str) -> None:
    with pytest.raises(ConfigError) as info:
        seconds("--delay", text)
    assert len(str(info.value)) < 200


def test_typed_values_within_the_bounds_are_taken() -> None:
    assert seconds("--delay", " 1.5 ") == 1.5
    assert seconds("--delay", str(MAX_DURATION_S)) == MAX_DURATION_S
    assert seconds("--duration", 60, minimum=1) == 60.0
    assert count("--limit", "+7") == 7
    assert count("--max-depth", "0", minimum=0) == 0
