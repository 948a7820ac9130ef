"""``scrapeq audit``: check a queue's Redis structures, and repair what is safely fixable.

The audit reads the queue in bounded slices (SCAN of the job keys, pages of every sorted set,
the domain hashes), works out from that snapshot what looks wrong (:func:`find_suspects`,
pure), then hands each suspicion to ``lua/audit-1.lua``, which checks it again atomically and
reports it only when it still holds (a live queue moves jobs between two reads), fixing it in
the same step when asked. What it checks:

- every job id is in exactly one place (delayed, its domain's ready queue, inflight, dead),
  under its own domain;
- no id without its job key, no job key that no structure names, no corrupt job text (a done
  job kept by ``keep_done`` is in no structure: it is done, unless its key outlived its
  ``keep_done`` time, a sign it lost its TTL);
- every lease records its domain; each domain's inflight counter equals its leases;
- the delayed counters (per domain and per lane) equal the delayed jobs, and each lane's
  ready counter its ready jobs;
- every domain with ready jobs is reachable: in ``domains:ready`` or ``domains:wait``, at its
  cap with leases out, or being drained (retired);
- no de-duplication fingerprint is held by a job that is no longer pending, and no pending
  job enqueued with uniqueness carries a fingerprint it does not hold: at most one pending
  job per unique URL (``duplicate_pending``; read from the job texts the scan has anyway);
- the set of open breakers (``sq:{Q}:open``, which status counts) names exactly the domains
  whose breaker is open or half-open.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from scrapeq.engine.lua import scripts
from scrapeq.engine.lua.scripts import Command, Op, server_ms_op
from scrapeq.engine.model.job import expand_stored
from scrapeq.engine.model.keys import Keys, registry_bucket

__all__ = ["AuditProblem", "AuditReport", "Snapshot", "audit_op", "find_suspects"]

#: Items read per command, and suspicions checked per script call.
PAGE = 1000
CHECKS_PER_CALL = 100
#: Fields a job text must have for the scripts to read it (``load_job`` in common.lua).
_JOB_FIELDS: dict[str, type | tuple[type, ...]] = {
    "url": str, "domain": str, "lane": str, "attempts": (int, float),
    "max_attempts": (int, float), "off": (int, float), "eligible": (int, float),
}  # fmt: skip


@dataclass(frozen=True, slots=True)
class AuditProblem:
    """One problem the audit confirmed.

    Attributes:
        kind: what is wrong (``job_without_place``, ``inflight_count``, ``stranded_domain``...;
            the list is in ``lua/audit-1.lua``).
        subject: the job id, domain, lane or fingerprint concerned.
        detail: what was found (and, when repaired, what was done).
        repaired: whether ``audit(repair=True)`` fixed it.
    """

    kind: str
    subject: str
    detail: str
    repaired: bool = False

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "subject": self.subject,
            "detail": self.detail,
            "repaired": self.repaired,
        }


@dataclass(frozen=True, slots=True)
class AuditReport:
    """What an audit found.

    Attributes:
        queue: the queue's name.
        problems: the confirmed problems, repaired or not.
        checked: how many jobs, domains, leases and fingerprints were looked at.
        suspected: suspicions the scan raised that were gone when checked again (a job
            moved between two reads): not problems.
    """

    queue: str
    problems: list[AuditProblem]
    checked: dict[str, int]
    suspected: int = 0

    @property
    def ok(self) -> bool:
        """No problem is left (every one found was repaired, or none was found)."""
        return all(p.repaired for p in self.problems)

    def as_dict(self) -> dict[str, Any]:
        return {
            "queue": self.queue,
            "ok": self.ok,
            "checked": self.checked,
            "problems": [p.as_dict() for p in self.problems],
            "repaired": sum(p.repaired for p in self.problems),
        }


@dataclass
class Snapshot:
    """What the scan read (see :func:`scan_op`); each field as Redis answered it."""

    jobs: dict[str, dict[str, Any] | None] = field(default_factory=dict)  # None: corrupt
    delayed: list[str] = field(default_factory=list)
    inflight: list[str] = field(default_factory=list)
    dead: list[str] = field(default_factory=list)
    queued: dict[str, list[str]] = field(default_factory=dict)  # domain -> dq ids
    dead_by_domain: dict[str, list[str]] = field(default_factory=dict)
    lanes: list[str] = field(default_factory=list)  # configured and known lanes
    domains: dict[str, dict[str, str | None]] = field(default_factory=dict)  # hash fields
    leased: dict[str, str] = field(default_factory=dict)
    unique: dict[str, str] = field(default_factory=dict)
    ready: set[str] = field(default_factory=set)
    waiting: set[str] = field(default_factory=set)
    retiring: set[str] = field(default_factory=set)
    open: set[str] = field(default_factory=set)  # sq:{Q}:open: breakers open or half-open
    stats: dict[str, str] = field(default_factory=dict)
    default_conc: int = 2
    now_ms: int = 0  # the Redis clock when the scan began
    #: Counters, job id and token at the scan's end (see _moves), and whether they had not
    #: moved since its start: only a still queue's ready counters can be checked per lane.
    moves: dict[str, str] = field(default_factory=dict)
    still: bool = False
    keep_done_ms: int = 0
    #: The registry's counter of domains and the names it holds.
    domain_count: int = 0
    registry_index: set[int] = field(default_factory=set)  # sq:{Q}:regb
    registry_names: list[str] = field(default_factory=list)


def parse_job(job_id: str, text: str) -> dict[str, Any] | None:
    """The fields the audit needs from a job text, or None when the scripts cannot read it."""
    try:
        job = expand_stored(json.loads(text), job_id)
    except ValueError:
        return None
    if not isinstance(job, dict) or job.get("id") != job_id:
        return None
    for name, kind in _JOB_FIELDS.items():
        if not isinstance(job.get(name), kind) or isinstance(job.get(name), bool):
            return None
    return job


# --- the scan --------------------------------------------------------------------------------


def scan_op(keys: Keys, lanes: list[str], default_conc: int, keep_done_ms: int = 0) -> Op[Snapshot]:
    """Read the queue's structures in bounded slices."""
    snap = Snapshot(default_conc=default_conc, keep_done_ms=keep_done_ms)
    snap.now_ms = yield from server_ms_op()
    before = yield from _moves(keys)
    ids = yield from _scan_keys(keys.job("*"))
    cut = len(keys.job(""))
    snap.jobs = yield from _job_texts(keys, [key[cut:] for key in ids])
    snap.delayed = yield from _zset(keys.delayed)
    snap.inflight = yield from _zset(keys.inflight)
    snap.dead = yield from _zset(keys.dead)
    domains = yield from scripts.registry_names_op()
    snap.domain_count = _int((yield Command(("GET", keys.domain_count))))
    snap.registry_names = domains
    snap.registry_index = {int(b) for b in (yield Command(("SMEMBERS", keys.registry_index)))}
    for d in domains:
        snap.queued[d] = yield from _zset(keys.domain_queue(d))
        snap.dead_by_domain[d] = yield from _zset(keys.domain_dead(d))
        fields = yield Command(("HMGET", keys.domain(d), "inflight", "delayed", "state", "conc"))
        snap.domains[d] = dict(zip(("inflight", "delayed", "state", "conc"), fields, strict=True))
    known_lanes = set(lanes) | set((yield Command(("SMEMBERS", keys.prefix + "lanes"))))
    snap.lanes = sorted(known_lanes)
    snap.leased = yield from _hash(keys.prefix + "leased")
    snap.unique = yield from _hash(keys.unique)
    snap.ready = set((yield from _zset(keys.domains_ready)))
    snap.waiting = set((yield from _zset(keys.domains_wait)))
    snap.retiring = set((yield Command(("SMEMBERS", keys.prefix + "retiring"))))
    snap.open = set((yield Command(("SMEMBERS", keys.prefix + "open"))))
    snap.stats = yield from _hash(keys.stats)
    snap.moves = yield from _moves(keys)
    snap.still = before == snap.moves
    return snap


