"""Every Redis key of a queue, built in one place.

All keys of queue ``Q`` carry the hash tag ``{Q}`` so one queue lives in one Redis Cluster
slot; with ``partitions = P > 1`` partition ``i``'s keys carry ``{Q:i}`` instead (``:`` cannot
be in a queue name, so ``{shop:0}`` is never the tag of a queue ``shop.0``), and ``{Q}``
keeps only the queue's home: its ``meta`` (the number of partitions). Scripts receive
:attr:`Keys.prefix` and build per-domain and per-job keys from it with the same suffixes as
here (``lua/includes/keys.lua``); the two must agree.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "QUEUE_SCAN_PATTERN",
    "REGISTRY_BUCKETS",
    "Keys",
    "queue_of_marker",
    "registry_bucket",
    "validate_queue_name",
]

_QUEUE_NAME = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")
#: The keys that show a queue exists (the ones ``Queue.exists`` looks at).
_MARKER = re.compile(r"^sq:\{([A-Za-z0-9_.\-]{1,64})(?::[0-9]+)?\}:(?:meta|stats|dcount|domains)$")

#: A SCAN pattern matching every scrapeq key of every queue (braces are literal in globs).
QUEUE_SCAN_PATTERN = "sq:{*}:*"


#: The domain registry's buckets: ``sq:{Q}:reg:<b>`` hashes, domain -> jobs enqueued for it.
REGISTRY_BUCKETS = 1024


def registry_bucket(domain: str) -> int:
    """The registry bucket of a domain (the scripts' ``registry_bucket``, lua/includes/common.lua).

    A polynomial hash of the name's UTF-8 bytes modulo the prime 1,000,003 (exact in Lua's
    doubles, and spread evenly: 50,000 names fill no bucket past 66), modulo
    :data:`REGISTRY_BUCKETS`.
    """
    h = 0
    for byte in domain.encode():
        h = (h * 31 + byte) % 1_000_003
    return h % REGISTRY_BUCKETS


def validate_queue_name(name: str) -> str:
    """Return ``name`` if it is a valid queue name, else raise ``ValueError``.

    A queue name is 1 to 64 characters of letters, digits, ``_``, ``.`` and ``-``; braces
    are refused because the name becomes the Redis Cluster hash tag.
    """
    if not _QUEUE_NAME.fullmatch(name):
        raise ValueError(f"invalid queue name {name!r}: use 1-64 letters, digits, '_', '.' or '-'")
    return name


def queue_of_marker(key: str) -> str | None:
    """The queue a key shows to exist (``sq:{shops}:meta`` → ``shops``), or None.

    Only a queue's marker keys answer (``meta``, ``stats``, ``dcount``, and ``domains`` of a
    queue written before the domain registry had buckets): every queue that
    ``Queue.exists`` finds has at least one, so a SCAN finds each queue a bounded number of
    times however many jobs it holds.
    """
    found = _MARKER.fullmatch(key)
    return found.group(1) if found else None


@dataclass(frozen=True, slots=True)
class Keys:
    """Key names of one queue."""

    queue: str
    #: The partition (``partitions > 1``), or None: the queue's own keys ``sq:{Q}:``.
    partition: int | None = None

    @property
    def prefix(self) -> str:
        """``sq:{Q}:`` (``sq:{Q:i}:`` for partition i), the start of every key."""
        if self.partition is None:
            return f"sq:{{{self.queue}}}:"
        return f"sq:{{{self.queue}:{self.partition}}}:"

    def job(self, job_id: str) -> str:
        return f"{self.prefix}job:{job_id}"

    def domain_queue(self, domain: str) -> str:
        return f"{self.prefix}dq:{domain}"

    def domain(self, domain: str) -> str:
        return f"{self.prefix}domain:{domain}"

    def domain_dead(self, domain: str) -> str:
        return f"{self.prefix}ddead:{domain}"

    def lane_ready(self, lane: str) -> str:
        """A lane's ready index in queues written before issue 13 (lanes now have counters)."""
        return f"{self.prefix}lane:{lane}"

    @property
    def delayed(self) -> str:
        return f"{self.prefix}delayed"

    @property
    def domains_ready(self) -> str:
        return f"{self.prefix}domains:ready"

    @property
    def domains_wait(self) -> str:
        return f"{self.prefix}domains:wait"

    @property
    def domains(self) -> str:
        """The domain registry of a queue written before it had buckets (a set): only
        ``lua/migrate-1.lua`` reads it, and the marker lists (``exists``, ``clear``)."""
        return f"{self.prefix}domains"

    def registry(self, bucket: int) -> str:
        """Bucket ``bucket`` of the domain registry (a hash: domain -> jobs enqueued)."""
        return f"{self.prefix}reg:{bucket}"

    @property
    def registry_keys(self) -> list[str]:
        """Every bucket of the domain registry, in order."""
        return [self.registry(b) for b in range(REGISTRY_BUCKETS)]

    @property
    def registry_index(self) -> str:
        """The numbers of the registry's buckets that are not empty (a set)."""
        return f"{self.prefix}regb"

    @property
    def domain_count(self) -> str:
        """The number of domains in the registry (a counter)."""
        return f"{self.prefix}dcount"

    @property
    def inflight(self) -> str:
        return f"{self.prefix}inflight"

    @property
    def dead(self) -> str:
        return f"{self.prefix}dead"

    def history(self, hour: int) -> str:
        """Per-minute counts of one hour (hours since the epoch): lua/includes/history.lua."""
        return f"{self.prefix}history:{hour}"

    @property
    def stats(self) -> str:
        return f"{self.prefix}stats"

    @property
    def unique(self) -> str:
        return f"{self.prefix}unique"

    @property
    def hosts(self) -> str:
        """``politeness = ip``: host -> its group key (``ip:<address>``), learned by fetches."""
        return f"{self.prefix}hosts"

    def seen(self, bucket: int, time_slice: int | None = None) -> str:
        """A bucket set of the exact seen-set (``time_slice``: with ``recrawl_after``)."""
        if time_slice is None:
            return f"{self.prefix}seen:{bucket}"
        return f"{self.prefix}seen:{time_slice}:{bucket}"

    def seen_bloom(self, chunk: int) -> str:
        """A chunk of the seen-set's Bloom filter (``seen_filter = bloom``)."""
        return f"{self.prefix}seen:bloom:{chunk}"

    @property
    def events(self) -> str:
        return f"{self.prefix}events"

    @property
    def wake(self) -> str:
        """A stream of one entry, written when urgent work is enqueued (workers block on it)."""
        return f"{self.prefix}wake"

    def exit(self, exit_id: str) -> str:
        """Hash: an exit's state and counters (includes/exits.lua)."""
        return f"{self.prefix}exit:{exit_id}"

    @property
    def exits_down(self) -> str:
        """Hash: exit id -> when its cooldown ends, for the exits that are not closed."""
        return f"{self.prefix}exits:down"

    def domain_exits(self, domain: str) -> str:
        """Hash: a domain's tier, its benched exits and its per-tier counts."""
        return f"{self.prefix}dexit:{domain}"

    @property
    def owed(self) -> str:
        """Hash: job id -> a results line owed to a sink (``lua/includes/owed.lua``): the
        attempt's record and the settle's answer, kept until a worker wrote it."""
        return f"{self.prefix}owed"

    @property
    def owed_due(self) -> str:
        """Zset: job id -> when (ms) an owed line is overdue: another worker may write it."""
        return f"{self.prefix}owed:due"

    @property
    def meta(self) -> str:
        return f"{self.prefix}meta"

    @property
    def log_leader(self) -> str:
        """The worker that logs the queue's events and progress (``log_leader-1.lua``)."""
        return f"{self.prefix}log-leader"

    @property
    def log_cursor(self) -> str:
        """The id of the last event the log leader logged."""
        return f"{self.prefix}log-cursor"

    def all_patterns(self) -> str:
        """A SCAN pattern matching every key of this queue (of this partition)."""
        return f"{self.prefix}*"
