"""Process trees read from /proc: a browser's processes, their memory and their CPU time.

:func:`tree` and :func:`tree_rss` read what exists of a tree now. :class:`TreeCpu` counts the
CPU-seconds a tree spent over its whole life, from samples (:func:`read_tree`): each
process's ``utime + stime + cutime + cstime`` (its own time and that of the children it
reaped). A process that left the tree between two samples is either *carried* (its parent,
or an ancestor, is still in the tree and reaped it: its whole time is now in that ancestor's
``cutime``/``cstime``; until that ancestor's figure shows it, the ancestor counts at least
its own last figure plus the carried one's) or *banked* at its last sampled figure (its
ancestors went too): the total never goes back. So
the total is exact up to the last sample of a process that ended without the tree reaping it
(a browser process that crashed: the time it spent after the last sample, at most one watchdog
tick, is not seen; a browser the pool closes is sampled just before it is killed).
"""

from __future__ import annotations

import os
import threading
from typing import Final, NamedTuple

__all__ = ["Proc", "TreeCpu", "read_tree", "tree", "tree_rss"]

_PAGE_SIZE: Final = os.sysconf("SC_PAGE_SIZE")
_TICK: Final = float(os.sysconf("SC_CLK_TCK"))


class Proc(NamedTuple):
    """One process as a sample saw it."""

    pid: int
    ppid: int
    cpu: float  # seconds: utime + stime + cutime + cstime
    rss: int  # bytes


def _stat(pid: int) -> tuple[int, list[bytes]] | None:
    """(``pid``'s parent, its /proc/<pid>/stat fields after the command name), None if gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    rest = stat[stat.rfind(b")") + 2 :].split()
    return int(rest[1]), rest


def _children() -> dict[int, list[int]]:
    """Every process's children, from /proc."""
    found: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        read = _stat(int(name))
        if read is not None:
            found.setdefault(read[0], []).append(int(name))
    return found


def tree(pid: int) -> list[int]:
    """``pid`` and its descendants, as /proc has them now."""
    children = _children()
    out, todo = [], [pid]
    while todo:
        current = todo.pop()
        out.append(current)
        todo.extend(children.get(current, ()))
    return out


def tree_rss(pid: int) -> int:
    """The resident memory of ``pid``'s process tree, bytes (what exists of it now)."""
    total = 0
    for each in tree(pid):
        try:
            with open(f"/proc/{each}/statm", "rb") as f:
                total += int(f.read().split()[1]) * _PAGE_SIZE
        except (OSError, ValueError, IndexError):
            continue
    return total


def read_tree(pid: int) -> dict[tuple[int, int], Proc]:
    """``pid``'s process tree now, keyed by (pid, start time): a reused pid is another key."""
    out: dict[tuple[int, int], Proc] = {}
    for each in tree(pid):
        read = _stat(each)
        if read is None:
            continue
        ppid, f = read  # f[k - 3] is stat(5)'s field k: utime 14 ... starttime 22, rss 24
        cpu = sum(int(x) for x in f[11:15]) / _TICK
        out[(each, int(f[19]))] = Proc(each, ppid, cpu, int(f[21]) * _PAGE_SIZE)
    return out


class TreeCpu:
    """The CPU-seconds one process tree spent, from its samples (see the module's text).
    :meth:`update` and :attr:`total` may be called from different threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seen: dict[tuple[int, int], Proc] = {}
        self._banked = 0.0

    @property
    def total(self) -> float:
        """Seconds spent so far (as last sampled)."""
        with self._lock:
            return self._banked + sum(p.cpu for p in self._seen.values())

    def update(self, now: dict[tuple[int, int], Proc]) -> None:
        """Take a sample (:func:`read_tree`): bank what left the tree and was not carried.

        A carried process's figure moves to its carrier, which counts at least its previous
        figure plus what it carries until its own figure shows it (an ancestor that died
        before reaping: its children went to init, and its last figure never had them).
        So the total never goes back."""
        with self._lock:
            alive = {p.pid: key for key, p in now.items()}
            gone = {p.pid: p for key, p in self._seen.items() if key not in now}
            carried: dict[tuple[int, int], float] = {}
            for proc in gone.values():
                carrier = _carrier(proc, gone, alive)
                if carrier is None:
                    self._banked += proc.cpu
                else:
                    carried[carrier] = carried.get(carrier, 0.0) + proc.cpu
            for key, proc in now.items():  # a figure never goes back (a zombie's last read)
                old = self._seen.get(key)
                if old is not None:
                    least = old.cpu + carried.get(key, 0.0)
                    if least > proc.cpu:
                        now[key] = proc._replace(cpu=least)
            self._seen = dict(now)

    def finish(self) -> float:
        """Bank every process (the tree is being killed); answers the total. Idempotent."""
        with self._lock:
            self._banked += sum(p.cpu for p in self._seen.values())
            self._seen = {}
            return self._banked


def _carrier(
    proc: Proc, gone: dict[int, Proc], alive: dict[int, tuple[int, int]]
) -> tuple[int, int] | None:
    """The live ancestor whose figure takes ``proc``'s time (its parent, or a gone parent's
    parent..., still in the tree: it reaped them), None when none is."""
    parent = proc.ppid
    for _ in range(len(gone) + 1):
        if parent in alive:
            return alive[parent]
        if parent not in gone:
            return None
        parent = gone[parent].ppid
    return None
