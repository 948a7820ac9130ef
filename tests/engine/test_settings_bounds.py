"""Settings are bounded where they are parsed (issue 21, item 3).

A duration past what the scripts take (``engine.limits.MAX_DURATION_S``, 100 years: times in
Redis stay exact integers of ms, and Python's clocks take them), a count past what Lua writes
exactly (``MAX_SCRIPT_INT``), or a number that is not finite is a bad setting: a
:class:`ConfigError` naming it, before anything reaches Redis. Table-driven over the settings
table itself, so a new duration or count setting is bounded too.
"""

from __future__ import annotations

import dataclasses

import pytest

from scrapeq.engine.config.settings import Settings, load_settings
from scrapeq.errors import ConfigError


def _specs() -> dict[str, object]:
    return {f.name: f.metadata["spec"] for f in dataclasses.fields(Settings)}


DURATIONS = sorted(n for n, s in _specs().items() if getattr(s, "unit", "") == "seconds")
COUNTS = sorted(
    n for n, s in _specs().items() if getattr(s, "kind", "") in ("int", "optional_int", "conc")
)


def test_the_table_has_the_durations_and_counts_this_test_expects() -> None:
    assert {"keep_done", "recrawl_after", "lease", "backoff_cap", "breaker_cooldown"} <= set(
        DURATIONS
    )
    assert {"max_attempts", "max_pages", "partitions", "domain_concurrency"} <= set(COUNTS)


@pytest.mark.parametrize("name", DURATIONS)
@pytest.mark.parametrize("raw", ["1e20", "1e16", "3155760001", "1e308"])
def test_a_duration_past_100_years_is_a_bad_setting(name: str, raw: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(environ={f"SCRAPEQ_{name.upper()}": raw})
    assert info.value.name == name
    assert "must be <= 3155760000 seconds (100 years)" in str(info.value)


@pytest.mark.parametrize("name", DURATIONS)
@pytest.mark.parametrize("raw", ["inf", "nan", "-inf"])
def test_a_duration_that_is_not_finite_is_a_bad_setting(name: str, raw: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(environ={f"SCRAPEQ_{name.upper()}": raw})
    assert info.value.name == name


#: Settings that must be at least another one (the cross-field checks).
AT_LEAST = {
    "backoff_base": "backoff_cap",
    "breaker_cooldown": "breaker_cooldown_max",
    "proxy_ban_cooldown": "proxy_ban_cooldown_max",
    "proxy_cooldown": "proxy_cooldown_max",
    "browser_bench": "browser_bench_max",
}


@pytest.mark.parametrize("name", DURATIONS)
def test_a_duration_of_100_years_is_taken(name: str) -> None:
    names = [name, AT_LEAST.get(name, name)]
    settings = load_settings(environ={f"SCRAPEQ_{n.upper()}": "3155760000" for n in names})
    assert getattr(settings, name) == 3155760000.0


@pytest.mark.parametrize("name", COUNTS)
def test_a_count_past_what_lua_writes_exactly_is_a_bad_setting(name: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(environ={f"SCRAPEQ_{name.upper()}": str(10**14)})
    assert info.value.name == name
    assert "must be <= " in str(info.value)


def test_partitions_is_bounded_above_as_the_table_says() -> None:
    with pytest.raises(ConfigError, match=r"must be <= 1024"):
        Settings(partitions=1025)
    assert Settings(partitions=1024).partitions == 1024


def test_the_bound_reads_as_one_line_from_the_cli_layer() -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(environ={"SCRAPEQ_KEEP_DONE": "1e20"})
    assert str(info.value) == (
        "setting 'keep_done': must be <= 3155760000 seconds (100 years), got 1e+20"
    )


def test_the_limits_module_answers_for_the_cli_options_too() -> None:
    from scrapeq.engine.config.limits import MAX_DURATION_MS, MAX_DURATION_S, duration_error

    assert MAX_DURATION_S == 3_155_760_000 and MAX_DURATION_MS == MAX_DURATION_S * 1000
    assert duration_error(MAX_DURATION_S) is None
    assert duration_error(0) is None
    assert duration_error(1e20) == "must be <= 3155760000 seconds (100 years), got 1e+20"
    assert duration_error(float("inf")) == "expected a finite number of seconds, got inf"
    assert duration_error(-1) == "must be >= 0 seconds, got -1"
    assert duration_error(10**400) is not None  # an int too large for a float
