"""What one plain job costs the worker's event loop, counted (issue 40): figures the machine's
load does not move, beside ``bench/cost.py``'s CPU times, which it does.

Runs ``bench/cost.py``'s rows (the real ``Worker``, concurrency 200, over 100 loopback sites,
against a private redis-server) and the bare aiohttp loop over the same URLs, and counts per
100 jobs (per 100 requests for the bare loop):

* **loop turns**: iterations of the event loop (``BaseEventLoop._run_once``: one ``epoll``
  wait each, and the timers' heap);
* **callbacks**: handles run (a task step, a future's callback, a timer);
* **tasks**: tasks created, **thread hops**: ``asyncio.to_thread`` calls (a results sink's
  write);
* **claims**, **settles**: calls of the claim and settle scripts (``AsyncQueue._step``);
* with ``--calls``, **python calls**: function calls (Python and C) ``cProfile`` counts over one
  more run of each row, a run of its own (profiling slows it, which moves the loop's counts);
  **scrapeq calls**: those of scrapeq's own functions and the C functions they call directly,
  a count that moves with the code alone (the total moves with the loop's batching too).

Each count is a median over ``--rounds`` rounds (each round runs every row once).

Run: ``.venv/bin/python bench/loop_turns.py [--jobs N] [--rounds R] [--rows bare,plain,nosink]
[--calls]``.
"""

from __future__ import annotations

import argparse
import asyncio
import asyncio.base_events
import contextlib
import cProfile
import pstats
import statistics
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import scrapeq
from _redis import format_table, load_note
from cost import DOMAINS, _fill, _page, _work, redis_server, workload
from scrapeq.engine.facades.async_queue import AsyncQueue
from scrapeq.engine.server.launcher import find_redis_server
from worker_throughput import _bare, fleet

COUNTS: Counter[str] = Counter()
OURS = str(Path(scrapeq.__file__).parent)  # scrapeq's own code, for --calls
NAMES = ("loop turns", "callbacks", "tasks", "thread hops", "claims", "settles")


def _count() -> None:
    """Count loop turns, callbacks, tasks, thread hops and script calls from now on."""
    loop_cls: Any = asyncio.base_events.BaseEventLoop
    run_once, create_task, step = loop_cls._run_once, loop_cls.create_task, AsyncQueue._step

    def counted_run_once(self: Any) -> None:
        COUNTS["loop turns"] += 1
        COUNTS["callbacks"] += len(self._ready)
        run_once(self)

    def counted_create_task(self: Any, coro: Any, **options: Any) -> Any:
        COUNTS["tasks"] += 1
        if getattr(coro, "__qualname__", "") == "to_thread":
            COUNTS["thread hops"] += 1
        return create_task(self, coro, **options)

    async def counted_step(self: AsyncQueue, s: Any) -> Any:
        script = getattr(s, "script", None)
        if script in ("claim", "settle"):
            COUNTS[script + "s"] += 1
        return await step(self, s)

    loop_cls._run_once, loop_cls.create_task = counted_run_once, counted_create_task
    AsyncQueue._step = counted_step  # type: ignore[method-assign]


def _run_row(row: str, url: str, w: Any, folder: Path) -> None:
    if row == "bare":
        asyncio.run(_bare(w.urls, 200))
    else:
        asyncio.run(_work(url, w, folder))


def _calls(row: str, url: str, w: Any, folder: Path) -> tuple[int, int]:
    """Function calls cProfile counts over one run of ``row`` (Python and C functions): all
    of them, and those of scrapeq's own code (its functions, and C functions they called)."""
    profile = cProfile.Profile()
    profile.enable()
    try:
        _run_row(row, url, w, folder)
    finally:
        profile.disable()
    stats: Any = pstats.Stats(profile)
    ours = 0
    for (path, _, _), (_, calls, _, _, callers) in stats.stats.items():
        if OURS in path:
            ours += calls
        elif path == "~":  # a C function: counted for the scrapeq functions that called it
            ours += sum(c[1] for caller, c in callers.items() if OURS in caller[0])
    return sum(entry[1] for entry in stats.stats.values()), ours


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rows", default="bare,plain,nosink", help="of bare,plain,nosink,dead")
    parser.add_argument("--calls", action="store_true", help="count Python calls (cProfile)")
    args = parser.parse_args(argv)
    names = NAMES + (("python calls", "scrapeq calls") if args.calls else ())
    rows = [r for r in args.rows.split(",") if r]
    _count()
    runs: dict[str, list[Counter[str]]] = {row: [] for row in rows}
    with contextlib.ExitStack() as stack:
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="scrapeq-turns-")))
        ports = stack.enter_context(fleet(DOMAINS, _page)).ports
        server = stack.enter_context(redis_server(find_redis_server(), folder))
        print(f"{args.jobs:,} jobs a run over {DOMAINS} sites; {load_note()}")
        for _ in range(args.rounds):
            for row in rows:
                w = workload("plain" if row == "bare" else row, ports, args.jobs, None)
                if row != "bare":
                    asyncio.run(_fill(server.url, w))
                COUNTS.clear()
                _run_row(row, server.url, w, folder)
                counts = Counter(COUNTS)
                if args.calls:
                    if row != "bare":
                        asyncio.run(_fill(server.url, w))
                    counts["python calls"], counts["scrapeq calls"] = _calls(
                        row, server.url, w, folder
                    )
                runs[row].append(counts)
    table = [
        [row, *(statistics.median(r[n] for r in runs[row]) * 100 / args.jobs for n in names)]
        for row in rows
    ]
    print(format_table(["per 100 jobs", *names], table))
    return 0


if __name__ == "__main__":
    sys.exit(main())
