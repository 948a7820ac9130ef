"""The demo's fleet: simulated shops on loopback, served from a separate process.

Each site is its own aiohttp server on ``127.0.0.1`` (its own port, so its own domain), with a
public-looking name (``shop-07.example.com``) that a :class:`~scrapeq.runtime.fetch.StaticResolver`
maps to loopback. The fleet runs in a child process with its own event loop, so the load of
serving thousands of requests does not share the event loop of the worker under test.

Site modes (:class:`Mode`):

* ``shop``: a healthy shop; each request waits a lognormal latency around the shop's median,
  then answers a small HTML page.
* ``hang``: accepts the request and never answers (the incident: ``shop-43.example.com``).
* ``error``: answers 503 to everything, without a Retry-After.
* ``gone``: a delisted catalogue: 404 for every page.
* ``throttle``: a shop that allows ``rate`` requests a second and answers 429 with
  ``Retry-After: 2`` beyond that.
* ``drip``: answers 200 and then sends its body one byte at a time (a per-read timeout never
  fires on it).
* ``flaky``: a shop that answers 500 to a share of its requests (``fail_share``, drawn at
  random per request): retries succeed, a run of failures may trip its breaker.
* ``limit``: a rate limiter as most CDNs run one: a token bucket of ``rate`` requests a
  second (holding at most ``burst`` tokens, ``rate`` when 0) per client address; a request
  that finds the bucket empty gets 503 *without* Retry-After at once. The others are shops.
* ``capacity``: a site that serves ``capacity`` (K) requests at once at its latency; beyond
  K a request queues for a free slot (its latency grows with the queue); beyond 2K requests
  in the site it answers 503 at once, without Retry-After.

The fleet counts, per site, the requests that reached it, the body bytes it sent and the
statuses it answered; :meth:`Fleet.stats` reads them from the child over a control port
(``GET /__stats``), so figures about fetches come from the servers, not from the client.
:meth:`Fleet.paths` reads (with ``track_paths``) what each path saw since the last
:meth:`Fleet.reset_paths`: the requests that reached it and how each ended (a status, or
``gave_up`` when the client closed the connection before a hanging or dripping answer was
complete).

:class:`Workload` is the jobs a demo gives the fleet: so many per site and lane, times the
site's ``weight`` (``shop-43`` carries the incident's big backlog).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import math
import os
import random
import select
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import IO, Any, Self

from aiohttp import web

from scrapeq.runtime.fetch import StaticResolver

__all__ = ["Fleet", "Mode", "SiteCounts", "SiteSpec", "Workload", "default_sites"]

_Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

#: Name of the control endpoint's pseudo-site in the ports the child reports.
_CONTROL = "__control"
#: Seconds between two bytes of the drip site, and the body length it announces.
DRIP_INTERVAL, DRIP_SIZE = 0.25, 4096
#: Seconds the throttled site asks clients to wait.
RETRY_AFTER = 2


class Mode(StrEnum):
    """How a simulated site behaves (see the module docstring)."""

    SHOP = "shop"
    HANG = "hang"
    ERROR = "error"
    GONE = "gone"
    THROTTLE = "throttle"
    DRIP = "drip"
    FLAKY = "flaky"
    LIMIT = "limit"
    CAPACITY = "capacity"


@dataclass(frozen=True, slots=True)
class SiteSpec:
    """One simulated site.

    Attributes:
        name: its host name, e.g. ``shop-43.example.com``.
        mode: its behaviour.
        latency_ms: median latency of an answer, milliseconds (lognormal, sigma 0.5).
        weight: its share of the demo's jobs, relative to an ordinary shop (1.0).
        rate: requests a second a ``throttle`` site allows before answering 429.
        fail_share: share of requests a ``flaky`` site answers with 500.
        capacity: requests a ``capacity`` site serves at once (K; 503 beyond 2K).
        burst: tokens a ``limit`` site's bucket holds (0: ``rate``).
    """

    name: str
    mode: Mode = Mode.SHOP
    latency_ms: float = 60.0
    weight: float = 1.0
    rate: int = 4
    fail_share: float = 0.3
    capacity: int = 8
    burst: int = 0

    @property
    def healthy(self) -> bool:
        """Whether every request to it should succeed (a plain shop)."""
        return self.mode is Mode.SHOP


def default_sites(seed: int = 43) -> list[SiteSpec]:
    """The incident's fleet: 40 healthy shops and five faulty sites.

    Healthy medians are spread between 30 and 150 ms (a few shops around 400 ms);
    ``shop-43`` hangs and carries a large backlog (the article's incident).

    Args:
        seed: seeds the medians, so a fleet is the same from run to run.
    """
    rng = random.Random(seed)
    slow = {7, 19, 33}
    sites = [
        SiteSpec(
            f"shop-{i:02d}.example.com",
            latency_ms=rng.uniform(300, 500) if i in slow else math.exp(rng.uniform(3.4, 5.0)),
        )
        for i in range(1, 41)
    ]
    return [
        *sites,
        SiteSpec("shop-41.example.com", Mode.ERROR, latency_ms=20),
        SiteSpec("shop-42.example.com", Mode.GONE, latency_ms=30),
        SiteSpec("shop-43.example.com", Mode.HANG, weight=25.0),
        SiteSpec("shop-44.example.com", Mode.THROTTLE, latency_ms=60, rate=4),
        SiteSpec("shop-45.example.com", Mode.DRIP),
    ]


@dataclass(slots=True)
class SiteCounts:
    """What one site saw: requests that reached it, bytes it sent, statuses it answered."""

    requests: int = 0
    bytes: int = 0
    statuses: dict[str, int] = field(default_factory=dict)

    def __sub__(self, other: SiteCounts) -> SiteCounts:
        keys = set(self.statuses) | set(other.statuses)
        diff = {k: self.statuses.get(k, 0) - other.statuses.get(k, 0) for k in sorted(keys)}
        return SiteCounts(
            self.requests - other.requests,
            self.bytes - other.bytes,
            {k: v for k, v in diff.items() if v},
        )

    def as_dict(self) -> dict[str, Any]:
        """JSON-friendly form."""
        return {"requests": self.requests, "bytes": self.bytes, "statuses": dict(self.statuses)}


# --- the child process: the servers ------------------------------------------------------


class _Site:
    """The handler and counters of one site, inside the fleet process."""

    def __init__(self, spec: SiteSpec, rng: random.Random, track_paths: bool = False) -> None:
        self.spec = spec
        self.track_paths = track_paths
        self.rng = rng
        self.requests = 0
        self.bytes = 0
        self.statuses: Counter[str] = Counter()
        self._second = 0
        self._in_second = 0
        modes: dict[Mode, _Handler] = {
            Mode.SHOP: self._shop,
            Mode.HANG: self._hang,
            Mode.ERROR: self._error,
            Mode.GONE: self._gone,
            Mode.THROTTLE: self._throttle,
            Mode.DRIP: self._drip,
            Mode.FLAKY: self._flaky,
            Mode.LIMIT: self._limit,
            Mode.CAPACITY: self._capacity,
        }
        self._handler = modes[spec.mode]
        # limit: client address -> (tokens, monotonic time of the last refill)
        self._buckets: dict[str, tuple[float, float]] = {}
        # capacity: requests in the site (served and queued), and the K serving slots
        self._in_site = 0
        self._slots = asyncio.Semaphore(max(spec.capacity, 1))
        # path -> [requests, outcome, ...] since the last reset (the reset count: epoch)
        self.paths: dict[str, list[Any]] = {}
        self.epoch = 0

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.requests += 1
        if not self.track_paths:
            return await self._handler(request)
        epoch, path = self.epoch, request.path
        self.paths.setdefault(path, [0])[0] += 1
        outcome = "gave_up"
        try:
            resp = await self._handler(request)
            if self.spec.mode is Mode.DRIP:
                outcome = "200" if resp.prepared and not _cut(request) else "gave_up"
            elif self.spec.mode is not Mode.HANG:
                outcome = str(resp.status)
            return resp
        finally:
            if epoch == self.epoch:  # a request from before a reset is not this run's
                self.paths[path].append(outcome)

    def counts(self) -> dict[str, Any]:
        return {"requests": self.requests, "bytes": self.bytes, "statuses": dict(self.statuses)}

    def _answer(self, status: int, body: str, **headers: str) -> web.Response:
        data = body.encode()
        self.bytes += len(data)
        self.statuses[str(status)] += 1
        return web.Response(status=status, body=data, content_type="text/html", headers=headers)

    async def _wait(self) -> None:
        median = self.spec.latency_ms / 1000
        await asyncio.sleep(min(median * math.exp(self.rng.gauss(0.0, 0.5)), 5.0))

    async def _shop(self, request: web.Request) -> web.StreamResponse:
        await self._wait()
        filler = "<li>item</li>" * self.rng.randint(60, 400)
        page = f"<html><title>{self.spec.name}{request.path}</title><ul>{filler}</ul></html>"
        return self._answer(200, page)

    async def _hang(self, request: web.Request) -> web.StreamResponse:
        # Hold the socket until the client gives up; aiohttp does not cancel the handler.
        while request.transport is not None and not request.transport.is_closing():
            await asyncio.sleep(0.5)
        return web.Response(status=504)

    async def _error(self, request: web.Request) -> web.StreamResponse:
        await self._wait()
        return self._answer(503, "service unavailable")

    async def _gone(self, request: web.Request) -> web.StreamResponse:
        await self._wait()
        return self._answer(404, "this product was delisted")

    async def _throttle(self, request: web.Request) -> web.StreamResponse:
        now = int(time.monotonic())
        if now != self._second:
            self._second, self._in_second = now, 0
        self._in_second += 1
        if self._in_second > self.spec.rate:
            return self._answer(429, "slow down", **{"Retry-After": str(RETRY_AFTER)})
        return await self._shop(request)

    async def _flaky(self, request: web.Request) -> web.StreamResponse:
        if self.rng.random() < self.spec.fail_share:
            await self._wait()
            return self._answer(500, "internal server error")
        return await self._shop(request)

    async def _limit(self, request: web.Request) -> web.StreamResponse:
        rate = float(max(self.spec.rate, 1))
        size = float(self.spec.burst or self.spec.rate or 1)
        client = request.remote or ""
        now = time.monotonic()
        tokens, last = self._buckets.get(client, (size, now))
        tokens = min(size, tokens + (now - last) * rate)
        if tokens < 1.0:
            self._buckets[client] = (tokens, now)
            return self._answer(503, "rate limit exceeded")
        self._buckets[client] = (tokens - 1.0, now)
        return await self._shop(request)

    async def _capacity(self, request: web.Request) -> web.StreamResponse:
        if self._in_site >= 2 * self.spec.capacity:
            return self._answer(503, "overloaded")
        self._in_site += 1
        try:
            async with self._slots:
                return await self._shop(request)
        finally:
            self._in_site -= 1

    async def _drip(self, request: web.Request) -> web.StreamResponse:
        self.statuses["200"] += 1
        resp = web.StreamResponse(headers={"Content-Type": "text/html"})
        resp.content_length = DRIP_SIZE
        try:
            await resp.prepare(request)
            for _ in range(DRIP_SIZE):
                await resp.write(b"x")
                self.bytes += 1
                await asyncio.sleep(DRIP_INTERVAL)
            await resp.write_eof()
        except (ConnectionError, RuntimeError):
            pass  # the client gave up
        return resp


def _cut(request: web.Request) -> bool:
    """Whether the client closed the connection (a dripping body was not complete)."""
    return request.transport is None or request.transport.is_closing()


async def _start_server(app: web.Application) -> tuple[web.AppRunner, int]:
    runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=0.2)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, backlog=1024)
    await site.start()
    server = site._server
    assert server is not None
    return runner, int(server.sockets[0].getsockname()[1])  # type: ignore[attr-defined]


async def _serve(specs: list[SiteSpec], seed: int, track_paths: bool = False) -> None:
    rng = random.Random(seed)
    sites = {s.name: _Site(s, random.Random(rng.random()), track_paths) for s in specs}
    runners: list[web.AppRunner] = []
    ports: dict[str, int] = {}
    for name, site in sites.items():
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", site.handle)
        runner, ports[name] = await _start_server(app)
        runners.append(runner)

    async def stats(request: web.Request) -> web.StreamResponse:
        return web.json_response({name: s.counts() for name, s in sites.items()})

    async def paths(request: web.Request) -> web.StreamResponse:
        return web.json_response({name: s.paths for name, s in sites.items()})

    async def reset_paths(request: web.Request) -> web.StreamResponse:
        for s in sites.values():
            s.paths, s.epoch = {}, s.epoch + 1
        return web.json_response({})

    control = web.Application()
    control.router.add_get("/__stats", stats)
    control.router.add_get("/__paths", paths)
    control.router.add_post("/__paths/reset", reset_paths)
    runner, ports[_CONTROL] = await _start_server(control)
    runners.append(runner)
    stop = asyncio.Event()
    # Any input, or the end of it (the parent closed the pipe or died), means stop.
    asyncio.get_running_loop().add_reader(sys.stdin.fileno(), stop.set)
    sys.stdout.write(json.dumps(ports) + "\n")
    sys.stdout.flush()
    await stop.wait()
    await asyncio.gather(*(r.cleanup() for r in runners), return_exceptions=True)


def main() -> None:
    """The fleet process (``python -m scrapeq.demo.fleet``): read the sites, serve until told.

    Reads one JSON line ``{"seed": n, "sites": [SiteSpec fields ...]}`` from stdin, writes
    one JSON line of ports (site name -> port, plus the control port) to stdout, then serves
    until stdin has more input or ends.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    config = json.loads(sys.stdin.readline())
    specs = [SiteSpec(**{**s, "mode": Mode(s["mode"])}) for s in config["sites"]]
    asyncio.run(_serve(specs, int(config["seed"]), bool(config.get("track_paths"))))


def _child_env() -> dict[str, str]:
    """The environment of the fleet process: ours, with this package importable."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return env


# --- the parent's handle -------------------------------------------------------------------


class Fleet:
    """Start, query and stop the fleet process.

    The fleet runs as ``python -m scrapeq.demo.fleet`` (a fresh interpreter: nothing of the
    caller's process, loop or threads is copied, and the caller's main module is not
    re-imported). Use it as a context manager, or call :meth:`start` and :meth:`stop`.

    Args:
        sites: the sites to serve; default :func:`default_sites`.
        seed: seeds the per-request latencies and page sizes.
        track_paths: record each request per path for :meth:`paths` (off: a long run's
            record would grow with every URL).
    """

    def __init__(
        self, sites: list[SiteSpec] | None = None, *, seed: int = 0, track_paths: bool = False
    ) -> None:
        self.sites = sites if sites is not None else default_sites()
        self.seed = seed
        self.track_paths = track_paths
        self.ports: dict[str, int] = {}
        self._process: subprocess.Popen[bytes] | None = None
        self._errors: IO[bytes] | None = None
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def start(self, timeout: float = 30.0) -> None:
        """Start the fleet process and wait until every site listens.

        Raises:
            RuntimeError: the process did not report its ports within ``timeout`` seconds.
        """
        self._errors = tempfile.TemporaryFile()  # noqa: SIM115 (closed by stop())
        proc = subprocess.Popen(
            [sys.executable, "-m", "scrapeq.demo.fleet"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._errors,
            env=_child_env(),
        )
        self._process = proc
        assert proc.stdin is not None and proc.stdout is not None
        config = {
            "seed": self.seed,
            "track_paths": self.track_paths,
            "sites": [dataclasses.asdict(s) for s in self.sites],
        }
        proc.stdin.write(json.dumps(config).encode() + b"\n")
        proc.stdin.flush()
        ready, _, _ = select.select([proc.stdout], [], [], timeout)
        line = proc.stdout.readline() if ready else b""
        if not line:
            detail = self._error_tail()
            self.stop()
            raise RuntimeError(f"the demo fleet did not start: {detail or 'no answer'}")
        self.ports = {str(k): int(v) for k, v in json.loads(line).items()}

    def _error_tail(self) -> str:
        if self._errors is None:
            return ""
        self._errors.seek(0)
        lines = self._errors.read().decode(errors="replace").strip().splitlines()
        return lines[-1] if lines else ""

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the fleet process (politely, then by force); idempotent."""
        proc, self._process = self._process, None
        if proc is not None:
            with contextlib.suppress(OSError, ValueError):
                assert proc.stdin is not None
                proc.stdin.close()  # end of input: the child stops
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout)
            if proc.stdout is not None:
                proc.stdout.close()
        if self._errors is not None:
            self._errors.close()
            self._errors = None

    def domain(self, name: str) -> str:
        """The queue domain of a site: ``name:port``."""
        return f"{name}:{self.ports[name]}"

    def url(self, name: str, path: str) -> str:
        """A URL on a site, e.g. ``url("shop-43.example.com", "/p/1")``."""
        return f"http://{self.domain(name)}{path}"

    def resolver(self) -> StaticResolver:
        """A resolver that maps every site name to 127.0.0.1."""
        return StaticResolver({s.name: "127.0.0.1" for s in self.sites})

    def stats(self, timeout: float = 10.0) -> dict[str, SiteCounts]:
        """Every site's counts since the fleet started, read from the fleet process."""
        url = f"http://127.0.0.1:{self.ports[_CONTROL]}/__stats"
        with self._opener.open(url, timeout=timeout) as resp:
            data: dict[str, dict[str, Any]] = json.load(resp)
        return {
            name: SiteCounts(int(c["requests"]), int(c["bytes"]), dict(c["statuses"]))
            for name, c in data.items()
        }

    def paths(self, timeout: float = 30.0) -> dict[str, dict[str, tuple[int, list[str]]]]:
        """Site -> path -> (requests that reached it, how each ended so far: the status
        answered, or ``gave_up``), since the last :meth:`reset_paths`; empty unless the
        fleet was started with ``track_paths``. An answer still being sent (a hanging or
        dripping one) has no outcome yet."""
        url = f"http://127.0.0.1:{self.ports[_CONTROL]}/__paths"
        with self._opener.open(url, timeout=timeout) as resp:
            data: dict[str, dict[str, list[Any]]] = json.load(resp)
        return {
            name: {path: (int(v[0]), [str(o) for o in v[1:]]) for path, v in seen.items()}
            for name, seen in data.items()
        }

    def reset_paths(self, timeout: float = 10.0) -> None:
        """Forget what every path saw; requests already under way are not recorded."""
        url = f"http://127.0.0.1:{self.ports[_CONTROL]}/__paths/reset"
        req = urllib.request.Request(url, data=b"", method="POST")
        with self._opener.open(req, timeout=timeout):
            pass


