"""Settings: one frozen object, loaded from flags, environment, a TOML file and defaults.

Precedence is flag > environment > file > default (docs/INTERFACE.md, "Settings").

Units:
    * durations are **seconds** (floats allowed): ``backoff_base``, ``backoff_cap``,
      ``lease``, ``request_timeout``, ``domain_delay``, ``slow_call``, ``breaker_cooldown``,
      ``breaker_cooldown_max``, ``global_trip_window``, ``shutdown_grace``,
      ``handler_timeout``, ``max_job_time``, ``keep_done``, ``recrawl_after`` (none: never),
      ``log_every``; lane offsets in ``lanes`` are seconds too; a duration is at most 100
      years (:mod:`scrapeq.engine.config.limits`: what a queue keeps in Redis exactly);
    * ``max_body`` and ``max_payload`` are **bytes**;
    * ``breaker_rate`` and ``global_trip_share`` are fractions in (0, 1];
      ``seen_error_rate`` is a fraction in (0, 0.5];
    * ``unique`` is ``off``, ``pending`` or ``seen`` (a boolean means ``pending`` or
      ``off``); ``seen_filter`` is ``exact`` or ``bloom``;
    * ``domain_concurrency`` is a count or ``auto``; every other number is a count, at most
      ``10**14 - 1`` (the integers Lua writes back exactly).

``canonical_keep_fragments`` and ``canonical_keep_blank_values`` are
:func:`scrapeq.engine.model.urls.canonical_url`'s options for de-duplication fingerprints.

Sources:
    * the file: ``config_file``, else ``$SCRAPEQ_CONFIG``, else ``./scrapeq.toml`` when it
      exists. Keys are setting names, at the top level or in a ``[scrapeq]`` table;
    * the environment: ``SCRAPEQ_<NAME>`` in upper case (``SCRAPEQ_MAX_ATTEMPTS=7``). Values
      are text: integers (``5``), numbers (``2.5``), booleans (true/false, 1/0, yes/no,
      on/off), lanes text, comma-separated proxy URLs, paths. An empty ``SCRAPEQ_REDIS_URL``
      or ``SCRAPEQ_PROXY`` means "none";
    * overrides (CLI flags): typed values; ``None`` means "flag not given". Strings are
      parsed as environment values are.

Every bad value raises :class:`~scrapeq.errors.ConfigError` naming the setting.
"""

from __future__ import annotations

import dataclasses
import difflib
import logging
import os
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from scrapeq.engine.config.limits import MAX_SCRIPT_INT
from scrapeq.engine.config.specs import (
    CLUSTER_MODES,
    UNIQUE_MODES,
    _at_least,
    _check_ban_statuses,
    _check_block,
    _check_browser_context,
    _check_cluster,
    _check_conc,
    _check_duration,
    _check_fetcher,
    _check_handler,
    _check_header,
    _check_log_format,
    _check_markers,
    _check_max_payload,
    _check_patterns,
    _check_politeness,
    _check_proxy,
    _check_proxy_tiers,
    _check_queue,
    _check_redis_url,
    _check_revisit,
    _check_scope,
    _check_seen_filter,
    _check_session,
    _check_target,
    _count,
    _fraction,
    _meta,
    _seconds,
    _setting,
    _Spec,
)
from scrapeq.engine.model.lanes import Lanes
from scrapeq.engine.model.seen import BLOOM_MAX_BITS, bloom_geometry
from scrapeq.engine.model.urls import redact_url
from scrapeq.errors import ConfigError

__all__ = [
    "CLUSTER_MODES",
    "CONFIG_FILE_NAME",
    "ENV_PREFIX",
    "OTHER_ENV_NAMES",
    "SETTING_NAMES",
    "UNIQUE_MODES",
    "Settings",
    "default_data_dir",
    "default_user_agent",
    "did_you_mean",
    "load_settings",
]

ENV_PREFIX = "SCRAPEQ_"
log = logging.getLogger("scrapeq.settings")
CONFIG_FILE_NAME = "scrapeq.toml"


