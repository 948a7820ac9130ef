"""Proxies as failure domains (issue 23): a fleet of 40 loopback domains fetched through 6
real exits in two tiers, by each system in turn.

The fleet (``tests/support/proxy_fleet.py``: one port of 127.0.0.1 per domain, bans by
source address) and the exits (``tests/support/proxy_proc.py``: one Debian ``tinyproxy`` per
exit, listening on and connecting out from its own loopback address):

* exits: 4 ``datacenter`` (127.0.0.2-5), 2 ``residential`` (127.0.0.6-7);
* 10 domains (``d30``-``d39``) refuse every datacenter address (403): only residential exits
  reach them;
* the datacenter exit 127.0.0.5 is dead (its tinyproxy killed: connection refused);
* the datacenter exit 127.0.0.3 is banned (403) by one domain (``d00``) and by no other.

Each domain has ``--pages`` pages (20). Each system starts with the same fresh exits (the dead
one killed) and a fleet whose request log was cleared, runs until it has nothing left to do or
``--duration`` seconds (120), whichever comes first, in a child process of its own (process
group: stopped with SIGTERM, then SIGKILL). Traffic goes only to 127.0.0.0/8.

Systems (``--systems``, comma-separated):

* ``scrapy-rotating-proxies``: Scrapy with ``scrapy-rotating-proxies`` 0.6.2 (the peer, from
  PyPI) and its defaults: ``ROTATING_PROXY_LIST`` of the 6 exits, its ban detection (a status
  other than 200/301/302, or any exception, marks the proxy dead for every site), 5 proxies
  tried per page, dead proxies re-checked after a full-jitter backoff from 300 s; Scrapy's
  defaults otherwise (8 requests at a time per proxy host), ``CONCURRENT_REQUESTS``
  ``--concurrency`` (32).

A system is a function returning the common result dict (:func:`result`); add one to
``SYSTEMS`` with whether it runs against the banning fleet or the same fleet with no bans (and
the dead exit alive).

Figures, from the fleet's own log (every request: domain, source address, status) unless said:

* pages fetched OK per domain group (``open``: the 29 domains every live exit reaches;
  ``one-ban``: ``d00``; ``residential``: the 10 that refuse the datacenter tier), of the total;
* requests (all that reached a site), requests per exit (by source address), residential
  requests beside their minimum (the residential domains' pages);
* attempts through the dead exit (nothing answers there, so **counted by the system**);
* wasted requests: bans + attempts through the dead exit + repeat fetches of a page already
  served;
* false bans (**counted by the system**): times the system took a live exit out of rotation
  (for the peer: ``mark_dead`` moving a proxy other than the dead one from good or unchecked
  to dead; its further calls on a proxy already dead are in the notes);
* seconds: the run's wall time; ``all_ok_s``: when the last page was first served (``-``
  when some page never was).

Run: ``python bench/proxies.py [--systems scrapy-rotating-proxies] [--pages 20]
[--duration 120] [--concurrency 32] [--delay-ms 10] [--json FILE]``. Needs ``tinyproxy``
(``apt-get install tinyproxy``) and the ``bench`` extra.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# The real parts live with the tests, which use them too.
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from _redis import format_table
from support.proxy_fleet import DomainSpec, Fleet, Hit
from support.proxy_proc import Tinyproxy, find_tinyproxy
from support.redis_proc import RedisProcess

DATACENTER = ("127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5")
RESIDENTIAL = ("127.0.0.6", "127.0.0.7")
DEAD = "127.0.0.5"
BANNED_ONCE = "127.0.0.3"
DOMAINS = 40
RESIDENTIAL_ONLY = 10  # the last ten domains
GROUPS = ("open", "one-ban", "residential")


def domain_specs() -> list[DomainSpec]:
    """The issue's fleet: d00 bans one datacenter exit, d30-d39 the whole datacenter tier."""
    specs = []
    for i in range(DOMAINS):
        name = f"d{i:02d}"
        if i == 0:
            specs.append(DomainSpec(name, banned=frozenset({BANNED_ONCE})))
        elif i >= DOMAINS - RESIDENTIAL_ONLY:
            specs.append(DomainSpec(name, banned=frozenset(DATACENTER)))
        else:
            specs.append(DomainSpec(name))
    return specs