# --- the workload ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Workload:
    """The jobs a demo gives the fleet: URLs per lane in enqueue order, and their sites.

    Attributes:
        lanes: lane name -> URLs (``http://<site>:<port>/p/<n>``, every URL distinct).
        site_of: URL -> its site.
    """

    lanes: dict[str, list[str]]
    site_of: dict[str, SiteSpec]

    @classmethod
    def build(
        cls,
        fleet: Fleet,
        per_site: Mapping[str, int],
        *,
        order: Iterable[str] | None = None,
        scale: float = 1.0,
        seed: int = 0,
    ) -> Workload:
        """Jobs for every site of ``fleet``, shuffled within each lane.

        Args:
            fleet: a started fleet (URLs carry its ports).
            per_site: lane -> jobs per ordinary site; a site's ``weight`` multiplies it.
            order: lanes in the order their URLs are numbered (default ``per_site``'s).
            scale: multiplies every count (at least one job per site and lane).
            seed: seeds the shuffle.
        """
        rng = random.Random(seed)
        lanes: dict[str, list[str]] = {}
        site_of: dict[str, SiteSpec] = {}
        for lane in order if order is not None else per_site:
            urls = []
            for spec in fleet.sites:
                for _ in range(max(1, round(per_site[lane] * spec.weight * scale))):
                    url = fleet.url(spec.name, f"/p/{len(site_of) + 1}")
                    site_of[url] = spec
                    urls.append(url)
            rng.shuffle(urls)
            lanes[lane] = urls
        return cls(lanes, site_of)


if __name__ == "__main__":
    main()
