"""Exits: the proxies (and the direct route) a queue fetches through, as failure domains.

A queue's **exit pool** comes from the ``proxy`` setting (a comma-separated list) and the
``proxy_file`` setting (one exit a line), each entry ``URL [tier=NAME] [cost=X] [cost_gb=Y]``
or the word ``direct`` (no proxy). Tiers are ordered cheapest first: by ``proxy_tiers`` when it
is set, else in the order they first appear; an entry without a tier is in tier ``default``.

Each exit has an **id**: ``direct``, or 12 hex digits of a BLAKE2b hash of its whole URL, so two
proxies that differ only by their password are two exits, and the id is not the credential
(:attr:`Exit.name` is the URL with its user and password as ``***``, for every display; the
fetcher alone gets :attr:`Exit.url`).

A proxy URL must name one host to every URL parser: a user info holding a second ``@``, an
unescaped ``#``, ``?``, ``/`` or ``\\`` (``http://carol:12#pw@host``: ``urlsplit`` reads host
``carol``, port 12) is refused, without echoing it; percent-encode such characters.

The scripts (``lua/includes/exits.lua``) hold the rules: which exit a claimed job goes
through (per domain, least recently used among the usable exits of the domain's tier), when
a (exit, domain) pair is benched after a ban, when an exit is dead, when a domain's tier goes
up or back down. This module only describes the pool; :meth:`ExitPool.wire` is what the
scripts receive (``ScriptConfig.exits``).
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

from scrapeq.engine.model.urls import REDACTED, redact_url
from scrapeq.errors import ConfigError, ConfigProblems

DIRECT: Final = "direct"
"""The exit that is no proxy: the worker connects to the site itself."""

DEFAULT_TIER: Final = "default"
MAX_EXITS: Final = 200
"""Exits in one pool at most: the pool travels with every script call (ScriptConfig)."""
MAX_TIERS: Final = 16
_TIER_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,31}$")
#: The proxies the fetcher speaks (aiohttp: no SOCKS without a package scrapeq does not
#: depend on). A socks one is refused when the settings load, before anything is enqueued.
_PROXY_SCHEMES: Final = frozenset({"http", "https"})
_SOCKS_SCHEMES: Final = frozenset({"socks4", "socks4a", "socks5", "socks5h"})
#: Statuses that mean "this exit is banned by this site" by default (``ban_statuses``).
DEFAULT_BAN_STATUSES: Final = (403, 429)
_MAX_FILE_BYTES: Final = 1_048_576
_COMMENT = re.compile(r"\s+#.*$")  # a comment after an entry (a '#' inside a URL stays)


@dataclass(frozen=True, slots=True)
class Exit:
    """One exit of the pool.

    Attributes:
        id: ``direct`` or 12 hex digits of the URL's hash (credentials included).
        url: the proxy URL with its credentials; None for ``direct``.
        tier: the tier's name.
        cost: cost per request (any currency; for reports), or None.
        cost_gb: cost per GB downloaded, or None.
    """

    id: str
    url: str | None
    tier: str
    cost: float | None = None
    cost_gb: float | None = None

    @property
    def name(self) -> str:
        """The URL with its user and password as ``***`` (``direct`` for the direct route):
        ``http://***:***@host:port``, ``http://***@host:port``."""
        if self.url is None:
            return DIRECT
        return redact_url(self.url)

    @property
    def host(self) -> str | None:
        return urlsplit(self.url).hostname if self.url else None


def exit_id(url: str | None) -> str:
    """The id of the exit through ``url`` (None: direct)."""
    if url is None:
        return DIRECT
    return hashlib.blake2b(url.encode(), digest_size=6).hexdigest()


