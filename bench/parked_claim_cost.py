"""Claim cost with 0 versus 1,000,000 jobs parked behind an open breaker.

Two private redis-servers (same binary) hold the same healthy set: 50 domains with many ready
jobs each (default settings: 2 in flight per domain). Server B also holds one more domain with
1,000,000 ready jobs whose breaker is open (``breaker_trip(d, cooldown=3600)`` after the
enqueue). The design says a parked job costs nothing: a claim is O(log D + batch), whatever
the backlog behind an open domain.

The timed step is ``q.claim(16)`` + ``q.settle_many([q.done(j) ...])``. A and B run side by side
in alternating rounds (A,B then B,A, ...) so machine noise hits both alike. Reported: mean,
p50, p90 and p99 wall latency per step on each server, the server-side script time per step
(``INFO commandstats``), and the ratios B/A. Afterwards the parked backlog is checked
untouched.

Bar: mean latency ratio B/A <= 1.2.

Run: ``.venv/bin/python bench/parked_claim_cost.py [--quick] [--redis-server PATH]``
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import redis

from _redis import (
    SCRIPT_COMMANDS,
    RedisServer,
    add_server_args,
    commandstats,
    format_table,
    load_note,
    pct,
    private_redis,
)
from scrapeq.engine.lua.scripts import EnqueueSpec
from scrapeq.engine.queue import Queue

BAR_RATIO = 1.2
BATCH = 16
HEALTHY_DOMAINS = 50
CHUNK = 500
PARKED_DOMAIN = "parked.example.com"


@dataclass(frozen=True, slots=True)
class Plan:
    parked: int  # jobs behind the open breaker on server B
    claims: int  # timed claim+settle steps per server
    per_round: int  # steps per server per round
    warmup: int  # untimed steps per server before the first round

    @property
    def healthy_per_domain(self) -> int:
        needed = (self.claims + self.warmup) * BATCH
        return needed // HEALTHY_DOMAINS + 200  # never runs dry


FULL = Plan(parked=1_000_000, claims=5_000, per_round=100, warmup=200)
QUICK = Plan(parked=100_000, claims=1_000, per_round=100, warmup=100)


@dataclass(slots=True)
class Side:
    """One server and the latencies measured on it."""

    name: str
    queue: Queue
    step_us: list[float] = field(default_factory=list)
    claim_us: list[float] = field(default_factory=list)
    short_claims: int = 0
    parked_claimed: int = 0
    stats: dict[str, tuple[int, float]] = field(default_factory=dict)


def _template(q: Queue, url: str) -> EnqueueSpec:
    return q.prepare(url)


def spec_like(t: EnqueueSpec, url: str) -> EnqueueSpec:
    """A spec with another URL on the template's domain (skips re-validation)."""
    return EnqueueSpec(
        url=url,
        domain=t.domain,
        lane=t.lane,
        off_ms=t.off_ms,
        delay_ms=t.delay_ms,
        max_attempts=t.max_attempts,
    )


def healthy_url(domain: int, i: int) -> str:
    return f"https://h{domain:02d}.example.com/catalogue/item/{i:021d}"


def parked_url(i: int) -> str:
    return f"https://{PARKED_DOMAIN}/catalogue/item/{i:021d}"


def enqueue_healthy(q: Queue, per_domain: int) -> None:
    templates = [_template(q, healthy_url(d, 0)) for d in range(HEALTHY_DOMAINS)]
    buf: list[EnqueueSpec] = []
    for i in range(per_domain):
        for d, t in enumerate(templates):  # interleaved: every chunk spans every domain
            buf.append(spec_like(t, healthy_url(d, i)))
            if len(buf) == CHUNK:
                q.enqueue_many(buf)
                buf = []
    if buf:
        q.enqueue_many(buf)


def enqueue_parked(q: Queue, n: int) -> list[list[object]]:
    """Enqueue n jobs on PARKED_DOMAIN in chunks of 500, then open its breaker for an hour."""
    sample = 5_000
    start = time.perf_counter()
    for i in range(sample):
        q.prepare(parked_url(i))
    prepare_us = (time.perf_counter() - start) / sample * 1e6
    template = _template(q, parked_url(0))
    if q.prepare(parked_url(n - 1)).url != parked_url(n - 1):
        raise RuntimeError("parked URLs are not in normal form: the template shortcut is wrong")
    build = send = 0.0
    for base in range(0, n, CHUNK):
        t0 = time.perf_counter()
        chunk = [spec_like(template, parked_url(i)) for i in range(base, min(base + CHUNK, n))]
        t1 = time.perf_counter()
        q.enqueue_many(chunk)
        build, send = build + t1 - t0, send + time.perf_counter() - t1
    state = q.breaker_trip(PARKED_DOMAIN, cooldown=3600)
    if state != "open":
        raise RuntimeError(f"breaker_trip answered {state!r}")
    return [
        [
            "q.prepare, per job (sample of 5,000)",
            f"{prepare_us:.1f} us",
            f"{n * prepare_us / 1e6:.1f} s",
        ],
        [
            "specs from one template (EnqueueSpec(...))",
            f"{build / n * 1e6:.1f} us",
            f"{build:.1f} s",
        ],
        [f"enqueue_many, chunks of {CHUNK}", f"{send / n * 1e6:.1f} us", f"{send:.1f} s"],
        ["enqueue rate", f"{n / send:,.0f} jobs/s", ""],
    ]


