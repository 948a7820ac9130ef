"""Settings: defaults, precedence, file handling and validation (pure, no Redis)."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

from scrapeq.engine.config.settings import SETTING_NAMES, Settings, default_data_dir, load_settings
from scrapeq.engine.model.lanes import Lanes
from scrapeq.errors import ConfigError

# The contract's defaults, in the settings' order (docs/reference/settings.md is generated from
# the code; this copy catches a default changed by accident).
INTERFACE_DEFAULTS: dict[str, object] = {
    "redis_url": None,
    "queue": "default",
    "max_attempts": 5,
    "backoff_base": 15,
    "backoff_cap": 3600,
    "lease": 60,
    "request_timeout": 30,
    "domain_concurrency": "auto",
    "domain_delay": 0,
    "breaker_failures": 5,
    "breaker_window": 20,
    "breaker_rate": 0.5,
    "breaker_min_calls": 10,
    "slow_call": 10,
    "breaker_cooldown": 120,
    "breaker_cooldown_max": 3600,
    "breaker_max_trips": 8,
    "global_trip_share": 0.5,
    "global_trip_min": 5,
    "global_trip_window": 60,
    "lanes": "critical=-3600,normal=0,bulk=21600",
    "allow_private": False,
    "max_body": 10485760,
    "max_throttles": 20,
    "max_releases": 20,
    "max_redirects": 10,
    "proxy": [],
    "user_agent": None,  # scrapeq/<version>, checked separately
    "respect_robots": False,
    "shutdown_grace": 30,
    "data_dir": None,  # XDG data dir, checked separately
    "max_payload": 1048576,
    "handler_timeout": 60,
    "max_job_time": 600,  # not in INTERFACE.md yet
    "canonical_keep_fragments": False,
    "canonical_keep_blank_values": True,
    "keep_done": 0,  # not in INTERFACE.md yet
    "unique": "off",
    "recrawl_after": None,  # forever, checked separately
    "seen_filter": "exact",
    "seen_capacity": 10_000_000,
    "seen_error_rate": 0.001,
    "handler": None,
    "scope": "host",
    "max_depth": None,
    "max_pages": None,
    "allow": [],
    "deny": [],
    "log_format": "text",  # not in INTERFACE.md yet
    "log_every": 10,  # not in INTERFACE.md yet
    "status_top": 50,
    "domain_ttl": 86400,
    "cluster": "auto",
    "partitions": 1,
    "metrics_top_domains": 20,
    "domain_concurrency_min": 1,
    "domain_concurrency_max": 32,
    "politeness": "host",
    "domain_concurrency_urgent": 16,
    "proxy_file": None,
    "proxy_tiers": [],
    "ban_statuses": "403,429",
    "ban_markers": [],
    "proxy_ban_cooldown": 300,
    "proxy_ban_cooldown_max": 21600,
    "proxy_cooldown": 60,
    "proxy_cooldown_max": 3600,
    "proxy_tier_quiet": 900,
    "session": "none",
    "revisit": "off",
    "revisit_budget": None,
    "revisit_min_interval": 60,
    "revisit_max_interval": 2592000,
    "max_bytes": None,
    "fetcher": "http",
    "auto_recheck": 0.1,
    "impersonate_target": "chrome152",
    "browser_path": "/usr/bin/chromium",
    "browsers": 2,
    "browser_pages": 4,
    "browser_recycle_pages": 100,
    "browser_max_rss": 2147483648,
    "browser_block": "image,font,media",
    "browser_context": "page",
    "browser_args": "",
    "browser_bench_after": 3,
    "browser_bench": 30.0,
    "browser_bench_max": 600.0,
}


def load(tmp_path: Path | None = None, toml: str | None = None, **kwargs: object) -> Settings:
    """load_settings with an empty environment unless one is given."""
    environ = kwargs.pop("environ", {})
    config_file = kwargs.pop("config_file", None)
    if toml is not None:
        assert tmp_path is not None
        config_file = tmp_path / "scrapeq.toml"
        config_file.write_text(toml, encoding="utf-8")
    return load_settings(
        config_file=config_file,  # type: ignore[arg-type]
        environ=environ,  # type: ignore[arg-type]
        overrides=kwargs.pop("overrides", None),  # type: ignore[arg-type]
    )


# --- defaults ---------------------------------------------------------------------------


def test_setting_names_follow_interface_order() -> None:
    assert list(SETTING_NAMES) == list(INTERFACE_DEFAULTS)
    assert [f.name for f in dataclasses.fields(Settings)] == list(SETTING_NAMES)


@pytest.mark.parametrize("name", [n for n, v in INTERFACE_DEFAULTS.items() if v is not None])
def test_default_matches_interface(name: str) -> None:
    assert Settings().as_dict()[name] == INTERFACE_DEFAULTS[name]


def test_defaults_have_the_right_types() -> None:
    s = Settings()
    assert s.redis_url is None
    assert isinstance(s.lease, float)
    assert isinstance(s.max_attempts, int)
    assert s.lanes == Lanes.default()
    assert s.proxy == ()
    assert s.user_agent.startswith("scrapeq/")
    assert len(s.user_agent) > len("scrapeq/")
    assert s.data_dir == default_data_dir()


def test_load_with_nothing_gives_defaults(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    s = load_settings(environ={"HOME": str(tmp_path)})
    assert s == Settings(data_dir=tmp_path / ".local" / "share" / "scrapeq")


def test_default_data_dir() -> None:
    assert default_data_dir({"XDG_DATA_HOME": "/xdg", "HOME": "/home/u"}) == Path("/xdg/scrapeq")
    assert default_data_dir({"HOME": "/home/u"}) == Path("/home/u/.local/share/scrapeq")
    # A relative or empty XDG_DATA_HOME is ignored (XDG spec).
    assert default_data_dir({"XDG_DATA_HOME": "rel", "HOME": "/h"}) == Path(
        "/h/.local/share/scrapeq"
    )
    assert default_data_dir({"XDG_DATA_HOME": "", "HOME": "/h"}) == Path("/h/.local/share/scrapeq")
    assert default_data_dir({}) == Path.home() / ".local" / "share" / "scrapeq"


def test_load_uses_environ_for_data_dir(tmp_path: Path) -> None:
    s = load(environ={"XDG_DATA_HOME": str(tmp_path)})
    assert s.data_dir == tmp_path / "scrapeq"


# --- precedence ---------------------------------------------------------------------------


FILE = """
lease = 10
max_attempts = 3
queue = "from-file"
allow_private = true
lanes = "a=-1,b=0"
"""


def test_file_beats_default(tmp_path: Path) -> None:
    s = load(tmp_path, FILE)
    assert (s.lease, s.max_attempts, s.queue, s.allow_private) == (10.0, 3, "from-file", True)
    assert s.lanes.names == ("a", "b")
    assert s.request_timeout == 30.0  # untouched settings keep their default


def test_env_beats_file(tmp_path: Path) -> None:
    env = {
        "SCRAPEQ_LEASE": "20",
        "SCRAPEQ_MAX_ATTEMPTS": "7",
        "SCRAPEQ_QUEUE": "from-env",
        "SCRAPEQ_ALLOW_PRIVATE": "false",
        "SCRAPEQ_LANES": "strict",
    }
    s = load(tmp_path, FILE, environ=env)
    assert (s.lease, s.max_attempts, s.queue, s.allow_private) == (20.0, 7, "from-env", False)
    assert s.lanes.strict


def test_flag_beats_env_and_file(tmp_path: Path) -> None:
    env = {"SCRAPEQ_LEASE": "20", "SCRAPEQ_MAX_ATTEMPTS": "7", "SCRAPEQ_QUEUE": "from-env"}
    overrides = {"lease": 30.5, "max_attempts": 9, "queue": "from-flag", "allow_private": None}
    s = load(tmp_path, FILE, environ=env, overrides=overrides)
    assert (s.lease, s.max_attempts, s.queue) == (30.5, 9, "from-flag")
    assert s.allow_private is True  # None means "flag not given": the file's value stands


def test_a_callers_defaults_sit_below_the_file(tmp_path: Path) -> None:
    (tmp_path / "scrapeq.toml").write_text("lease = 10\n")
    defaults = {"lease": 99, "queue": "spider", "unique": "seen"}

    def loaded(environ: dict[str, str], **overrides: object) -> Settings:
        return load_settings(
            config_file=tmp_path / "scrapeq.toml",
            environ=environ,
            overrides=overrides,
            defaults=defaults,
        )

    s = loaded({})
    assert (s.lease, s.queue, s.unique) == (10.0, "spider", "seen")
    s = loaded({"SCRAPEQ_QUEUE": "from-env"}, unique="off")
    assert (s.queue, s.unique) == ("from-env", "off")
    with pytest.raises(ConfigError, match="leese"):
        load_settings(environ={}, defaults={"leese": 1})


def test_env_beats_default_without_file() -> None:
    s = load(environ={"SCRAPEQ_BREAKER_COOLDOWN": "7.5", "SCRAPEQ_RESPECT_ROBOTS": "YES"})
    assert s.breaker_cooldown == 7.5
    assert s.respect_robots is True


def test_handler_timeout_and_max_job_time_from_each_source(tmp_path: Path) -> None:
    toml = "handler_timeout = 12.5\n[scrapeq]\nmax_job_time = 120\n"
    assert (load(tmp_path, toml).handler_timeout, load(tmp_path, toml).max_job_time) == (12.5, 120)
    env = {"SCRAPEQ_HANDLER_TIMEOUT": "7", "SCRAPEQ_MAX_JOB_TIME": "90.5"}
    s = load(tmp_path, toml, environ=env)
    assert (s.handler_timeout, s.max_job_time) == (7.0, 90.5)
    s = load(tmp_path, toml, environ=env, overrides={"handler_timeout": 3, "max_job_time": "45"})
    assert (s.handler_timeout, s.max_job_time) == (3.0, 45.0)


def test_override_strings_are_parsed_like_env() -> None:
    s = load(overrides={"lease": "2.5", "max_attempts": "4", "allow_private": "on"})
    assert (s.lease, s.max_attempts, s.allow_private) == (2.5, 4, True)


def test_only_the_winning_value_is_parsed() -> None:
    s = load(environ={"SCRAPEQ_LEASE": "abc"}, overrides={"lease": 5})
    assert s.lease == 5.0


def test_unknown_override_is_refused() -> None:
    with pytest.raises(ConfigError) as info:
        load(overrides={"leese": 5})
    assert info.value.name == "leese"
    assert "unknown setting" in str(info.value)


def test_other_scrapeq_env_vars_are_ignored() -> None:
    env = {
        "SCRAPEQ_REDIS_SERVER": "/nonexistent/redis-server",
        "SCRAPEQ_SOMETHING_ELSE": "x",
        "SCRAPEQ_MAX_ATTEMPT": "not-a-number",
        "MAX_ATTEMPTS": "99",
    }
    assert load(environ=env).max_attempts == 5


# --- the config file ----------------------------------------------------------------------


def test_explicit_file_not_found(tmp_path: Path) -> None:
    missing = tmp_path / "nope.toml"
    with pytest.raises(ConfigError) as info:
        load(config_file=missing)
    assert info.value.name == "config"
    assert str(info.value) == f"setting 'config': file not found: {missing}"


def test_env_config_file_not_found(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="file not found"):
        load(environ={"SCRAPEQ_CONFIG": str(tmp_path / "nope.toml")})


def test_env_config_file_is_used(tmp_path: Path) -> None:
    path = tmp_path / "other.toml"
    path.write_text("lease = 42\n", encoding="utf-8")
    assert load(environ={"SCRAPEQ_CONFIG": str(path)}).lease == 42.0


def test_explicit_file_beats_env_config(tmp_path: Path) -> None:
    a = tmp_path / "a.toml"
    b = tmp_path / "b.toml"
    a.write_text("lease = 1\n", encoding="utf-8")
    b.write_text("lease = 2\n", encoding="utf-8")
    assert load(config_file=a, environ={"SCRAPEQ_CONFIG": str(b)}).lease == 1.0


def test_cwd_scrapeq_toml_fallback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "scrapeq.toml").write_text("max_attempts = 11\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    assert load().max_attempts == 11


def test_no_cwd_file_is_fine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert load().max_attempts == 5


def test_bad_toml(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load(tmp_path, "lease = = 3\n")
    assert info.value.name == "config"
    assert str(tmp_path / "scrapeq.toml") in str(info.value)
    assert "line 1" in str(info.value)


def test_file_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_bytes(b'queue = "\xff"\n')
    with pytest.raises(ConfigError) as info:
        load(config_file=path)
    assert info.value.name == "config"


def test_unknown_key_in_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load(tmp_path, "lease = 3\nleese = 4\n")
    assert info.value.name == "leese"
    assert str(info.value) == "setting 'leese': unknown setting"


def test_unknown_key_in_scrapeq_table(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load(tmp_path, "[scrapeq]\nbogus = 1\n")
    assert info.value.name == "bogus"


def test_scrapeq_table(tmp_path: Path) -> None:
    s = load(tmp_path, 'domain_delay = 1.5\n[scrapeq]\nlease = 12\nqueue = "tabled"\n')
    assert (s.lease, s.queue, s.domain_delay) == (12.0, "tabled", 1.5)


def test_setting_in_both_places_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load(tmp_path, "lease = 1\n[scrapeq]\nlease = 2\n")
    assert info.value.name == "lease"


def test_scrapeq_must_be_a_table(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load(tmp_path, 'scrapeq = "x"\n')
    assert info.value.name == "config"


def test_toml_lanes_table_and_proxy_forms(tmp_path: Path) -> None:
    s = load(
        tmp_path,
        'proxy = ["http://p1:8080", "https://p2:1080"]\n'
        "[lanes]\ncritical = -3600\nnormal = 0\nbulk = 21600.0\n",
    )
    assert s.lanes == Lanes.default()
    assert s.proxy == ("http://p1:8080", "https://p2:1080")
    s = load(tmp_path, 'proxy = "http://p1:8080, https://p2:8443"\nlanes = "strict:a,b"\n')
    assert s.proxy == ("http://p1:8080", "https://p2:8443")
    assert s.lanes.strict and s.lanes.names == ("a", "b")


def test_toml_strings_are_parsed(tmp_path: Path) -> None:
    s = load(tmp_path, 'lease = "7.5"\nallow_private = "yes"\ndata_dir = "~/sq"\n')
    assert s.lease == 7.5
    assert s.allow_private is True
    assert s.data_dir == Path("~/sq").expanduser()


@pytest.mark.parametrize(
    ("toml", "name"),
    [
        ("max_attempts = 5.0\n", "max_attempts"),
        ("max_attempts = true\n", "max_attempts"),
        ("allow_private = 1\n", "allow_private"),
        ("lease = true\n", "lease"),
        ("lease = nan\n", "lease"),
        ("lease = inf\n", "lease"),
        ("queue = 5\n", "queue"),
        ("proxy = [1, 2]\n", "proxy"),
        ("lanes = 5\n", "lanes"),
        ("lanes = {a = 0, b = 0}\n", "lanes"),
        ("lease = 2024-01-01\n", "lease"),
    ],
)
def test_toml_wrong_types(tmp_path: Path, toml: str, name: str) -> None:
    with pytest.raises(ConfigError) as info:
        load(tmp_path, toml)
    assert info.value.name == name


# --- validation -------------------------------------------------------------------------


BAD_ENV = [
    ("breaker_cooldown", "-5", "must be > 0"),
    ("breaker_cooldown", "0", "must be > 0"),
    ("lease", "0", "must be > 0 seconds"),
    ("lease", "-1", "must be > 0 seconds"),
    ("request_timeout", "0", "must be > 0"),
    ("slow_call", "0", "must be > 0"),
    ("global_trip_window", "0", "must be > 0"),
    ("backoff_base", "0", "must be > 0"),
    ("domain_delay", "-0.1", "must be >= 0"),
    ("shutdown_grace", "-1", "must be >= 0"),
    ("handler_timeout", "0", "must be > 0 seconds"),
    ("handler_timeout", "-5", "must be > 0 seconds"),
    ("handler_timeout", "inf", "finite"),
    ("handler_timeout", "nan", "finite"),
    ("handler_timeout", "soon", "expected a number of seconds"),
    ("max_job_time", "0", "must be > 0 seconds"),
    ("max_job_time", "inf", "finite"),
    ("breaker_rate", "1.5", "must be in (0, 1]"),
    ("breaker_rate", "0", "must be in (0, 1]"),
    ("breaker_rate", "-0.5", "must be in (0, 1]"),
    ("global_trip_share", "1.01", "must be in (0, 1]"),
    ("global_trip_share", "0", "must be in (0, 1]"),
    ("lease", "nan", "finite"),
    ("lease", "inf", "finite"),
    ("breaker_rate", "nan", "finite"),
    ("backoff_cap", "-inf", "finite"),
    ("breaker_cooldown", "abc", "expected a number of seconds, got 'abc'"),
    ("breaker_rate", "half", "expected a number, got 'half'"),
    ("lease", "", "expected a number of seconds"),
    ("max_attempts", "5.0", "expected an integer, got '5.0'"),
    ("max_attempts", "five", "expected an integer"),
    ("max_attempts", "0", "must be >= 1"),
    ("domain_concurrency", "0", "must be >= 1"),
    ("breaker_failures", "0", "must be >= 1"),
    ("breaker_window", "0", "must be >= 1"),
    ("breaker_min_calls", "0", "must be >= 1"),
    ("breaker_max_trips", "0", "must be >= 1"),
    ("global_trip_min", "0", "must be >= 1"),
    ("max_body", "0", "must be >= 1"),
    ("max_throttles", "0", "must be >= 1"),
    ("max_releases", "0", "must be >= 1"),
    ("max_releases", "2.5", "expected an integer"),
    ("max_redirects", "-1", "must be >= 0"),
    ("max_body", "1e6", "expected an integer"),
    ("allow_private", "maybe", "expected true/false"),
    ("respect_robots", "2", "expected true/false"),
    ("allow_private", "", "expected true/false"),
    ("redis_url", "http://localhost:6379", "scheme 'http'"),
    ("redis_url", "localhost:6379", "redis://, rediss:// or unix://"),
    ("redis_url", "memcached://x", "redis://, rediss:// or unix://"),
    ("proxy", "ftp://proxy:21", "unsupported proxy scheme 'ftp'"),
    ("proxy", "proxy.example.com:8080", "unsupported proxy scheme"),
    ("proxy", "http://", "without a host"),
    ("proxy", "http://ok:1,https://", "without a host"),
    ("proxy", "http://ok:1,socks5://p:1080", "socks5:// proxies are not supported"),
    ("proxy", "http://host:99999", "bad port"),
    ("queue", "has{brace}", "invalid queue name"),
    ("queue", "", "invalid queue name"),
    ("lanes", "a=0,a=1", "duplicate lane"),
    ("lanes", "", "empty lane specification"),
    ("user_agent", "", "non-empty"),
    ("user_agent", "evil\r\nX-Injected: 1", "control characters"),
    ("data_dir", "", "expected a path"),
    ("log_format", "yaml", "expected text or json"),
    ("log_every", "-1", ">= 0"),
    ("cluster", "yes", "expected auto, on or off"),
    ("partitions", "0", ">= 1"),
]


@pytest.mark.parametrize(("name", "raw", "fragment"), BAD_ENV)
def test_bad_env_value_names_the_setting(name: str, raw: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        load(environ={f"SCRAPEQ_{name.upper()}": raw})
    assert info.value.name == name
    assert str(info.value).startswith(f"setting {name!r}: ")
    assert fragment in str(info.value)


def test_malformed_number_message_exactly() -> None:
    with pytest.raises(ConfigError) as info:
        load(environ={"SCRAPEQ_BREAKER_COOLDOWN": "abc"})
    assert str(info.value) == "setting 'breaker_cooldown': expected a number of seconds, got 'abc'"


@pytest.mark.parametrize(
    ("changes", "name", "fragment"),
    [
        ({"breaker_cooldown": 200.0, "breaker_cooldown_max": 100.0}, "breaker_cooldown_max", ">="),
        ({"breaker_min_calls": 30}, "breaker_min_calls", "<= breaker_window"),
        ({"breaker_window": 5}, "breaker_min_calls", "<= breaker_window"),
        ({"backoff_base": 10.0, "backoff_cap": 5.0}, "backoff_cap", ">= backoff_base"),
    ],
)
def test_cross_field_checks(changes: dict[str, object], name: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        Settings(**changes)  # type: ignore[arg-type]
    assert info.value.name == name
    assert fragment in str(info.value)


def test_cross_field_edges_are_allowed() -> None:
    s = Settings(breaker_cooldown=100.0, breaker_cooldown_max=100.0, backoff_cap=15.0)
    assert s.breaker_cooldown_max == s.breaker_cooldown
    assert Settings(breaker_min_calls=20).breaker_min_calls == 20
    assert Settings(breaker_rate=1.0, global_trip_share=1.0).breaker_rate == 1.0
    assert Settings(max_redirects=0, domain_delay=0.0, shutdown_grace=0).max_redirects == 0


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("max_attempts", True),
        ("max_attempts", 5.0),
        ("max_attempts", "5"),
        ("allow_private", 1),
        ("allow_private", "true"),
        ("lease", False),
        ("lease", math.nan),
        ("lease", math.inf),
        ("breaker_rate", -math.inf),
        ("queue", None),
        ("lanes", "critical=0"),
        ("proxy", [1]),
        ("data_dir", 5),
    ],
)
def test_constructor_is_strict_about_types(name: str, value: object) -> None:
    with pytest.raises(ConfigError) as info:
        Settings(**{name: value})  # type: ignore[arg-type]
    assert info.value.name == name


def test_constructor_normalises_typed_values(tmp_path: Path) -> None:
    s = Settings(lease=5, proxy=["http://p:1"], data_dir=str(tmp_path))  # type: ignore[arg-type]
    assert isinstance(s.lease, float)
    assert s.proxy == ("http://p:1",)
    assert s.data_dir == tmp_path


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("true", True),
        ("TRUE", True),
        (" yes ", True),
        ("On", True),
        ("1", True),
        ("false", False),
        ("No", False),
        ("OFF", False),
        ("0", False),
    ],
)
def test_bool_words(raw: str, expected: bool) -> None:
    assert load(environ={"SCRAPEQ_ALLOW_PRIVATE": raw}).allow_private is expected


def test_env_value_forms(tmp_path: Path) -> None:
    env = {
        "SCRAPEQ_REDIS_URL": "rediss://:secret@cache.example.com:6380/1",
        "SCRAPEQ_MAX_ATTEMPTS": " +7 ",
        "SCRAPEQ_BACKOFF_BASE": "1e1",
        "SCRAPEQ_PROXY": "http://u:pw@p1:3128, https://p2:1080,",
        "SCRAPEQ_LANES": "fast=-10,slow=10",
        "SCRAPEQ_DATA_DIR": str(tmp_path / "data"),
        "SCRAPEQ_USER_AGENT": "my-bot/1.0 (+https://example.com)",
    }
    s = load(environ=env)
    assert s.redis_url == "rediss://:secret@cache.example.com:6380/1"
    assert s.max_attempts == 7
    assert s.backoff_base == 10.0
    assert s.proxy == ("http://u:pw@p1:3128", "https://p2:1080")
    assert s.lanes.names == ("fast", "slow")
    assert s.data_dir == tmp_path / "data"
    assert s.user_agent == "my-bot/1.0 (+https://example.com)"


@pytest.mark.parametrize("url", ["redis://localhost:6379/0", "REDIS://h", "unix:///tmp/r.sock"])
def test_redis_schemes(url: str) -> None:
    assert Settings(redis_url=url).redis_url == url


def test_empty_redis_url_and_proxy_mean_none(tmp_path: Path) -> None:
    s = load(
        tmp_path,
        'redis_url = "redis://x"\nproxy = "http://p:1"\n',
        environ={"SCRAPEQ_REDIS_URL": "", "SCRAPEQ_PROXY": ""},
    )
    assert s.redis_url is None
    assert s.proxy == ()


# --- replace, as_dict, repr -----------------------------------------------------------------


def test_replace_validates_again() -> None:
    s = Settings()
    t = s.replace(lease=5, queue="other")
    assert (t.lease, t.queue) == (5.0, "other")
    assert s.lease == 60.0  # frozen original untouched
    assert s.replace(max_attempts="3").max_attempts == 3
    with pytest.raises(ConfigError) as info:
        s.replace(lease=0)
    assert info.value.name == "lease"
    with pytest.raises(ConfigError) as info:
        s.replace(nope=1)
    assert info.value.name == "nope"


def test_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        Settings().lease = 1.0  # type: ignore[misc]


def test_as_dict_is_json_friendly(tmp_path: Path) -> None:
    s = Settings(proxy=("http://p:1",), data_dir=tmp_path, lanes=Lanes.parse("strict"))
    d = s.as_dict()
    assert list(d) == list(SETTING_NAMES)
    assert d["lanes"] == "strict:critical,normal,bulk"
    assert d["data_dir"] == str(tmp_path)
    assert d["proxy"] == ["http://p:1"]
    assert json.loads(json.dumps(d)) == d


def as_env_text(value: object) -> str:
    """How a user would write an as_dict() value in the environment."""
    if isinstance(value, list):
        return ",".join(str(item) for item in value)
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def test_as_dict_round_trips_through_env() -> None:
    s = Settings(lease=2.5, lanes=Lanes.parse("a=-1,b=0.5"), proxy=("http://p:1",))
    env = {
        f"SCRAPEQ_{name.upper()}": as_env_text(value)
        for name, value in s.as_dict().items()
        if value is not None
    }
    assert load(environ=env) == s


def test_repr_hides_passwords() -> None:
    s = Settings(redis_url="redis://:hunter2@db:6379/0", proxy=("http://bob:pw123@p:8080",))
    text = repr(s)
    assert "hunter2" not in text
    assert "pw123" not in text
    assert "redis://:***@db:6379/0" in text
    assert "http://***:***@p:8080" in text and "bob" not in text  # the user too (issue 36)
    assert s.redis_url == "redis://:hunter2@db:6379/0"  # the value itself is intact


def test_max_releases_from_env_file_and_flag(tmp_path: Path) -> None:
    assert load(tmp_path, "max_releases = 7\n").max_releases == 7
    assert load(tmp_path, "[scrapeq]\nmax_releases = 8\n").max_releases == 8
    assert load(environ={"SCRAPEQ_MAX_RELEASES": "9"}).max_releases == 9
    flag = load(environ={"SCRAPEQ_MAX_RELEASES": "9"}, overrides={"max_releases": 3})
    assert flag.max_releases == 3
    with pytest.raises(ConfigError, match="max_releases"):
        load(tmp_path, 'max_releases = "many"\n')


def test_canonical_options_from_env_file_and_flag(tmp_path: Path) -> None:
    s = load()
    assert (s.canonical_keep_fragments, s.canonical_keep_blank_values) == (False, True)
    s = load(tmp_path, "canonical_keep_fragments = true\ncanonical_keep_blank_values = false\n")
    assert (s.canonical_keep_fragments, s.canonical_keep_blank_values) == (True, False)
    env = {"SCRAPEQ_CANONICAL_KEEP_FRAGMENTS": "yes", "SCRAPEQ_CANONICAL_KEEP_BLANK_VALUES": "0"}
    s = load(environ=env)
    assert (s.canonical_keep_fragments, s.canonical_keep_blank_values) == (True, False)
    flag = load(environ=env, overrides={"canonical_keep_fragments": False})
    assert flag.canonical_keep_fragments is False
    for name, bad in (("canonical_keep_fragments", "maybe"), ("canonical_keep_blank_values", "")):
        with pytest.raises(ConfigError, match="expected true/false") as info:
            load(environ={f"SCRAPEQ_{name.upper()}": bad})
        assert info.value.name == name
    with pytest.raises(ConfigError) as info:
        load(tmp_path, "canonical_keep_fragments = 1\n")
    assert info.value.name == "canonical_keep_fragments"


def test_every_setting_is_in_the_settings_reference() -> None:
    """docs/reference/settings.md (generated by scripts/gen_reference.py, linked from
    docs/INTERFACE.md) names every setting, each with the default the code has."""
    text = (Path(__file__).resolve().parents[2] / "docs/reference/settings.md").read_text()
    rows = {
        row.split("|")[1].strip(" `"): row.split("|")[2].strip()
        for row in text.splitlines()
        if row.startswith("| `")
    }
    missing = [name for name in SETTING_NAMES if name not in rows]
    assert not missing, f"docs/reference/settings.md lacks {missing}"
    assert rows["max_attempts"] == f"`{Settings().max_attempts}`"
    assert rows["lanes"] == f"`{Settings().lanes.to_text()}`"


def test_domain_concurrency_is_a_number_or_auto() -> None:
    assert load(environ={"SCRAPEQ_DOMAIN_CONCURRENCY": "AUTO"}).domain_concurrency == "auto"
    assert load(environ={"SCRAPEQ_DOMAIN_CONCURRENCY": "4"}).domain_concurrency == 4
    assert Settings(domain_concurrency=3).domain_concurrency == 3
    for bad in ("fast", "0", 0, 2.5, True):
        with pytest.raises(ConfigError, match="domain_concurrency"):
            Settings(domain_concurrency=bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="domain_concurrency_max"):
        Settings(domain_concurrency_min=8, domain_concurrency_max=4)


def test_politeness_is_host_or_domain() -> None:
    assert load(environ={"SCRAPEQ_POLITENESS": "domain"}).politeness == "domain"
    with pytest.raises(ConfigError, match="politeness"):
        Settings(politeness="street")
