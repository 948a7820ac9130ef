"""Redis memory per tracked URL of the revisit state (issue 25: at most 100 bytes at 1M URLs).

The state is what ``lua/includes/revisit.lua`` keeps per URL: a field of 8 bytes (from the
URL's SHA-1) in one of 65,536 bucket hashes ``sq:{Q}:rv:<b>``, valued 28 packed bytes. This
bench writes N URLs' states (default 1,000,000) with the include's own ``RV.where`` and
``RV.FMT`` (an EVAL of the expanded include, 50,000 URLs a call, each state a realistic one:
visits, changes, intervals, a signature) and reads ``INFO memory`` ``used_memory`` before and
after; the difference over N is the cost of one URL, bucket keys and the keyspace's share
included. A second figure checks the settle path writes the same 28 bytes: 1,000 URLs
enqueued, claimed and settled done through the real queue with revisit on (their revisits
scheduled), and the state values' lengths read back.

Run: ``.venv/bin/python bench/revisit_state.py [--urls N] [--redis-server PATH]``
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from typing import Any

import redis

from _redis import add_server_args, format_table, private_redis
from scrapeq.engine.config.settings import Settings
from scrapeq.engine.lua import scripts
from scrapeq.engine.queue import Queue

BAR_BYTES = 100.0
CHUNK = 50_000

FILL_LUA = scripts.expand_includes(
    """local P = KEYS[1]
--@include revisit
local first, n = tonumber(ARGV[1]), tonumber(ARGV[2])
for i = first, first + n - 1 do
  local key, field = RV.where('https://shop' .. (i % 1000) .. '.example.com/product/' .. i)
  local sig = string.sub(redis.sha1hex(tostring(i)), 1, 16)
  redis.call('HSET', key, field, struct.pack(RV.FMT, 1767225600 + i % 86400,
    1767225600 + 86400 + i % 7200, (i % 50) * 3600, (i % 70) * 3600, i % 120, i % 50)
    .. RV.unhex(sig))
end
return n
"""
)


def used(client: redis.Redis) -> int:
    time.sleep(0.3)
    return int(client.info("memory")["used_memory"])


def settle_path(url: str, n: int) -> list[int]:
    """Lengths of the states the real settle writes for n URLs."""
    q = Queue.from_url(url, settings=Settings(queue="settled", revisit="on"))
    try:
        q.enqueue_many([f"http://site{i % 10}.test/p/{i}" for i in range(n)])
        while jobs := q.claim(100).jobs:
            q.settle_many(
                [dataclasses.replace(q.done(j), signature=f"{i:016x}") for i, j in enumerate(jobs)]
            )
    finally:
        q.close()
    raw = redis.Redis.from_url(url)
    lengths = [len(v) for k in raw.scan_iter("sq:{settled}:rv:*") for v in raw.hvals(k)]
    raw.close()
    return lengths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--urls", type=int, default=1_000_000)
    add_server_args(parser)
    args = parser.parse_args(argv)
    report: dict[str, Any] = {}
    with private_redis(args.redis_server) as server:
        client = redis.Redis.from_url(server.url)
        fill = client.register_script(FILL_LUA)
        before = used(client)
        started = time.monotonic()
        for first in range(0, args.urls, CHUNK):
            fill(keys=["sq:{default}:"], args=[first, min(CHUNK, args.urls - first)])
        after = used(client)
        per_url = (after - before) / args.urls
        encodings: dict[str, int] = {}
        for key in client.scan_iter("sq:{default}:rv:*", count=1000):
            enc = client.object("encoding", key)
            name = enc.decode() if isinstance(enc, bytes) else str(enc)
            encodings[name] = encodings.get(name, 0) + 1
        lengths = settle_path(server.url, 1000)
        report = {
            "redis": server.version, "urls": args.urls, "bytes_per_url": round(per_url, 1),
            "keys_in_db": client.dbsize(), "encodings": encodings,
            "fill_seconds": round(time.monotonic() - started, 1),
            "settle_path_states": len(lengths), "settle_path_lengths": sorted(set(lengths)),
        }  # fmt: skip
        client.close()
    print(format_table(["figure", "value"], [[k, str(v)] for k, v in report.items()]))
    ok = per_url <= BAR_BYTES and report["settle_path_lengths"] == [28]
    print(f"{'PASS' if ok else 'FAIL'}  <= {BAR_BYTES:g} bytes per tracked URL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
