"""Where a critical burst's wait goes, for bench/incident.py's scrapeq runs.

The child (scrapeq's worker) notes, on a file named by ``$BENCH_TIMELINE``, one JSON line
an event (``time.monotonic()``, system-wide, as the burst site's clock):

* ``enq``: the burst's enqueue call returned, with the worker's busy slots at that moment;
* ``claim``: a claim call that took burst jobs: when it was sent and answered, the slots it
  asked for, the burst jobs and all the jobs it got.

:func:`breakdown` turns them, with the burst site's first fetch of each page, into the
figures bench/incident.py prints: the enqueue call, enqueue -> claimed, claimed -> first
fetch (task start, fetch setup, loopback), claim rounds, and how many of those rounds were
cut short by the slots the worker had free (the claim got all it asked for, all burst)
rather than by the burst domain's limit.
"""

from __future__ import annotations

import inspect
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

ENV = "BENCH_TIMELINE"


class Timeline:
    """The child's side: appends events to ``$BENCH_TIMELINE`` (nothing when unset)."""

    def __init__(self, burst_urls: list[str]) -> None:
        path = os.environ.get(ENV)
        self._file = None if not path else Path(path).open("a")  # noqa: SIM115
        self._burst = set(burst_urls)

    def note(self, **event: Any) -> None:
        if self._file is not None:
            self._file.write(json.dumps(event) + "\n")
            self._file.flush()

    def enqueued(self, busy: int) -> None:
        self.note(ev="enq", t=time.monotonic(), busy=busy)

    def watch_claims(self, queue: Any) -> None:
        """Wrap ``queue.claim`` (async or sync) to note each claim that took burst jobs."""
        if self._file is None:
            return
        claim = queue.claim

        def note(n: int, sent: float, got: Any, urgent_only: bool = False) -> Any:
            urls = [j.url for j in got.jobs if j.url in self._burst]
            if urls:
                self.note(ev="claim", sent=sent, t=time.monotonic(), n=n, urls=urls,
                          jobs=len(got.jobs), urgent_only=urgent_only)  # fmt: skip
            return got

        async def noted(n: int, **options: Any) -> Any:
            sent = time.monotonic()
            return note(n, sent, await claim(n, **options), **options)

        def noted_sync(n: int, **options: Any) -> Any:
            sent = time.monotonic()
            return note(n, sent, claim(n, **options), **options)

        queue.claim = noted if inspect.iscoroutinefunction(claim) else noted_sync


def read(path: str) -> list[dict[str, Any]]:
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def _ms(values: list[float], p: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    rank = max(1, -(-len(values) * p // 100))
    return round(values[int(rank) - 1] * 1000, 1)


def breakdown(events: list[dict[str, Any]], at: float, first: dict[str, float]) -> dict[str, Any]:
    """Figures of one run: ``at`` the burst's enqueue time, ``first`` URL -> first fetch."""
    enq = next((e for e in events if e["ev"] == "enq"), None)
    claims = [e for e in events if e["ev"] == "claim"]
    if enq is None or not claims:
        return {}
    claimed = {u: c["t"] for c in claims for u in c["urls"]}
    to_claim = [t - enq["t"] for t in claimed.values()]
    to_fetch = [first[u] - t for u, t in claimed.items() if u in first]
    slot_bound = sum(1 for c in claims if len(c["urls"]) == c["n"] == c["jobs"])
    return {
        "enqueue_ms": round((enq["t"] - at) * 1000, 1),
        "busy_at_enqueue": enq["busy"],
        "to_claim_p50_ms": _ms(to_claim, 50),
        "to_claim_p99_ms": _ms(to_claim, 99),
        "first_claim_ms": _ms(to_claim, 0),
        "to_fetch_p50_ms": _ms(to_fetch, 50),
        "to_fetch_p99_ms": _ms(to_fetch, 99),
        "claim_rounds": len(claims),
        "urgent_only_rounds": sum(1 for c in claims if c.get("urgent_only")),
        "per_round": round(statistics.mean(len(c["urls"]) for c in claims), 1),
        "slot_bound_rounds": slot_bound,
        "claim_rtt_ms": _ms([c["t"] - c["sent"] for c in claims], 50),
        # each round: ms after the enqueue, burst jobs, slots asked, and the p50 ms from that
        # round's claim to its pages' first fetch
        "rounds": [
            (
                round((c["t"] - enq["t"]) * 1000),
                len(c["urls"]),
                c["n"],
                _ms([first[u] - c["t"] for u in c["urls"] if u in first], 50),
            )
            for c in claims
        ],
    }


def line(b: dict[str, Any]) -> str:
    """One line of the breakdown, for the run's log."""
    if not b:
        return "breakdown: none (no timeline)"
    return (
        f"breakdown: enqueue call {b['enqueue_ms']} ms ({b['busy_at_enqueue']} slots busy); "
        f"enqueue->claimed first {b['first_claim_ms']} p50 {b['to_claim_p50_ms']} "
        f"p99 {b['to_claim_p99_ms']} ms; claimed->fetch p50 {b['to_fetch_p50_ms']} "
        f"p99 {b['to_fetch_p99_ms']} ms; {b['claim_rounds']} claim rounds of "
        f"{b['per_round']} burst jobs ({b['slot_bound_rounds']} bound by free slots, "
        f"{b.get('urgent_only_rounds', 0)} urgent-only), "
        f"claim rtt p50 {b['claim_rtt_ms']} ms; rounds (ms, burst/asked, to fetch ms) "
        + " ".join(f"{t}:{got}/{asked}:{fetch}" for t, got, asked, fetch in b.get("rounds", []))
    )