def _moves(keys: Keys) -> Op[dict[str, str]]:
    """What changes whenever a job moves: the counters, and the last job id and token."""
    stats = yield from _hash(keys.stats)
    seq, token = yield Command(("HMGET", keys.meta, "seq", "token"))
    return {**stats, "@seq": seq or "", "@token": token or ""}


def _scan_keys(pattern: str) -> Op[list[str]]:
    found: set[str] = set()
    cursor = 0
    while True:
        cursor, batch = yield Command(("SCAN", cursor, "MATCH", pattern, "COUNT", PAGE))
        found.update(batch)
        if int(cursor) == 0:
            return sorted(found)


def _job_texts(keys: Keys, ids: list[str]) -> Op[dict[str, dict[str, Any] | None]]:
    jobs: dict[str, dict[str, Any] | None] = {}
    for start in range(0, len(ids), PAGE):
        page = ids[start : start + PAGE]
        texts = yield Command(("MGET", *[keys.job(i) for i in page]))
        for job_id, text in zip(page, texts, strict=True):
            if text is not None:  # gone since the SCAN: not a problem
                jobs[job_id] = parse_job(job_id, text)
    return jobs


def _zset(key: str) -> Op[list[str]]:
    out: list[str] = []
    while True:
        page = yield Command(("ZRANGE", key, len(out), len(out) + PAGE - 1))
        out.extend(page)
        if len(page) < PAGE:
            return out


