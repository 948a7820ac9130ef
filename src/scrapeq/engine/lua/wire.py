"""Wire names: the field names the client and the Lua scripts share, in one table each.

A settle item (``settle-1.lua``'s ``ARGV[3].items``) and a done answer's notes are transient,
so their names are readable words; ``lua/includes/wire.lua`` holds the same tables
(``WIRE.SETTLE_ITEM``, ``WIRE.DONE``) and ``tests/engine/test_wire_names.py`` keeps them, and the
fields settle-1.lua checks, equal.

Stored names are kept short and never renamed (that would be a data migration); they are
documented here and checked against the Lua the same way:

- a queued job's compact form: ``engine/model/job.py`` (``_LONG``) and ``includes/codec.lua``
  (``SHORT``), where ``o`` is a job's lane offset;
- the adaptive state in a domain's hash: :data:`ADAPTIVE_FIELDS` and
  ``includes/adaptive_rule.lua`` (``ADAPTIVE_FIELDS``, which documents each);
- a cookie of the sticky session's jar: :data:`JAR_COOKIE`, :data:`JAR_FLAGS` and
  :data:`JAR_LIMITS`, and ``includes/jar.lua`` (``JAR``, which documents the jar).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

#: A settle item's fields: the attribute of :class:`scrapeq.engine.lua.scripts.Settlement` ->
#: its name on the wire.
SETTLE_ITEM: Final[Mapping[str, str]] = MappingProxyType(
    {
        "job_id": "id",
        "token": "token",
        "outcome": "outcome",  # done | retry | throttle | fail | release
        "domain_failed": "domain_failed",  # breaker input: true, false, absent
        "delay_ms": "delay",  # ms before the job is eligible again
        "backoff": "backoff",  # no delay given: the script draws the full-jitter backoff
        "retry_after_ms": "retry_after",  # ms the whole domain is parked
        "kind": "kind",  # error kind kept in the history
        "message": "message",  # error message kept in the history
        "reason": "reason",  # dead-letter reason (fail)
        "shutdown": "shutdown",  # a release because the worker stops
        "follow": "follow",  # follow-up job specs of a done job
        "final": "final_seen",  # seen-set argument of the URL after redirects
        "latency_ms": "latency",  # ms the fetch took
        "overload": "overload",  # the site signalled overload
        "exit_result": "exit",  # ok | ban | down | timeout | error, through the job's exit
        "bytes_in": "bytes",  # bytes downloaded
        "jar": "jar",  # session = sticky: the attempt's changes to the domain's cookie jar
        "not_modified": "not_modified",  # revisit: a 304 answered the conditional request
        "changed": "changed",  # revisit: False when the handler said unchanged
        "signature": "signature",  # revisit: 64-bit signature of the content, 16 hex digits
        "etag": "etag",  # revisit: the answer's ETag (at most 100 bytes)
        "last_modified": "last_modified",  # revisit: the answer's Last-Modified
        "line": "line",  # the attempt's results record (JSON text): owed until written
        "auto_evidence": "auto",  # block | render | same: what an auto job's fetch showed
    }
)

#: What a ``done`` settle answer says beside its status (``done:<name>=<n>,...``, in this
#: order; ``lua/includes/wire.lua``, ``WIRE.DONE``): the settle script's decisions about the
#: page, which the worker's results line says (:class:`scrapeq.engine.lua.scripts.Settled`).
SETTLE_DONE: Final = (
    "changed",  # 1 or 0: revisit = on, the page changed since its last visit (a first visit: 1)
    "not_modified",  # 1: a 304 answered the revisit's conditional request
    "max_pages",  # n: follow-ups cut at their domain's max_pages
    "max_bytes",  # n: follow-ups cut at their domain's max_bytes
    "revisit_skipped",  # 1: the page's next visit not scheduled, its domain past max_bytes
)

#: The adaptive state (stored in a domain's hash ``sq:{Q}:domain:<d>``): the name
#: ``adaptive_step`` gives a field -> its stored field name.
ADAPTIVE_FIELDS: Final[Mapping[str, str]] = MappingProxyType(
    {
        "limit": "alim",  # the concurrency limit (a float)
        "interval": "aivl",  # ms between request starts at the minimum limit
        "base": "abase",  # no-load latency, ms
        "avg": "alat",  # current latency (EWMA), ms
        "cut_at": "acut",  # ms: the last decrease
        "ok_at": "aok",  # ms: the last answer
        "sec": "asb",  # the second sec_n counts answers of
        "sec_n": "asn",  # answers in that second
        "prev_n": "asp",  # answers in the second before it
        "threshold": "ath",  # slow-start threshold
        "refused": "abad",  # ms: the interval last refused
        "cap": "acap",  # the ceiling an overload left
        "count": "acnt",  # answers since the last decrease or the streak's start
        "streak_at": "asa",  # ms: the current streak of answers began
        "long_avg": "alt",  # long average of the latencies, ms
    }
)

#: A cookie of the sticky session's jar (``session = sticky``), as stored (a domain's ``dexit``
#: hash, field ``sj``: a JSON list of cookies, oldest first) and as a settle item's ``jar`` sets
#: it (``{"set": [cookie, ...], "del": [[name, domain, path], ...]}``): a JSON list of these
#: fields in this order (``lua/includes/jar.lua``, ``JAR.FIELDS``). ``domain`` has no leading
#: dot; ``expires`` is epoch seconds or null (a session cookie); ``flags`` a sum of
#: :data:`JAR_FLAGS`. (name, domain, path) is a cookie's key.
JAR_COOKIE: Final = ("name", "value", "domain", "path", "expires", "flags")

#: The bits of a jar cookie's ``flags`` (``JAR.FLAGS``): host-only (sent to the host that set
#: it alone), Secure (sent over https only), HttpOnly (kept; nothing here runs scripts).
JAR_FLAGS: Final[Mapping[str, int]] = MappingProxyType(
    {"host_only": 1, "secure": 2, "http_only": 4}
)

#: The jar's bounds, checked by settle-1.lua and kept by its merge (``JAR``): cookies kept
#: (and set or deleted by one attempt), bytes of the stored text, bytes of a name and value
#: together, of a domain, of a path, and the latest ``expires`` (9999-12-31T23:59:59Z).
JAR_LIMITS: Final[Mapping[str, int]] = MappingProxyType(
    {
        "MAX_COOKIES": 50,
        "MAX_BYTES": 16_384,
        "MAX_PAIR": 4096,
        "MAX_DOMAIN": 255,
        "MAX_PATH": 1024,
        "MAX_EXPIRES": 253_402_300_799,
    }
)
