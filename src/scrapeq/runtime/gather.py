"""When a worker's claims and settles wait for company (:class:`Gather`).

Each claim and each settle is one script call, and a call costs redis-server about a million
instructions before its first job (the script's prologue: every include's functions made
anew, the configuration decoded and checked; docs/BENCHMARKS.md section 38), against about
300 thousand a job after that. On pages that answer at once a worker's calls carry 60-170
jobs each; on pages that take their time (50-350 ms) slots free one at a time and each claim
carried two jobs and each settle four: Redis spent five times the CPU a job (section 39:
these waits halve it there, at 0.974x the jobs/s).

So, while claims come back full (as many jobs as asked: work is waiting, and other domains'
jobs fill the slots meanwhile):

* a claim waits, at most :data:`CLAIM_WAIT` seconds and 1/:data:`CLAIM_HELD_SHARE` of the
  time a job holds its slot (so on instant pages hardly at all), for at least
  1/:data:`CLAIM_SHARE` of the worker's slots (up to a claim's batch) to be free;
* a settlement that nobody awaits waits, at most :data:`SETTLE_WAIT` seconds and
  1/:data:`SETTLE_HELD_SHARE` of the time a job holds its slot, for :data:`SETTLE_MIN`
  settlements to go together (its slot is already free; its lease holds meanwhile; its
  domain's slot in Redis is freed when it lands). On instant pages both waits are shorter
  than the loops' own ticks: calls there were full already.

After a short claim (fewer jobs than asked: the queue had no more ready work, or domains were
at their caps), the next claim waits for the queue to move: one of this worker's settles
landing (it frees its domains' slots, may enqueue follow-ups or retries) or urgent work; at
most 1/:data:`SETTLE_HELD_SHARE` of a job's time and the idle wait the claim answered (its
next due job, at most ``IDLE_MAX``). A job of its own ending alone changes nothing in the
queue, and a claim for each would come back empty. Settles then go
at the settle loop's every tick, as before (domains at their caps wait for them). With no job
in flight the claim loop's own idle wait is all there is, as before.

Always at once: a claim woken by urgent work, a settle buffer holding a settlement someone
awaits (a results line written from its answer, a handler that runs alone), and every flush at
a stop.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

__all__ = [
    "CLAIM_HELD_SHARE", "CLAIM_SHARE", "CLAIM_WAIT", "SETTLE_HELD_SHARE", "SETTLE_MIN",
    "SETTLE_WAIT", "Gather",
]  # fmt: skip

#: Longest a claim waits for more free slots, seconds.
CLAIM_WAIT: Final = 0.010
#: ... and at most 1/CLAIM_HELD_SHARE of the time a job holds its slot (recent average): a
#: wait costs the slots free meanwhile, a few per cent of their time at most.
CLAIM_HELD_SHARE: Final = 32
#: A claim waits for 1/CLAIM_SHARE of the worker's slots (at most a batch) to be free.
CLAIM_SHARE: Final = 8
#: Longest a settlement nobody awaits waits for others, seconds.
SETTLE_WAIT: Final = 0.050
#: ... and at most 1/SETTLE_HELD_SHARE of the time a job holds its slot: a settle frees its
#: domain's slot in Redis, so its wait is a domain at its cap waiting too.
SETTLE_HELD_SHARE: Final = 8
#: Settlements that go at once, whoever awaits them.
SETTLE_MIN: Final = 64


class Gather:
    """The claim loop's and the settle loop's shared view: whether claims come back full,
    since when the claim loop waits, since when the settle buffer holds settlements."""

    __slots__ = (
        "_claim_since", "_held", "_moved_at", "_settle_since", "_short_until", "claim_min",
        "claims_full", "moves", "slots", "urgent",
    )  # fmt: skip

    def __init__(self, concurrency: int, batch: int) -> None:
        self.slots = concurrency
        #: Free slots a claim waits for while claims come back full.
        self.claim_min = max(1, min(batch, concurrency) // CLAIM_SHARE)
        self.claims_full = False
        self.urgent = False  # urgent work was enqueued: the next claim goes at once
        self._held = 0.0  # seconds a job holds its slot, a moving average (:meth:`ended`)
        self.moves = 0  # settles of this worker landed so far (:meth:`moved`)
        self._moved_at = 0  # ``moves`` when the last claim was sent
        self._short_until: float | None = None  # after a short claim: its idle wait's end
        self._claim_since: float | None = None
        self._settle_since: float | None = None

    def ended(self, held: float) -> None:
        """A job left its slot after ``held`` seconds (from its claim)."""
        self._held += (held - self._held) * 0.0625

    def moved(self) -> None:
        """One of this worker's settles landed: the queue moved."""
        self.moves += 1

    def claimed(self, asked: int, got: int, sent: int, now: float, idle: float) -> None:
        """A claim sent when ``moves`` was ``sent`` asked for ``asked`` jobs and got ``got``;
        ``idle``: how long it says to wait when it got none (its next due job, at most
        ``IDLE_MAX``)."""
        self.claims_full = got >= asked
        self.urgent = False
        self._claim_since = None
        self._moved_at = sent
        # after a short claim: wait for a settle of ours at most 1/SETTLE_HELD_SHARE of a job's
        # time (what a settle waits), and never past the claim's own idle wait
        bound = min(idle, self._held / SETTLE_HELD_SHARE)
        self._short_until = None if self.claims_full else now + bound

    def claim_wait(self, free: int, now: float) -> float:
        """Seconds the claim loop waits (for more free slots, or for the queue to move)
        before it claims, ``free`` slots free now; 0: claim now."""
        if self.urgent:
            return 0.0
        if not self.claims_full:  # with no job in flight, none of ours can move the queue
            if self._short_until is None or self.moves > self._moved_at or free >= self.slots:
                return 0.0
            return max(0.0, self._short_until - now)
        if free >= self.claim_min:
            return 0.0
        if self._claim_since is None:
            self._claim_since = now
        most = min(CLAIM_WAIT, self._held / CLAIM_HELD_SHARE)
        return max(0.0, self._claim_since + most - now)

    def settle_due(self, pending: Sequence[tuple[Any, Any, Any]], now: float) -> bool:
        """Whether the settle buffer (``pending``: settlement, job, future or None) goes now."""
        if not pending:
            self._settle_since = None
            return False
        if not self.claims_full or len(pending) >= SETTLE_MIN:
            return True
        if self._settle_since is None:
            self._settle_since = now
        if now - self._settle_since >= min(SETTLE_WAIT, self._held / SETTLE_HELD_SHARE):
            return True
        return any(item[2] is not None for item in pending)

    def settled(self) -> None:
        """The settle buffer went (what joins it now starts a new wait)."""
        self._settle_since = None