def group_of(name: str) -> str:
    index = int(name[1:])
    if index == 0:
        return "one-ban"
    return "residential" if index >= DOMAINS - RESIDENTIAL_ONLY else "open"


@dataclass(frozen=True)
class Exit:
    """One exit of the pool as a system is given it."""

    ip: str
    tier: str
    url: str
    dead: bool


@dataclass
class Scenario:
    """What a system runs against: the fleet, the exits, the pages, the limits."""

    fleet: Fleet
    exits: list[Exit]
    urls: list[str]  # every page, round robin over the domains
    args: argparse.Namespace
    bans: bool
    started: float = 0.0  # time.monotonic() when the system was started


@contextlib.contextmanager
def scenario(fleet: Fleet, args: argparse.Namespace, *, bans: bool) -> Iterator[Scenario]:
    """Fresh exits (the dead one killed when ``bans``) and the fleet's log cleared."""
    proxies = [Tinyproxy(ip) for ip in DATACENTER + RESIDENTIAL]
    try:
        for proxy in proxies:
            proxy.start()
        exits = []
        for proxy in proxies:
            dead = bans and proxy.exit_ip == DEAD
            if dead:
                proxy.kill()
            tier = "datacenter" if proxy.exit_ip in DATACENTER else "residential"
            exits.append(Exit(proxy.exit_ip, tier, proxy.url, dead))
        fleet.bans = bans
        fleet.clear()
        names = list(fleet.specs)
        urls = [fleet.url(n, f"/p/{i}") for i in range(args.pages) for n in names]
        yield Scenario(fleet, exits, urls, args, bans)
    finally:
        for proxy in proxies:
            proxy.stop()


def result(
    name: str,
    sc: Scenario,
    hits: list[Hit],
    seconds: float,
    *,
    dead_attempts: int | None,
    false_bans: int | None,
    notes: str = "",
) -> dict[str, Any]:
    """The common result of one system's run, from the fleet's log ``hits`` and what only
    the system can count (``None``: not counted)."""
    served = sc.fleet.served(hits)
    total = {g: 0 for g in GROUPS}
    ok = {g: 0 for g in GROUPS}
    for domain in sc.fleet.specs:
        total[group_of(domain)] += sc.args.pages
        ok[group_of(domain)] += served[domain]
    first_ok: dict[tuple[str, str], float] = {}
    for h in hits:
        if h.status == 200 and not h.banned:
            first_ok.setdefault((h.domain, h.path), h.at)
    good = sum(1 for h in hits if h.status == 200 and not h.banned)
    repeats = good - len(first_ok)
    banned = sum(h.banned for h in hits)
    other = sum(1 for h in hits if not h.banned and h.status != 200)
    pages = DOMAINS * sc.args.pages
    all_ok = max(first_ok.values()) - sc.started if len(first_ok) == pages else None
    residential = sum(1 for h in hits if h.source in RESIDENTIAL)
    return {
        "system": name,
        "bans": sc.bans,
        "pages": pages,
        "ok": ok,
        "ok_total": total,
        "requests": len(hits),
        "by_exit": dict(sorted(Counter(h.source for h in hits).items())),
        "residential_requests": residential,
        "residential_min": RESIDENTIAL_ONLY * sc.args.pages if sc.bans else 0,
        "banned": banned,
        "other_failures": other,
        "repeats": repeats,
        "dead_attempts": dead_attempts,
        "wasted": banned + other + repeats + (dead_attempts or 0),
        "false_bans": false_bans,
        "seconds": round(seconds, 2),
        "all_ok_s": None if all_ok is None else round(all_ok, 2),
        "notes": notes,
    }


# --- running a system in a child process -----------------------------------------------------


