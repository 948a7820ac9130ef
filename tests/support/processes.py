"""Processes as the tests watch them: polling, and /proc scans (no psutil).

The session fixture of tests/conftest.py finds the redis-servers the tests left running with
:func:`redis_servers_under`; the worker tests find a supervisor's children with
:func:`worker_children` and kill whole trees with :func:`descendants`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


def wait_until(cond: Callable[[], T], timeout: float, what: str) -> T:
    """Poll ``cond`` until it answers something true; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)


def _processes() -> Iterator[tuple[int, Path]]:
    """(pid, its /proc folder) of every process."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            yield int(entry.name), entry


def _stat(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the command name, or None when the pid is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()


def catches(pid: int, signum: int) -> bool:
    """``pid`` has a handler of its own for ``signum`` (its ``SigCgt`` mask): a process that
    installs one after it starts (asyncio's ``add_signal_handler``) is ready for the signal,
    where before it the default action (death) would run."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    mask = next(line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:"))
    return bool(int(mask, 16) >> (signum - 1) & 1)


def alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    fields = _stat(pid)
    return fields is not None and fields[0] not in ("Z", "X")


def children(pid: int) -> list[int]:
    """Live direct children of ``pid`` (scans /proc: no psutil, no /proc/.../children)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        fields = _stat(int(entry.name))
        if fields is not None and fields[1] == str(pid) and fields[0] not in ("Z", "X"):
            found.append(int(entry.name))
    return sorted(found)


def descendants(pid: int) -> list[int]:
    out: list[int] = []
    for child in children(pid):
        out += [child, *descendants(child)]
    return out


def worker_children(pid: int) -> list[int]:
    """Children of a supervisor that are worker processes (not multiprocessing's helpers)."""
    out = []
    for child in children(pid):
        try:
            cmdline = Path(f"/proc/{child}/cmdline").read_bytes()
        except OSError:
            continue
        if b"spawn_main" in cmdline:
            out.append(child)
    return out


def redis_servers_under(*roots: Path) -> list[int]:
    """Live redis-server processes whose working folder (their ``--dir``) is under a root.

    (Not their environment: redis-server writes its process title over it.)
    """
    real = [Path(os.path.realpath(r)) for r in roots]
    found = []
    for pid, entry in _processes():
        try:
            if not (entry / "comm").read_text().startswith("redis-server"):
                continue
            cwd = Path(os.readlink(entry / "cwd"))
        except OSError:
            continue  # gone meanwhile, or not ours to read
        if any(cwd.is_relative_to(r) for r in real):
            found.append(pid)
    return found


def marked_processes(name: str, value: str) -> list[int]:
    """Live processes whose environment has ``name=value`` (a redis-server's is overwritten)."""
    wanted = f"{name}={value}".encode()
    found = []
    for pid, entry in _processes():
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if wanted in environ:
            found.append(pid)
    return found
