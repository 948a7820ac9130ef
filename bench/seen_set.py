"""Seen-set memory and speed: exact (intset buckets) and Bloom, beside scrapy-redis' layout.

Each row runs on the same private redis-server, flushed (``FLUSHALL``) and left 0.5 s before
``INFO memory`` is read; bytes/URL is the growth of ``used_memory`` less that of
``mem_clients_normal`` (a client's query buffer keeps the size of its last big call), over the
URL count. Scripts are loaded before the first reading, the slow log is off (it keeps the
arguments of up to 128 slow calls: ~0.1 bytes/URL at 1,000,000 URLs) and so is Redis 7's
latency tracking (``CONFIG RESETSTAT`` drops its per-command histograms, and the commands of
a row allocate them again: ~0.2 MB). URLs are 60 characters
(``https://d00042.example.com/item/000…``, 10,000 domains), all distinct.

Rows:

* **seen-only script**: a probe script made of ``lua/includes/common.lua`` and
  ``lua/includes/seen.lua`` that calls ``seen_add`` (the very code ``enqueue-1.lua`` runs)
  for 1,000 URLs a call, and creates no job. The client computes each URL's arguments with
  ``SeenLayout.arg`` as the queue does, from the SHA-1 prefix of the URL (what
  ``urls.fingerprint64`` computes, without parsing the URL again). The memory is the
  seen-set's alone: the bucket sets (exact) or the bitmap (bloom), their keys and the
  keyspace's table. adds/s times the script calls only (not the hashing in Python); server
  us/add is the script's time inside Redis (``INFO commandstats``). Three exact rows a
  size N: the default ``seen_capacity`` (10,000,000: 65,536 buckets, the layout of every
  queue before the bucket count was sized), ``seen_capacity`` = N (the crawl's size stated),
  and ``seen_capacity`` = N/2 (a crawl twice the size stated: are its buckets still
  intsets?).
* **scrapy-redis layout**: scrapy-redis' ``RFPDupeFilter`` keeps request fingerprints as
  40-character hex SHA-1 strings in one Redis set (``SADD <spider>:dupefilter <fp>``);
  reproduced here (no scrapy dependency) with the hex SHA-1 of the same URLs, SADDed in
  pipelines of 1,000. scrapy-redis itself sends one SADD a request, without a pipeline.
* **enqueue script**: ``Queue.enqueue_many(..., unique="seen")`` in calls of 500: the full
  ``enqueue-1.lua``, which creates every job too. adds/s times ``enqueue_many`` (jobs made
  per second; ``Queue.prepare``, which parses and fingerprints each URL, runs beforehand and
  is not timed); the row is repeated with ``unique="off"`` for reference. Its bytes/URL is
  the seen-set it built, measured after every other key was deleted and the seen keys moved
  to an empty database (so the keyspace table sized for the jobs is not counted). The exact
  row is run at the default ``seen_capacity`` and at ``seen_capacity`` = N.

The Bloom filters are sized for the row's URL count (``seen_capacity`` = N) at
``seen_error_rate`` 1e-3. After loading, N/100 new URLs (10,000 at least) are offered to
each seen-set: those refused are false positives (none for exact). A Bloom filter also
refuses some of the N distinct URLs while it fills (its false positives on the way).

Bars: exact <= 16 bytes/URL at 10,000,000 URLs; bloom <= 2 bytes/URL at 10,000,000 URLs and
p = 1e-3; exact with ``seen_capacity`` = N <= 16 bytes/URL at every size N run. ``--quick``
runs 100,000 and 1,000,000 instead, ``--sizes A,B`` any two sizes (no verdict on the 10 M
bars unless B is 10,000,000).

Run: ``.venv/bin/python bench/seen_set.py [--quick | --sizes A,B] [--enqueue-urls N]
[--redis-server PATH]``
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import orjson
import redis

from _redis import add_server_args, commandstats, format_table, load_note, private_redis
from scrapeq.engine.config.settings import Settings
from scrapeq.engine.lua.scripts import ScriptConfig, expand_includes
from scrapeq.engine.model.seen import SeenLayout
from scrapeq.engine.model.urls import fingerprint64
from scrapeq.engine.queue import Queue

EXACT_BAR = 16.0
BIG = 10_000_000
BLOOM_BAR = 2.0
ERROR_RATE = 1e-3
BATCH = 1000
ENQUEUE_CHUNK = 500
#: New URLs offered after loading N, as a share of N (at least 10,000): the filter fills a
#: little while they are offered, so the share is kept small.
PROBE_SHARE = 0.01
SETTLE_S = 0.5
QUEUE = "bench"

#: The seen-only probe: the include enqueue-1.lua uses, without the job.
PROBE_LUA = """--@include common
--@include seen
local bad = seen_layout_error()
if bad then return redis.error_reply(bad) end
local new = 0
for _, s in ipairs(ARG.items) do
  if seen_add(s) then new = new + 1 end