def run_child(name: str, spec: dict[str, Any], duration: float) -> tuple[dict[str, Any], float]:
    """Run ``--child name`` with ``spec`` (JSON) for at most ``duration`` seconds; answer
    what the child wrote to its output file and the wall time."""
    with tempfile.TemporaryDirectory(prefix="scrapeq-bench-proxies-") as folder:
        spec_file, out_file = Path(folder) / "spec.json", Path(folder) / "out.json"
        spec_file.write_text(json.dumps({**spec, "out": str(out_file)}))
        log_path = Path(folder) / "log"
        cmd = [sys.executable, __file__, "--child", name, "--spec", str(spec_file)]
        started = time.monotonic()
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
            try:
                proc.wait(duration)
            except subprocess.TimeoutExpired:
                pass
            finally:
                _stop_group(proc)
        seconds = time.monotonic() - started
        out = json.loads(out_file.read_text()) if out_file.exists() else {}
        if proc.returncode not in (0, -signal.SIGTERM, -signal.SIGKILL) or not out:
            out["log_tail"] = log_path.read_text(errors="replace")[-2000:]
    return out, seconds


def _stop_group(proc: subprocess.Popen[bytes]) -> None:
    """Stop the child's whole process group: SIGTERM, then SIGKILL after 10 s."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(10)


# --- the peer: Scrapy with scrapy-rotating-proxies -------------------------------------------


def run_rotating_proxies(sc: Scenario) -> dict[str, Any]:
    """scrapy-rotating-proxies 0.6.2 in Scrapy, its defaults, the 6 exits in its list."""
    spec = {
        "urls": sc.urls,
        "proxies": [e.url for e in sc.exits],
        "concurrency": sc.args.concurrency,
    }
    out, seconds = run_child("scrapy-rotating-proxies", spec, sc.args.duration)
    hits = sc.fleet.snapshot()
    dead_url = next((e.url for e in sc.exits if e.dead), None)
    assigned: dict[str, int] = out.get("assigned", {})
    went_dead: dict[str, int] = out.get("went_dead", {})
    calls = {url.split("@")[-1].split("//")[-1]: n for url, n in out.get("mark_dead", {}).items()}
    notes = f"mark_dead calls {calls}, all-dead resets {out.get('resets', '?')}"
    if "log_tail" in out:
        notes += " | child: " + out["log_tail"][-300:].replace("\n", " ")
    return result(
        "scrapy-rotating-proxies",
        sc,
        hits,
        seconds,
        dead_attempts=assigned.get(dead_url, 0) if dead_url else 0,
        false_bans=sum(n for url, n in went_dead.items() if url != dead_url) if out else None,
        notes=notes,
    )


def _counted_middleware(counts: dict[str, Any], save: Callable[[], None]) -> type:
    """The peer's RotatingProxyMiddleware, counting into ``counts`` (saved every second)."""
    from rotating_proxies.middlewares import RotatingProxyMiddleware
    from twisted.internet import task

    class Counted(RotatingProxyMiddleware):  # type: ignore[misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            proxies = self.proxies
            mark_dead, reset = proxies.mark_dead, proxies.reset

            def counted_mark_dead(proxy: str, _time: Any = None) -> Any:
                counts["mark_dead"][proxy] += 1
                if proxy not in proxies.dead:
                    counts["went_dead"][proxy] += 1
                return mark_dead(proxy, _time)

            def counted_reset() -> Any:
                counts["resets"] += 1
                return reset()

            proxies.mark_dead, proxies.reset = counted_mark_dead, counted_reset
            self.saver = task.LoopingCall(save)

        def engine_started(self) -> None:
            super().engine_started()
            self.saver.start(1.0, now=False)

        def engine_stopped(self) -> None:
            super().engine_stopped()
            if self.saver.running:
                self.saver.stop()
            save()

        def process_request(self, request: Any, spider: Any) -> Any:
            answer = super().process_request(request, spider)
            if request.meta.get("_rotating_proxy"):
                counts["assigned"][request.meta["proxy"]] += 1
            return answer

    return Counted


