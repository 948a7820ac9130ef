"""A private redis-server process for fault tests: started, killed and restarted at will.

The session fixture in conftest keeps one server for the whole run; fault tests need their
own, with persistence on, to kill it (SIGKILL, SIGTERM), cut its append-only file back and
start it again on the same port and data.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import redis

from scrapeq.engine.embedded import find_redis_server


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisProcess:
    """One redis-server on a loopback port with an AOF in ``workdir``.

    Args:
        workdir: its data folder (AOF, logs).
        extra: more ``--name value`` arguments (``["--maxmemory-policy", "allkeys-lru"]``).
    """

    def __init__(self, workdir: Path, *extra: str, port: int | None = None) -> None:
        self.workdir = workdir
        self.port = port or free_port()
        self.extra = list(extra)
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisProcess:
        args = [
            str(find_redis_server()),
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--save", "",
            "--appendonly", "yes",
            "--appendfsync", "everysec",
            "--dir", str(self.workdir),
            "--daemonize", "no",
            *self.extra,
        ]  # fmt: skip
        with (self.workdir / "redis.log").open("ab") as log:
            self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        client = redis.Redis(port=self.port, socket_connect_timeout=1)
        deadline = time.monotonic() + 15
        try:
            while True:
                try:
                    if client.ping():
                        info = client.info("persistence")
                        if not info.get("loading"):
                            return self
                except (redis.ConnectionError, redis.BusyLoadingError):
                    pass
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop(signal.SIGKILL)
                    raise RuntimeError(f"redis-server did not start on {self.port}")
                time.sleep(0.03)
        finally:
            client.close()

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def aof_files(self) -> list[Path]:
        """The append-only files written to (Redis 7: ``appendonlydir/*.incr.aof``)."""
        multi = sorted((self.workdir / "appendonlydir").glob("*.incr.aof"))
        if multi:
            return multi
        return [self.workdir / "appendonly.aof"]

    def aof_sizes(self) -> dict[Path, int]:
        """Sizes of the append-only files now (after the server wrote what it has)."""
        return {p: p.stat().st_size for p in self.aof_files() if p.exists()}

    def wait_aof_flushed(self) -> None:
        """Wait until the server has written its AOF buffer (``everysec`` writes each loop)."""
        client = redis.Redis(port=self.port)
        try:
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                info = client.info("persistence")
                if (
                    int(info.get("aof_pending_bio_fsync", 0)) == 0
                    and int(info.get("aof_buffer_length", 0)) == 0
                ):
                    break
                time.sleep(0.02)
            time.sleep(0.05)
        finally:
            client.close()

    def truncate_aof(self, sizes: dict[Path, int]) -> None:
        """Cut each append-only file back to ``sizes`` (what a lost last second leaves)."""
        for path, size in sizes.items():
            with path.open("r+b") as f:
                f.truncate(size)
                f.flush()
                os.fsync(f.fileno())
