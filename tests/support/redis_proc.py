"""A private redis-server process for fault tests: started, killed and restarted at will.

The session fixture in conftest keeps one server for the whole run; fault tests need their
own, with persistence on, to kill it (SIGKILL, SIGTERM), cut its append-only file back and
start it again on the same port and data. The process is scrapeq's own launcher's
(:class:`scrapeq.engine.server.launcher.RedisProcess`), with an AOF and a log in ``workdir``;
:class:`RedisProc` is one in a folder of its own that fsyncs every write.
"""

from __future__ import annotations

import shutil
import signal
import tempfile
from pathlib import Path

from scrapeq.engine.server import launcher
from scrapeq.engine.server.launcher import free_port

__all__ = ["RedisProc", "RedisProcess", "free_port"]


class RedisProcess(launcher.RedisProcess):
    """One redis-server on a loopback port with an AOF (and ``redis.log``) in ``workdir``.

    Args:
        workdir: its data folder (AOF, logs).
        extra: more ``--name value`` arguments (``["--maxmemory-policy", "allkeys-lru"]``).
        port: the port (default: a free one); the same on every restart.
    """

    def __init__(self, workdir: Path, *extra: str, port: int | None = None) -> None:
        super().__init__(workdir, *extra, port=port, aof=True, log=workdir / "redis.log")

    def start(self, timeout: float = 15.0) -> RedisProcess:
        super().start(timeout)
        return self


class RedisProc(launcher.RedisProcess):
    """A private redis-server with AOF (fsync always), restartable on the same port and dir."""

    def __init__(self) -> None:
        folder = Path(tempfile.mkdtemp(prefix="scrapeq-test-redis-loss-"))
        super().__init__(folder, "--appendfsync", "always", aof=True)
        self.dir = folder

    def kill(self) -> None:
        self.stop(signal.SIGKILL)

    def close(self) -> None:
        self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)
