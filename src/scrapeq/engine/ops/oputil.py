"""Small helpers shared by the operations: argument checks, call chunking, reply shaping."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from scrapeq.engine.config.limits import (
    MAX_SCRIPT_INT,
    check_count,
    check_json_depth,
    check_seconds,
)
from scrapeq.engine.config.settings import Settings
from scrapeq.engine.config.specs import FETCHERS
from scrapeq.engine.lua import scripts
from scrapeq.engine.lua.scripts import (
    EnqueueSpec,
    JobPlace,
    Op,
    Settlement,
)
from scrapeq.engine.model.job import Job, JobInfo, expand_stored, ms_to_iso
from scrapeq.engine.model.urls import fingerprint
from scrapeq.engine.ops.results import EnqueueResult
from scrapeq.errors import (
    ConfigError,
)

T = TypeVar("T")

#: Most jobs, and about the most bytes of arguments, one enqueue or settle call carries: a
#: call must stay far below Redis's argument limit and answer well within the socket timeout.
CALL_ITEMS = 500
CALL_BYTES = 8 * 1024 * 1024


def _seconds_ms(name: str, value: float | None, *, allow_none: bool = True) -> int | None:
    if value is None:
        if allow_none:
            return None
        raise ConfigError(name, "a number of seconds is required")
    return round(check_seconds(name, value) * 1000)


def _epoch_ms(name: str, value: float) -> int:
    """A point in time given as epoch seconds, in ms: a finite number from 0 to what Lua
    writes exactly (10^14 - 1 ms, the year 5138)."""
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if not ok or not math.isfinite(value) or not 0 <= value * 1000 <= MAX_SCRIPT_INT:
        raise ConfigError(name, f"expected epoch seconds from 0 to 10^11, got {value!r}")
    return round(value * 1000)


def domain_set_call(
    domain: str,
    delay: float | None,
    concurrency: int | str | None,
    fetcher: str | None,
    max_pages: int | None,
    blocked_until: float | None,
    crawl_limit: int | None = None,
    wait_for: str | None = None,
) -> scripts.Call[tuple[int, int, bool, str | None, str | None]]:
    """The ``domain_set`` script's call for a domain's overrides, every argument checked
    (ConfigError naming it): delay (s), concurrency (``auto`` or >= 1), fetcher (a name of
    FETCHERS or ``default``: none), max_pages (-1: the queue's), blocked_until (epoch s),
    crawl_limit (jobs done at most, -1: none), wait_for (a CSS selector of at most 500
    bytes; ``""``: none)."""
    delay_ms = _seconds_ms("delay", delay)
    if concurrency is not None and concurrency != "auto":
        check_count("concurrency", concurrency)
    if fetcher is not None and fetcher != "default" and fetcher not in FETCHERS:
        words = ", ".join((*FETCHERS, "default"))
        raise ConfigError("fetcher", f"expected {words}, got {fetcher!r}")
    if max_pages is not None and max_pages != -1:
        check_count("max_pages", max_pages, minimum=0)
    if crawl_limit is not None and crawl_limit != -1:
        check_count("crawl_limit", crawl_limit, minimum=1)
    until_ms = None if blocked_until is None else _epoch_ms("blocked_until", blocked_until)
    fetcher_arg = -1 if fetcher == "default" else fetcher
    if wait_for is not None and len(wait_for.encode()) > 500:
        raise ConfigError("browser_wait_for", "expected a CSS selector of at most 500 bytes")
    wait_arg = -1 if wait_for == "" else wait_for
    return scripts.domain_set(
        domain, delay_ms, concurrency, fetcher_arg, max_pages=max_pages, until_ms=until_ms,
        crawl_limit=crawl_limit, wait_for=wait_arg,
    )  # fmt: skip


def _expires_ms(expires: float | None) -> int | None:
    """``expires`` seconds in ms (None: the job never expires); refused unless > 0."""
    expires_ms = _seconds_ms("expires", expires)
    if expires_ms is not None and expires_ms <= 0:
        raise ConfigError("expires", "must be > 0 seconds")
    return expires_ms


def _payload_json(payload: Any) -> str | None:
    """A job's payload as compact JSON text (None for none), checked for depth."""
    if payload is None:
        return None
    try:
        # Compact, as people and programs write JSON: a payload of max_payload bytes as
        # typed is max_payload bytes as stored and measured (default separators add one
        # space per key and item).
        payload_json = json.dumps(payload, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise ConfigError("payload", f"not JSON-serialisable: {exc}") from None
    except RecursionError:  # nested past the encoder's stack: far past the bound below
        raise ConfigError("payload", "JSON nested too deeply to encode") from None
    check_json_depth("payload", payload_json)
    return payload_json


def _keep_follow(item: Settlement, part: int, part_of: Callable[[str], int]) -> Settlement:
    """The settlement with only the follow-ups of its own partition (and its final URL only
    when that partition's seen-set holds it: a redirect elsewhere is not marked)."""
    if item.final is not None and part_of(item.final.domain) != part:
        item = dataclasses.replace(item, final=None)
    if not item.follow:
        return item
    own = tuple(s for s in item.follow if part_of(s.domain) == part)
    return item if len(own) == len(item.follow) else dataclasses.replace(item, follow=own)


def _by_part(names: Sequence[str], part_of: Callable[[str], int]) -> list[tuple[int, list[str]]]:
    """``names`` grouped by partition (in the order given within each)."""
    groups: dict[int, list[str]] = {}
    for name in names:
        groups.setdefault(part_of(name), []).append(name)
    return sorted(groups.items())


def _pairs(reply: Any) -> list[tuple[Any, Any]]:
    """A WITHSCORES reply (flat list, or pairs under RESP3) as (member, score) pairs."""
    if reply and isinstance(reply[0], list | tuple):
        return [(m, s) for m, s in reply]
    return list(zip(reply[::2], reply[1::2], strict=True))


def _spec_size(spec: EnqueueSpec) -> int:
    """About the bytes a job adds to an enqueue call's arguments."""
    return 200 + len(spec.url) + len(spec.payload_json or "") + len(spec.request_json or "")


def _settlement_size(item: Settlement) -> int:
    """About the bytes a settlement adds to a settle call's arguments."""
    size = 100 + len(item.message or "") + len(item.kind or "") + len(item.reason or "")
    if item.line is not None:  # a record's quotes are escaped in the call's JSON
        size += len(item.line) * 5 // 4
    return size + sum(map(_spec_size, item.follow)) if item.follow else size


def _chunks(items: Sequence[T], size: Callable[[T], int]) -> Iterator[Sequence[T]]:
    """Consecutive slices of at most CALL_ITEMS items and about CALL_BYTES (one item at least)."""
    start, used = 0, 0
    for i, item in enumerate(items):
        n = size(item)
        if i > start and (i - start >= CALL_ITEMS or used + n > CALL_BYTES):
            yield items[start:i]
            start, used = i, 0
        used += n
    if start < len(items):
        yield items[start:]


def _with_fingerprint(spec: EnqueueSpec) -> EnqueueSpec:
    """The spec with its fingerprint, so a job without uniqueness can take it when free."""
    if spec.fingerprint is not None:
        return spec
    return dataclasses.replace(spec, fingerprint=fingerprint(spec.url))


def _enqueue_result(reply: tuple[str, bool]) -> EnqueueResult:
    answer, urgent = reply
    if answer.startswith("dup:"):
        return EnqueueResult(answer[4:], "duplicate", urgent)
    if answer == "seen":
        return EnqueueResult("", "seen")
    if answer.startswith("dead:"):
        return EnqueueResult(answer[5:], "dead")
    if answer == "limit":
        return EnqueueResult("", "limit")
    if answer == "known":
        return EnqueueResult("", "known")
    return EnqueueResult(answer, "added", urgent)


def _dead_job(job_id: str, text: str) -> Job:
    try:
        return Job.from_json(text, job_id)
    except (ValueError, KeyError, TypeError):
        return Job(id=job_id, url="", domain="", lane="", attempts=0, max_attempts=0, raw=text)


def _job_info(job_id: str, place: JobPlace) -> JobInfo:
    text = place.text or ""
    data: Any = None
    try:
        data = expand_stored(json.loads(text), job_id)
        job = Job.from_dict(data)
    except (ValueError, KeyError, TypeError, AttributeError):
        data, job = {}, _dead_job(job_id, text)
    state = place.place
    done = state == "done"
    return JobInfo(
        job,
        state,
        place.now_ms,
        position=place.position,
        depth=place.depth,
        eligible_ms=place.score if state == "delayed" else (job.eligible_ms or None),
        lease_deadline_ms=place.score if state == "inflight" else None,
        done_ms=data.get("done_at") if done else None,
        kept_until_ms=place.now_ms + place.ttl_ms if done and place.ttl_ms is not None else None,
    )


def _event(entry_id: str, fields: Any) -> dict[str, Any]:
    data = fields if isinstance(fields, dict) else dict(zip(fields[::2], fields[1::2], strict=True))
    at = data.get("at")
    return {
        "id": entry_id,
        "kind": data.get("kind", ""),
        "domain": data.get("domain", ""),
        "message": data.get("message", ""),
        "at": ms_to_iso(float(at)) if at else None,
    }


def _stream_entries(reply: Any) -> list[dict[str, str]]:
    """An XREAD reply of one stream (RESP2 list or RESP3 map) as dicts: id, then every field."""
    streams = list(reply.values()) if isinstance(reply, dict) else [s[1] for s in reply or []]
    out: list[dict[str, str]] = []
    for entries in streams:
        for entry_id, fields in entries:
            pairs = zip(fields[::2], fields[1::2], strict=True) if isinstance(fields, list) else ()
            data = fields if isinstance(fields, dict) else dict(pairs)
            out.append({"id": str(entry_id), **{str(k): str(v) for k, v in data.items()}})
    return out


def _audit_conc(s: Settings) -> int:
    """The default limit the audit judges a domain by: with ``auto``, the lower bound, so a
    domain with leases counts as at its cap (the script checks each suspicion again with the
    domain's own limit)."""
    conc = s.domain_concurrency
    return conc if isinstance(conc, int) else s.domain_concurrency_min


def _names(value: Any) -> list[str]:
    """A list of names from a script's JSON (an empty Lua table encodes as ``{}``)."""
    return [str(v) for v in value] if isinstance(value, list) else []


def _op_host_group(host: str, address: str) -> Op[str]:
    return (yield scripts.host_group(host, f"ip:{address}"))  # type: ignore[no-any-return]
