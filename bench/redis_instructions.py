"""Instructions redis-server executes per job: enqueue, then claim + settle(done), counted by
valgrind's callgrind (a figure the machine's load does not move, unlike wall time).

A private redis-server runs under ``valgrind --tool=callgrind --instr-atstart=no``;
``callgrind_control -i on|off`` brackets each phase, so only that phase's instructions count:
``enqueue`` (``--jobs`` jobs over 100 domains, chunks of 500) and ``claim+settle`` (the
claim_throughput.py loop, ``claim(64)`` then ``settle_many(done)`` until the queue is empty).
The same jobs and the same calls every run: two trees compare by running this file with each
tree's ``src/`` first on ``PYTHONPATH`` (the file itself only uses the public API).

Run: ``PYTHONPATH=src .venv/bin/python bench/redis_instructions.py [--jobs N] [--batch B]``.
Needs ``valgrind`` (``callgrind_control``) on PATH.
"""

from __future__ import annotations

import argparse
import re
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import redis

import scrapeq
from scrapeq import Queue, Settings
from scrapeq.engine.server.launcher import find_redis_server

DOMAINS = 100


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _collect(pid: int, on: bool) -> None:
    subprocess.run(["callgrind_control", "-i", "on" if on else "off", str(pid)],
                   check=True, capture_output=True)  # fmt: skip


def _dumped(pid: int, out: Path) -> int:
    """Dump the counts collected since the last dump; their total instructions."""
    before = set(out.parent.glob(out.name + "*"))
    subprocess.run(["callgrind_control", "-d", str(pid)], check=True, capture_output=True)
    for _ in range(1200):  # a loaded machine: callgrind may take a minute to write it
        new = set(out.parent.glob(out.name + "*")) - before
        if new:
            text = max(new, key=lambda p: p.stat().st_mtime).read_text()
            found = re.search(r"^totals: (\d+)", text, re.MULTILINE)
            if found:
                return int(found.group(1))
        time.sleep(0.05)
    raise SystemExit("callgrind wrote no dump")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--batch", type=int, default=64)
    args = parser.parse_args()
    port = _free_port()
    with tempfile.TemporaryDirectory(prefix="sq-instr-") as tmp:
        out = Path(tmp) / "callgrind.out"
        server = subprocess.Popen(
            ["valgrind", "--tool=callgrind", "--instr-atstart=no",
             f"--callgrind-out-file={out}", find_redis_server(), "--port", str(port),
             "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", tmp],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            url = f"redis://127.0.0.1:{port}/0"
            client = redis.Redis.from_url(url)
            for _ in range(600):
                try:
                    client.ping()
                    break
                except redis.ConnectionError:
                    time.sleep(0.1)
            q = Queue.from_url(url, "instr", settings=Settings(domain_concurrency=10_000))
            specs = [
                q.prepare(f"http://d{i % DOMAINS}.example/p/{i:08d}") for i in range(args.jobs)
            ]
            q.claim(1)  # scripts loaded before counting
            _collect(server.pid, True)
            for start in range(0, len(specs), 500):
                q.enqueue_many(specs[start : start + 500])
            _collect(server.pid, False)
            enqueued = _dumped(server.pid, out)
            _collect(server.pid, True)
            done = 0
            while claimed := q.claim(args.batch).jobs:
                q.settle_many([q.done(j) for j in claimed])
                done += len(claimed)
            _collect(server.pid, False)
            drained = _dumped(server.pid, out)
            q.close()
            client.close()
        finally:
            server.terminate()
            server.wait(60)
    assert done == args.jobs, (done, args.jobs)
    print(f"scrapeq from {Path(scrapeq.__file__).parent}; {args.jobs} jobs, batch {args.batch}")
    print(f"enqueue: {enqueued / args.jobs:,.0f} instructions/job")
    print(f"claim+settle: {drained / args.jobs:,.0f} instructions/job")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
