"""Throughput of scrapeq and the incident's peers when nothing fails: jobs per second.

The same systems as ``bench/incident.py`` (the same children, settings and concurrency, 64),
on the same kind of private redis-server, fetch ``--jobs`` URLs (2,000) spread over 16
healthy loopback sites (the demo fleet's ``shop`` mode: a small HTML page), in two cases:

* **instant**: the sites answer at once (latency 0): what a job costs the system itself;
* **50 ms**: the sites answer after a lognormal latency of median 50 ms (I/O bound: at 64 at
  once, at most about 1,280 jobs/s).

For scrapeq and Scrapy on scrapeq ``domain_concurrency`` is 4 (16 sites x 4 = 64).
Throughput is counted by the sites (requests answered), from the first answer to the last,
so start-up (64 RQ processes, Scrapy's engine) is left out. Each system runs until every URL
was fetched or ``--timeout`` seconds (60) passed.

arq is left out unless named in ``--systems``; it runs from a venv of its own
(``--python-for arq=/tmp/arq-venv/bin/python``, as in ``bench/incident.py``).

Run: ``python bench/peer_throughput.py [--systems scrapeq,rq,...] [--jobs N]
[--python-for SYSTEM=PYTHON]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import redis

from _redis import add_server_args, format_table, load_note, private_redis
from incident import SYSTEMS, _stop_group, add_python_for_arg, prepare_run
from scrapeq.demo.fleet import Fleet, SiteSpec

SITES = 16


def _answered(fleet: Fleet) -> int:
    return sum(c.requests for c in fleet.stats().values())


def run_case(
    name: str, fleet: Fleet, redis_url: str, urls: list[str], args: argparse.Namespace
) -> float | None:
    """Jobs/s of one system on one fleet (first answer to last), or None if it never ended."""
    client = redis.Redis.from_url(redis_url)
    client.flushall()
    client.close()
    before = _answered(fleet)
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump({"urls": urls, "burst": [], "burst_at": 0.0}, f)
        url_file = f.name
    here = Path(__file__).resolve().parent
    python = args.python_for.get(name, sys.executable)
    cmd = [python, str(here / "incident.py"), "--child", name, "--redis-url", redis_url,
           "--url-file", url_file, "--concurrency", "64"]  # fmt: skip
    os.environ["BENCH_DOMAIN_CONCURRENCY"] = "4"
    log = tempfile.TemporaryFile()  # noqa: SIM115 (closed below)
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    first = last = None
    deadline = time.monotonic() + args.timeout
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)
            done = _answered(fleet) - before
            if done and first is None:
                first = time.monotonic()
            if done >= len(urls):
                last = time.monotonic()
                break
    finally:
        _stop_group(proc)
        os.unlink(url_file)
        os.environ.pop("BENCH_DOMAIN_CONCURRENCY", None)
        log.close()
    if first is None or last is None or last <= first:
        return None
    return (len(urls) - 1) / (last - first)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--systems", default=",".join(s for s in SYSTEMS if s != "arq"))
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--timeout", type=float, default=60.0)
    add_python_for_arg(parser)
    add_server_args(parser)
    args = parser.parse_args(argv)
    if not prepare_run(args, "peer_throughput"):
        return 2
    systems = args.systems.split(",")
    unknown = [s for s in systems if s not in SYSTEMS]
    if unknown:
        print(f"peer_throughput: unknown system {unknown[0]!r}", file=sys.stderr)
        return 2
    rows: list[list[Any]] = []
    results: dict[str, dict[str, float | None]] = {s: {} for s in systems}
    with private_redis(args.redis_server) as server:
        print(f"redis {server.version}; {args.jobs} jobs over {SITES} sites, concurrency 64; "
              f"{load_note()}")  # fmt: skip
        for case, latency in (("instant", 0.0), ("50 ms", 50.0)):
            specs = [
                SiteSpec(f"site-{i:02d}.example.com", latency_ms=latency) for i in range(SITES)
            ]
            with Fleet(specs) as fleet:
                ports = [fleet.ports[s.name] for s in specs]
                urls = [f"http://127.0.0.1:{ports[i % SITES]}/t/{i}" for i in range(args.jobs)]
                for name in systems:
                    rate = run_case(name, fleet, server.url, urls, args)
                    results[name][case] = rate
                    print(f"{case} {name}: {rate and round(rate)} jobs/s", flush=True)
    for name in systems:
        rows.append([name, *(_rate(results[name].get(c)) for c in ("instant", "50 ms"))])
    print(format_table(["system", "instant jobs/s", "50 ms jobs/s"], rows))
    return 0


def _rate(value: float | None) -> str:
    return "did not finish" if value is None else f"{value:,.0f}"


if __name__ == "__main__":
    sys.exit(main())