end
return new
"""


@dataclass(frozen=True, slots=True)
class Row:
    label: str
    urls: int
    bytes_per_url: float
    adds_per_s: float
    server_us: float
    note: str = ""


def url_for(i: int) -> str:
    return f"https://d{i % 10_000:05d}.example.com/item/{i:034d}"


def digest(i: int) -> bytes:
    return hashlib.sha1(url_for(i).encode(), usedforsecurity=False).digest()


def fp64(i: int) -> int:
    """``urls.fingerprint64(url_for(i))``: the URL is normalised already."""
    return int.from_bytes(digest(i)[:8], "big", signed=True)


def used_memory(client: redis.Redis) -> int:
    """``used_memory`` less the normal clients' buffers."""
    time.sleep(SETTLE_S)
    client.ping()
    info: dict[str, Any] = client.info("memory")
    return int(info["used_memory"]) - int(info.get("mem_clients_normal", 0))


def fresh(client: redis.Redis) -> int:
    client.flushall()
    client.config_resetstat()
    return used_memory(client)


def server_us(client: redis.Redis, command: str, per: int) -> float:
    calls_usec = commandstats(client).get(command, (0, 0.0))
    return calls_usec[1] / max(per, 1)


def batches(start: int, n: int) -> Iterator[range]:
    for first in range(start, start + n, BATCH):
        yield range(first, min(first + BATCH, start + n))


# --- seen-only script ----------------------------------------------------------------------------


class Probe:
    """The seen-only script for one layout."""

    def __init__(self, client: redis.Redis, settings: Settings) -> None:
        self.client = client
        self.layout = SeenLayout.from_settings(settings)
        self.config = ScriptConfig.from_settings(settings).to_json()
        self.prefix = f"sq:{{{QUEUE}}}:"
        self.script = client.register_script(expand_includes(PROBE_LUA))
        self.script(keys=[self.prefix], args=[0, self.config, '{"items":[]}'])  # load it

    def add(self, start: int, n: int) -> tuple[int, float]:
        """Offer URLs start..start+n-1; answers (how many were new, seconds in the calls)."""
        new, spent = 0, 0.0
        for ids in batches(start, n):
            args = orjson.dumps({"items": [self.layout.arg(fp64(i)) for i in ids]})
            t0 = time.perf_counter()
            new += int(self.script(keys=[self.prefix], args=[0, self.config, args]))
            spent += time.perf_counter() - t0
        return new, spent


def seen_only_row(client: redis.Redis, settings: Settings, n: int, label: str) -> Row:
    client.flushall()  # the previous row's layout stamp
    probe = Probe(client, settings)
    before = fresh(client)
    new, spent = probe.add(0, n)
    after = used_memory(client)
    exact = probe.layout.filter == "exact"
    if exact and new != n:
        raise RuntimeError(f"{label}: {n - new} of {n:,} distinct URLs refused while loading")
    us = server_us(client, "scripts", n)
    probes = max(10_000, round(n * PROBE_SHARE))
    refused = probes - probe.add(n, probes)[0]
    note = f"then {refused:,} of {probes:,} new URLs refused ({refused / probes:.3%})"
    if exact:
        note += "; " + bucket_note(client, probe.prefix, probe.layout.buckets)
    else:
        note = f"{n - new:,} refused while loading, {note}"
    return Row(label, n, (after - before) / n, n / spent, us, note)


