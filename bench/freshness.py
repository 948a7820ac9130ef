"""Freshness per fetch budget: uniform revisits, Nutch's adaptive rule, scrapeq's, the oracle.

A fleet of pages on several domains, each page's content changing as a Poisson process
whose rate is drawn from a heavy-tailed mix (a few pages change every minute or two, most
every few hours, some never). Every change is logged (the ground truth). Half of the domains
answer conditional requests (a 304 without a body when the copy is current), the other half
always send the whole body.

The run is a discrete-event simulation in simulated hours (no wall clock: hundreds of
simulated hours take seconds). Every policy gets the same fetch budget per domain and runs
over the same pages and the same change log. Two modes (``--mode``, both by default):

- ``due`` (the live system's semantics since issue 37, the verdicts): a page is fetched when
  it is due, never earlier and never held back, so a policy's fetches are what it scheduled
  (the live queue's claims are not paced by the revisit budget); the bounds are the live
  defaults (``revisit_min_interval`` 60 s, ``revisit_max_interval`` 30 days);
- ``paced`` (the bench before issue 37): a domain is fetched at most ``budget`` times an hour,
  the most overdue page first, whatever the policy scheduled.

The first crawl is paced at the budget in both. Nutch has no budget of its own (a round
fetches its topN most due pages): it is paced in both modes. The policies:

- ``uniform``: every page every pages / budget hours (today's ``recrawl_after``; no
  conditional requests: scrapeq before issue 25 sent none);
- ``nutch``: Nutch's AdaptiveFetchSchedule: the interval x (1 - 0.2) after a change,
  x (1 + 0.4) after none (its DEC_RATE and INC_RATE defaults), within the same bounds as
  scrapeq's; conditional requests (Nutch sends If-Modified-Since);
- ``scrapeq``: each visit's next due time is the answer of ``RV.step``
  (``src/scrapeq/engine/lua/includes/revisit_rule.lua``, the pure rule settle-1.lua runs),
  EVALed on a private redis-server one visit at a time, with the page's and the domain's
  state it returned last; conditional requests;
- ``oracle``: the optimal allocation computed with the true rates (a domain's price mu found
  by bisection so the rates sum to the budget; each page visited every 1 / f hours; pages
  not worth a visit are never visited again): the limit.

A page is fresh while the copy of its last fetch is its live content. Reported: the
time-averaged weighted freshness after warm-up (``--warmup`` hours), each policy's share of
the oracle's, fetches, and body bytes downloaded (all domains, and the conditional ones:
a 304 costs no body).

Targets (issue 25): scrapeq >= 95% of the oracle after warm-up, above uniform and Nutch;
bytes on the conditional domains at most half of uniform's (checked in ``due`` mode; the
``paced`` mode's in the JSON report's ``paced``).

The same measure on the real queue and worker, in compressed time: ``bench/freshness_live.py``.

Run: ``.venv/bin/python bench/freshness.py [--quick] [--seed N] [--mode M] [--json PATH]``
"""

from __future__ import annotations

import argparse
import bisect
import heapq
import json
import math
import random
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import redis

from _redis import add_server_args, format_table, private_redis
from scrapeq.engine.lua import scripts

NUTCH_DEC, NUTCH_INC = 0.2, 0.4
#: the interval's bounds (scrapeq's and Nutch's): the live defaults (revisit_min_interval,
#: revisit_max_interval)
MIN_S, MAX_S = 60.0, 30 * 86400.0

STEP_LUA = scripts.expand_includes(
    """--@include revisit_rule
local a = cjson.decode(ARGV[1])
local page = a.page
if page == cjson.null then page = nil end
local p, d, interval = RV.step(page, a.dom, a.obs, a.cfg)
return cjson.encode({page = p, dom = d, interval = interval})
"""
)


@dataclass(slots=True)
class Page:
    domain: int
    rate: float  # changes per hour (true)
    weight: float
    size: int  # body bytes
    changes: list[float] = field(default_factory=list)  # hours


