"""Real forward proxies for the tests and ``bench/proxies.py``: Debian's ``tinyproxy``, one
process per exit, each with its own config file in a temporary folder.

Each proxy listens on its exit address at a free port and connects out **from it** (``Listen``
and ``Bind 127.0.0.N``): on Linux all of 127.0.0.0/8 is routed on ``lo``, so a site on
127.0.0.1 sees a distinct source address per exit (``request.remote``) and can ban one exit,
or a tier of them, by address. Each proxy has a host of its own, as real exits do (Scrapy's
rotating-proxies middleware gives each proxy *host* one download slot).

Options: Basic credentials (a request without them is answered ``407``; with wrong ones
tinyproxy 1.11 answers ``401`` with ``WWW-Authenticate``, for plain requests and ``CONNECT``
alike, where squid answers ``407``); ``CONNECT`` to any port (no ``ConnectPort`` line:
tinyproxy's default file allows 443 and 563 only); logs at ``Critical`` into the proxy's
folder; foreground (``-d``); 512 clients; a 30 s idle timeout. :meth:`Tinyproxy.kill` makes a
dead exit: its port then refuses connections.

As root the proxy runs as root, said in its file (``User root``/``Group root``; without them
tinyproxy 1.11 keeps the current user and warns). Without the binary a test is skipped on a
workstation and fails under CI (``CI=true``: ``.ci/run`` installs Debian's ``tinyproxy``), as
``tests/support/pg_proc.py`` does for PostgreSQL. Importing this module needs no pytest (the bench
imports it).
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from urllib.parse import quote

#: Where Debian installs it; else the first ``tinyproxy`` on PATH.
TINYPROXY = "/usr/bin/tinyproxy"

#: Seconds to wait for a new proxy to accept connections.
READY_TIMEOUT = 10.0


def find_tinyproxy() -> str | None:
    """The tinyproxy binary to run, or None when there is none."""
    if os.access(TINYPROXY, os.X_OK):
        return TINYPROXY
    return shutil.which("tinyproxy")


def require_tinyproxy() -> str:
    """The binary, or skip the calling test (fail it under ``CI=true``)."""
    import pytest

    binary = find_tinyproxy()
    if binary is None:
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true but tinyproxy is missing (.ci/run installs it)")
        pytest.skip("no tinyproxy (apt-get install tinyproxy)")
    return binary


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class Tinyproxy:
    """One tinyproxy process whose outgoing connections come from ``exit_ip``.

    Args:
        exit_ip: the source address of its connections to sites: a loopback address
            (``127.0.0.2``...); ``127.0.0.1`` is the address of direct fetches.
        auth: ``(user, password)``: the proxy answers 407 to a request without them.
        timeout_s: tinyproxy's ``Timeout`` (seconds a connection may stay idle).
        max_clients: tinyproxy's ``MaxClients`` (one thread per connection).
        binary: the tinyproxy to run (default: :func:`find_tinyproxy`).

    Use as a context manager, or call :meth:`start` and :meth:`stop`. It listens on
    ``exit_ip``: ``url`` is ``http://[user:pass@]<exit_ip>:PORT``; ``bare_url`` has no
    credentials.
    """

    def __init__(
        self,
        exit_ip: str,
        auth: tuple[str, str] | None = None,
        *,
        timeout_s: int = 30,
        max_clients: int = 512,
        binary: str | None = None,
    ) -> None:
        address = ipaddress.ip_address(exit_ip)
        if not address.is_loopback or address.version != 4:
            raise ValueError(f"an exit address must be in 127.0.0.0/8, not {exit_ip!r}")
        self.exit_ip = exit_ip
        self.auth = auth
        self.timeout_s = timeout_s
        self.max_clients = max_clients
        self.binary = binary or find_tinyproxy()
        self.port = 0
        self.folder: Path | None = None
        self.proc: subprocess.Popen[bytes] | None = None

    # --- addresses ---------------------------------------------------------------------------

    @property
    def host(self) -> str:
        """The address it listens on: its exit address."""
        return self.exit_ip

    @property
    def bare_url(self) -> str:
        """``http://<exit_ip>:PORT``, without credentials."""
        return f"http://{self.host}:{self.port}"

    @property
    def url(self) -> str:
        """The proxy URL to configure a client with, credentials included when it has some."""
        if self.auth is None:
            return self.bare_url
        user, password = (quote(part, safe="") for part in self.auth)
        return f"http://{user}:{password}@{self.host}:{self.port}"

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"Tinyproxy({self.bare_url}, {state})"

    # --- lifecycle ---------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def config(self) -> str:
        """The config file's text (``folder`` and ``port`` set)."""
        assert self.folder is not None
        lines = [
            f"Port {self.port}",
            f"Listen {self.host}",
            f"Bind {self.exit_ip}",
            f"Timeout {self.timeout_s}",
            f"MaxClients {self.max_clients}",
            f'LogFile "{self.folder / "tinyproxy.log"}"',
            "LogLevel Critical",
            "DisableViaHeader Yes",
            # no ConnectPort line: CONNECT to any port; no Allow line: any client (loopback)
        ]
        if os.geteuid() == 0:
            lines += ["User root", "Group root"]
        if self.auth is not None:
            user, password = self.auth
            if any(c.isspace() or c == '"' for c in user + password):
                raise ValueError("proxy credentials without spaces or quotes, please")
            lines.append(f"BasicAuth {user} {password}")
        return "\n".join(lines) + "\n"

    def start(self) -> Tinyproxy:
        """Write the config, start the process, wait until it accepts connections."""
        if self.binary is None:
            raise FileNotFoundError("no tinyproxy binary (apt-get install tinyproxy)")
        self.folder = Path(tempfile.mkdtemp(prefix="scrapeq-tinyproxy-"))
        self.port = _free_port(self.host)
        conf = self.folder / "tinyproxy.conf"
        conf.write_text(self.config())
        with open(self.folder / "stderr", "wb") as err:
            self.proc = subprocess.Popen(
                [self.binary, "-d", "-c", str(conf)],
                stdin=subprocess.DEVNULL,
                stdout=err,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a Ctrl-C to the tests is not sent to it
            )
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self) -> None:
        assert self.proc is not None and self.folder is not None
        deadline = time.monotonic() + READY_TIMEOUT
        while True:
            if self.proc.poll() is not None:
                said = (self.folder / "stderr").read_text(errors="replace").strip()
                raise RuntimeError(f"tinyproxy exited ({self.proc.returncode}): {said[-500:]}")
            with (
                contextlib.suppress(OSError),
                socket.create_connection((self.host, self.port), timeout=0.5),
            ):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"tinyproxy did not listen on {self.port} in {READY_TIMEOUT} s")
            time.sleep(0.02)

    def kill(self) -> None:
        """SIGKILL the process (a dead exit: its port refuses connections); keep the folder."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        """Stop the process (SIGTERM, then SIGKILL after 5 s) and remove its folder."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.kill()
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None

    def __enter__(self) -> Tinyproxy:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class TinyproxySet:
    """Proxies started on demand and all stopped by :meth:`close` (the ``tinyproxies``
    fixture; the bench uses it too)."""

    def __init__(self, binary: str | None = None) -> None:
        self.binary = binary
        self.started: list[Tinyproxy] = []

    def __call__(self, exit_ip: str, auth: tuple[str, str] | None = None) -> Tinyproxy:
        """Start a proxy whose connections come from ``exit_ip`` (see :class:`Tinyproxy`)."""
        proxy = Tinyproxy(exit_ip, auth, binary=self.binary)
        self.started.append(proxy)
        return proxy.start()

    def close(self) -> None:
        for proxy in self.started:
            proxy.stop()
        self.started.clear()
