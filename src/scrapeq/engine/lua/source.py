"""The Lua scripts' sources: the registry of script files, ``--@include`` expansion, and
the mapping of a script's error replies to scrapeq's errors. Split from
:mod:`scrapeq.engine.lua.scripts`, which re-exports the public names."""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import cache
from importlib import resources

from scrapeq.errors import ConfigError, NotFound, PayloadTooLarge, RedisUnavailable, ScriptError

#: Every script: name -> file under ``lua/`` (``<action>-<numKeys>.lua``).
SCRIPTS: dict[str, str] = {
    "audit": "audit-1.lua",
    "breaker": "breaker-1.lua",
    "browser_down": "browser_down-1.lua",
    "cancel": "cancel-1.lua",
    "claim": "claim-1.lua",
    "clear": "clear-1.lua",
    "domain_info": "domain_info-1.lua",
    "domains": "domains-1.lua",
    "domain_set": "domain_set-1.lua",
    "downloaded": "downloaded-1.lua",
    "host_group": "host_group-1.lua",
    "enqueue": "enqueue-1.lua",
    "exit_probe": "exit_probe-1.lua",
    "heartbeat": "heartbeat-1.lua",
    "job_info": "job_info-1.lua",
    "log_leader": "log_leader-1.lua",
    "migrate": "migrate-1.lua",
    "once": "once-1.lua",
    "owed_ack": "owed_ack-1.lua",
    "owed_take": "owed_take-1.lua",
    "page_info": "page_info-1.lua",
    "partitions": "partitions-1.lua",
    "purge": "purge-1.lua",
    "reap": "reap-1.lua",
    "seen_has": "seen_has-1.lua",
    "renew": "renew-1.lua",
    "replay": "replay-1.lua",
    "settle": "settle-1.lua",
    "status": "status-1.lua",
}

_INCLUDE = re.compile(r"^--@include (\w+)\s*$", re.MULTILINE)

#: Error codes scripts raise with ``redis.error_reply('SQ_<CODE> detail')``, each before
#: their first write (``lua/includes/check.lua``): a refusal changed nothing.
_ERROR_CODES: dict[str, Callable[[str, str], Exception]] = {
    "SQ_UNKNOWN_DOMAIN": lambda detail, script: NotFound(f"unknown domain {detail!r}"),
    "SQ_BAD_ARG": lambda detail, script: ScriptError(f"{script} refused its arguments: {detail}"),
    "SQ_BAD_CONFIG": lambda detail, script: _config_error(detail, script),
    "SQ_SEEN_LAYOUT": lambda detail, script: _seen_layout_error(detail),
    "SQ_PARTITIONS": lambda detail, script: _partitions_error(detail),
    "SQ_SCHEMA": lambda detail, script: _schema_error(detail),
}


@cache
def _read(relative: str) -> str:
    """A file under ``lua/``, read once per process (an include is in most scripts)."""
    return _lua_folder().joinpath(relative).read_text(encoding="utf-8")


@cache
def _lua_folder() -> resources.abc.Traversable:
    """``lua/``, found once (``resources.files`` takes ~0.3 ms a call: a queue loads every
    script and its includes, 52 files, when it is made)."""
    return resources.files("scrapeq.engine").joinpath("lua")


@cache
def load_source(name: str) -> str:
    """Return the Lua source of script ``name`` with its ``--@include`` lines expanded.

    Each include (``lua/includes/<name>.lua``) is inserted once, at its first mention.
    """
    return expand_includes(_read(SCRIPTS[name]))


def expand_includes(source: str) -> str:
    """Expand the ``--@include <name>`` lines of a Lua ``source`` (as :func:`load_source`
    does), for a script outside the table: a benchmark's probe, a test's."""
    seen: set[str] = set()

    def expand(match: re.Match[str]) -> str:
        include = match.group(1)
        if include in seen:
            return ""
        seen.add(include)
        return _expanded(_read(f"includes/{include}.lua"))

    def _expanded(text: str) -> str:  # the search first: most includes include nothing
        return _INCLUDE.sub(expand, text) if "--@include" in text else text

    return _expanded(source)


#: Error replies that say Redis cannot take writes for now (failover, disk, memory,
#: replicas, loading): transient, so they map to RedisUnavailable and callers retry.
_TRANSIENT = ("READONLY", "NOREPLICAS", "MISCONF", "OOM", "LOADING", "BUSY", "TRYAGAIN",
              "CLUSTERDOWN", "MASTERDOWN")  # fmt: skip


def map_error(message: str | Exception, script: str = "a script") -> Exception:
    """Map a script's error reply to the library's exception for it.

    Args:
        message: the error reply's text, or redis-py's exception for it (whose text lacks
            the reply's code for the codes it has classes for: ``OOM``, ``READONLY``...).
        script: the script's name (``SCRIPTS``), for the message of a refused argument.

    Returns:
        ``SQ_BAD_ARG`` (a call argument the script refused) a :class:`ScriptError`: the client
        sent what its own checks should have refused; ``SQ_BAD_CONFIG`` a
        :class:`ConfigError` naming the configuration field; the other codes as documented
        in the scripts' headers; anything else a :class:`ScriptError`.
    """
    if isinstance(message, Exception):
        code, message = getattr(message, "status_code", None), str(message)
        if code and not message.startswith(code):
            message = f"{code} {message}"
    text = message.removeprefix("ERR ").strip()
    if "invalid bulk length" in text:
        return PayloadTooLarge(
            f"payload too large: Redis refused a call over its proto-max-bulk-len ({text})"
        )
    if any(f"-{code} " in text or text.startswith(code) for code in _TRANSIENT):
        return RedisUnavailable(f"Redis refused the call for now: {text}")
    # the first code in the text: a refusal quotes the value it refused, which may hold one
    found = sorted((text.find(code), code) for code in _ERROR_CODES if code in text)
    if found:
        at, code = found[0]
        return _ERROR_CODES[code](text[at + len(code) :].strip(), script)
    return ScriptError(text)


def _config_error(detail: str, script: str) -> ConfigError:
    field, _, why = detail.partition(": ")
    return ConfigError(field, f"{script} refused this configuration field: {why}")


def _two_words(detail: str) -> tuple[str, str]:
    """An error's two values (what the queue holds, what this client has); "?" for one missing."""
    first, second = ([*detail.split(), "?", "?"])[:2]
    return first, second


def _partitions_error(detail: str) -> ConfigError:
    stored, given = _two_words(detail)
    return ConfigError(
        "partitions",
        f"this queue has {stored} partition(s) and these settings say {given}: changing "
        "partitions needs an empty queue (scrapeq queue clear), or set partitions to "
        f"{stored}",
    )


def _schema_error(detail: str) -> ScriptError:
    stored, known = _two_words(detail)
    return ScriptError(
        f"this queue's data is at schema {stored}, which this scrapeq (schema {known}) does "
        "not know: a newer scrapeq wrote it; upgrade scrapeq to use this queue"
    )


def _seen_layout_error(detail: str) -> ConfigError:
    stored, given = _two_words(detail)
    return ConfigError(
        "seen_filter",
        f"this queue's seen-set was built as {stored} and these settings make {given}: every "
        "client of a queue must agree on seen_filter, recrawl_after and, for a Bloom filter, "
        "seen_capacity and seen_error_rate (to change them, delete the queue's sq:{Q}:seen* "
        "keys and the 'seen' field of sq:{Q}:meta)",
    )