def _number(name: str, key: str, text: str, where: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise ConfigError(name, f"{where}: {key} must be a number >= 0, got {text!r}")
    return value


def parse_entry(text: str, *, setting: str = "proxy", where: str = "") -> Exit:
    """One pool entry: ``URL [tier=NAME] [cost=X] [cost_gb=Y]`` or ``direct [tier=...]``.

    Raises:
        ConfigError: a bad URL, scheme, tier name or cost (named ``setting``, the message
            never shows a password).
    """
    words = text.split()
    if not words:
        raise ConfigError(setting, f"{where}empty proxy entry")
    head, attrs = words[0], words[1:]
    at = where or f"{_redacted(head)}: "
    url: str | None
    url = None if head.lower() == DIRECT else _check_url(setting, head, at)
    tier, cost, cost_gb = DEFAULT_TIER, None, None
    for attr in attrs:
        key, eq, value = attr.partition("=")
        key = key.lower()
        if not eq or not value:
            raise ConfigError(setting, f"{at}expected key=value after the URL, got {attr!r}")
        if key == "tier":
            tier = _check_tier(setting, value, at)
        elif key == "cost":
            cost = _number(setting, key, value, at.rstrip(": "))
        elif key == "cost_gb":
            cost_gb = _number(setting, key, value, at.rstrip(": "))
        else:
            raise ConfigError(setting, f"{at}unknown attribute {key!r} (tier, cost, cost_gb)")
    return Exit(exit_id(url), url, tier, cost, cost_gb)


def _redacted(url: str) -> str:
    """An entry's URL for an error message, even one refused for its user info: everything
    between ``://`` and its last ``@`` is ``***``."""
    scheme, sep, rest = url.partition("://")
    if not sep or "@" not in rest:
        return url
    return f"{scheme}://{REDACTED}@{rest.rpartition('@')[2]}"


#: RFC 3986 user info: unreserved, pct-encoded, sub-delims and ":".
_USERINFO: Final = re.compile(r"[A-Za-z0-9\-._~%!$&'()*+,;=:]*")


def _check_userinfo(setting: str, url: str, at: str) -> None:
    """Refuse a user info that URL parsers may read as part of the host, or the reverse."""
    rest = url.partition("://")[2]
    if "@" not in rest:
        return
    if rest.count("@") > 1:
        raise ConfigError(setting, f"{at}more than one '@': percent-encode an '@' of the user "
                          "or password as %40")  # fmt: skip
    userinfo = rest.partition("@")[0]
    if any(c in userinfo for c in "/?#\\"):
        raise ConfigError(
            setting,
            f"{at}the user or password holds a '/', '?', '#' or '\\' that makes the host "
            "unclear: percent-encode it (%2F, %3F, %23, %5C)",
        )
    if not _USERINFO.fullmatch(userinfo):
        raise ConfigError(setting, f"{at}the user or password holds a character a URL may not "
                          "hold there: percent-encode it")  # fmt: skip


def _check_url(setting: str, url: str, at: str) -> str:
    _check_userinfo(setting, url, at)
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme in _SOCKS_SCHEMES:
        raise ConfigError(setting, f"{at}{scheme}:// proxies are not supported (the fetcher "
                          "speaks http:// and https:// proxies only)")  # fmt: skip
    if scheme not in _PROXY_SCHEMES:
        raise ConfigError(
            setting, f"{at}unsupported proxy scheme {parts.scheme!r}; use http:// or https://"
        )
    try:
        parts.port  # noqa: B018  (raises ValueError on a bad port)
    except ValueError:
        raise ConfigError(setting, f"{at}bad port") from None
    if not parts.hostname:
        raise ConfigError(setting, f"{at}proxy URL without a host")
    return url


def _check_tier(setting: str, name: str, at: str = "") -> str:
    name = name.strip().lower()
    if not _TIER_NAME.fullmatch(name):
        raise ConfigError(
            setting, f"{at}bad tier name {name!r}: lowercase letters, digits, - and _, at most 32"
        )
    return name


def parse_tiers(text: str | Sequence[str], setting: str = "proxy_tiers") -> tuple[str, ...]:
    """``proxy_tiers``: tier names, cheapest first, no repeats."""
    items = text.split(",") if isinstance(text, str) else list(text)
    tiers = tuple(_check_tier(setting, t) for t in items if t.strip())
    if len(set(tiers)) != len(tiers):
        raise ConfigError(setting, f"a tier is named twice: {', '.join(tiers)}")
    if len(tiers) > MAX_TIERS:
        raise ConfigError(setting, f"at most {MAX_TIERS} tiers, got {len(tiers)}")
    return tiers


def parse_statuses(text: str | Iterable[int], setting: str = "ban_statuses") -> tuple[int, ...]:
    """``ban_statuses``: HTTP statuses (400-599) that mean "banned through this exit"."""
    items: list[Any] = text.split(",") if isinstance(text, str) else list(text)
    out: list[int] = []
    for item in items:
        if isinstance(item, str) and not item.strip():
            continue
        try:
            status = int(str(item).strip())
        except ValueError:
            raise ConfigError(setting, f"expected HTTP statuses, got {item!r}") from None
        if not 400 <= status <= 599:
            raise ConfigError(setting, f"expected statuses in 400-599, got {status}")
        out.append(status)
    return tuple(sorted(set(out)))


def read_pool_file(path: Path, setting: str = "proxy_file") -> list[tuple[str, str]]:
    """The entries of a pool file with where each is (``file:line: ``); ``#`` comments."""
    try:
        with open(path, "rb") as f:
            data = f.read(_MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise ConfigError(setting, f"cannot read {path}: {exc.strerror or exc}") from None
    if len(data) > _MAX_FILE_BYTES:
        raise ConfigError(setting, f"{path} is over 1 MiB")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise ConfigError(setting, f"{path} is not UTF-8") from None
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        line = _COMMENT.sub("", line).strip()
        if line and not line.startswith("#"):
            out.append((line, f"{path}:{n}: "))
    return out


@dataclass(frozen=True, slots=True)
class ExitPool:
    """The exits a queue's workers fetch through, and their tiers (cheapest first)."""

    exits: tuple[Exit, ...] = ()
    tiers: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.exits)

    def __len__(self) -> int:
        return len(self.exits)

    def by_id(self, exit_id: str) -> Exit | None:
        for e in self.exits:
            if e.id == exit_id:
                return e
        return None

    def tier_index(self, tier: str) -> int:
        return self.tiers.index(tier)

    def wire(self) -> list[list[Any]]:
        """What the scripts receive: ``[[id, tier index], ...]`` (``ScriptConfig.exits``)."""
        return [[e.id, self.tiers.index(e.tier)] for e in self.exits]

    def describe(self) -> list[dict[str, Any]]:
        """Each exit for display: id, name (redacted), tier, tier index, costs."""
        return [
            {"id": e.id, "name": e.name, "tier": e.tier, "tier_index": self.tiers.index(e.tier),
             "cost": e.cost, "cost_gb": e.cost_gb}
            for e in self.exits
        ]  # fmt: skip

    @classmethod
    def build(
        cls,
        entries: Iterable[tuple[str, str]],
        tiers: Sequence[str] = (),
        *,
        setting: str = "proxy",
    ) -> ExitPool:
        """A pool from ``(entry text, where)`` pairs; ``tiers`` orders them (else first seen).

        Raises:
            ConfigError: a bad entry, an exit named twice, a tier not in ``tiers``, too many
                exits or tiers. Every bad entry is reported at once: with more than one,
                a :class:`~scrapeq.errors.ConfigProblems` holding one problem each.
        """
        exits: list[Exit] = []
        seen: set[str] = set()
        problems: list[str] = []
        for text, where in entries:
            try:
                e = parse_entry(text, setting=setting, where=where)
            except ConfigError as exc:
                problems.append(exc.reason)
                continue
            if e.id in seen:
                problems.append(f"{where or e.name + ': '}the same exit is listed twice")
                continue
            seen.add(e.id)
            exits.append(e)
        if len(problems) == 1:
            raise ConfigError(setting, problems[0])
        if problems:
            raise ConfigProblems(setting, problems)
        if len(exits) > MAX_EXITS:
            raise ConfigError(setting, f"at most {MAX_EXITS} exits, got {len(exits)}")
        order = list(tiers)
        for e in exits:
            if e.tier not in order:
                if tiers:
                    raise ConfigError(
                        setting,
                        f"{e.name}: tier {e.tier!r} is not in proxy_tiers ({', '.join(tiers)})",
                    )
                order.append(e.tier)
        if len(order) > MAX_TIERS:
            raise ConfigError(setting, f"at most {MAX_TIERS} tiers, got {len(order)}")
        used = [t for t in order if any(e.tier == t for e in exits)]
        return cls(tuple(exits), tuple(used))

    @classmethod
    def from_settings(cls, settings: Any) -> ExitPool:
        """The pool of ``proxy`` and ``proxy_file`` (the file read now), ordered by
        ``proxy_tiers``.

        Raises:
            ConfigError: as :meth:`build`, or the file cannot be read.
        """
        entries = [(text, "") for text in settings.proxy]
        path = settings.proxy_file
        setting = "proxy"
        if path is not None:
            entries += read_pool_file(Path(path))
            setting = "proxy_file" if not settings.proxy else "proxy"
        return cls.build(entries, settings.proxy_tiers, setting=setting)


#: An exit's counters (includes/exits.lua), summed over a queue's partitions.
_COUNTERS: Final = ("req", "ok", "bans", "fails", "timeouts", "errors", "bytes", "lat")
_STATE_RANK: Final = {"closed": 0, "half_open": 1, "open": 2}


def shape_exits(
    pool: ExitPool, raws: Sequence[Sequence[dict[str, str]]], now_ms: int
) -> list[dict[str, Any]]:
    """Each exit of ``pool`` with its state and counts: ``raws[p][i]`` is exit ``i``'s hash
    on partition ``p`` (each partition judges an exit on the domains it holds; the worst
    state is shown, the counts are summed). Passwords never appear (names are redacted)."""
    out: list[dict[str, Any]] = []
    for i, e in enumerate(pool.exits):
        counts = dict.fromkeys(_COUNTERS, 0)
        state, open_until, trips, last_used = "closed", 0, 0, 0
        for part in raws:
            raw = part[i]
            for name in _COUNTERS:
                counts[name] += int(raw.get(name) or 0)
            s = raw.get("state") or "closed"
            if _STATE_RANK.get(s, 0) > _STATE_RANK[state]:
                state = s
            open_until = max(open_until, int(raw.get("open_until") or 0))
            trips = max(trips, int(raw.get("trips") or 0))
            last_used = max(last_used, int(raw.get("lu") or 0))
        if state == "open" and open_until <= now_ms:
            state = "half_open"  # cooldown over: the next claim sends a probe
        answered = counts["req"] - counts["fails"]
        out.append({
            "id": e.id, "name": e.name, "tier": e.tier, "state": state,
            "open_until_ms": open_until if state == "open" else None, "trips": trips,
            "requests": counts["req"], "ok": counts["ok"], "bans": counts["bans"],
            "failures": counts["fails"], "timeouts": counts["timeouts"],
            "errors": counts["errors"], "bytes": counts["bytes"],
            "success_rate": round(counts["ok"] / counts["req"], 4) if counts["req"] else None,
            "latency_ms": round(counts["lat"] / answered) if answered > 0 else None,
            "last_used_ms": last_used or None, "cost": e.cost, "cost_gb": e.cost_gb,
            "spend": _spend(e, counts["req"], counts["bytes"]),
        })  # fmt: skip
    return out


def _spend(e: Exit, requests: int, volume: int) -> float | None:
    """What an exit cost so far by its ``cost`` (a request) and ``cost_gb`` (a GB: 10^9
    bytes); None when it has neither."""
    if e.cost is None and e.cost_gb is None:
        return None
    return round(requests * (e.cost or 0.0) + volume / 1e9 * (e.cost_gb or 0.0), 6)


def shape_domain_exits(pool: ExitPool, raw: dict[str, str], now_ms: int) -> dict[str, Any]:
    """A domain's exit state: its tier, its benched exits (id, name, until, bans in a row),
    and requests and bytes per tier."""
    tier = int(raw.get("tier") or 0)
    benched = []
    for e in pool.exits:
        value = raw.get(f"b:{e.id}")
        if not value:
            continue
        until, _, strikes = value.partition(":")
        if int(until or 0) > now_ms:
            benched.append({
                "id": e.id, "name": e.name, "tier": e.tier, "until_ms": int(until),
                "bans_in_a_row": int(strikes or 0),
            })  # fmt: skip
    per_tier = {
        name: {"requests": int(raw.get(f"r:{t}") or 0), "bytes": int(raw.get(f"y:{t}") or 0)}
        for t, name in enumerate(pool.tiers)
    }
    return {
        "tier": pool.tiers[tier] if pool and tier < len(pool.tiers) else None,
        "benched": benched,
        "per_tier": per_tier,
    }
