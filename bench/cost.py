"""The cost ledger (issue 40): what one job of each kind costs the worker and Redis.

One fixed workload per row, each run by the real ``Worker`` (``--burst``, concurrency 200,
``domain_concurrency`` 4) in this process against a private redis-server, over a fleet of
100 loopback sites with instant answers in a process of their own (nothing leaves 127.0.0.1):

* **bare aiohttp**: the reference, not scrapeq: one ``aiohttp.ClientSession`` and a pool of
  200 tasks over the plain row's URLs (``bench/worker_throughput.py``'s bare loop): its CPU
  per request is the bar of the worker's CPU per plain job;
* **plain**: a page of 600 bytes, done; results to a JSONL file (``JsonlSink``), no proxy,
  ``revisit = off``;
* **plain, no sink**: the same without a results sink;
* **plain, pages of 50-350 ms**: the plain row on pages that take their time (each URL its
  own fixed delay, 50 ms plus 0-300 ms): slots free one at a time, as on the web, so the
  claims and settles carry fewer jobs each than on instant pages (``runtime/gather.py``);
* **crawl page, 20 links**: ``follow_links``: a seed page with 20 links to plain pages of its
  site; a row's jobs are the seeds and their children (1 in 21 a seed), JSONL;
* **bare aiohttp through the proxy**: the bare loop through the exit row's proxy, the
  reference of that row: tinyproxy answers one request per connection, so each fetch through
  it pays a new connection, with or without scrapeq;
* **exit**: the plain row through one forward proxy (Debian's ``tinyproxy`` on 127.0.0.2,
  ``tests/support/proxy_proc.py``), ``proxy = <it>``: the exit's counters, breaker and
  per-domain plan on every claim and settle; left out when tinyproxy is missing;
* **revisit**: the plain row with ``revisit = on``: each done page is scheduled again
  (its revisit state, the answer noted in the owed-lines ledger), JSONL; the worker is
  stopped once every job was settled (a burst worker would wait for the next visits);
* **dead letter**: the site answers 404: the job fails at once, dead-lettered, JSONL.
* **Scrapy request**: the plain row's pages crawled by Scrapy with the add-on
  (``bench/_scrapy_crawl.py``'s crawl, as ``bench/scrapy_calls.py``'s, ``CONCURRENT_REQUESTS``
  200, ``domain_concurrency`` 4, no feed), in a process of its own: its "worker" CPU is that
  process's, Scrapy's start-up and its own request handling included; the start requests'
  enqueue is in its Redis figures (the other rows enqueue before they count); round trips and
  instructions are not counted ("-"). Left out when Scrapy is not installed.

Four figures per row:

* **worker us/job**: CPU (user + sys) of this process over the worker's run, per job;
* **redis us/job**: redis-server's CPU over the run (``INFO cpu``), per job;
* **round trips/job**: requests the worker sent to Redis (a pipeline counts once; counted at
  redis-py's ``send_packed_command``), per job; beside it **cmds/job**, the commands Redis ran
  (``INFO commandstats``, those run inside scripts included), and **jobs/settle**, the jobs
  settled per call of ``settle-1.lua`` (the settle buffer's batch);
* **Minstr/job**... **kinstr/job**: instructions redis-server executed per job under
  ``valgrind --tool=callgrind`` (counting zeroed after the jobs are enqueued, dumped after the
  worker ends: the claim, settle and ledger scripts alone): the stable figure, independent of
  the machine's load. One run per row of ``--callgrind-jobs`` jobs (slow: valgrind runs Redis
  about 50x slower); ``--no-callgrind`` leaves it out.

The timed figures are medians of ``--rounds`` rounds; each round runs every row once, in
turn, so the drift of a shared machine hits all rows alike.

Run: ``.venv/bin/python bench/cost.py [--jobs N] [--rounds R] [--callgrind-jobs N]
[--no-callgrind] [--rows plain,exit,...] [--redis-server PATH]``. The defaults (4,000 jobs,
3 rounds, 1,000 jobs under callgrind) took six minutes on a shared 2-core machine before the
Scrapy row, which adds a crawl a round.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
import redis.asyncio.connection
from aiohttp import web

from _redis import commandstats, format_table, load_note, server_cpu, server_version
from _scrapy_crawl import crawl
from scrapeq.engine.config.settings import Settings
from scrapeq.engine.facades.async_queue import AsyncQueue
from scrapeq.engine.server.launcher import RedisProcess, find_redis_server
from scrapeq.runtime.sinks import JsonlSink
from scrapeq.runtime.worker import Worker
from worker_throughput import _bare, fleet, own_cpu

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from support.proxy_proc import Tinyproxy, find_tinyproxy

DOMAINS = 100
CONCURRENCY = 200
DOMAIN_CONCURRENCY = 4
LINKS = 20
CHUNK = 500
QUEUE = "cost"
PAGE = (
    b"<!doctype html><html><head><title>cost</title></head><body>"
    + b"<p>a small page for the cost ledger</p>" * 14
    + b"</body></html>"
)
ROWS = (
    "bare", "plain", "nosink", "slow", "crawl", "bareexit", "exit", "revisit", "dead", "scrapy",
)  # fmt: skip
LABELS = {
    "bare": "bare aiohttp loop (reference)",
    "plain": "plain job (JSONL)",
    "nosink": "plain job, no sink",
    "slow": "plain job, pages of 50-350 ms",
    "crawl": "crawl page, 20 links (per job)",
    "bareexit": "bare aiohttp through the proxy",
    "exit": "job through an exit",
    "revisit": "revisit = on",
    "dead": "dead letter (404)",
    "scrapy": "Scrapy request (add-on)",
}


# --- the fleet: 100 loopback sites in their own process --------------------------------------


def _links_page(tail: str) -> bytes:
    links = "".join(f'<a href="/p/{tail}-{k}">{k}</a>' for k in range(LINKS))
    return b"<!doctype html><html><body>" + links.encode() + b"</body></html>"


async def _page(request: web.Request) -> web.StreamResponse:
    """The fleet's answer: ``/gone/..`` a 404, ``/links/N`` a page of links, ``/slow/N`` the
    page after 50 + (37 N mod 301) ms, else the page."""
    kind, _, tail = request.path.lstrip("/").partition("/")
    if kind == "slow":
        await asyncio.sleep((50 + int(tail) * 37 % 301) / 1000)
    elif kind == "gone":
        return web.Response(status=404, body=b"gone")
    if kind == "links":
        return web.Response(body=_links_page(tail), content_type="text/html")
    return web.Response(body=PAGE, content_type="text/html")


# --- counting round trips --------------------------------------------------------------------

ROUND_TRIPS = [0]
SETTLE_CALLS = [0]


def _count_round_trips() -> None:
    """Count each request redis-py's asyncio connections send (a pipeline is one), and the
    settle script's calls (``AsyncQueue._step``)."""
    cls = redis.asyncio.connection.AbstractConnection
    sent = cls.send_packed_command

    async def counted(self: Any, command: Any, check_health: bool = True) -> None:
        ROUND_TRIPS[0] += 1
        await sent(self, command, check_health)

    cls.send_packed_command = counted  # type: ignore[method-assign]
    step = AsyncQueue._step

    async def counted_step(self: AsyncQueue, s: Any) -> Any:
        if getattr(s, "script", None) == "settle":
            SETTLE_CALLS[0] += 1
        return await step(self, s)

    AsyncQueue._step = counted_step  # type: ignore[method-assign]


