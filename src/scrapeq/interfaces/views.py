"""One vocabulary for domain listings, shared by the CLI's tables (:mod:`render`) and the
dashboard (:mod:`scrapeq.interfaces.web`): the breaker states and their rank, the sort keys
and the field each orders by, and the JSON shape of a row of the dashboard's domains table.
Pure: no Redis, no I/O.

The CLI (``domains``/``breakers --sort``) and the dashboard (``/api/domains?sort=``) offer
the names they always offered (:data:`CLI_SORTS`, :data:`API_SORTS`); both are keys of one
table (:data:`SORT_FIELDS`), where ``name`` is the CLI's alias of ``domain``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from scrapeq.engine.model.job import ms_to_iso

__all__ = [
    "API_SORTS",
    "CLI_SORTS",
    "DOMAIN_STATES",
    "SORT_FIELDS",
    "STATE_RANK",
    "budget_cuts",
    "domain_row",
    "order_for_listing",
    "order_for_table",
    "sort_field",
    "state_rank",
    "worth_a_look_key",
]

#: A domain's breaker states.
DOMAIN_STATES = ("closed", "half_open", "open", "retired")
#: Worth a look first: retired, open, half-open, closed (an unknown state after them all).
STATE_RANK = {"retired": 0, "open": 1, "half_open": 2, "closed": 3}

#: Every sort key -> the field of a domain it orders by (the same name when not listed here
#: differently). ``failures`` and ``failure_rate`` are two columns: the consecutive failures,
#: and the breaker window's failures among its calls (the dashboard's row only).
SORT_FIELDS = {
    "domain": "domain", "name": "domain", "state": "state", "ready": "ready",
    "delayed": "delayed", "inflight": "inflight", "done": "done", "dead": "dead",
    "failures": "consecutive_failures", "failure_rate": "failure_rate", "trips": "trips",
    "open_until": "open_until", "delay": "delay_ms", "revisit_load": "revisit_load",
    "freshness": "freshness",
}  # fmt: skip

#: ``--sort`` keys of ``domains`` and ``breakers``: counts and failures largest first,
#: ``open_until`` soonest first (closed breakers last), ``name`` A to Z, ``state`` worth a look
#: first (retired, open, half-open, closed; then the most dead letters).
CLI_SORTS = (
    "name", "state", "ready", "delayed", "inflight", "done", "dead", "failures", "trips",
    "open_until", "delay",
)  # fmt: skip
#: Columns the dashboard's domains table sorts by (server side, ``order`` asc or desc).
API_SORTS = (
    "domain", "state", "ready", "delayed", "inflight", "done", "dead", "failure_rate",
    "open_until", "trips", "revisit_load", "freshness",
)  # fmt: skip

Row = Mapping[str, Any]


def state_rank(state: str) -> int:
    """A state's place in "worth a look" order (:data:`STATE_RANK`)."""
    return STATE_RANK.get(state, len(STATE_RANK))


def worth_a_look_key(d: Row) -> tuple[int, int, int, str]:
    """Retired, open, half-open, closed; then the most dead letters, the most ready."""
    return (state_rank(d["state"]), -d["dead"], -d["ready"], d["domain"])


def sort_field(key: str) -> str:
    """The field ``key`` orders by.

    Raises:
        ValueError: ``key`` is no sort key.
    """
    try:
        return SORT_FIELDS[key]
    except KeyError:
        raise ValueError(f"unknown sort key {key!r}") from None


def _listing_key(key: str) -> Callable[[Row], Any]:
    field = sort_field(key)
    if field == "state":
        return worth_a_look_key
    if field == "domain":
        return lambda d: d["domain"]
    if field == "open_until":
        never = float("inf")
        return lambda d: (d["open_until"] or never, d["domain"])
    return lambda d: (-d[field], d["domain"])


def order_for_listing(rows: list[dict[str, Any]], key: str) -> list[dict[str, Any]]:
    """The CLI's order (figures as ``domains_info`` gives them): each key's natural direction,
    counts largest first, ties by name. Sorts ``rows`` in place and returns it."""
    rows.sort(key=_listing_key(key))
    return rows


