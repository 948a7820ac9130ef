"""How each setting is read and checked: text parsers (environment values, strings), type
normalisers (constructor, TOML, overrides), the checks beyond the type, and the table of
kinds (:class:`_Spec`). :mod:`scrapeq.engine.config.settings` declares the settings with them and
loads them. Split from :mod:`scrapeq.engine.config.settings`."""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import SplitResult, urlsplit

from scrapeq.engine.config.limits import MAX_SCRIPT_INT, duration_error
from scrapeq.engine.model.exits import parse_entry, parse_statuses, parse_tiers
from scrapeq.engine.model.keys import validate_queue_name
from scrapeq.engine.model.lanes import Lanes
from scrapeq.engine.model.seen import SEEN_FILTERS
from scrapeq.engine.model.urls import POLITENESS, SCOPES
from scrapeq.errors import ConfigError

_REDIS_SCHEMES = ("redis", "rediss", "unix")
_TRUE = frozenset({"true", "1", "yes", "on"})
_FALSE = frozenset({"false", "0", "no", "off"})
_INT = re.compile(r"^[+-]?[0-9]+$")
#: The de-duplication modes of an enqueue (setting ``unique``).
UNIQUE_MODES = ("off", "pending", "seen")
#: The ``cluster`` setting's values: detect Redis Cluster, require it, or refuse it.
CLUSTER_MODES = ("auto", "on", "off")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


# --- parsing text (env values, strings in overrides and TOML) --------------------------


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _number_word(spec: _Spec) -> str:
    return f"a number of {spec.unit}" if spec.unit else "a number"


def _text_int(name: str, text: str, spec: _Spec) -> object:
    if not _INT.match(text.strip()):
        raise ConfigError(name, f"expected an integer, got {text!r}")
    return int(text.strip())


def _text_float(name: str, text: str, spec: _Spec) -> object:
    try:
        return float(text.strip())
    except ValueError:
        raise ConfigError(name, f"expected {_number_word(spec)}, got {text!r}") from None


def _text_bool(name: str, text: str, spec: _Spec) -> object:
    word = text.strip().lower()
    if word in _TRUE:
        return True
    if word in _FALSE:
        return False
    raise ConfigError(name, f"expected true/false (or 1/0, yes/no, on/off), got {text!r}")


def _text_optional(name: str, text: str, spec: _Spec) -> object:
    return text.strip() or None


def _text_proxy(name: str, text: str, spec: _Spec) -> object:
    return tuple(item.strip() for item in text.split(",") if item.strip())


def _text_path(name: str, text: str, spec: _Spec) -> object:
    if not text.strip():
        raise ConfigError(name, "expected a path, got an empty string")
    return Path(text.strip()).expanduser()


def _text_lanes(name: str, text: str, spec: _Spec) -> object:
    return Lanes.parse(text)


def _text_str(name: str, text: str, spec: _Spec) -> object:
    return text


def _text_optional_float(name: str, text: str, spec: _Spec) -> object:
    if text.strip().lower() in ("", "none"):
        return None
    return _text_float(name, text, spec)


def _text_unique(name: str, text: str, spec: _Spec) -> object:
    word = text.strip().lower()
    if word in UNIQUE_MODES:
        return word
    if word in _TRUE or word in _FALSE:
        return _text_bool(name, word, spec)
    raise ConfigError(name, f"expected off, pending or seen, got {text!r}")


def _text_switch(name: str, text: str, spec: _Spec) -> object:
    """An off/on setting: the boolean words (true/false, 1/0, yes/no) say it too."""
    word = text.strip().lower()
    if word in _TRUE:
        return "on"
    if word in _FALSE:
        return "off"
    raise ConfigError(name, f"expected off or on (or true/false, 1/0, yes/no), got {text!r}")


def _text_optional_int(name: str, text: str, spec: _Spec) -> object:
    return None if not text.strip() else _text_int(name, text, spec)


def _text_conc(name: str, text: str, spec: _Spec) -> object:
    if text.strip().lower() == "auto":
        return "auto"
    if not _INT.match(text.strip()):
        raise ConfigError(name, f"expected an integer or auto, got {text!r}")
    return int(text.strip())


def _text_patterns(name: str, text: str, spec: _Spec) -> object:
    # whitespace-separated: a regex for URLs has no need of a space (write \s or %20)
    return tuple(text.split())