# --- one run ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Workload:
    """What a row enqueues and how its worker runs."""

    urls: list[str]
    settings: Settings
    sink: bool = True
    follow: bool = False
    expect_done: int = 0  # jobs done at the end
    expect_dead: int = 0  # jobs dead-lettered at the end


@dataclass(slots=True)
class Figures:
    """One run's figures (per job)."""

    jobs: int
    seconds: float
    worker_us: float
    redis_us: float | None = None
    round_trips: float | None = None
    cmds: float | None = None
    settle_batch: float | None = None  # jobs per settle call


@dataclass(slots=True)
class Row:
    runs: list[Figures] = field(default_factory=list)
    instructions: float | None = None

    def median(self, name: str) -> float | None:
        values = [getattr(r, name) for r in self.runs if getattr(r, name) is not None]
        return statistics.median(values) if values else None


def settings_for(row: str, proxy: str | None, slow: bool = False) -> Settings:
    """The row's settings; ``slow``: redis-server runs under callgrind (about 50x slower), so
    leases are long enough that none is reaped while its job waits for a settle."""
    extra: dict[str, Any] = {"lease": 600.0} if slow else {}
    if row == "exit":
        assert proxy is not None
        extra["proxy"] = (proxy,)
    if row == "revisit":
        extra["revisit"] = "on"
    return Settings(allow_private=True, domain_concurrency=DOMAIN_CONCURRENCY, queue=QUEUE, **extra)