def bucket_note(client: redis.Redis, prefix: str, buckets: int) -> str:
    pipe = client.pipeline(transaction=False)
    for b in range(buckets):
        pipe.object("encoding", f"{prefix}seen:{b}")
        pipe.scard(f"{prefix}seen:{b}")
    replies = pipe.execute()
    encodings: dict[str, int] = {}
    for enc in replies[0::2]:
        name = "empty" if enc is None else str(enc)
        encodings[name] = encodings.get(name, 0) + 1
    sizes = [int(s) for s in replies[1::2]]
    shown = ", ".join(f"{count:,} {enc}" for enc, count in sorted(encodings.items()))
    return f"buckets: {shown}; members {min(sizes)}-{max(sizes)}"


# --- scrapy-redis layout -------------------------------------------------------------------------


def scrapy_row(client: redis.Redis, n: int) -> Row:
    key = "bench:dupefilter"
    before = fresh(client)
    spent = 0.0
    for ids in batches(0, n):
        members = [digest(i).hex() for i in ids]
        pipe = client.pipeline(transaction=False)
        for m in members:
            pipe.sadd(key, m)
        t0 = time.perf_counter()
        pipe.execute()
        spent += time.perf_counter() - t0
    after = used_memory(client)
    if client.scard(key) != n:
        raise RuntimeError("scrapy-redis layout: members lost")
    enc = client.object("encoding", key)
    return Row("scrapy-redis layout (SADD pipelines)", n, (after - before) / n, n / spent,
               server_us(client, "sadd", n), f"one set, {enc}")  # fmt: skip


# --- enqueue script ------------------------------------------------------------------------------


def enqueue_rows(client: redis.Redis, url: str, n: int) -> list[Row]:
    rows = []
    for label, settings, mode in (
        ("exact, enqueue script", Settings(queue=QUEUE, unique="seen"), "seen"),
        ("exact, seen_capacity = N, enqueue script", _exact(n), "seen"),
        ("bloom, enqueue script", _bloom(n), "seen"),
        ("no seen-set (unique=off), enqueue script", Settings(queue=QUEUE), "off"),
    ):
        q = Queue.from_url(url, settings=settings)
        client.flushall()
        q.enqueue("https://warm.example.com/", unique=mode)  # load the script
        before = fresh(client)
        spent = 0.0
        for ids in batches(0, n):
            specs = [q.prepare(url_for(i), unique=mode) for i in ids]
            t0 = time.perf_counter()
            for start in range(0, len(specs), ENQUEUE_CHUNK):
                q.enqueue_many(specs[start : start + ENQUEUE_CHUNK])
            spent += time.perf_counter() - t0
        us = server_us(client, "scripts", n)
        size = seen_set_alone(client, q) - before if mode == "seen" else 0
        q.close()
        note = "jobs made per second; us/add is the whole enqueue script a job"
        rows.append(Row(label, n, size / n if size else 0.0, n / spent, us, note))
    return rows


def seen_set_alone(client: redis.Redis, q: Queue) -> int:
    """Move the seen-set's keys to database 1, empty database 0 (its keyspace table was sized
    for the jobs), measure."""
    keep = q.keys.prefix + "seen:"
    cursor = 0
    while True:
        cursor, keys = client.scan(cursor, match=q.keys.all_patterns(), count=10_000)
        pipe = client.pipeline(transaction=False)
        for key in keys:
            if str(key).startswith(keep):
                pipe.move(key, 1)
        pipe.execute()
        if cursor == 0:
            break
    client.flushdb()
    return used_memory(client)


def _exact(capacity: int) -> Settings:
    return Settings(queue=QUEUE, unique="seen", seen_capacity=max(1, capacity))


def _bloom(n: int) -> Settings:
    return Settings(queue=QUEUE, unique="seen", seen_filter="bloom", seen_capacity=n,
                    seen_error_rate=ERROR_RATE)  # fmt: skip


# --- main ----------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="100,000 and 1,000,000 URLs")
    parser.add_argument("--sizes", default=None, help="two URL counts, A,B (default 1M,10M)")
    parser.add_argument(
        "--enqueue-urls", type=int, default=None,
        help="URLs through the enqueue script (default 1,000,000; --quick 100,000)",
    )  # fmt: skip
    parser.add_argument("--strict", action="store_true", help="exit 1 when a bar is missed")
    add_server_args(parser)
    return parser.parse_args(argv)


def quiet_server(client: redis.Redis) -> None:
    """No slow log, no latency histograms (Redis 7): memory they take is not the seen-set's."""
    client.config_set("slowlog-log-slower-than", -1)
    with contextlib.suppress(redis.ResponseError):  # Redis 6.2 has no latency tracking
        client.config_set("latency-tracking", "no")


