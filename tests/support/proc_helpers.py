"""What tests that run a process under asyncio share: a bounded wait that leaves nothing
running behind it."""

from __future__ import annotations

import asyncio
import os
import signal


async def reap(proc: asyncio.subprocess.Process, *, group: bool = False) -> None:
    """Kill ``proc`` if it is still running (with ``group``, its whole session: it was
    started with ``start_new_session=True``), and wait for it."""
    if proc.returncode is not None:
        return
    if group:
        os.killpg(proc.pid, signal.SIGKILL)
    else:
        proc.kill()
    await proc.wait()


async def communicate(
    proc: asyncio.subprocess.Process, timeout: float, *, group: bool = False
) -> tuple[bytes, bytes]:
    """``proc.communicate()`` within ``timeout`` seconds; a process still running after it
    (the wait timed out or failed) is killed by :func:`reap`."""
    try:
        return await asyncio.wait_for(proc.communicate(), timeout)
    finally:
        await reap(proc, group=group)
