"""The integration's settings: scrapeq's, loaded as the CLI loads them, and Scrapy's own.

scrapeq's settings come from :func:`scrapeq.engine.config.settings.load_settings`: flag >
environment (``SCRAPEQ_<NAME>``) > file (Scrapy's ``SCRAPEQ_CONFIG``, else ``$SCRAPEQ_CONFIG``, else
``./scrapeq.toml``) > default, the Scrapy settings playing the flags' part: ``SCRAPEQ_SETTINGS``
(a dict of scrapeq settings by name) and ``SCRAPEQ_REDIS_URL``, ``SCRAPEQ_QUEUE``,
``SCRAPEQ_UNIQUE`` (which win over the same names in ``SCRAPEQ_SETTINGS``). Two defaults are
the integration's: the queue is the spider's name, and ``unique`` is ``seen`` (a request is
fetched once per crawl, as with Scrapy's own dupefilter). ``redis_url`` unset is the CLI's
embedded server.

Scrapy's only (settings.py or ``-s``, never the environment): ``SCRAPEQ_LANE`` [the default
lane], ``SCRAPEQ_CLAIM_BATCH`` [16], ``SCRAPEQ_RETRY_CALLBACK_ERRORS`` [False],
``SCRAPEQ_NEW_CRAWL`` [False: forget what the queue has seen before this process opens, as
``scrapeq crawl --new`` does; give it to the first process of a new crawl only],
``SCRAPEQ_URGENT_SLOTS`` [an eighth of ``CONCURRENT_REQUESTS``, at least 1 from 2 up: claim
slots work of other lanes leaves free for the most urgent lane's; 0: none kept],
``SCRAPEQ_TUNE_GC`` [True: tune the garbage collector while the crawl runs, as the worker
does (:func:`scrapeq.runtime.gc_tuning.tuned_gc`); False: leave it alone].

A Scrapy setting named ``SCRAPEQ_*`` that is none of these (a typo: ``SCRAPEQ_QEUE``), a name
in ``SCRAPEQ_SETTINGS`` that is not a scrapeq setting, and a value Scrapy cannot read as its
type are ConfigErrors naming the setting, with the name meant when one is close (as the CLI
warns of a misspelt ``SCRAPEQ_*`` environment variable: :func:`did_you_mean`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from scrapy.crawler import Crawler

from scrapeq.engine.config.settings import (
    ENV_PREFIX,
    SETTING_NAMES,
    Settings,
    did_you_mean,
    load_settings,
)
from scrapeq.errors import ConfigError

__all__ = ["SCRAPY_SETTING_NAMES", "ScrapyConfig"]

T = TypeVar("T")

#: Scrapy settings that each name one scrapeq setting (they win over ``SCRAPEQ_SETTINGS``).
_NAMED = {"SCRAPEQ_REDIS_URL": "redis_url", "SCRAPEQ_QUEUE": "queue", "SCRAPEQ_UNIQUE": "unique"}
#: Every Scrapy setting of the integration (any other ``SCRAPEQ_*`` one is a mistake).
SCRAPY_SETTING_NAMES = frozenset(
    {
        *_NAMED,
        "SCRAPEQ_SETTINGS",
        "SCRAPEQ_CONFIG",
        "SCRAPEQ_LANE",
        "SCRAPEQ_CLAIM_BATCH",
        "SCRAPEQ_RETRY_CALLBACK_ERRORS",
        "SCRAPEQ_NEW_CRAWL",
        "SCRAPEQ_URGENT_SLOTS",
        "SCRAPEQ_TUNE_GC",
    }
)


@dataclass(frozen=True, slots=True)
class ScrapyConfig:
    """What a crawl runs with (module docstring).

    Attributes:
        settings: scrapeq's settings, loaded as the CLI loads them.
        lane: the lane of a request without ``meta["scrapeq_lane"]`` (None: the default one).
        claim_batch: jobs claimed per round trip at most.
        concurrency: Scrapy's ``CONCURRENT_REQUESTS``: jobs held at once at most.
        set_timeout: give requests scrapeq's ``request_timeout`` (the project did not set
            ``DOWNLOAD_TIMEOUT``).
        retry_callback_errors: a callback that raises retries its job (default: the job is
            done, the error logged by Scrapy: a spider's bug is not the page's fault).
        new_crawl: start a new crawl (``Queue.new_crawl``) before taking the start requests.
        urgent_slots: claim slots kept for jobs of the most urgent lane (work of the other
            lanes fills ``concurrency - urgent_slots`` at most).
        tune_gc: tune the garbage collector while the crawl runs (``tuned_gc``).
    """

    settings: Settings
    lane: str | None
    claim_batch: int
    concurrency: int
    set_timeout: bool
    retry_callback_errors: bool
    new_crawl: bool = False
    urgent_slots: int = 0
    tune_gc: bool = True

    @classmethod
    def from_crawler(cls, crawler: Crawler, spider_name: str) -> ScrapyConfig:
        """The crawl's configuration.

        Raises:
            ConfigError: a setting is bad (named: scrapeq's by its name, Scrapy's by its own).
        """
        s = crawler.settings
        _check_names(crawler)
        settings = load_settings(
            config_file=s.get("SCRAPEQ_CONFIG") or None,
            overrides=_flags(crawler),
            defaults={"queue": spider_name, "unique": "seen"},
        )
        batch = _read(s.getint, "SCRAPEQ_CLAIM_BATCH", 16)
        if batch < 1:
            raise ConfigError("SCRAPEQ_CLAIM_BATCH", f"must be >= 1, got {batch}")
        concurrency = _read(s.getint, "CONCURRENT_REQUESTS", 16)
        urgent = _read(
            s.getint, "SCRAPEQ_URGENT_SLOTS", max(1, concurrency // 8) if concurrency > 1 else 0
        )
        if not 0 <= urgent < concurrency:
            raise ConfigError(
                "SCRAPEQ_URGENT_SLOTS",
                f"must be >= 0 and below CONCURRENT_REQUESTS ({concurrency}), got {urgent}",
            )
        lane = s.get("SCRAPEQ_LANE")
        if lane is not None:
            settings.lanes.get(lane)  # raises ConfigError naming the known lanes
        return cls(
            settings=settings,
            lane=lane,
            claim_batch=batch,
            concurrency=concurrency,
            # Scrapy's DOWNLOAD_TIMEOUT (180 s) unless the project set it: scrapeq's
            # request_timeout, so a hanging site costs what it costs scrapeq's worker.
            set_timeout=(s.getpriority("DOWNLOAD_TIMEOUT") or 0) <= 0,
            retry_callback_errors=_read(s.getbool, "SCRAPEQ_RETRY_CALLBACK_ERRORS", False),
            new_crawl=_read(s.getbool, "SCRAPEQ_NEW_CRAWL", False),
            urgent_slots=urgent,
            tune_gc=_read(s.getbool, "SCRAPEQ_TUNE_GC", True),
        )


def _read(getter: Callable[[str, T], T], name: str, default: T) -> T:
    """A Scrapy setting read by ``getter`` (``getint``, ``getbool``); a value it
    cannot read is a ConfigError naming the setting (not Scrapy's ValueError)."""
    try:
        return getter(name, default)
    except (ValueError, TypeError) as exc:
        raise ConfigError(name, f"cannot be read: {exc}") from None


def _check_names(crawler: Crawler) -> None:
    """Raise a ConfigError for a ``SCRAPEQ_*`` Scrapy setting the integration does not read,
    and for a name in ``SCRAPEQ_SETTINGS`` that is not a scrapeq setting (module docstring)."""
    s = crawler.settings
    for key in sorted(k for k in s if isinstance(k, str) and k.startswith(ENV_PREFIX)):
        if key in SCRAPY_SETTING_NAMES:
            continue
        name = key.removeprefix(ENV_PREFIX).lower()
        if name in SETTING_NAMES:  # scrapeq's own, given as a Scrapy setting
            raise ConfigError(
                key,
                f"not a Scrapy setting of scrapeq; scrapeq's {name} goes in SCRAPEQ_SETTINGS "
                f"(-s 'SCRAPEQ_SETTINGS={{\"{name}\": ...}}') or the environment variable {key}",
            )
        raise ConfigError(
            key, f"not a Scrapy setting of scrapeq{did_you_mean(key, SCRAPY_SETTING_NAMES)}"
        )
    for name in _scrapeq_settings(crawler):
        if name not in SETTING_NAMES:
            hint = did_you_mean(str(name), SETTING_NAMES, quote=True)
            raise ConfigError(str(name), f"unknown setting (in SCRAPEQ_SETTINGS){hint}")


def _scrapeq_settings(crawler: Crawler) -> dict[str, object]:
    """``SCRAPEQ_SETTINGS``: a dict, or its JSON text (a ConfigError when it is neither)."""
    try:
        return dict(crawler.settings.getdict("SCRAPEQ_SETTINGS"))
    except (ValueError, TypeError) as exc:
        raise ConfigError("SCRAPEQ_SETTINGS", f"not a dict or its JSON text: {exc}") from None


def _flags(crawler: Crawler) -> dict[str, object]:
    """scrapeq settings the Scrapy settings give (the CLI's flags, in load_settings' terms)."""
    s = crawler.settings
    flags = _scrapeq_settings(crawler)
    for key, name in _NAMED.items():
        if s.get(key) is not None:
            flags[name] = s.get(key)
    return flags