def check_fingerprints() -> None:
    for i in (0, 1, 12_345):
        if fp64(i) != fingerprint64(url_for(i)):
            raise RuntimeError("the bench's fingerprint is not urls.fingerprint64")


def run_rows(client: redis.Redis, url: str, sizes: tuple[int, int], n_enqueue: int) -> list[Row]:
    steps: list[Callable[[], Row | list[Row]]] = []
    for n in sizes:
        steps += [
            lambda n=n: seen_only_row(client, Settings(queue=QUEUE), n, "exact, seen-only script"),
            lambda n=n: seen_only_row(client, _exact(n), n, "exact, seen_capacity = N"),
            lambda n=n: seen_only_row(client, _exact(n // 2), n, "exact, seen_capacity = N/2"),
            lambda n=n: seen_only_row(client, _bloom(n), n, "bloom p=0.001, seen-only script"),
            lambda n=n: scrapy_row(client, n),
        ]
    steps.append(lambda: enqueue_rows(client, url, n_enqueue))
    rows: list[Row] = []
    for step in steps:
        got = step()
        rows += got if isinstance(got, list) else [got]
        last = rows[-1]
        shown = f"{last.bytes_per_url:.2f} B/URL, " if last.bytes_per_url else ""
        print(f"  {last.label}, {last.urls:,} URLs: {shown}{last.adds_per_s:,.0f}/s", flush=True)
    return rows


def verdict(rows: list[Row], big: int) -> tuple[bool, str]:
    exact = next(r for r in rows if r.urls == big and r.label.startswith("exact, seen-only"))
    bloom = next(r for r in rows if r.urls == big and r.label.startswith("bloom"))
    sized = [r for r in rows if r.label == "exact, seen_capacity = N"]
    ok = exact.bytes_per_url <= EXACT_BAR and bloom.bytes_per_url <= BLOOM_BAR
    ok = ok and all(r.bytes_per_url <= EXACT_BAR for r in sized)
    shown = ", ".join(f"{r.bytes_per_url:.2f} at {r.urls:,}" for r in sized)
    text = (
        f"exact {exact.bytes_per_url:.2f} B/URL at {big:,} URLs (bar <= {EXACT_BAR:g}); "
        f"bloom {bloom.bytes_per_url:.2f} B/URL at {big:,} URLs, p = {ERROR_RATE:g} "
        f"(bar <= {BLOOM_BAR:g}); exact with seen_capacity = N: {shown} B/URL "
        f"(bar <= {EXACT_BAR:g} at each)"
    )
    return ok, text


def chosen_sizes(args: argparse.Namespace) -> tuple[int, int]:
    if args.sizes:
        small, big = (int(s.replace("_", "")) for s in args.sizes.split(","))
        return small, big
    return (100_000, 1_000_000) if args.quick else (1_000_000, BIG)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    sizes = chosen_sizes(args)
    n_enqueue = args.enqueue_urls or (100_000 if args.quick else 1_000_000)
    check_fingerprints()
    with private_redis(args.redis_server) as server:
        # FLUSHALL of 10 million set members takes seconds: no socket timeout
        client = redis.Redis.from_url(server.url, decode_responses=True, socket_timeout=None)
        limit = client.config_get("set-max-intset-entries")["set-max-intset-entries"]
        quiet_server(client)
        print(f"redis-server {server.version}: {server.binary}")
        print(f"set-max-intset-entries {limit}; {load_note()}")
        rows = run_rows(client, server.url, sizes, n_enqueue)
        client.close()
    headers = ["row", "URLs", "bytes/URL", "adds/s", "server us/add", "notes"]
    table = [[r.label, r.urls, r.bytes_per_url or "-", r.adds_per_s, r.server_us, r.note]
             for r in rows]  # fmt: skip
    print()
    print(format_table(headers, table))
    ok, text = verdict(rows, sizes[1])
    if sizes[1] != BIG:
        print(f"(no verdict on the {BIG:,}-URL bars: the largest size run is {sizes[1]:,}) {text}")
        return 0
    print(f"{'PASS' if ok else 'FAIL'}: {text}")
    return 1 if args.strict and not ok else 0


if __name__ == "__main__":
    sys.exit(main())