def _hash(key: str) -> Op[dict[str, str]]:
    out: dict[str, str] = {}
    cursor = 0
    while True:
        cursor, page = yield Command(("HSCAN", key, cursor, "COUNT", PAGE))
        out.update(page)
        if int(cursor) == 0:
            return out


# --- what looks wrong --------------------------------------------------------------------------


def find_suspects(snap: Snapshot) -> list[dict[str, Any]]:
    """Every suspicion the snapshot raises, as items for ``lua/audit-1.lua`` (pure)."""
    leases = _leases_per_domain(snap)
    return [
        *_job_suspects(snap),
        *_orphan_ids(snap),
        *_lane_suspects(snap),
        *_lease_suspects(snap),
        *_counter_suspects(snap, leases),
        *_stranded_domains(snap, leases),
        *_open_set_suspects(snap),
        *_fingerprint_suspects(snap),
        *_duplicate_suspects(snap),
        *_registry_suspects(snap),
    ]


def _queued_in(snap: Snapshot) -> dict[str, list[str]]:
    """Job id -> the domains whose ready queue holds it."""
    where: dict[str, list[str]] = {}
    for d, ids in snap.queued.items():
        for job_id in ids:
            where.setdefault(job_id, []).append(d)
    return where


def _job_suspects(snap: Snapshot) -> Iterator[dict[str, Any]]:
    queued = _queued_in(snap)
    delayed, inflight, dead = set(snap.delayed), set(snap.inflight), set(snap.dead)
    for job_id, job in snap.jobs.items():
        domains = queued.get(job_id, [])
        if job is None:
            yield {"k": "corrupt_job", "id": job_id, **({"d": domains[0]} if domains else {})}
            continue
        for d in domains:
            if d != job["domain"]:
                yield {"k": "wrong_domain_queue", "id": job_id, "d": d}
        places = (job_id in delayed) + (job_id in inflight) + (job_id in dead)
        places += job["domain"] in domains
        if places == 0 and not domains:
            if _kept_done(snap, job):
                continue
            yield {"k": "job_without_place", "id": job_id}
        elif places > 1:
            yield {"k": "job_in_two_places", "id": job_id}


#: A done job's key may outlive its keep_done time by this much (expiry is not instant).
_EXPIRY_SLACK_MS = 1000


def _kept_done(snap: Snapshot, job: dict[str, Any]) -> bool:
    """A done job kept by keep_done, still within its time (its TTL is then not read: a job
    that lost it is found once that time is over)."""
    done_at = job.get("done_at")
    if not isinstance(done_at, int | float):
        return False
    return bool(done_at + snap.keep_done_ms + _EXPIRY_SLACK_MS >= snap.now_ms)