def _table_key(key: str) -> Callable[[Row], Any]:
    field = sort_field(key)
    if field == "state":
        return lambda r: (state_rank(r["state"]), r["domain"])
    if field == "domain":
        return lambda r: r["domain"]
    return lambda r: (r[field] is None, r[field] or 0, r["domain"])


def order_for_table(rows: list[dict[str, Any]], key: str, descending: bool) -> None:
    """The dashboard's order (rows of :func:`domain_row`): ascending values, unset ones last,
    ties by name; all of it reversed when ``descending``. Sorts ``rows`` in place."""
    rows.sort(key=_table_key(key), reverse=descending)


def _learned_limit(info: Row) -> float | None:
    limit = info.get("limit")
    if not info.get("adaptive") or not isinstance(limit, int | float):
        return None
    return round(float(limit), 1)


def domain_row(info: Row, now_ms: int) -> dict[str, Any]:
    """One row of the dashboard's domains table: the figures, the breaker window's failure
    rate (its failures among the last outcomes it recorded, kept while it is open; 404s and
    other page faults are not in it), the open time left."""
    failures, calls = int(info["window_failures"]), int(info["window_calls"])
    open_until = info.get("open_until")
    row = {k: info[k] for k in ("domain", "state", "ready", "delayed", "inflight", "done", "dead")}
    row.update(
        failure_rate=round(failures / calls, 4) if calls else 0.0,
        window_failures=failures,
        window_calls=calls,
        open_until=ms_to_iso(open_until) if open_until else None,
        open_for=round(max(open_until - now_ms, 0) / 1000, 1) if open_until else None,
        trips=info.get("trips", 0),
        consecutive_failures=info.get("consecutive_failures", 0),
        concurrency=info.get("concurrency"),
        delay_ms=info.get("delay_ms"),
        # an adaptive domain's learned limit (domain_concurrency = auto); None when fixed
        adaptive_limit=_learned_limit(info),
        # revisit = on: its revisit load (visits an hour), pages tracked, estimated freshness
        revisit_load=_rounded(info.get("revisit_load"), 9) if info.get("revisit_pages") else None,
        revisit_pages=info.get("revisit_pages") or 0,
        # the budget that load is measured against (visits a domain-hour, as the queue's
        # settings set it)
        revisit_budget=_rounded(info.get("revisit_budget"), 9)
        if info.get("revisit_pages")
        else None,
        freshness=_rounded(info.get("freshness"), 4),
        budget=budget_cuts(info) or None,
        # fetcher auto: the fleet's decision for it, in words (None: not auto)
        fetcher=auto_fetcher(info) or None,
    )
    return row


def _rounded(value: Any, digits: int) -> float | None:
    return round(float(value), digits) if isinstance(value, int | float) else None


def auto_fetcher(d: Row) -> str:
    """Fetcher ``auto``'s decision for a domain in words: its level, then each path pattern
    with a level of its own (``http; /p/ browser``); empty when the domain is not auto."""
    level = d.get("auto_fetcher")
    if not level:
        return ""
    patterns = d.get("auto_patterns") or {}
    return "; ".join([f"auto: {level}", *(f"{p} {v}" for p, v in sorted(patterns.items()))])


def budget_cuts(d: Row) -> str:
    """What a domain's per-domain budgets stopped, in words (``max_pages: 3 links``,
    ``max_bytes: 2 links, 1 revisits``); empty when nothing (``domains``, the dashboard)."""
    parts = []
    if d.get("max_pages_skipped"):
        parts.append(f"max_pages: {d['max_pages_skipped']} links")
    cut = [f"{d[k]} {name}" for k, name in (("skipped", "links"), ("revisits_skipped",
           "revisits")) if d.get(k)]  # fmt: skip
    if cut:
        parts.append("max_bytes: " + ", ".join(cut))
    return "; ".join(parts)