# --- normalising typed values (constructor, TOML, overrides) ---------------------------


def _norm_int(name: str, value: object, spec: _Spec) -> object:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(name, f"expected an integer, got {_shown(value)}")
    return value


def _norm_float(name: str, value: object, spec: _Spec) -> object:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(name, f"expected {_number_word(spec)}, got {_shown(value)}")
    if not math.isfinite(value):
        raise ConfigError(name, f"expected a finite number, got {value!r}")
    return float(value)


def _norm_bool(name: str, value: object, spec: _Spec) -> object:
    if not isinstance(value, bool):
        raise ConfigError(name, f"expected true or false, got {_shown(value)}")
    return value


def _norm_str(name: str, value: object, spec: _Spec) -> object:
    if not isinstance(value, str):
        raise ConfigError(name, f"expected a string, got {_shown(value)}")
    return value


def _norm_switch(name: str, value: object, spec: _Spec) -> object:
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, str):
        return _text_switch(name, value, spec)
    raise ConfigError(name, f"expected off or on, got {_shown(value)}")


def _norm_optional(name: str, value: object, spec: _Spec) -> object:
    return None if value is None else _norm_str(name, value, spec)


def _norm_optional_float(name: str, value: object, spec: _Spec) -> object:
    return None if value is None else _norm_float(name, value, spec)


def _norm_unique(name: str, value: object, spec: _Spec) -> object:
    if isinstance(value, bool):
        return "pending" if value else "off"
    if isinstance(value, str) and value in UNIQUE_MODES:
        return value
    if isinstance(value, str):
        return _text_unique(name, value, spec)
    raise ConfigError(name, f"expected off, pending or seen, got {_shown(value)}")


def _norm_optional_int(name: str, value: object, spec: _Spec) -> object:
    return None if value is None else _norm_int(name, value, spec)


def _norm_conc(name: str, value: object, spec: _Spec) -> object:
    if isinstance(value, str):
        return _text_conc(name, value, spec)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(name, f"expected an integer or auto, got {_shown(value)}")
    return value


def _norm_text_list(parse: _Text, what: str) -> _Norm:
    """Normalise a list of strings, or text that ``parse`` splits into one (``what``: its
    items, for the message)."""

    def norm(name: str, value: object, spec: _Spec) -> object:
        if isinstance(value, str):
            return parse(name, value, spec)
        if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
            raise ConfigError(name, f"expected a list of {what}, got {_shown(value)}")
        return tuple(value)

    return norm


def _norm_path(name: str, value: object, spec: _Spec) -> object:
    if isinstance(value, str):
        return _text_path(name, value, spec)
    if not isinstance(value, os.PathLike):
        raise ConfigError(name, f"expected a path, got {_shown(value)}")
    return Path(value)


def _norm_lanes(name: str, value: object, spec: _Spec) -> object:
    if isinstance(value, Lanes):
        return value
    if isinstance(value, Mapping):
        return Lanes.from_offsets(value)
    raise ConfigError(name, f"expected lanes text or a table, got {_shown(value)}")


# --- checks beyond the type -----------------------------------------------------------


def _redact(parts: SplitResult) -> str:
    """``scheme://host[:port]``, never the credentials."""
    host = parts.hostname or ""
    return f"{parts.scheme}://{host}" + (f":{parts.port}" if parts.port else "")


def _check_queue(name: str, value: Any) -> None:
    try:
        validate_queue_name(value)
    except ValueError as exc:
        raise ConfigError(name, str(exc)) from None


def _check_redis_url(name: str, value: Any) -> None:
    if value is None:
        return
    scheme = urlsplit(value).scheme.lower()
    if scheme not in _REDIS_SCHEMES:
        found = f"scheme {scheme!r}" if scheme else "no scheme"
        raise ConfigError(name, f"expected a redis://, rediss:// or unix:// URL, got {found}")


def _check_proxy(name: str, value: Any) -> None:
    # each entry: URL [tier=NAME] [cost=X] [cost_gb=Y], or direct (engine/model/exits.py)
    for entry in value:
        parse_entry(entry, setting=name)


def _check_proxy_tiers(name: str, value: Any) -> None:
    parse_tiers(value, name)


def _check_ban_statuses(name: str, value: Any) -> None:
    parse_statuses(value, name)