def _orphan_ids(snap: Snapshot) -> Iterator[dict[str, Any]]:
    def orphan(ids: list[str], place: str, **where: str) -> Iterator[dict[str, Any]]:
        for job_id in ids:
            if job_id not in snap.jobs:
                yield {"k": "id_without_job", "id": job_id, "place": place, **where}

    yield from orphan(snap.delayed, "delayed")
    yield from orphan(snap.inflight, "inflight")
    yield from orphan(snap.dead, "dead")
    for d, ids in snap.queued.items():
        yield from orphan(ids, "dq", d=d)
    for d, ids in snap.dead_by_domain.items():
        yield from orphan(ids, "ddead", d=d)


def _lane_suspects(snap: Snapshot) -> Iterator[dict[str, Any]]:
    if not snap.still:
        return  # jobs moved while the scan read the ready queues one by one
    ready: Counter[str] = Counter()  # lane -> its ready jobs (filed under their own domain)
    for d, ids in snap.queued.items():
        for job_id in ids:
            job = snap.jobs.get(job_id)
            if job is not None and job["domain"] == d:
                ready[job["lane"]] += 1
    for lane in sorted(set(snap.lanes) | set(ready)):
        observed = _int(snap.stats.get(f"ready:{lane}"))
        if observed != ready[lane]:
            yield {"k": "lane_ready_count", "lane": lane, "exp": ready[lane], "obs": observed,
                   "moves": snap.moves}  # fmt: skip


def _lease_suspects(snap: Snapshot) -> Iterator[dict[str, Any]]:
    inflight = set(snap.inflight)
    for job_id in inflight:
        job = snap.jobs.get(job_id)
        if job is not None and snap.leased.get(job_id) != job["domain"]:
            yield {"k": "lease_domain", "id": job_id}
    for job_id in snap.leased.keys() - inflight:
        yield {"k": "lease_domain", "id": job_id}


def _leases_per_domain(snap: Snapshot) -> Counter[str]:
    """Leases holding a slot, per domain: not those whose slot was given back at their
    download's end (the job's ``sf`` is its lease's token: ``slot_given_back`` in
    ``lua/includes/domain.lua``, whose check confirms every suspect)."""
    counts: Counter[str] = Counter()
    for job_id in snap.inflight:
        job = snap.jobs.get(job_id)
        d = snap.leased.get(job_id) or (job["domain"] if job is not None else None)
        if job is not None and job.get("sf") is not None and job.get("sf") == job.get("token"):
            continue
        if d is not None:
            counts[d] += 1
    return counts


def _counter_suspects(snap: Snapshot, leases: Counter[str]) -> Iterator[dict[str, Any]]:
    by_domain: Counter[str] = Counter()
    by_lane: Counter[str] = Counter()
    for job_id in snap.delayed:
        job = snap.jobs.get(job_id)
        if job is not None:
            by_domain[job["domain"]] += 1
            by_lane[job["lane"]] += 1
    for d, fields in snap.domains.items():
        if _int(fields.get("inflight")) != leases[d]:
            yield {"k": "inflight_count", "d": d}
        observed = _int(fields.get("delayed"))
        if observed != by_domain[d]:
            yield {"k": "delayed_count", "d": d, "exp": by_domain[d], "obs": observed}
    for lane in snap.lanes:
        observed = _int(snap.stats.get(f"delayed:{lane}"))
        if observed != by_lane[lane]:
            yield {"k": "lane_delayed_count", "lane": lane, "exp": by_lane[lane], "obs": observed}


def _stranded_domains(snap: Snapshot, leases: Counter[str]) -> Iterator[dict[str, Any]]:
    for d, ids in snap.queued.items():
        if not ids or d in snap.ready or d in snap.waiting:
            continue
        fields = snap.domains.get(d, {})
        state = fields.get("state") or "closed"
        if state == "retired":
            if d not in snap.retiring:
                yield {"k": "stranded_domain", "d": d}
            continue
        cap = 1 if state == "half_open" else _int(fields.get("conc")) or snap.default_conc
        at_cap = leases[d] > 0 and leases[d] >= cap and _int(fields.get("inflight")) == leases[d]
        if not at_cap:
            yield {"k": "stranded_domain", "d": d}