@dataclass(slots=True)
class Outcome:
    name: str
    fresh: float = 0.0  # weighted time-averaged freshness after warm-up
    fetches: int = 0
    bytes_all: int = 0
    bytes_conditional: int = 0
    fetches_conditional: int = 0


def make_fleet(rng: random.Random, domains: int, pages: int, hours: float) -> list[Page]:
    fleet = []
    for d in range(domains):
        for _ in range(pages):
            u = rng.random()
            if u < 0.05:
                rate = rng.uniform(30, 60)  # every minute or two
            elif u < 0.15:
                rate = 0.0  # never
            elif u < 0.20:
                rate = 1 / rng.uniform(0.25, 1)  # several times an hour
            else:
                rate = 1 / math.exp(rng.uniform(math.log(2), math.log(24)))  # every few hours
            weight = rng.choice((1.0, 1.0, 1.0, 2.0, 4.0))
            page = Page(d, rate, weight, rng.randint(10_000, 60_000))
            t = 0.0
            while rate > 0:
                t += rng.expovariate(rate)
                if t > hours:
                    break
                page.changes.append(t)
            fleet.append(page)
    return fleet


class Changing(Protocol):
    """A page's change log: when its content changed (hours here, seconds in the live bench)."""

    changes: list[float]


def fresh_time(page: Changing, fetches: list[float], start: float, end: float) -> float:
    """Time within [start, end] (the change log's unit) that the copy of the last fetch
    equals the live page."""
    total = 0.0
    for i, t in enumerate(fetches):
        nxt = fetches[i + 1] if i + 1 < len(fetches) else end
        k = bisect.bisect_right(page.changes, t)
        stale_at = page.changes[k] if k < len(page.changes) else end
        a, b = max(t, start), min(nxt, stale_at, end)
        if b > a:
            total += b - a
    return total


def version(page: Page, t: float) -> int:
    return bisect.bisect_right(page.changes, t)


#: A policy: (page index, fetch time h, changed: True/False/None for the first) -> next due h.
Policy = Callable[[int, float, bool | None], float]


def simulate(
    name: str,
    fleet: list[Page],
    budget: float,
    hours: float,
    warmup: float,
    conditional: Callable[[int], bool],
    policy: Policy,
    sends_validators: bool,
    paced: bool = False,
) -> Outcome:
    out = Outcome(name)
    domains = sorted({p.domain for p in fleet})
    fetch_log: dict[int, list[float]] = {i: [] for i in range(len(fleet))}
    for d in domains:
        members = [i for i, p in enumerate(fleet) if p.domain == d]
        heap = [(k / budget, i) for k, i in enumerate(members)]  # the first crawl, paced
        heapq.heapify(heap)
        seen_version: dict[int, int] = {}
        slot = -1.0 / budget
        while heap:
            due, i = heapq.heappop(heap)
            if due == math.inf:
                break
            # live, a page is fetched when it is due (claims are not paced by the budget);
            # paced (the bench before issue 37): at most budget fetches an hour, most overdue first
            t = max(due, slot + 1.0 / budget) if paced else due
            if t > hours:
                break
            slot = t
            page = fleet[i]
            v = version(page, t)
            changed = None if i not in seen_version else v != seen_version[i]
            seen_version[i] = v
            fetch_log[i].append(t)
            out.fetches += 1
            body = page.size
            if sends_validators and conditional(d) and changed is False:
                body = 0  # 304 Not Modified
            out.bytes_all += body
            if conditional(d):
                out.bytes_conditional += body
                out.fetches_conditional += 1
            heapq.heappush(heap, (policy(i, t, changed), i))
    weights = sum(p.weight for p in fleet)
    kept = sum(p.weight * fresh_time(p, fetch_log[i], warmup, hours) for i, p in enumerate(fleet))
    out.fresh = kept / (weights * (hours - warmup))
    return out