def _check_session(name: str, value: Any) -> None:
    if value not in ("none", "sticky"):
        raise ConfigError(name, f"expected none or sticky, got {value!r}")


#: The fetchers a job can go through (setting ``fetcher``, a job's and a domain's own):
#: ``http`` (our HTTP/1.1 client, runtime/http1.py), ``impersonate`` (curl_cffi with a
#: browser's TLS fingerprint) or ``browser`` (chromium driven by Playwright: the rendered
#: DOM), or ``auto`` (one of them, chosen per domain by the claim for the whole fleet:
#: ``lua/includes/auto.lua``).
FETCHERS = ("http", "impersonate", "browser", "auto")
#: The resource types a browser fetcher's pages may be kept from loading (``browser_block``):
#: Playwright's ``Request.resource_type`` names.
RESOURCE_TYPES = frozenset(
    {
        *("document", "stylesheet", "image", "media", "font", "script", "texttrack"),
        *("xhr", "fetch", "eventsource", "websocket", "manifest", "other"),
    }
)


def _check_browser_context(name: str, value: Any) -> None:
    if value not in ("page", "browser"):
        raise ConfigError(name, f"expected page or browser, got {value!r}")


def _check_block(name: str, value: Any) -> None:
    for word in (w.strip() for w in value.split(",")):
        if word and word not in RESOURCE_TYPES:
            raise ConfigError(name, f"{word!r} is not a resource type (e.g. image,font,media)")
        if word == "document":
            raise ConfigError(name, "document cannot be blocked: it is the page")


_TARGET = re.compile(r"^[a-z][a-z0-9_]{0,39}$")


def _check_fetcher(name: str, value: Any) -> None:
    if value not in FETCHERS:
        raise ConfigError(name, f"expected {' or '.join(FETCHERS)}, got {value!r}")


def _check_target(name: str, value: Any) -> None:
    # the name is checked against curl_cffi's targets when an impersonate fetcher starts
    if not _TARGET.match(value):
        raise ConfigError(name, f"expected a browser target such as chrome152, got {value!r}")


def _check_markers(name: str, value: Any) -> None:
    for marker in value:
        if len(marker) > 200 or _CONTROL.search(marker):
            raise ConfigError(
                name, f"a marker is at most 200 characters, no control ones: {marker!r}"
            )


#: Largest ``max_payload``: Redis refuses an argument over ``proto-max-bulk-len`` (512 MiB by
#: default) and an enqueue call carries a job's URL and fields beside its payload.
MAX_PAYLOAD_LIMIT = 256 * 1024 * 1024


def _check_max_payload(name: str, value: Any) -> None:
    if value > MAX_PAYLOAD_LIMIT:
        raise ConfigError(name, f"must be <= {MAX_PAYLOAD_LIMIT} bytes (256 MiB), got {value!r}")


def _check_seen_filter(name: str, value: Any) -> None:
    if value not in SEEN_FILTERS:
        raise ConfigError(name, f"expected exact or bloom, got {value!r}")


def _check_handler(name: str, value: Any) -> None:
    if value is None:
        return
    module, colon, attr = value.partition(":")
    if not colon or not module.strip() or not attr.strip():
        raise ConfigError(name, f"expected package.module:function, got {value!r}")


def _check_scope(name: str, value: Any) -> None:
    if value not in SCOPES:
        raise ConfigError(name, f"expected {', '.join(SCOPES)}, got {value!r}")


def _check_politeness(name: str, value: Any) -> None:
    if value not in POLITENESS:
        raise ConfigError(name, f"expected {' or '.join(POLITENESS)}, got {value!r}")


def _check_revisit(name: str, value: Any) -> None:
    if value not in ("off", "on"):
        raise ConfigError(name, f"expected off or on, got {value!r}")


def _at_least(low: int) -> _Check:
    def check(name: str, value: Any) -> None:
        if value is not None and value < low:
            raise ConfigError(name, f"must be >= {low} (or unset), got {value!r}")

    return check


def _check_duration(name: str, value: Any) -> None:
    """At most what a queue keeps (``engine.limits``: 100 years); None passes (unset)."""
    if value is not None and (why := duration_error(value)) is not None:
        raise ConfigError(name, why)


def _check_conc(name: str, value: Any) -> None:
    if value != "auto" and value < 1:
        raise ConfigError(name, f"must be >= 1 or auto, got {value!r}")