def _open_set_suspects(snap: Snapshot) -> Iterator[dict[str, Any]]:
    """The set of open breakers (status counts it) against the domains' states."""
    is_open = {d for d, f in snap.domains.items() if f.get("state") in ("open", "half_open")}
    for d in sorted(is_open ^ snap.open):
        yield {"k": "open_set", "d": d}


def _fingerprint_suspects(snap: Snapshot) -> Iterator[dict[str, Any]]:
    dead = set(snap.dead)
    for fp, job_id in snap.unique.items():
        job = snap.jobs.get(job_id)
        if job_id not in snap.jobs or job_id in dead or (job or {}).get("done_at") is not None:
            yield {"k": "stale_fingerprint", "fp": fp, "id": job_id}


def _duplicate_suspects(snap: Snapshot) -> Iterator[dict[str, Any]]:
    """Pending jobs that took their fingerprint for uniqueness (``fp`` without ``fpw``) and
    do not hold it in ``sq:{Q}:unique``: a second pending job of their URL (or a lost hold).
    A job that took its fingerprint without asking for uniqueness (``fpw``) may share it."""
    dead = set(snap.dead)
    for job_id, job in snap.jobs.items():
        if job is None or job_id in dead or job.get("done_at") is not None or job.get("fpw"):
            continue
        fp = job.get("fp")
        if isinstance(fp, str) and snap.unique.get(fp) != job_id:
            yield {"k": "duplicate_pending", "id": job_id, "fp": fp}


def _registry_suspects(snap: Snapshot) -> Iterator[dict[str, Any]]:
    used = {registry_bucket(d) for d in snap.registry_names}
    registered = len(snap.registry_names)
    if snap.domain_count != registered or used != snap.registry_index:
        yield {"k": "domain_count", "exp": registered, "obs": snap.domain_count}


def _int(value: str | None) -> int:
    try:
        return int(value or 0)
    except ValueError:
        return 0


# --- the whole audit -------------------------------------------------------------------------


def _subject(item: dict[str, Any]) -> str:
    if item["k"] == "domain_count":
        return "registry"
    for name in ("id", "d", "lane", "fp"):
        if name in item and not (name == "id" and item["k"] == "stale_fingerprint"):
            return str(item[name])
    return ""


#: Passes of a repairing audit: one repair can reveal another (a job removed from a second
#: place leaves a counter to recount), so it scans again until a pass finds nothing.
REPAIR_PASSES = 3


def audit_op(
    keys: Keys, lanes: list[str], default_conc: int, repair: bool, keep_done_ms: int = 0
) -> Op[AuditReport]:
    """Scan, then confirm (and with ``repair`` fix) each suspicion atomically."""
    problems: list[AuditProblem] = []
    suspected = 0
    for _ in range(REPAIR_PASSES if repair else 1):
        snap = yield from scan_op(keys, lanes, default_conc, keep_done_ms)
        suspects = find_suspects(snap)
        found = yield from _confirm(suspects, repair)
        problems += found
        suspected += len(suspects) - len(found)
        if not found:
            break
    checked = {
        "jobs": len(snap.jobs),
        "domains": len(snap.domains),
        "leases": len(snap.inflight),
        "fingerprints": len(snap.unique),
    }
    return AuditReport(keys.queue, problems, checked, suspected=suspected)


def _confirm(suspects: list[dict[str, Any]], repair: bool) -> Op[list[AuditProblem]]:
    problems: list[AuditProblem] = []
    for start in range(0, len(suspects), CHECKS_PER_CALL):
        chunk = suspects[start : start + CHECKS_PER_CALL]
        answers = yield scripts.audit(chunk, repair)
        for item, (confirmed, repaired, detail) in zip(chunk, answers, strict=True):
            if confirmed:
                problems.append(AuditProblem(item["k"], _subject(item), detail, repaired))
    return problems
