"""Scrapy on scrapeq on pages that take their time: the script calls a page and what Redis
spends a page (issue 40; docs/BENCHMARKS.md section 40).

One crawl per run: Scrapy with the add-on (``bench/_scrapy_crawl.py``, a process of its
own), ``domain_concurrency`` 4, over ``--pages`` pages of 20 loopback sites, each page
answering after 50 ms plus 0-300 ms (``bench/cost.py``'s ``slow`` row: its own fixed delay),
against a private redis-server. Per run:

* **pages/s**: pages over the crawl's wall time (Scrapy's start to its end);
* **scrapy us/page**: CPU (user + sys) of the crawl's process, its start-up included;
* **redis us/page**: redis-server's CPU over the crawl (``INFO cpu``), per page, the start
  requests' enqueue included;
* **calls/page**: script calls (``INFO commandstats``: EVALSHA or FCALL) per page;
* **jobs/claim**, **jobs/settle**: the jobs each ``Queue.claim`` and ``Queue.settle_many``
  carried; **give-backs/page**: ``Queue.downloaded`` calls (a domain slot given back while a
  page's callback runs) per page.

Rounds alternate the ``--concurrency`` values given (``CONCURRENT_REQUESTS``: 16 is Scrapy's
default); the table shows each value's medians. Two trees compare by running this file with
each tree's ``src/`` first on ``PYTHONPATH`` (``bench/ab_commits.py``).

Run: ``PYTHONPATH=src .venv/bin/python bench/scrapy_calls.py [--pages N] [--rounds R]
[--concurrency 16,32] [--redis-server PATH]``. Needs Scrapy (the ``scrapy`` extra).
"""

from __future__ import annotations

import argparse
import statistics

from _redis import add_server_args, format_table, private_redis
from _scrapy_crawl import SHOWN, crawl
from cost import _page
from worker_throughput import fleet

SITES = 20


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--pages", type=int, default=1500)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--concurrency", default="16,32", help="CONCURRENT_REQUESTS values")
    add_server_args(parser)
    args = parser.parse_args(argv)
    values = [int(v) for v in args.concurrency.split(",")]
    runs: dict[int, list[dict[str, float]]] = {v: [] for v in values}
    with fleet(SITES, _page) as sites, private_redis(args.redis_server) as server:
        for r in range(args.rounds):
            for v in values if r % 2 == 0 else values[::-1]:
                figures = crawl(server.url, args.pages, v, sites.ports, "slow")
                runs[v].append(figures)
                shown = ", ".join(f"{k} {figures[k]:,.2f}" for k in SHOWN)
                print(f"round {r + 1} CONCURRENT_REQUESTS={v}: {shown}", flush=True)
    rows = [
        [f"CONCURRENT_REQUESTS={v}"]
        + [f"{statistics.median(run[n] for run in runs[v]):,.2f}" for n in SHOWN]
        for v in values
    ]
    print()
    print(format_table(["crawl", *SHOWN], rows))
    print(f"(medians of {args.rounds} rounds of {args.pages:,} pages over {SITES} sites)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
