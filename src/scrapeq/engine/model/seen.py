"""The seen-set's layout: what the client computes so a script can check-and-add a URL.

With ``unique = seen`` a URL once enqueued is never enqueued again for the queue's life, or
not before ``recrawl_after`` seconds. The check and the add happen in the Lua script that
creates the job (``lua/includes/seen.lua``, ``seen_add``); everything that needs hashing is
done here, in Python, and passed to it:

* **exact** (default): the URL's 64-bit fingerprint
(:func:`scrapeq.engine.model.urls.fingerprint64`),
  as a decimal *string* (cjson keeps 14 significant digits, a fingerprint has up to 19), is
  SADDed into one of B sets ``sq:{Q}:seen:<bucket>``, bucket = the fingerprint mod B: its
  low bits, B being a power of two. The client sends the fingerprint's low 32 bits and the
  script takes them mod the queue's B, so the bucket count has one home, the queue. B is
  sized from ``seen_capacity`` (:func:`seen_buckets`: at most :data:`SEEN_BUCKET_FILL` URLs
  a bucket at capacity, more than half as many) and recorded by the queue's first seen
  enqueue (``exact/buckets=<B>`` in ``sq:{Q}:meta``; no suffix for
  :data:`DEFAULT_SEEN_BUCKETS`, which the default capacity gives and which every queue
  written before the count was sized has). A client whose ``seen_capacity`` asks for
  another B uses the queue's and logs a warning once: the seen-set is never re-bucketed.
  Each set holds integers only, so Redis keeps it an *intset*: 8 bytes a member while it
  has at most ``set-max-intset-entries`` members (512 by default; the fullest bucket stays
  under it up to about twice ``seen_capacity``). Past that a bucket becomes a hash table of
  strings, tens of bytes a member. Exact up to fingerprint collisions: about
  ``n**2 / 2**65``, 3 in a million at 10 million URLs.
* **exact with** ``recrawl_after`` = R: time slices of R/4 (:data:`RECRAWL_SLICES`); a URL
  is looked up in the current slice and the 4 before it and added to the current one, whose
  keys expire once no lookup reads them. A URL is let in again between R and 1.25 R after it
  was last let in (the granularity is one slice, R/4).
* **bloom**: a bitmap of m bits and k bit positions per URL by double hashing of the
  fingerprint, m = -N ln p / (ln 2)^2, k = round(m/N ln 2) for ``seen_capacity`` N and
  ``seen_error_rate`` p: 14.4 bits (1.8 bytes) a URL at p = 1e-3. It is stored in chunks of
  :data:`BLOOM_CHUNK_BYTES` (``sq:{Q}:seen:bloom:<i>``), so each allocation fits an
  allocator size class (one 18 MB string takes a 20 MiB jemalloc class: +17 %), and created
  in full by the queue's first seen enqueue (m is rounded up to whole chunks). A false
  positive (probability up to p at N URLs, more beyond: about 5 % at 2 N for p = 1e-3)
  **drops a new URL** as seen. It cannot forget, so it takes no ``recrawl_after``.

Every client of a queue must agree on the layout (:attr:`SeenLayout.stamp`, the bucket count
aside): the first call records it in ``sq:{Q}:meta`` and a call with another one is refused
(``ConfigError``).
"""

from __future__ import annotations

import logging
import math
import re
from dataclasses import dataclass
from typing import Any

__all__ = [
    "BLOOM_CHUNK_BYTES",
    "BLOOM_MAX_BITS",
    "DEFAULT_SEEN_BUCKETS",
    "MAX_SEEN_BUCKETS",
    "RECRAWL_SLICES",
    "SEEN_BUCKET_FILL",
    "SEEN_FILTERS",
    "SeenLayout",
    "bloom_geometry",
    "bloom_positions",
    "exact_bucket",
    "seen_buckets",
    "stored_buckets",
    "warn_if_resized",
]

log = logging.getLogger("scrapeq.seen")

#: Bucket sets of an exact seen-set whose recorded layout names no count: every queue written
#: before the count was sized (the fingerprint's low 16 bits chose one), and the count the
#: default ``seen_capacity`` (10 million) gives.
DEFAULT_SEEN_BUCKETS = 1 << 16
#: URLs a bucket holds at most at ``seen_capacity`` (more than half as many): ~105 bytes of
#: key shared by 100-200 members of 8 bytes, and room to twice the capacity below the
#: intset limit (512).
SEEN_BUCKET_FILL = 200
#: Most buckets: the script takes the bucket from the fingerprint's low 32 bits.
MAX_SEEN_BUCKETS = 1 << 32
#: Slices a ``recrawl_after`` period is cut into; lookups read the current slice and this many
#: before it, so a URL comes back between 1 and 1 + 1/RECRAWL_SLICES periods after it went in.
RECRAWL_SLICES = 4
#: Largest Bloom filter: 512 MiB, which its first seen enqueue allocates at once.
BLOOM_MAX_BITS = 1 << 32
#: Bytes of one chunk of a Bloom filter: with Redis's string header (9 bytes) and its final
#: NUL, a chunk is 256 KiB, an exact allocator size class.
BLOOM_CHUNK_BYTES = (1 << 18) - 16
SEEN_FILTERS = ("exact", "bloom")

_MASK64 = (1 << 64) - 1


def bloom_geometry(capacity: int, error_rate: float) -> tuple[int, int]:
    """The Bloom filter for ``capacity`` URLs at false-positive rate ``error_rate``.

    Returns:
        (m, k): m = ceil(-N ln p / (ln 2)^2) bits, k = round(m / N ln 2) >= 1 positions a URL.
    """
    bits = math.ceil(-capacity * math.log(error_rate) / math.log(2) ** 2)
    hashes = max(1, round(bits / capacity * math.log(2)))
    return bits, hashes