def oracle_rates(pages: list[Page], budget: float) -> list[float]:
    """The optimal visits per hour of each page with the true rates (bisection on mu)."""

    def freq(lam: float, w: float, mu: float) -> float:
        if lam <= 0 or w / lam <= mu:
            return 0.0
        c = 1 - mu * lam / w
        lo, hi = math.log(1e-9), math.log(700)
        for _ in range(60):
            mid = (lo + hi) / 2
            r = math.exp(mid)
            if (1 + r) * math.exp(-r) > c:
                lo = mid
            else:
                hi = mid
        return lam / math.exp((lo + hi) / 2)

    lo, hi = math.log(1e-9), math.log(1e9)
    for _ in range(100):
        mid = (lo + hi) / 2
        total = sum(freq(p.rate, p.weight, math.exp(mid)) for p in pages)
        if total > budget:
            lo = mid
        else:
            hi = mid
    mu = math.exp(hi)
    return [freq(p.rate, p.weight, mu) for p in pages]


class ScrapeqRule:
    """RV.step EVALed per visit, with each page's and each domain's state kept as it answers."""

    def __init__(self, client: redis.Redis, fleet: list[Page], budget: float) -> None:
        self.fleet, self.budget = fleet, budget
        self.step = client.register_script(STEP_LUA)
        self.pages: dict[int, Any] = {}
        self.doms: dict[int, dict[str, Any]] = {}
        self.calls = 0

    def __call__(self, i: int, t: float, changed: bool | None) -> float:
        page = self.fleet[i]
        obs: dict[str, Any] = {"now": t * 3600}
        if changed is not None:
            obs["changed"] = changed
        cfg = {"budget": self.budget, "min": MIN_S, "max": MAX_S, "w": page.weight}
        arg = {"page": self.pages.get(i), "dom": self.doms.get(page.domain, {}), "obs": obs,
               "cfg": cfg}  # fmt: skip
        answer = json.loads(self.step(args=[json.dumps(arg)]))
        self.calls += 1
        self.pages[i], self.doms[page.domain] = answer["page"], answer["dom"]
        # the rule works in whole seconds: the next visit is at the second it names
        return float(answer["page"]["due"]) / 3600


def run(
    client: redis.Redis, *, domains: int, pages: int, budget: float, hours: float,
    warmup: float, seed: int, paced: bool = False,
) -> dict[str, Any]:  # fmt: skip
    rng = random.Random(seed)
    fleet = make_fleet(rng, domains, pages, hours)

    def conditional(d: int) -> bool:
        return d % 2 == 0

    uniform_every = pages / budget
    outcomes = [
        simulate("uniform", fleet, budget, hours, warmup, conditional,
                 lambda i, t, c: t + uniform_every, sends_validators=False, paced=paced),
    ]  # fmt: skip
    nutch: dict[int, float] = {}

    def nutch_rule(i: int, t: float, changed: bool | None) -> float:
        ivl = nutch.get(i, uniform_every)
        if changed is True:
            ivl *= 1 - NUTCH_DEC
        elif changed is False:
            ivl *= 1 + NUTCH_INC
        ivl = min(max(ivl, MIN_S / 3600), MAX_S / 3600)
        nutch[i] = ivl
        return t + ivl

    # Nutch has no budget of its own (a round fetches the topN most due): paced in both modes
    outcomes.append(simulate("nutch", fleet, budget, hours, warmup, conditional, nutch_rule,
                             sends_validators=True, paced=True))  # fmt: skip
    rule = ScrapeqRule(client, fleet, budget)
    outcomes.append(simulate("scrapeq", fleet, budget, hours, warmup, conditional, rule,
                             sends_validators=True, paced=paced))  # fmt: skip
    best: dict[int, float] = {}
    for d in range(domains):
        members = [i for i, p in enumerate(fleet) if p.domain == d]
        for i, f in zip(members, oracle_rates([fleet[i] for i in members], budget), strict=True):
            best[i] = f

    def oracle(i: int, t: float, changed: bool | None) -> float:
        f = best[i]
        return t + 1 / f if f > 0 else math.inf

    outcomes.append(simulate("oracle", fleet, budget, hours, warmup, conditional, oracle,
                             sends_validators=True, paced=paced))  # fmt: skip
    by = {o.name: o for o in outcomes}
    limit = by["oracle"].fresh
    return {
        "seed": seed, "mode": "paced" if paced else "due", "domains": domains,
        "pages_per_domain": pages, "budget_per_hour": budget,
        "hours": hours, "warmup_hours": warmup, "rule_calls": rule.calls,
        "changes_logged": sum(len(p.changes) for p in fleet),
        "policies": [
            {"name": o.name, "freshness": round(o.fresh, 4),
             "of_oracle": round(o.fresh / limit, 4) if limit > 0 else None,
             "fetches": o.fetches, "bytes": o.bytes_all,
             "bytes_conditional": o.bytes_conditional,
             "fetches_conditional": o.fetches_conditional}
            for o in outcomes
        ],
    }  # fmt: skip