def step(side: Side) -> None:
    q = side.queue
    t0 = time.perf_counter_ns()
    claimed = q.claim(BATCH)
    t1 = time.perf_counter_ns()
    q.settle_many([q.done(j) for j in claimed.jobs])
    t2 = time.perf_counter_ns()
    side.claim_us.append((t1 - t0) / 1000)
    side.step_us.append((t2 - t0) / 1000)
    if len(claimed.jobs) < BATCH:
        side.short_claims += 1
    side.parked_claimed += sum(j.domain == PARKED_DOMAIN for j in claimed.jobs)


def measure(a: Side, b: Side, plan: Plan) -> None:
    for side in (a, b):
        for _ in range(plan.warmup):
            step(side)
        side.step_us.clear()
        side.claim_us.clear()
        side.queue.client.config_resetstat()
    rounds = plan.claims // plan.per_round
    for r in range(rounds):
        for side in (a, b) if r % 2 == 0 else (b, a):
            for _ in range(plan.per_round):
                step(side)
    for side in (a, b):
        side.stats = commandstats(side.queue.client)


def figures(side: Side) -> dict[str, float]:
    calls, usec = side.stats["scripts"]
    pairs = calls / 2 or 1  # one claim + one settle per step
    return {
        "mean": statistics.fmean(side.step_us),
        "p50": pct(side.step_us, 50),
        "p90": pct(side.step_us, 90),
        "p99": pct(side.step_us, 99),
        "claim mean": statistics.fmean(side.claim_us),
        "claim p99": pct(side.claim_us, 99),
        "server-side": usec / pairs,
    }


def command_rows(a: Side, b: Side, steps: int) -> tuple[list[str], list[list[object]]]:
    names = sorted(
        (n for n in b.stats if n not in ("scripts", *SCRIPT_COMMANDS, "info", "config")),
        key=lambda n: -b.stats[n][1],
    )
    rows: list[list[object]] = []
    for name in names[:8]:
        ca, ua = a.stats.get(name, (0, 0.0))
        cb, ub = b.stats[name]
        ratio = f"{ub / ua:.2f}" if ua else "-"
        rows.append([name.upper(), ca / steps, cb / steps, ua / steps, ub / steps, ratio])
    headers = ["command", "calls A", "calls B", "usec A", "usec B", "B/A"]
    return headers, rows


def check_parked(q: Queue, n: int) -> tuple[int, str]:
    left = int(q.client.zcard(q.keys.domain_queue(PARKED_DOMAIN)))
    state = str(q.client.hget(q.keys.domain(PARKED_DOMAIN), "state"))
    if left != n:
        raise RuntimeError(f"parked backlog changed: {left} of {n} left")
    return left, state


def used_mb(client: redis.Redis) -> float:
    info: dict[str, Any] = client.info("memory")
    return float(info["used_memory"]) / 2**20


def report(a: Side, b: Side, plan: Plan, sb: RedisServer) -> float:
    fa, fb = figures(a), figures(b)
    rows: list[list[object]] = [[k, fa[k], fb[k], f"{fb[k] / fa[k]:.3f}"] for k in fa]
    print(f"\nclaim({BATCH}) + settle_many(done) latency, us per step, {plan.claims:,} steps each:")
    print(format_table(["figure", "A: 0 parked", f"B: {plan.parked:,} parked", "B/A"], rows))
    print("(server-side = claim-1.lua + settle-1.lua EVALSHA time per step, INFO commandstats)")
    print("\nInside the scripts, per step (top commands by time on B):")
    print(format_table(*command_rows(a, b, len(a.step_us))))
    left, state = check_parked(b.queue, plan.parked)
    print(
        f"\nServer B after the run: {PARKED_DOMAIN} breaker {state}, {left:,} jobs still parked, "
        f"{b.parked_claimed} claimed; used_memory {used_mb(b.queue.client):,.0f} MiB "
        f"(A: {used_mb(a.queue.client):,.0f} MiB)"
    )
    short = a.short_claims + b.short_claims
    if short or b.parked_claimed:
        raise RuntimeError(f"{short} short claims, {b.parked_claimed} parked jobs claimed")
    print(f"redis-server {sb.version}: {sb.binary}; {load_note()}")
    return fb["mean"] / fa["mean"]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="short run: 100,000 parked jobs")
    parser.add_argument("--parked", type=int, default=None, help="jobs parked on server B")
    parser.add_argument("--strict", action="store_true", help="exit 1 when the bar is missed")
    add_server_args(parser)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    plan = QUICK if args.quick else FULL
    if args.parked is not None:
        plan = Plan(args.parked, plan.claims, plan.per_round, plan.warmup)
    with private_redis(args.redis_server) as sa, private_redis(args.redis_server) as sb:
        a = Side("A", Queue.from_url(sa.url, "bench"))
        b = Side("B", Queue.from_url(sb.url, "bench"))
        per_domain = plan.healthy_per_domain
        print(f"Healthy set on A and B: {HEALTHY_DOMAINS} domains x {per_domain:,} ready jobs")
        for side in (a, b):
            enqueue_healthy(side.queue, per_domain)
        print(f"\nB only: {plan.parked:,} ready jobs on {PARKED_DOMAIN}, then its breaker opened")
        rows = enqueue_parked(b.queue, plan.parked)
        print(format_table(["step", "per job", "total"], rows))
        measure(a, b, plan)
        ratio = report(a, b, plan, sb)
    passed = ratio <= BAR_RATIO
    verdict = "PASS" if passed else "FAIL"
    print(f"\n{verdict}: mean latency ratio B/A = {ratio:.3f} (bar <= {BAR_RATIO})")
    return 1 if args.strict and not passed else 0


if __name__ == "__main__":
    sys.exit(main())