def _child_rotating_proxies(spec: dict[str, Any]) -> None:
    """In the child: the spider, with the peer's middleware counted (each request's proxy,
    each ``mark_dead``, each reset of an all-dead list) into ``spec["out"]`` every second."""
    import scrapy
    from scrapy.crawler import CrawlerProcess

    counts: dict[str, Any] = {
        "assigned": Counter(),  # requests sent through each proxy
        "mark_dead": Counter(),  # calls of mark_dead per proxy
        "went_dead": Counter(),  # of them, those that took a live proxy out of rotation
        "resets": 0,  # every proxy was dead: all made unchecked again
    }

    def save() -> None:
        Path(spec["out"]).write_text(json.dumps(counts))

    globals()["Counted"] = _counted_middleware(counts, save)  # Scrapy loads it by path

    class Pages(scrapy.Spider):
        name = "pages"

        async def start(self) -> Any:
            for url in spec["urls"]:
                yield scrapy.Request(url, callback=self.parse_page)

        def parse_page(self, response: Any) -> Any:
            yield {"url": response.url}

    process = CrawlerProcess(
        settings={
            "CONCURRENT_REQUESTS": spec["concurrency"],
            "LOG_LEVEL": "WARNING",
            "ROBOTSTXT_OBEY": False,
            "TELNETCONSOLE_ENABLED": False,
            "ITEM_PIPELINES": {},
            "TWISTED_REACTOR": "twisted.internet.asyncioreactor.AsyncioSelectorReactor",
            "ROTATING_PROXY_LIST": spec["proxies"],
            "DOWNLOADER_MIDDLEWARES": {
                "__main__.Counted": 610,
                "rotating_proxies.middlewares.BanDetectionMiddleware": 620,
            },
        }
    )
    process.crawl(Pages)
    process.start()
    save()


# --- scrapeq: the exit pool in Lua (issue 23) ------------------------------------------------


def run_scrapeq(sc: Scenario) -> dict[str, Any]:
    """scrapeq's worker with the 6 exits as a pool in two tiers (datacenter, residential),
    its defaults otherwise (proxy_ban_cooldown 300 s, proxy_cooldown 60 s), one process with
    the same total concurrency, on a private redis-server."""
    name = "scrapeq" if sc.bans else "scrapeq-noban"
    with tempfile.TemporaryDirectory(prefix="scrapeq-bench-proxies-redis-") as folder:
        server = RedisProcess(Path(folder)).start()
        try:
            spec = {
                "redis": server.url,
                "urls": sc.urls,
                "proxies": [f"{e.url} tier={e.tier}" for e in sc.exits],
                "concurrency": sc.args.concurrency,
            }
            out, seconds = run_child("scrapeq", spec, sc.args.duration)
        finally:
            server.stop()
    hits = sc.fleet.snapshot()
    dead_url = next((e.url for e in sc.exits if e.dead), None)
    exits = {e["name"]: e for e in out.get("exits", [])}
    dead = exits.get(dead_url or "", {})
    notes = f"breaker trips {out.get('trips', '?')}, exit trips {out.get('exit_trips', '?')}"
    if "log_tail" in out:
        notes += " | child: " + out["log_tail"][-300:].replace("\n", " ")
    live_trips = sum(e["trips"] for url, e in exits.items() if url != dead_url)
    return result(
        name, sc, hits, seconds,
        dead_attempts=dead.get("failures", 0) + dead.get("timeouts", 0) if dead_url else 0,
        false_bans=live_trips if out else None,
        notes=notes,
    )  # fmt: skip


def _child_scrapeq(spec: dict[str, Any]) -> None:
    """In the child: enqueue the pages and run one worker until they are all done."""
    import asyncio

    from scrapeq import AsyncQueue, Settings
    from scrapeq.runtime.worker import Worker

    async def main() -> None:
        settings = Settings(
            queue="bench", proxy=tuple(spec["proxies"]),
            proxy_tiers=("datacenter", "residential"), allow_private=True,
            request_timeout=5.0, log_every=0,
        )  # fmt: skip
        q = AsyncQueue.from_url(spec["redis"], settings=settings)
        try:
            await q.enqueue_many(spec["urls"])
            worker = Worker(q, concurrency=spec["concurrency"])
            task = asyncio.create_task(worker.run_async())
            total = len(spec["urls"])
            while not task.done():
                counts = (await q.status())["counts"]
                if counts["done"] + counts["dead"] >= total:
                    break
                await asyncio.sleep(0.05)
            worker.stop()
            await asyncio.wait_for(task, 30)
            stats = await q.stats()
            out = {"exits": await q.exits_info(), "trips": stats.get("trips", 0),
                   "exit_trips": stats.get("exit_trips", 0)}  # fmt: skip
            Path(spec["out"]).write_text(json.dumps(out))
        finally:
            await q.close()

    asyncio.run(main())


