"""A worker process's own Prometheus metrics (``scrapeq worker --metrics-port``).

What only the process knows: how its settles ended by lane and outcome, how long its fetches
took, how many jobs each claim brought and how long the claim took. The queue-wide figures
(jobs by state, lanes, breakers) are read from Redis by the dashboard's ``/metrics``
(:mod:`scrapeq.interfaces.web`), so a fleet is scraped once for those and once per process for
these. Every series has a ``queue`` label; each :class:`WorkerMetrics` has its own registry, so
several workers in one process (tests) never collide.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily
from prometheus_client.exposition import start_http_server
from prometheus_client.registry import Collector

__all__ = ["CLAIM_SIZE_BUCKETS", "FETCH_BUCKETS", "OUTCOMES", "WorkerMetrics"]

#: The settle answers counted (``stale`` too: a lease lost before settling).
OUTCOMES = ("done", "retried", "throttled", "dead", "released", "stale")
#: Fetch latency buckets, seconds: a fast local site to a slow one near the request timeout.
FETCH_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
#: Claim batch sizes (the worker asks for at most 100 at a time).
CLAIM_SIZE_BUCKETS = (0, 1, 2, 5, 10, 20, 50, 100)
#: Claim latency buckets, seconds (one Redis script call).
CLAIM_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)


class WorkerMetrics:
    """The counters and histograms of one worker, in a registry of their own.

    Args:
        queue: the queue's name, the ``queue`` label of every series.
    """

    def __init__(self, queue: str) -> None:
        self.queue = queue
        self.registry = CollectorRegistry()
        self._settled = Counter(
            "scrapeq_worker_settled",
            "Jobs this worker settled, by lane and outcome.",
            ["queue", "lane", "outcome"],
            registry=self.registry,
        )
        self._fetch = Histogram(
            "scrapeq_worker_fetch_duration_seconds",
            "Duration of this worker's fetches (body included), by lane.",
            ["queue", "lane"],
            buckets=FETCH_BUCKETS,
            registry=self.registry,
        )
        self._claim_size = Histogram(
            "scrapeq_worker_claim_batch_size",
            "Jobs one claim call brought (0: nothing was ready).",
            ["queue"],
            buckets=CLAIM_SIZE_BUCKETS,
            registry=self.registry,
        ).labels(queue)
        self._claim_latency = Histogram(
            "scrapeq_worker_claim_duration_seconds",
            "Duration of one claim call (a Redis round trip and script).",
            ["queue"],
            buckets=CLAIM_BUCKETS,
            registry=self.registry,
        ).labels(queue)
        self._requests = Counter(
            "scrapeq_worker_fetcher_requests",
            "Requests this worker made, by fetcher (a browser page's own requests included).",
            ["queue", "fetcher"],
            registry=self.registry,
        )
        self._bytes = Counter(
            "scrapeq_worker_fetcher_bytes",
            "Body bytes this worker's requests brought, by fetcher.",
            ["queue", "fetcher"],
            registry=self.registry,
        )
        self._cpu = _CpuCollector(queue)
        self.registry.register(self._cpu)
        # The labelled children, looked up once per (lane, outcome): labels() is a dict
        # lookup under a lock, done per job otherwise.
        self._settled_children: dict[tuple[str, str], Any] = {}
        self._fetch_children: dict[str, Any] = {}
        self._server: Any = None

    def settled(self, lane: str, outcome: str) -> None:
        """Count one settle answer."""
        child = self._settled_children.get((lane, outcome))
        if child is None:
            child = self._settled.labels(self.queue, lane, outcome)
            self._settled_children[(lane, outcome)] = child
        child.inc()

    def fetched(self, lane: str, seconds: float) -> None:
        """Observe one fetch's duration."""
        child = self._fetch_children.get(lane)
        if child is None:
            child = self._fetch.labels(self.queue, lane)
            self._fetch_children[lane] = child
        child.observe(seconds)

    def fetched_by(self, fetcher: str, requests: int, size: int) -> None:
        """Count ``requests`` of ``fetcher`` that brought ``size`` bytes."""
        self._requests.labels(self.queue, fetcher).inc(requests)
        self._bytes.labels(self.queue, fetcher).inc(size)

    def cpu_of(self, fetcher: str, seconds: Callable[[], float]) -> None:
        """Expose ``seconds()`` (read at each scrape, from the server's thread) as the
        CPU-seconds of ``fetcher``: the browser's, its chromium process trees'."""
        self._cpu.sources[fetcher] = seconds

    def claimed(self, jobs: int, seconds: float) -> None:
        """Observe one claim call: how many jobs it brought and how long it took."""
        self._claim_size.observe(jobs)
        self._claim_latency.observe(seconds)

    def exposition(self) -> bytes:
        """The registry in the Prometheus text format."""
        return bytes(generate_latest(self.registry))

    def serve(self, port: int, host: str = "127.0.0.1") -> int:
        """Serve ``/metrics`` on ``host:port`` from a daemon thread; answers the port bound
        (``port`` 0 picks a free one). Loopback by default: put a proxy in front to expose it.

        Raises:
            OSError: the address cannot be bound.
        """
        server, thread = start_http_server(port, addr=host, registry=self.registry)
        self._server = (server, thread)
        return int(server.server_address[1])

    def close(self) -> None:
        """Stop serving (when :meth:`serve` was called)."""
        if self._server is not None:
            server, thread = self._server
            self._server = None
            server.shutdown()
            server.server_close()
            if isinstance(thread, threading.Thread):
                thread.join(5)


class _CpuCollector(Collector):
    """CPU-seconds read at each scrape: per fetcher that runs processes of its own (the
    browser's chromium trees), and this worker process's own (every thread of it: the http
    and impersonate fetches, parsing, handlers run here, Redis calls: not split by fetcher,
    whose work is interleaved on one event loop)."""

    def __init__(self, queue: str) -> None:
        self.queue = queue
        self.sources: dict[str, Callable[[], float]] = {}

    def collect(self) -> Iterator[CounterMetricFamily]:
        by_fetcher = CounterMetricFamily(
            "scrapeq_worker_fetcher_cpu_seconds",
            "CPU-seconds of the processes a fetcher runs, by fetcher (browser: its chromium "
            "process trees, children included; http and impersonate run in the worker's own "
            "process: scrapeq_worker_process_cpu_seconds).",
            labels=["queue", "fetcher"],
        )
        sources = dict(self.sources)  # one C call: the loop's thread may add one
        for fetcher, seconds in sources.items():
            by_fetcher.add_metric([self.queue, fetcher], seconds())
        if sources:
            yield by_fetcher
        own = CounterMetricFamily(
            "scrapeq_worker_process_cpu_seconds",
            "CPU-seconds of this worker's own process, every thread (http and impersonate "
            "fetches, parsing, handlers run in it, Redis calls; not the browsers').",
            labels=["queue"],
        )
        own.add_metric([self.queue], time.process_time())
        yield own
