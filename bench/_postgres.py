"""Benchmark helper: a private, throw-away PostgreSQL cluster (Debian's initdb and pg_ctl) in
a temporary folder on a free loopback port, stopped when the context manager exits. As root
it runs as the ``postgres`` user (the server refuses root). Never the machine's own server.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

__all__ = ["private_postgres"]


def _as_owner(argv: list[str]) -> list[str]:
    return ["runuser", "-u", "postgres", "--", *argv] if os.geteuid() == 0 else argv


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def private_postgres() -> Iterator[str]:
    """Start a cluster; yield ``postgresql://postgres@127.0.0.1:PORT/postgres``."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if not found:
        raise RuntimeError("no /usr/lib/postgresql/*/bin/initdb (apt-get install postgresql)")
    bindir = Path(found[-1]).parent
    folder = Path(tempfile.mkdtemp(prefix="scrapeq-bench-pg-", dir="/tmp"))
    if os.geteuid() == 0:
        user = pwd.getpwnam("postgres")
        os.chown(folder, user.pw_uid, user.pw_gid)
    data, port = folder / "data", _free_port()
    ctl = str(bindir / "pg_ctl")
    try:
        subprocess.run(_as_owner([str(bindir / "initdb"), "-D", str(data), "-U", "postgres",
                                  "-A", "trust", "--no-sync", "-E", "UTF8"]),
                       check=True, capture_output=True, timeout=120)  # fmt: skip
        # durable commits (fsync on), as a real database would be: the figures count them
        options = f"-p {port} -c listen_addresses=127.0.0.1 -k {folder}"
        subprocess.run(_as_owner([ctl, "-D", str(data), "-o", options, "-w", "-t", "30",
                                  "-l", str(folder / "log"), "start"]),
                       check=True, capture_output=True, timeout=60)  # fmt: skip
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(_as_owner([ctl, "-D", str(data), "-m", "fast", "-w", "stop"]),
                       capture_output=True, timeout=60)  # fmt: skip
        shutil.rmtree(folder, ignore_errors=True)
