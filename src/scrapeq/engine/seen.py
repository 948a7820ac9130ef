"""The seen-set's layout: what the client computes so a script can check-and-add a URL.

With ``unique = seen`` a URL once enqueued is never enqueued again for the queue's life, or
not before ``recrawl_after`` seconds. The check and the add happen in the Lua script that
creates the job (``lua/includes/seen.lua``, ``seen_add``); everything that needs hashing is
done here, in Python, and passed to it:

* **exact** (default): the URL's 64-bit fingerprint (:func:`scrapeq.engine.urls.fingerprint64`),
  as a decimal *string* (cjson keeps 14 significant digits, a fingerprint has up to 19), is
  SADDed into one of :data:`SEEN_BUCKETS` sets ``sq:{Q}:seen:<bucket>``, bucket = its low 16
  bits. Each set holds integers only, so Redis keeps it an *intset*: 8 bytes a member while
  it has at most ``set-max-intset-entries`` members (512 by default: about 150 a bucket at
  10 million URLs, the fullest bucket reaches 512 near 27 million). Past that a bucket
  becomes a hash table of strings, tens of bytes a member. Exact up to fingerprint
  collisions: about ``n**2 / 2**65``, 3 in a million at 10 million URLs.
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

Every client of a queue must agree on the layout (:attr:`SeenLayout.stamp`): the first call
records it in ``sq:{Q}:meta`` and a call with another one is refused (``ConfigError``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

__all__ = [
    "BLOOM_CHUNK_BYTES",
    "BLOOM_MAX_BITS",
    "RECRAWL_SLICES",
    "SEEN_BUCKETS",
    "SEEN_FILTERS",
    "SeenLayout",
    "bloom_geometry",
    "bloom_positions",
    "seen_bucket",
]

#: Bucket sets of the exact seen-set: the fingerprint's low 16 bits choose one.
SEEN_BUCKETS = 1 << 16
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


def seen_bucket(fp64: int) -> int:
    """The exact seen-set's bucket of a fingerprint: its low 16 bits (0..65535)."""
    return fp64 & (SEEN_BUCKETS - 1)


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
    """

    filter: str = "exact"
    slice_ms: int = 0
    bits: int = 0
    hashes: int = 0
    chunk_bits: int = 0

    @classmethod
    def from_settings(cls, s: Any) -> SeenLayout:
        """The layout ``s`` (a :class:`~scrapeq.engine.settings.Settings`) asks for."""
        if s.seen_filter == "bloom":
            bits, hashes = bloom_geometry(s.seen_capacity, s.seen_error_rate)
            chunk_bits = min(BLOOM_CHUNK_BYTES, math.ceil(bits / 8)) * 8
            chunks = math.ceil(bits / chunk_bits)
            return cls("bloom", 0, chunks * chunk_bits, hashes, chunk_bits)
        if s.recrawl_after is None:
            return cls("exact")
        return cls("exact", max(1, round(s.recrawl_after * 1000 / RECRAWL_SLICES)))

    @property
    def stamp(self) -> str:
        """The text every client of a queue must agree on (kept in ``sq:{Q}:meta``)."""
        if self.filter == "bloom":
            return f"bloom/m={self.bits}/k={self.hashes}/chunk={self.chunk_bits}"
        return f"exact/slice_ms={self.slice_ms}" if self.slice_ms else "exact"

    def arg(self, fp64: int) -> dict[str, Any]:
        """The ``seen`` argument of one URL for ``seen_add`` (``lua/includes/seen.lua``).

        Args:
            fp64: the URL's :func:`~scrapeq.engine.urls.fingerprint64`.
        """
        if self.filter == "bloom":
            return {"bits": bloom_positions(fp64, self.bits, self.hashes)}
        return {"b": seen_bucket(fp64), "f": str(fp64)}
