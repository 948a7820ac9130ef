"""A fleet of loopback sites served by a real nginx (Debian's ``nginx``), for the benches
that compare scrapeq with a bare loop against a server that is not Python's: one nginx
process (``worker_processes 1``: the client, Redis and the sites share the machine's cores)
listening on ``domains`` ports of 127.0.0.1, each answering every path with ``page``.

Nothing is downloaded, nothing leaves 127.0.0.1; the configuration, pid file and logs live in
a temporary folder removed at the end.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

__all__ = ["find_nginx", "nginx_fleet"]


def find_nginx() -> str | None:
    """The nginx binary (PATH, then Debian's /usr/sbin), or None."""
    found = shutil.which("nginx")
    if found is None and Path("/usr/sbin/nginx").exists():
        found = "/usr/sbin/nginx"
    return found


def _free_ports(n: int) -> list[int]:
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [int(s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


def _config(folder: Path, ports: list[int], page: Path) -> str:
    servers = "\n".join(
        f"  server {{ listen 127.0.0.1:{port} reuseport backlog=1024; root {folder}; "
        f"location / {{ try_files /{page.name} =404; }} }}"
        for port in ports
    )
    return f"""
daemon off;
master_process on;
worker_processes 1;
pid {folder}/nginx.pid;
error_log {folder}/error.log error;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  default_type text/html;
  keepalive_requests 100000;
  keepalive_timeout 60s;
  client_body_temp_path {folder}/body;
  proxy_temp_path {folder}/proxy;
  fastcgi_temp_path {folder}/fastcgi;
  uwsgi_temp_path {folder}/uwsgi;
  scgi_temp_path {folder}/scgi;
{servers}
}}
"""


def _worker_pid(master: int, timeout: float = 10.0) -> int:
    """The pid of the master's one worker process (its CPU is the sites')."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        children = Path(f"/proc/{master}/task/{master}/children")
        text = children.read_text().split() if children.exists() else []
        if text:
            return int(text[0])
        time.sleep(0.05)
    raise RuntimeError("nginx started no worker process")


@contextlib.contextmanager
def nginx_fleet(domains: int, page: bytes) -> Iterator[tuple[int, list[int]]]:
    """Start nginx serving ``page`` on ``domains`` loopback ports; yield (the worker's pid,
    the ports); stop it."""
    binary = find_nginx()
    if binary is None:
        raise RuntimeError("nginx is not installed (Debian: apt-get install nginx-light)")
    with tempfile.TemporaryDirectory(prefix="bench-nginx-") as tmp:
        folder = Path(tmp)
        folder.chmod(0o755)  # nginx's worker runs as another user (Debian: www-data)
        page_file = folder / "page.html"
        page_file.write_bytes(page)
        page_file.chmod(0o644)
        ports = _free_ports(domains)
        conf = folder / "nginx.conf"
        conf.write_text(_config(folder, ports, page_file))
        proc = subprocess.Popen(
            [binary, "-c", str(conf), "-p", str(folder), "-e", str(folder / "error.log")],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            deadline = time.monotonic() + 15
            while True:
                with (
                    contextlib.suppress(OSError),
                    socket.create_connection(("127.0.0.1", ports[-1]), 0.2),
                ):
                    break
                if proc.poll() is not None or time.monotonic() > deadline:
                    err = proc.stderr.read().decode() if proc.stderr else ""
                    raise RuntimeError(f"nginx did not start: {err.strip()[:500]}")
                time.sleep(0.05)
            yield _worker_pid(proc.pid), ports
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