# --- the table -------------------------------------------------------------------------------


@dataclass(frozen=True)
class System:
    """A system of the comparison: how to run it, and against which fleet."""

    run: Callable[[Scenario], dict[str, Any]]
    bans: bool = True  # False: the same fleet with no bans and the dead exit alive


SYSTEMS: dict[str, System] = {
    "scrapeq-noban": System(run_scrapeq, bans=False),
    "scrapeq": System(run_scrapeq),
    "scrapy-rotating-proxies": System(run_rotating_proxies),
}

CHILDREN: dict[str, Callable[[dict[str, Any]], None]] = {
    "scrapeq": _child_scrapeq,
    "scrapy-rotating-proxies": _child_rotating_proxies,
}


def _dash(value: object) -> object:
    return "-" if value is None else value


def report(results: list[dict[str, Any]]) -> str:
    headers = ["system", *(f"ok {g}" for g in GROUPS), "requests", "residential (min)",
               "dead exit", "banned", "wasted", "false bans", "seconds", "all ok s"]  # fmt: skip
    rows = []
    for r in results:
        ok = [f"{r['ok'][g]}/{r['ok_total'][g]}" for g in GROUPS]
        residential = f"{r['residential_requests']} ({r['residential_min']})"
        rows.append([r["system"], *ok, r["requests"], residential, _dash(r["dead_attempts"]),
                     r["banned"], r["wasted"], _dash(r["false_bans"]), r["seconds"],
                     _dash(r["all_ok_s"])])  # fmt: skip
    exits = DATACENTER + RESIDENTIAL
    per_exit: list[list[object]] = [
        [r["system"], *(r["by_exit"].get(ip, 0) for ip in exits)] for r in results
    ]
    lines = [format_table(headers, rows), "", "requests per exit (source address at the sites;",
             f"datacenter {', '.join(DATACENTER)}; dead {DEAD}; residential "
             f"{', '.join(RESIDENTIAL)}):", format_table(["system", *exits], per_exit)]  # fmt: skip
    lines += [f"{r['system']}: {r['notes']}" for r in results if r["notes"]]
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--systems", default=",".join(SYSTEMS),
                        help=f"comma-separated, of: {', '.join(SYSTEMS)}")  # fmt: skip
    parser.add_argument("--pages", type=int, default=20, help="pages per domain (20)")
    parser.add_argument("--duration", type=float, default=120.0,
                        help="seconds each system may run at most (120)")  # fmt: skip
    parser.add_argument("--concurrency", type=int, default=32, help="total requests at once")
    parser.add_argument("--delay-ms", type=float, default=10.0,
                        help="every page's latency at the sites, ms (10)")  # fmt: skip
    parser.add_argument("--json", type=Path, help="write the results here too")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--spec", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is None:
        names = [s for s in args.systems.split(",") if s]
        unknown = [s for s in names if s not in SYSTEMS]
        if unknown or not names:
            parser.error(f"--systems: unknown {unknown}; choose from {', '.join(SYSTEMS)}")
        if args.pages < 1 or args.duration <= 0 or args.concurrency < 1 or args.delay_ms < 0:
            parser.error("--pages, --duration and --concurrency must be positive")
        args.systems = names
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child is not None:
        CHILDREN[args.child](json.loads(args.spec.read_text()))
        return 0
    if find_tinyproxy() is None:
        print("bench/proxies.py needs tinyproxy (apt-get install tinyproxy)", file=sys.stderr)
        return 2
    results = []
    with Fleet(domain_specs(), delay_s=args.delay_ms / 1000) as fleet:
        for name in args.systems:
            system = SYSTEMS[name]
            with scenario(fleet, args, bans=system.bans) as sc:
                sc.started = time.monotonic()
                results.append(system.run(sc))
    print(
        f"{DOMAINS} domains x {args.pages} pages, 6 exits, concurrency {args.concurrency}, "
        f"latency {args.delay_ms:g} ms, at most {args.duration:g} s a system\n"
    )
    print(report(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