def _splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def bloom_positions(fp64: int, bits: int, hashes: int) -> list[int]:
    """The ``hashes`` bit positions in ``[0, bits)`` of fingerprint ``fp64``.

    Double hashing (Kirsch-Mitzenmacher): ``(h1 + i * h2) mod m`` for i < k, h1 and h2 two
    64-bit mixes (splitmix64) of the fingerprint; h2 is never 0 mod m, so the k positions
    are not all one.
    """
    h1 = _splitmix64(fp64 & _MASK64)
    h2 = _splitmix64(h1) % (bits - 1) + 1 if bits > 1 else 0
    return [(h1 + i * h2) % bits for i in range(hashes)]


def seen_buckets(capacity: int) -> int:
    """Buckets of an exact seen-set for ``capacity`` URLs.

    Returns:
        The smallest power of two >= capacity / :data:`SEEN_BUCKET_FILL` (1 to
        :data:`MAX_SEEN_BUCKETS`): 1,024 for 200,000 URLs, 65,536 for 10 million.
    """
    need = max(1, math.ceil(capacity / SEEN_BUCKET_FILL))
    return min(MAX_SEEN_BUCKETS, 1 << (need - 1).bit_length())


def exact_bucket(fp64: int, buckets: int) -> int:
    """The bucket ``includes/seen.lua`` files a fingerprint in, for a reader (``buckets`` a
    power of two, as :func:`stored_buckets` reads it from the queue)."""
    return fp64 & (buckets - 1)


_BUCKETS = re.compile(r"/buckets=(\d+)$")


def stored_buckets(stamp: str | None) -> int | None:
    """The bucket count of a queue's recorded layout (the ``seen`` field of its meta).

    Returns:
        None when the queue has no exact seen-set yet (no stamp, or a Bloom filter);
        :data:`DEFAULT_SEEN_BUCKETS` when the stamp names no count.
    """
    if stamp is None or not stamp.startswith("exact"):
        return None
    match = _BUCKETS.search(stamp)
    return int(match.group(1)) if match else DEFAULT_SEEN_BUCKETS


def warn_if_resized(layout: SeenLayout, stamp: str | None) -> None:
    """Log a warning when the queue's seen-set (recorded as ``stamp``) has another bucket
    count than ``layout``, built from this client's ``seen_capacity``, asks for."""
    stored = stored_buckets(stamp)
    if stored is None or layout.filter != "exact" or stored == layout.buckets:
        return
    log.warning(
        "seen_capacity asks for %s seen-set buckets, but this queue's seen-set has %s buckets "
        "(fixed by its first seen enqueue): keeping %s, memory per URL follows them",
        f"{layout.buckets:,}", f"{stored:,}", f"{stored:,}",
    )  # fmt: skip


@dataclass(frozen=True, slots=True)
class SeenLayout:
    """How a queue's seen-set is laid out; built from the settings.

    Attributes:
        filter: ``exact`` or ``bloom``.
        slice_ms: exact with ``recrawl_after``: the slice length (recrawl_after / 4) in ms;
            0 when URLs are kept forever.
        bits, hashes: the Bloom filter's m (rounded up to whole chunks) and k (0 for exact).
        chunk_bits: bits in one chunk of the Bloom filter (a filter smaller than
            :data:`BLOOM_CHUNK_BYTES` is one chunk of its own size).
        buckets: exact: the bucket count ``seen_capacity`` asks for (:func:`seen_buckets`),
            recorded by the queue's first seen enqueue; the queue's recorded count wins.
    """

    filter: str = "exact"
    slice_ms: int = 0
    bits: int = 0
    hashes: int = 0
    chunk_bits: int = 0
    buckets: int = DEFAULT_SEEN_BUCKETS

    @classmethod
    def from_settings(cls, s: Any) -> SeenLayout:
        """The layout ``s`` (a :class:`~scrapeq.engine.config.settings.Settings`) asks for."""
        if s.seen_filter == "bloom":
            bits, hashes = bloom_geometry(s.seen_capacity, s.seen_error_rate)
            chunk_bits = min(BLOOM_CHUNK_BYTES, math.ceil(bits / 8)) * 8
            chunks = math.ceil(bits / chunk_bits)
            return cls("bloom", 0, chunks * chunk_bits, hashes, chunk_bits, 0)
        slice_ms = 0
        if s.recrawl_after is not None:
            slice_ms = max(1, round(s.recrawl_after * 1000 / RECRAWL_SLICES))
        return cls("exact", slice_ms, buckets=seen_buckets(s.seen_capacity))

    @property
    def stamp(self) -> str:
        """The text every client of a queue must agree on (kept in ``sq:{Q}:meta``, where the
        first seen enqueue appends ``/buckets=<n>`` unless n is :data:`DEFAULT_SEEN_BUCKETS`).
        """
        if self.filter == "bloom":
            return f"bloom/m={self.bits}/k={self.hashes}/chunk={self.chunk_bits}"
        return f"exact/slice_ms={self.slice_ms}" if self.slice_ms else "exact"

    def arg(self, fp64: int) -> dict[str, Any]:
        """The ``seen`` argument of one URL for ``seen_add`` (``lua/includes/seen.lua``):
        exact, ``b`` the fingerprint's low 32 bits (the script takes them mod the queue's
        bucket count) and ``f`` the fingerprint as text; bloom, its bit positions.

        Args:
            fp64: the URL's :func:`~scrapeq.engine.model.urls.fingerprint64`.
        """
        if self.filter == "bloom":
            return {"bits": bloom_positions(fp64, self.bits, self.hashes)}
        return {"b": fp64 & 0xFFFF_FFFF, "f": str(fp64)}
