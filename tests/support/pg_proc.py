"""A private PostgreSQL cluster for the tests: Debian's binaries (``initdb``, ``pg_ctl``), a
temporary folder, a free loopback port, stopped at the end. Never the machine's own server.

As root the cluster runs as the ``postgres`` user (the server refuses root), in a folder that
user owns. Without the binaries a test is skipped on a workstation and fails under CI
(``CI=true``: ``.ci/run`` installs Debian's ``postgresql``).
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from scrapeq.engine.server.launcher import free_port


def find_bin() -> Path | None:
    """The newest Debian PostgreSQL bin folder with initdb and pg_ctl, or None."""
    found = sorted(
        (Path(p).parent for p in glob.glob("/usr/lib/postgresql/*/bin/initdb")),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
    )
    return found[-1] if found and (found[-1] / "pg_ctl").exists() else None


def _as_owner(argv: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return argv
    return ["runuser", "-u", "postgres", "--", *argv]


def _run(argv: list[str]) -> None:
    subprocess.run(_as_owner(argv), check=True, capture_output=True, timeout=60)


@contextlib.contextmanager
def postgres_cluster() -> Iterator[str]:
    """Start a cluster; yield its URL (user ``postgres``, trust auth on loopback only)."""
    bindir = find_bin()
    if bindir is None:
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true but PostgreSQL's binaries are missing (.ci/run installs them)")
        pytest.skip("no /usr/lib/postgresql/*/bin (apt-get install postgresql)")
    folder = Path(tempfile.mkdtemp(prefix="scrapeq-pg-", dir="/tmp"))
    if os.geteuid() == 0:
        user = pwd.getpwnam("postgres")
        os.chown(folder, user.pw_uid, user.pw_gid)
    data, port = folder / "data", free_port()
    try:
        _run([str(bindir / "initdb"), "-D", str(data), "-U", "postgres", "-A", "trust",
              "--no-sync", "-E", "UTF8"])  # fmt: skip
        options = (f"-p {port} -c listen_addresses=127.0.0.1 -k {folder} -c fsync=off "
                   "-c full_page_writes=off -c max_connections=50")  # fmt: skip
        _run([str(bindir / "pg_ctl"), "-D", str(data), "-o", options, "-w", "-t", "30",
              "-l", str(folder / "log"), "start"])  # fmt: skip
    except subprocess.CalledProcessError as exc:
        shutil.rmtree(folder, ignore_errors=True)
        raise RuntimeError(f"postgres did not start: {exc.stderr!r}") from exc
    try:
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run(_as_owner([str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate",
                                  "-w", "stop"]), capture_output=True, timeout=60)  # fmt: skip
        deadline = time.monotonic() + 10
        while (data / "postmaster.pid").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        shutil.rmtree(folder, ignore_errors=True)