def default_data_dir(environ: Mapping[str, str] | None = None) -> Path:
    """Where the embedded Redis keeps its files: ``$XDG_DATA_HOME/scrapeq``.

    Args:
        environ: the environment to read (``os.environ`` when ``None``). A relative or
            empty ``XDG_DATA_HOME`` is ignored, as the XDG spec says.

    Returns:
        ``$XDG_DATA_HOME/scrapeq``, else ``$HOME/.local/share/scrapeq``.
    """
    env = os.environ if environ is None else environ
    xdg = env.get("XDG_DATA_HOME", "")
    if xdg and Path(xdg).is_absolute():
        return Path(xdg) / "scrapeq"
    home = env.get("HOME")
    base = Path(home) if home else Path.home()
    return base / ".local" / "share" / "scrapeq"


@cache
def default_user_agent() -> str:
    """``scrapeq/<version>``, the version read from the installed distribution."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"scrapeq/{version('scrapeq')}"
    except PackageNotFoundError:
        return "scrapeq/0.1.0"


def _cross_checks(s: Settings) -> None:
    if s.backoff_cap < s.backoff_base:
        raise ConfigError("backoff_cap", f"must be >= backoff_base ({s.backoff_base:g})")
    if s.breaker_cooldown_max < s.breaker_cooldown:
        raise ConfigError(
            "breaker_cooldown_max", f"must be >= breaker_cooldown ({s.breaker_cooldown:g})"
        )
    if s.breaker_min_calls > s.breaker_window:
        raise ConfigError("breaker_min_calls", f"must be <= breaker_window ({s.breaker_window})")
    if s.seen_filter == "bloom":
        _check_bloom(s)
    if s.proxy_ban_cooldown_max < s.proxy_ban_cooldown:
        raise ConfigError(
            "proxy_ban_cooldown_max", f"must be >= proxy_ban_cooldown ({s.proxy_ban_cooldown:g})"
        )
    if s.browser_bench_max < s.browser_bench:
        raise ConfigError("browser_bench_max", f"must be >= browser_bench ({s.browser_bench:g})")
    if s.proxy_cooldown_max < s.proxy_cooldown:
        raise ConfigError("proxy_cooldown_max", f"must be >= proxy_cooldown ({s.proxy_cooldown:g})")
    if s.domain_concurrency_max < s.domain_concurrency_min:
        raise ConfigError(
            "domain_concurrency_max",
            f"must be >= domain_concurrency_min ({s.domain_concurrency_min})",
        )
    if s.politeness == "ip" and s.partitions > 1:
        # a job's partition is chosen from its host before Redis knows the host's address
        raise ConfigError(
            "politeness", "ip needs partitions = 1 (use host or domain with partitions)"
        )


def _check_bloom(s: Settings) -> None:
    if s.recrawl_after is not None:
        raise ConfigError(
            "recrawl_after",
            "a Bloom filter cannot forget a URL: use seen_filter = exact with recrawl_after",
        )
    bits, _ = bloom_geometry(s.seen_capacity, s.seen_error_rate)
    if bits > BLOOM_MAX_BITS:
        raise ConfigError(
            "seen_capacity",
            f"a Bloom filter for {s.seen_capacity:,} URLs at error rate {s.seen_error_rate:g} "
            f"needs {bits:,} bits, over Redis's 512 MiB string ({BLOOM_MAX_BITS:,} bits)",
        )


@dataclass(frozen=True, slots=True)
class Settings:
    """Every setting of scrapeq, validated on construction (see docs/INTERFACE.md).

    Build one with :func:`load_settings`; ``Settings()`` gives the defaults. Invalid values
    raise :class:`~scrapeq.errors.ConfigError` naming the setting.
    """

    redis_url: str | None = _setting("optional_str", None, check=_check_redis_url)
    queue: str = _setting("str", "default", check=_check_queue)
    max_attempts: int = _count(5)
    backoff_base: float = _seconds(15.0)
    backoff_cap: float = _seconds(3600.0)
    lease: float = _seconds(60.0)
    request_timeout: float = _seconds(30.0)
    # A number: that many jobs in flight per domain; auto: adaptive, within
    # domain_concurrency_min and domain_concurrency_max (docs/DESIGN.md, "Adaptive politeness").
    domain_concurrency: int | str = _setting("conc", "auto", le=MAX_SCRIPT_INT, check=_check_conc)
    domain_delay: float = _seconds(0.0, positive=False)
    breaker_failures: int = _count(5)
    breaker_window: int = _count(20)
    breaker_rate: float = _fraction(0.5)
    breaker_min_calls: int = _count(10)
    slow_call: float = _seconds(10.0)
    breaker_cooldown: float = _seconds(120.0)
    breaker_cooldown_max: float = _seconds(3600.0)
    breaker_max_trips: int = _count(8)
    global_trip_share: float = _fraction(0.5)
    global_trip_min: int = _count(5)
    global_trip_window: float = _seconds(60.0)
    lanes: Lanes = field(default_factory=Lanes.default, metadata=_meta("lanes"))
    allow_private: bool = _setting("bool", False)
    max_body: int = _count(10_485_760)
    max_throttles: int = _count(20)
    max_releases: int = _count(20)
    max_redirects: int = _count(10, ge=0)
    proxy: tuple[str, ...] = _setting("proxy", (), check=_check_proxy)
    user_agent: str = field(
        default_factory=default_user_agent, metadata=_meta("str", check=_check_header)
    )
    respect_robots: bool = _setting("bool", False)
    shutdown_grace: float = _seconds(30.0, positive=False)
    data_dir: Path = field(default_factory=default_data_dir, metadata=_meta("path"))
    max_payload: int = _setting("int", 1_048_576, ge=1, check=_check_max_payload)
    handler_timeout: float = _seconds(60.0)
    # Ten times the default lease, five times the longest a well-behaved job holds its lease
    # with the defaults (robots.txt and the page, 30 s each, then the handler's 60 s): past
    # it the attempt is stuck, not slow.
    max_job_time: float = _seconds(600.0)
    canonical_keep_fragments: bool = _setting("bool", False)
    canonical_keep_blank_values: bool = _setting("bool", True)
    # 0: a done job's key is deleted at once; > 0: kept that long (with ``done_at``) so
    # ``scrapeq job show`` can say it is done.
    keep_done: float = _seconds(0.0, positive=False)
    unique: str = _setting("unique", "off")
    recrawl_after: float | None = _setting(
        "optional_float", None, gt=0.0, unit="seconds", check=_check_duration
    )
    seen_filter: str = _setting("str", "exact", check=_check_seen_filter)
    seen_capacity: int = _count(10_000_000)
    seen_error_rate: float = _setting("float", 0.001, gt=0.0, le=0.5)
    handler: str | None = _setting("optional_str", None, check=_check_handler)
    scope: str = _setting("str", "host", check=_check_scope)
    max_depth: int | None = _setting("optional_int", None, le=MAX_SCRIPT_INT, check=_at_least(0))
    max_pages: int | None = _setting("optional_int", None, le=MAX_SCRIPT_INT, check=_at_least(1))
    allow: tuple[str, ...] = _setting("patterns", (), check=_check_patterns)
    deny: tuple[str, ...] = _setting("patterns", (), check=_check_patterns)
    log_format: str = _setting("str", "text", check=_check_log_format)
    # The queue-wide progress line's period (0: none); one worker of all logs it.
    log_every: float = _seconds(10.0, positive=False)
    # Domains that status, the dashboard and /metrics detail (the rest are counted only).
    status_top: int = _count(50)
    # A domain with nothing queued or in flight and a closed breaker is forgotten this long
    # after its last job left (0: never).
    domain_ttl: float = _seconds(86400.0, positive=False)
    # Redis Cluster: auto detects it (INFO cluster), on requires one, off refuses one.
    cluster: str = _setting("str", "auto", check=_check_cluster)
    # Hash-tag partitions of one queue (1: the one tag {Q}); fixed once the queue is in use.
    partitions: int = _setting("int", 1, ge=1, le=1024)
    # Domains with their own series on the dashboard's /metrics (the worst first): bounds the
    # label cardinality whatever the number of domains (0: none).
    metrics_top_domains: int = _count(20, ge=0)
    # Bounds of an adaptive (auto) domain's concurrency limit.
    domain_concurrency_min: int = _count(1)
    domain_concurrency_max: int = _count(32)
    # What limits, delays and breakers apply to: each host, or each registrable domain.
    politeness: str = _setting("str", "host", check=_check_politeness)
    # auto: the limit a domain with no learned limit yet starts at when its most urgent ready
    # job is of the most urgent lane (a critical burst for a new site), within the bounds.
    domain_concurrency_urgent: int = _count(16)
    # Exits (engine/model/exits.py): a file of proxies, one `URL [tier=NAME] [cost=X]` a line, added
    # to `proxy`; the tiers' order, cheapest first (else as they first appear).
    proxy_file: str | None = _setting("optional_str", None)
    proxy_tiers: tuple[str, ...] = _setting("proxy", (), check=_check_proxy_tiers)
    # What says "banned through this exit" with a pool: these statuses, or a marker (a text)
    # in the first 64 KiB of the body; a handler may raise scrapeq.Banned.
    ban_statuses: str = _setting("str", "403,429", check=_check_ban_statuses)
    ban_markers: tuple[str, ...] = _setting("proxy", (), check=_check_markers)
    # A banned (exit, domain) pair rests this long, doubling while bans repeat, up to the max.
    proxy_ban_cooldown: float = _seconds(300.0)
    proxy_ban_cooldown_max: float = _seconds(21600.0)
    # A dead exit (failing for several domains) rests this long before one probe, doubling.
    proxy_cooldown: float = _seconds(60.0)
    proxy_cooldown_max: float = _seconds(3600.0)
    # A domain moved up a tier tries the cheaper tier again after this long.
    proxy_tier_quiet: float = _seconds(900.0)
    # sticky: each domain keeps one exit and a cookie jar (in Redis, any worker continues
    # it) until that exit is banned or down, then a new exit and a new jar.
    session: str = _setting("str", "none", check=_check_session)
    # on: a page fetched comes back by itself, when its estimated change rate, its weight and
    # its domain's revisit budget say (docs/DESIGN.md, "Revisits").
    revisit: str = _setting("switch", "off", check=_check_revisit)
    # Revisits per domain per hour (default: half what domain_delay allows, else 360).
    revisit_budget: float | None = _setting("optional_float", None, gt=0.0, le=1e9)
    # The shortest and the longest interval between two visits of a page.
    revisit_min_interval: float = _seconds(60.0)
    revisit_max_interval: float = _seconds(30 * 86400.0)
    # Bytes a domain may download before its follow-ups and revisits are skipped.
    max_bytes: int | None = _setting("optional_int", None, le=MAX_SCRIPT_INT, check=_at_least(1))
    # What fetches a job that names no fetcher, on a domain that names none: http (our
    # HTTP/1.1 client) or impersonate (curl_cffi, a browser's TLS fingerprint: the
    # impersonate extra).
    fetcher: str = _setting("str", "http", check=_check_fetcher)
    # fetcher auto: the share of an auto domain's pages above http fetched again with the
    # cheaper fetcher (a re-check: as good, the domain comes back down).
    auto_recheck: float = _setting("float", 0.1, ge=0.0, le=1.0)
    # The browser the impersonate fetcher's TLS handshake and headers look like (curl_cffi).
    impersonate_target: str = _setting("str", "chrome152", check=_check_target)
    # The browser fetcher (issue 42, the browser extra): Debian's chromium, driven by
    # Playwright; browsers per worker process, pages at once per browser, a browser recycled
    # after that many pages or above that RSS (bytes, its whole process tree), the resource
    # types its pages never load (comma-separated; "" loads everything).
    browser_path: str = _setting("str", "/usr/bin/chromium")
    browsers: int = _setting("int", 2, ge=1, le=64)
    browser_pages: int = _setting("int", 4, ge=1, le=256)
    browser_recycle_pages: int = _count(100)
    browser_max_rss: int = _count(2_147_483_648)
    browser_block: str = _setting("str", "image,font,media", check=_check_block)
    # page: a fresh browser context per page (no cookie or storage crosses jobs); browser:
    # one context per browser, its pages sharing cookies and cache until it is recycled
    # (2-3x the pages a second on a loaded machine: docs/BENCHMARKS.md).
    browser_context: str = _setting("str", "page", check=_check_browser_context)
    # More chromium command-line flags, as a shell would split them (e.g. "--lang=fr").
    browser_args: str = _setting("str", "")
    # A worker's browsers that crash (or fail to launch) this many times in a row are benched
    # for browser_bench seconds, doubling while its probe (one launch) fails, up to the max:
    # meanwhile its browser jobs wait, spending nothing, and status raises browsers_down.
    browser_bench_after: int = _setting("int", 3, ge=1, le=1000)
    browser_bench: float = _seconds(30.0)
    browser_bench_max: float = _seconds(600.0)

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            spec: _Spec = f.metadata["spec"]
            value = spec.normalize(f.name, getattr(self, f.name))
            spec.check_bounds(f.name, value)
            if spec.check is not None:
                spec.check(f.name, value)
            object.__setattr__(self, f.name, value)
        _cross_checks(self)

    def replace(self, **changes: object) -> Settings:
        """A copy with ``changes`` applied, validated again.

        Raises:
            ConfigError: a name is not a setting, or a value is bad.
        """
        typed = {name: _coerce(name, value) for name, value in changes.items()}
        return dataclasses.replace(self, **typed)  # type: ignore[arg-type]

    def as_dict(self) -> dict[str, object]:
        """The settings as JSON-friendly values: lanes as text, paths as str, lists."""
        out: dict[str, object] = {}
        for name in SETTING_NAMES:
            value = getattr(self, name)
            if isinstance(value, Lanes):
                value = value.to_text()
            elif isinstance(value, Path):
                value = str(value)
            elif isinstance(value, tuple):
                value = list(value)
            out[name] = value
        return out

    def __repr__(self) -> str:
        shown: dict[str, object] = {name: getattr(self, name) for name in SETTING_NAMES}
        if self.redis_url is not None:
            shown["redis_url"] = _redact_url(self.redis_url)
        shown["proxy"] = tuple(_redact_url(p) for p in self.proxy)
        body = ", ".join(f"{name}={value!r}" for name, value in shown.items())
        return f"Settings({body})"


def _redact_url(url: str) -> str:
    """``url`` with its credentials (user and password) as ``***`` (:func:`redact_url`)."""
    return redact_url(url)


_SPECS: dict[str, _Spec] = {f.name: f.metadata["spec"] for f in dataclasses.fields(Settings)}
SETTING_NAMES: tuple[str, ...] = tuple(_SPECS)
"""Every setting name, in docs/INTERFACE.md order."""


def _coerce(name: str, value: object) -> object:
    spec = _SPECS.get(name)
    if spec is None:
        raise ConfigError(name, "unknown setting")
    return spec.coerce(name, value)


# --- loading ---------------------------------------------------------------------------


def _config_path(config_file: str | Path | None, env: Mapping[str, str]) -> Path | None:
    explicit = config_file if config_file is not None else env.get("SCRAPEQ_CONFIG") or None
    if explicit is not None:
        path = Path(explicit).expanduser()
        if not path.is_file():
            raise ConfigError("config", f"file not found: {path}")
        return path
    fallback = Path(CONFIG_FILE_NAME)
    return fallback if fallback.is_file() else None


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError("config", f"{path}: {exc}") from None
    except RecursionError:  # arrays or tables nested past the parser's stack
        raise ConfigError("config", f"{path}: nested too deeply to read") from None
    except OSError as exc:
        raise ConfigError("config", f"{path}: {exc.strerror or exc}") from None


def _file_values(path: Path) -> dict[str, object]:
    """The settings a TOML file sets: top-level keys and a ``[scrapeq]`` table."""
    data = _read_toml(path)
    table = data.pop("scrapeq", {})
    if not isinstance(table, dict):
        raise ConfigError("config", f"{path}: [scrapeq] must be a table")
    values: dict[str, object] = {}
    for key, value in [*data.items(), *table.items()]:
        if key not in _SPECS:
            raise ConfigError(key, "unknown setting")
        if key in values:
            raise ConfigError(key, f"set twice in {path} (top level and [scrapeq])")
        values[key] = value
    return values


def _env_values(env: Mapping[str, str]) -> dict[str, object]:
    """``SCRAPEQ_<NAME>`` values, still text.

    Other ``SCRAPEQ_*`` variables are not settings and are ignored: those scrapeq reads for
    itself (:data:`OTHER_ENV_NAMES`) silently, any other (a typo) with a warning.
    """
    _warn_unknown_env(env)
    return {name: env[key] for name in SETTING_NAMES if (key := ENV_PREFIX + name.upper()) in env}


#: ``SCRAPEQ_*`` variables that are not settings but are read by scrapeq (the settings file,
#: the redis-server binary to embed, the dashboard's and the frontier's tokens) or by its
#: tests (screenshots).
OTHER_ENV_NAMES = frozenset(
    {
        "SCRAPEQ_CONFIG",
        "SCRAPEQ_REDIS_SERVER",
        "SCRAPEQ_DASHBOARD_TOKEN",
        "SCRAPEQ_FRONTIER_TOKEN",
        "SCRAPEQ_SCREENSHOTS",
    }
)
#: The unknown variables this process has warned about (each once).
_WARNED_ENV: set[str] = set()


def _warn_unknown_env(env: Mapping[str, str]) -> None:
    """Warn once per process about each ``SCRAPEQ_*`` variable that is neither a setting nor
    one of :data:`OTHER_ENV_NAMES`, naming the setting meant when one is close (a typo in
    the TOML file is an error; in the environment, which other programs share, a warning)."""
    known = {ENV_PREFIX + name.upper() for name in SETTING_NAMES} | OTHER_ENV_NAMES
    for key in sorted(env):
        if key.startswith(ENV_PREFIX) and key not in known and key not in _WARNED_ENV:
            _WARNED_ENV.add(key)
            hint = did_you_mean(key, known - OTHER_ENV_NAMES)
            log.warning("environment variable %r is not a scrapeq setting: ignored%s", key, hint)


def did_you_mean(name: str, known: Iterable[str], *, quote: bool = False) -> str:
    """``"; did you mean X?"`` naming the one of ``known`` closest to a misspelt ``name``
    (``repr`` of it with ``quote``), or ``""`` when none is close."""
    close = difflib.get_close_matches(name, sorted(known), n=1)
    if not close:
        return ""
    return f"; did you mean {close[0]!r}?" if quote else f"; did you mean {close[0]}?"


def _override_values(overrides: Mapping[str, object]) -> dict[str, object]:
    values: dict[str, object] = {}
    for name, value in overrides.items():
        if name not in _SPECS:
            raise ConfigError(name, "unknown setting")
        if value is not None:
            values[name] = value
    return values


def load_settings(
    *,
    config_file: str | Path | None = None,
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, object] | None = None,
    defaults: Mapping[str, object] | None = None,
) -> Settings:
    """Load the settings: flag > environment > file > default.

    Args:
        config_file: a TOML file; ``None`` falls back to ``$SCRAPEQ_CONFIG``, then to
            ``./scrapeq.toml`` when it exists.
        environ: the environment (``os.environ`` when ``None``).
        overrides: typed values from CLI flags; ``None`` values are skipped, strings are
            parsed like environment values.
        defaults: the caller's own defaults, in place of the built-in ones (an integration's:
            Scrapy's queue is its spider's name); read like ``overrides``, below the file.

    Returns:
        The validated settings.

    Raises:
        ConfigError: named ``config`` for a missing or unreadable file, otherwise named
            after the bad or unknown setting.
    """
    env = os.environ if environ is None else environ
    path = _config_path(config_file, env)
    merged: dict[str, object] = {"data_dir": default_data_dir(env)}
    merged.update(_override_values(defaults or {}))
    if path is not None:
        merged.update(_file_values(path))
    merged.update(_env_values(env))
    merged.update(_override_values(overrides or {}))
    typed = {name: _coerce(name, value) for name, value in merged.items()}
    return Settings(**typed)  # type: ignore[arg-type]