def _check_patterns(name: str, value: Any) -> None:
    for pattern in value:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ConfigError(name, f"bad pattern {pattern!r}: {exc}") from None


def _check_log_format(name: str, value: Any) -> None:
    if value not in ("text", "json"):
        raise ConfigError(name, f"expected text or json, got {value!r}")


def _check_cluster(name: str, value: Any) -> None:
    if value not in CLUSTER_MODES:
        raise ConfigError(name, f"expected auto, on or off, got {value!r}")


def _check_header(name: str, value: Any) -> None:
    if not value.strip() or _CONTROL.search(value):
        raise ConfigError(name, "must be non-empty with no control characters")


# --- the table -------------------------------------------------------------------------

_Text = Callable[[str, str, "_Spec"], object]
_Norm = Callable[[str, object, "_Spec"], object]
_Check = Callable[[str, Any], None]

_KINDS: dict[str, tuple[_Text, _Norm]] = {
    "int": (_text_int, _norm_int),
    "float": (_text_float, _norm_float),
    "bool": (_text_bool, _norm_bool),
    "str": (_text_str, _norm_str),
    "optional_str": (_text_optional, _norm_optional),
    "optional_float": (_text_optional_float, _norm_optional_float),
    "unique": (_text_unique, _norm_unique),
    "switch": (_text_switch, _norm_switch),
    "proxy": (_text_proxy, _norm_text_list(_text_proxy, "proxy URLs")),
    "path": (_text_path, _norm_path),
    "lanes": (_text_lanes, _norm_lanes),
    "optional_int": (_text_optional_int, _norm_optional_int),
    "patterns": (_text_patterns, _norm_text_list(_text_patterns, "URL patterns")),
    "conc": (_text_conc, _norm_conc),
}


@dataclass(frozen=True, slots=True)
class _Spec:
    """How one setting is parsed and checked.

    ``gt``/``ge``/``le`` bound numbers; ``unit`` words messages; ``check`` does the rest.
    """

    kind: str
    gt: float | None = None
    ge: float | None = None
    le: float | None = None
    unit: str = ""
    check: _Check | None = None

    def from_text(self, name: str, text: str) -> object:
        return _KINDS[self.kind][0](name, text, self)

    def normalize(self, name: str, value: object) -> object:
        return _KINDS[self.kind][1](name, value, self)

    def coerce(self, name: str, value: object) -> object:
        """Text is parsed; anything else is taken as already typed."""
        if isinstance(value, str):
            value = self.from_text(name, value)
        return self.normalize(name, value)

    def check_bounds(self, name: str, value: Any) -> None:
        if value is None or isinstance(value, str):  # unset, or a word (conc: auto)
            return
        unit = f" {self.unit}" if self.unit else ""
        if self.gt is not None and self.le is not None and not self.gt < value <= self.le:
            raise ConfigError(name, f"must be in ({self.gt:g}, {self.le:g}], got {value!r}")
        if self.gt is not None and not value > self.gt:
            raise ConfigError(name, f"must be > {self.gt:g}{unit}, got {value!r}")
        if self.ge is not None and not value >= self.ge:
            raise ConfigError(name, f"must be >= {self.ge:g}{unit}, got {value!r}")
        if self.le is not None and not value <= self.le:
            raise ConfigError(name, f"must be <= {_bound(self.le)}{unit}, got {value!r}")


def _bound(value: float) -> str:
    """A bound as people read it: an integer exactly, a fraction shortest."""
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def _meta(kind: str, **spec: Any) -> dict[str, _Spec]:
    return {"spec": _Spec(kind, **spec)}


def _setting(kind: str, default: object, **spec: Any) -> Any:
    return field(default=default, metadata=_meta(kind, **spec))


def _count(default: int, ge: int = 1) -> Any:
    # counts reach the scripts: at most the integers Lua writes back exactly (engine.limits)
    return _setting("int", default, ge=ge, le=MAX_SCRIPT_INT)


def _seconds(default: float, *, positive: bool = True) -> Any:
    # durations reach Redis as times: at most 100 years (engine.limits)
    if positive:
        return _setting("float", default, gt=0.0, unit="seconds", check=_check_duration)
    return _setting("float", default, ge=0.0, unit="seconds", check=_check_duration)


def _fraction(default: float) -> Any:
    return _setting("float", default, gt=0.0, le=1.0)
