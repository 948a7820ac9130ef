"""CPU-seconds of a process tree (runtime/proc_tree.py), on real processes: a child reaped by
its parent is carried by the parent's figure (counted once), a tree that dies keeps its last
sample."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import time

from scrapeq.runtime.proc_tree import Proc, TreeCpu, read_tree

#: /proc's resolution: 4 figures (utime, stime, cutime, cstime), each in whole clock ticks.
TICKS = 4 / os.sysconf("SC_CLK_TCK")

_PARENT = """
import resource, subprocess, sys, time
burn = "import time\\nend = time.process_time() + 0.3\\nwhile time.process_time() < end: pass\\n"
child = subprocess.Popen([sys.executable, "-c", burn])
print(child.pid, flush=True)
sys.stdin.readline()
child.wait()
used = resource.getrusage(resource.RUSAGE_CHILDREN)
print(used.ru_utime + used.ru_stime, flush=True)
sys.stdin.readline()
"""


def _send(proc: subprocess.Popen[str], line: str) -> None:
    assert proc.stdin is not None
    proc.stdin.write(line)
    proc.stdin.flush()


def test_a_reaped_child_is_counted_once_and_a_killed_tree_keeps_its_last_sample() -> None:
    with subprocess.Popen(
        [sys.executable, "-c", _PARENT], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as parent:
        _reaped_then_killed(parent)


def _reaped_then_killed(parent: subprocess.Popen[str]) -> None:
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        cpu = TreeCpu()
        deadline = time.monotonic() + 30
        while True:  # a sample with the child in the tree, halfway through its work
            sample = read_tree(parent.pid)
            mine = [p for p in sample.values() if p.pid == child]
            if mine and mine[0].cpu >= 0.1:
                break
            assert time.monotonic() < deadline
            time.sleep(0.02)
        cpu.update(sample)
        assert cpu.total >= 0.1
        _send(parent, "\n")
        reaped = float(parent.stdout.readline())  # the child's whole time, by the kernel
        assert reaped >= 0.3
        sample = read_tree(parent.pid)
        assert [p.pid for p in sample.values()] == [parent.pid]
        cpu.update(sample)
        # the child's time is in its parent's cutime now: counted there, once
        (now,) = sample.values()
        assert now.cpu >= reaped - TICKS  # /proc's figures are whole clock ticks
        assert cpu.total == now.cpu
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        cpu.update(read_tree(parent.pid))  # gone: banked at its last sample
        assert cpu.total == now.cpu == cpu.finish()
        assert cpu.finish() == now.cpu  # idempotent
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()


def test_a_reused_pid_is_another_process() -> None:
    """Keys are (pid, start time): the figure of a process never moves to another."""
    sample = read_tree(os.getpid())
    (mine,) = [key for key, p in sample.items() if p.pid == os.getpid()]
    assert mine[1] > 0
    own = resource.getrusage(resource.RUSAGE_SELF)
    assert sample[mine].cpu >= own.ru_utime + own.ru_stime - TICKS


def _sample(*procs: tuple[int, int, float]) -> dict[tuple[int, int], Proc]:
    return {(pid, 1): Proc(pid, ppid, cpu, 0) for pid, ppid, cpu in procs}


def test_a_child_gone_before_its_parent_shows_its_time_keeps_the_total() -> None:
    """A renderer gone from the tree whose parent's figure does not have its time (the
    parent died as a zombie, its children went to init; or it was sampled before its wait):
    the total stays (it fell from 3.29 to 2.75 s in a loaded run, a counter going back), and
    is not counted twice once the parent's figure has it."""
    cpu = TreeCpu()
    cpu.update(_sample((10, 1, 1.0), (11, 10, 2.0), (12, 11, 0.5)))  # browser, zygote, renderer
    assert cpu.total == 3.5
    cpu.update(_sample((10, 1, 1.0), (11, 10, 2.0)))  # the renderer left, the zygote as before
    assert cpu.total == 3.5
    cpu.update(_sample((10, 1, 1.0)))  # the zygote left too, nobody's figure has either
    assert cpu.total == 3.5
    cpu.update(_sample((10, 1, 3.6)))  # the browser reaped them: its figure has it all now
    assert cpu.total == 3.6
    assert cpu.finish() == 3.6
