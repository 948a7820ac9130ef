"""What the queue's operations answer: typed results of enqueue, claim, replay, cancel."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from scrapeq.engine.model.job import Job


@dataclass(frozen=True, slots=True)
class EnqueueResult:
    """What happened to one enqueued URL.

    Attributes:
        id: the job's id (for a duplicate: the pending job that has the fingerprint; for
            ``seen``: empty, no job was made).
        status: ``added``; ``duplicate`` (a pending job has the URL; with revisit on, a
            sitemap ``lastmod`` newer than the URL's last visit makes that job due now);
            ``seen`` (``unique="seen"``: the queue's seen-set has the URL); ``dead`` (its
            domain is retired: the job went straight to the dead letters, replayable);
            ``limit`` (a follow-up cut by ``max_pages``); or ``known`` (a known URL never to
            be visited again, ``EnqueueSpec.at_ms`` = 0: the seen-set has it now).
        urgent: the job went ready now as urgent work (the enqueue script's ``is_urgent``: at
            least as urgent as a fresh job of the most urgent lane; never with one lane), or
            a duplicate made due now did: idle workers were woken for it. What a client
            keeping slots for urgent work reads (Scrapy on scrapeq).
    """

    id: str
    status: str
    urgent: bool = field(default=False, compare=False)

    @property
    def added(self) -> bool:
        """Whether a job was made (``added`` or ``dead``), not skipped as a duplicate."""
        return self.status not in ("duplicate", "seen", "limit")


@dataclass(frozen=True, slots=True)
class Claimed:
    """The answer of a claim.

    Attributes:
        jobs: the claimed jobs, leased to the caller.
        next_due: seconds until something is next due (a delayed job, a parked domain, a
            lease to reap, the end of a global pause); 0.0 when jobs are ready now; ``None``
            when nothing at all is scheduled.
    """

    jobs: list[Job]
    next_due: float | None


class ReplayResult(NamedTuple):
    """What a replay did.

    Attributes:
        moved: dead letters put back in their lanes.
        missing: ids asked for that are not dead letters, or cannot be replayed (corrupt).
        duplicates: dead letters left dead because a pending job holds their de-duplication
            fingerprint (the URL was enqueued again after they died): replaying them would
            make two pending jobs for one URL.
    """

    moved: int
    missing: list[str]
    duplicates: list[str]


@dataclass(frozen=True, slots=True)
class CancelResult:
    """What a cancel did.

    Attributes:
        cancelled: pending jobs removed (counted in ``status`` as ``cancelled``).
        inflight: ids refused because a worker holds them (``force=True`` cancels them).
        dead: ids that are dead letters (``purge`` deletes those).
        done: ids of done jobs (kept by ``keep_done``).
        unknown: ids with no job (never enqueued, or done and not kept, or cancelled).
        corrupt: ids whose stored text is not a job (``audit --repair`` deals with them).
        left_inflight: ``domain=`` only: the domain's jobs in flight, left to finish.
    """

    cancelled: int
    inflight: list[str] = field(default_factory=list)
    dead: list[str] = field(default_factory=list)
    done: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)
    corrupt: list[str] = field(default_factory=list)
    left_inflight: int = 0


#: Why ``cancel-1.lua`` did not cancel an id: the CancelResult list it goes to.
_REFUSALS = ("inflight", "dead", "done", "unknown", "corrupt")


class KnownQueues(NamedTuple):
    """The queues a bounded SCAN found, and whether it looked at every key."""

    names: list[str]
    complete: bool