def verdicts(report: dict[str, Any]) -> dict[str, bool]:
    by = {p["name"]: p for p in report["policies"]}
    s = by["scrapeq"]
    return {
        "scrapeq >= 95% of oracle": s["of_oracle"] >= 0.95,
        "scrapeq > uniform": s["freshness"] > by["uniform"]["freshness"],
        "scrapeq > nutch": s["freshness"] > by["nutch"]["freshness"],
        "conditional bytes <= half of uniform's": (
            s["bytes_conditional"] <= 0.5 * by["uniform"]["bytes_conditional"]
        ),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small fleet, a short run")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--domains", type=int, default=4)
    parser.add_argument("--pages", type=int, default=100, help="pages per domain")
    parser.add_argument("--budget", type=float, default=25.0, help="fetches per domain-hour")
    parser.add_argument("--hours", type=float, default=600.0, help="simulated hours")
    parser.add_argument("--warmup", type=float, default=150.0, help="hours left out")
    parser.add_argument("--json", help="write the report there too")
    parser.add_argument("--mode", choices=("due", "paced", "both"), default="both",
                        help="due: a page fetched when due, as live (the verdicts); "
                        "paced: at most the budget's rate, most overdue first")  # fmt: skip
    add_server_args(parser)
    args = parser.parse_args(argv)
    if args.quick:
        args.domains, args.pages, args.budget, args.hours, args.warmup = 2, 30, 8.0, 200.0, 60.0
    modes = {"due": [False], "paced": [True], "both": [False, True]}[args.mode]
    with private_redis(args.redis_server) as server:
        client = redis.Redis.from_url(server.url)
        reports = [run(client, domains=args.domains, pages=args.pages, budget=args.budget,
                       hours=args.hours, warmup=args.warmup, seed=args.seed, paced=paced)
                   for paced in modes]  # fmt: skip
    report = reports[0]
    report["redis"] = server.version
    for one in reports:
        rows = [[p["name"], f"{p['freshness']:.3f}", f"{p['of_oracle']:.1%}", p["fetches"],
                 f"{p['bytes'] / 1e6:.1f}", f"{p['bytes_conditional'] / 1e6:.1f}"]
                for p in one["policies"]]  # fmt: skip
        print(f"{one['mode']}: {one['domains']} domains x {one['pages_per_domain']} pages, budget "
              f"{one['budget_per_hour']:g}/domain-hour, {one['hours']:g} h simulated "
              f"(warm-up {one['warmup_hours']:g} h), {one['changes_logged']} changes, "
              f"seed {one['seed']}, intervals {MIN_S:g} s to {MAX_S / 86400:g} days")  # fmt: skip
        print(format_table(["policy", "freshness", "of oracle", "fetches", "MB",
                            "MB conditional"], rows))  # fmt: skip
        if one is not report:
            one["verdicts"] = verdicts(one)
            report[one["mode"]] = one
    report["verdicts"] = verdicts(report)
    for what, ok in report["verdicts"].items():
        print(f"{'PASS' if ok else 'FAIL'}  {what} ({report['mode']})")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(report, fh, indent=1)
    return 0 if all(report["verdicts"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