def workload(
    row: str, ports: Sequence[int], jobs: int, proxy: str | None, slow: bool = False
) -> Workload:
    settings = settings_for(row, proxy, slow)
    n = len(ports)
    if row == "crawl":
        seeds = max(1, jobs // (LINKS + 1))
        urls = [f"http://127.0.0.1:{ports[i % n]}/links/{i:07d}" for i in range(seeds)]
        return Workload(urls, settings, follow=True, expect_done=seeds * (LINKS + 1))
    kind = {"dead": "gone", "slow": "slow"}.get(row, "p")
    urls = [f"http://127.0.0.1:{ports[i % n]}/{kind}/{i:07d}" for i in range(jobs)]
    if row == "dead":
        return Workload(urls, settings, expect_dead=jobs)
    return Workload(urls, settings, sink=row != "nosink", expect_done=jobs)


def client_of(url: str) -> redis.asyncio.Redis:
    """A client that waits for its answers: under callgrind a claim takes seconds (redis-py's
    own default timeout is 5 s)."""
    return redis.asyncio.Redis.from_url(url, decode_responses=True, socket_timeout=600)


async def _fill(url: str, w: Workload) -> None:
    client: redis.asyncio.Redis = client_of(url)
    q = AsyncQueue(client, settings=w.settings)
    await client.flushall()
    for start in range(0, len(w.urls), CHUNK):
        await q.enqueue_many(w.urls[start : start + CHUNK])
    await client.config_resetstat()
    await q.close()


async def _work(url: str, w: Workload, folder: Path) -> Worker:
    client: redis.asyncio.Redis = client_of(url)
    q = AsyncQueue(client, settings=w.settings)
    sink = JsonlSink(folder / "results.jsonl") if w.sink else None
    # revisit = on: each done page is scheduled again, so a burst worker would wait for its
    # next visit; the worker is stopped once the row's jobs are all settled instead
    burst = w.settings.revisit == "off"
    worker = Worker(
        q, concurrency=CONCURRENCY, burst=burst, sink=sink, follow_links=w.follow, report=False
    )
    task = asyncio.create_task(worker.run_async())
    while not burst and not task.done():
        if worker.stats.done + worker.stats.dead >= w.expect_done + w.expect_dead:
            worker.stop()
            break
        await asyncio.sleep(0.01)
    await task
    await q.close()
    if sink is not None:
        await sink.close()
    return worker


def run_worker(
    url: str, w: Workload, folder: Path, around: Callable[[str], None] | None = None
) -> Figures:
    """Enqueue the workload into a flushed server (not counted), run one burst worker,
    measure it. ``around('start')``/``around('end')``: called just before and after it."""
    asyncio.run(_fill(url, w))
    admin = redis.Redis.from_url(url, decode_responses=True)
    (folder / "results.jsonl").unlink(missing_ok=True)
    if around:
        around("start")
    cpu0, redis0, trips0, settles0 = own_cpu(), server_cpu(admin), ROUND_TRIPS[0], SETTLE_CALLS[0]
    start = time.perf_counter()
    worker = asyncio.run(_work(url, w, folder))
    seconds = time.perf_counter() - start
    worker_cpu, trips = own_cpu() - cpu0, ROUND_TRIPS[0] - trips0
    settles = SETTLE_CALLS[0] - settles0
    redis_used = server_cpu(admin) - redis0
    if around:
        around("end")
    stats = commandstats(admin)
    admin.close()
    done, dead = worker.stats.done, worker.stats.dead
    if done != w.expect_done or dead != w.expect_dead:
        raise RuntimeError(
            f"{done} done and {dead} dead, expected {w.expect_done} and {w.expect_dead}"
        )
    jobs = done + dead
    cmds = sum(calls for name, (calls, _) in stats.items() if name not in ("info", "config"))
    return Figures(
        jobs, seconds, worker_cpu / jobs * 1e6, redis_used / jobs * 1e6, trips / jobs,
        cmds / jobs, jobs / max(settles, 1),
    )  # fmt: skip


def run_scrapy(url: str, ports: Sequence[int], jobs: int) -> Figures:
    """The Scrapy row: one crawl of ``jobs`` plain pages (module docstring)."""
    f = crawl(url, jobs, CONCURRENCY, list(ports), kind="p")
    return Figures(
        jobs, f["seconds"], f["scrapy us/page"], f["redis us/page"], None, f["cmds/page"],
        f["jobs/settle"],
    )  # fmt: skip


def run_bare(urls: Sequence[str], proxy: str | None = None) -> Figures:
    cpu0 = own_cpu()
    start = time.perf_counter()
    ok = asyncio.run(_bare(urls, CONCURRENCY, proxy))
    seconds, cpu = time.perf_counter() - start, own_cpu() - cpu0
    if ok != len(urls):
        raise RuntimeError(f"bare: {ok} of {len(urls)} fetches answered 200")
    return Figures(ok, seconds, cpu / ok * 1e6)


# --- redis-server: native, or under callgrind ------------------------------------------------


@contextlib.contextmanager
def redis_server(binary: Path, folder: Path, callgrind: bool = False) -> Iterator[RedisProcess]:
    exe = binary
    if callgrind:
        exe = folder / "redis-callgrind.sh"
        exe.write_text(
            "#!/bin/sh\nexec valgrind -q --tool=callgrind "
            f'--callgrind-out-file={folder}/callgrind.out.%p {binary} "$@"\n'
        )
        exe.chmod(0o755)
    work = folder / ("redis-cg" if callgrind else "redis")
    work.mkdir(exist_ok=True)
    server = RedisProcess(work, binary=exe)
    try:
        server.start(120.0 if callgrind else 15.0)
        yield server
    finally:
        server.stop()


def _callgrind(pid: int, *args: str) -> None:
    subprocess.run(["callgrind_control", *args, str(pid)], check=True, capture_output=True)


def instructions(url: str, w: Workload, folder: Path, pid: int) -> float:
    """Instructions redis-server ran per job over one worker run (callgrind)."""
    for old in folder.glob("callgrind.out.*.*"):
        old.unlink()

    def around(when: str) -> None:
        _callgrind(pid, "-z" if when == "start" else "-d")

    figures = run_worker(url, w, folder, around)
    total = 0
    for dump in folder.glob("callgrind.out.*.*"):  # the dump (-d), not the final file
        text = dump.read_text(errors="replace")
        found = re.search(r"(?m)^(?:summary|totals): (\d+)", text)
        if found:
            total += int(found.group(1))
    if not total:
        raise RuntimeError("callgrind wrote no instruction count")
    return total / figures.jobs


# --- the ledger ------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument("--jobs", type=int, default=4000, help="jobs per run (default 4,000)")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds (default 3)")
    parser.add_argument("--callgrind-jobs", type=int, default=1000)
    parser.add_argument("--no-callgrind", action="store_true", help="leave instructions out")
    parser.add_argument("--rows", default=",".join(ROWS), help="of " + ",".join(ROWS))
    parser.add_argument("--redis-server", metavar="PATH", type=Path, default=None)
    args = parser.parse_args(argv)
    args.rows = [r for r in args.rows.split(",") if r]
    unknown = [r for r in args.rows if r not in ROWS]
    if unknown:
        parser.error(f"unknown row {unknown[0]!r} (of {', '.join(ROWS)})")
    if args.jobs < 100 or args.rounds < 1 or args.callgrind_jobs < 100:
        parser.error("--jobs and --callgrind-jobs >= 100, --rounds >= 1")
    return args


def available(rows: list[str]) -> list[str]:
    """``rows`` but those whose real part is missing here (said on stderr)."""
    if {"exit", "bareexit"} & set(rows) and find_tinyproxy() is None:
        print("cost: no tinyproxy: the exit rows are left out", file=sys.stderr)
        rows = [r for r in rows if r not in ("exit", "bareexit")]
    if "scrapy" in rows and importlib.util.find_spec("scrapy") is None:
        print("cost: no Scrapy: the scrapy row is left out", file=sys.stderr)
        rows = [r for r in rows if r != "scrapy"]
    return rows


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    binary = args.redis_server or find_redis_server()
    callgrind = not args.no_callgrind
    if callgrind and not (shutil.which("valgrind") and shutil.which("callgrind_control")):
        print("cost: valgrind not found: instructions left out (--no-callgrind)", file=sys.stderr)
        callgrind = False
    rows = available(args.rows)
    _count_round_trips()
    ledger = {row: Row() for row in rows}
    began = time.perf_counter()
    with contextlib.ExitStack() as stack:
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="scrapeq-cost-")))
        ports = stack.enter_context(fleet(DOMAINS, _page)).ports
        proxy = None
        if {"exit", "bareexit"} & set(rows):
            proxy = stack.enter_context(Tinyproxy("127.0.0.2")).url
        server = stack.enter_context(redis_server(binary, folder))
        head = f"{args.jobs:,} jobs a run over {DOMAINS} sites, concurrency {CONCURRENCY}"
        print(f"redis {server_version(binary)}; {head}, {args.rounds} rounds; {load_note()}")
        for rnd in range(1, args.rounds + 1):
            for row in rows:
                w = workload(row, ports, args.jobs, proxy)
                if row in ("bare", "bareexit"):
                    via = proxy if row == "bareexit" else None
                    fig = run_bare(workload("plain", ports, args.jobs, proxy).urls, via)
                elif row == "scrapy":
                    fig = run_scrapy(server.url, ports, args.jobs)
                else:
                    fig = run_worker(server.url, w, folder)
                ledger[row].runs.append(fig)
                print(f"round {rnd} {row}: {fig.worker_us:.0f} worker us/job, "
                      f"{fig.jobs / fig.seconds:,.0f} jobs/s", flush=True)  # fmt: skip
        if callgrind:
            with redis_server(binary, folder, callgrind=True) as cg:
                assert cg.proc is not None
                for row in rows:
                    if row in ("bare", "bareexit", "scrapy"):
                        continue
                    w = workload(row, ports, args.callgrind_jobs, proxy, slow=True)
                    ledger[row].instructions = instructions(cg.url, w, folder, cg.proc.pid)
                    print(f"callgrind {row}: {ledger[row].instructions / 1e3:,.0f} "
                          "k instructions/job", flush=True)  # fmt: skip
    print()
    print(format_table(HEADERS, [table_row(row, ledger[row]) for row in rows]))
    took = time.perf_counter() - began
    print(f"(medians of {args.rounds} rounds of {args.jobs:,} jobs; instructions: one run of "
          f"{args.callgrind_jobs:,} jobs under callgrind; {took:.0f} s)")  # fmt: skip
    if "bare" in ledger and "plain" in ledger:
        bare, plain = ledger["bare"].median("worker_us"), ledger["plain"].median("worker_us")
        assert bare is not None and plain is not None
        print(f"worker CPU of a plain job / bare aiohttp's per request: {plain / bare:.2f}")
    if "bareexit" in ledger and "exit" in ledger:
        bare, through = ledger["bareexit"].median("worker_us"), ledger["exit"].median("worker_us")
        assert bare is not None and through is not None
        print(f"worker CPU of a job through an exit / bare aiohttp's through the proxy: "
              f"{through / bare:.2f}")  # fmt: skip
    return 0


HEADERS = ["workload", "worker us/job", "redis us/job", "round trips/job", "cmds/job",
           "kinstr/job", "jobs/settle", "jobs/s"]  # fmt: skip


def table_row(row: str, r: Row) -> list[object]:
    def fmt(value: float | None, digits: int = 0) -> object:
        return "-" if value is None else round(value, digits) if digits else float(round(value))

    rate = statistics.median(f.jobs / f.seconds for f in r.runs)
    kinstr = None if r.instructions is None else r.instructions / 1e3
    return [
        LABELS[row],
        fmt(r.median("worker_us")),
        fmt(r.median("redis_us")),
        fmt(r.median("round_trips"), 3),
        fmt(r.median("cmds"), 2),
        fmt(kinstr),
        fmt(r.median("settle_batch"), 1),
        float(round(rate)),
    ]


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(main())
