"""Features that are off cost nothing in the worker either (issue 40): with no proxy, none of
the exit's code runs on an attempt (the ban rules, the proxy's credential check, the session's
jar); with ``revisit = off``, none of the revisit's (what the answer says of the content); and
a plain job's results line, written before its settle, writes nothing to the owed-lines
ledger (it is for the lines that wait for the settle's answer: runtime/owed.py).

Counted, not timed: each of those functions is wrapped to count its calls while a real worker
fetches pages of a local site (the ledger: its writes read from ``MONITOR``); the control runs
the same jobs with the feature on.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from scrapeq import AsyncQueue
from scrapeq.runtime import attempt
from scrapeq.runtime.bans import BanRules
from scrapeq.runtime.proxy_auth import ProxyAuthCheck
from scrapeq.runtime.sinks import JsonlSink
from scrapeq.runtime.worker import Worker
from support.monitor import Monitor
from support.sites import ok, proxy, sites
from support.waiting import until
from support.workers import run_until_done

PAGES = 6


def counting(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Count the calls of the exits' and the revisits' code on an attempt."""
    calls: Counter[str] = Counter()

    def wrap(owner: Any, name: str, label: str) -> None:
        original = getattr(owner, name)

        def counted(*args: Any, **kwargs: Any) -> Any:
            calls[label] += 1
            return original(*args, **kwargs)

        monkeypatch.setattr(owner, name, counted)

    wrap(BanRules, "why", "exit")  # a ban of the exit by the site
    wrap(ProxyAuthCheck, "check", "exit")  # the proxy refusing our credentials
    wrap(attempt, "absorb", "exit")  # the session's cookie jar
    wrap(attempt, "observed", "revisit")  # what the answer says of the content
    return calls


@pytest.mark.parametrize("on", [False, True])
async def test_with_no_proxy_no_exit_code_runs(
    make_async_queue: Callable[..., AsyncQueue], monkeypatch: pytest.MonkeyPatch, on: bool
) -> None:
    calls = counting(monkeypatch)
    async with sites(ok) as (site,), proxy() as through:
        pool = (through.url,) if on else ()
        q = make_async_queue(allow_private=True, request_timeout=5.0, proxy=pool,
                             session="sticky" if on else "none")  # fmt: skip
        await q.enqueue_many([site.url(f"/p/{i}") for i in range(PAGES)])
        counts = await run_until_done(q, PAGES)
    assert counts["done"] == PAGES, counts
    assert calls["revisit"] == 0
    if on:  # the control: each attempt through the exit runs it
        assert calls["exit"] >= 2 * PAGES, calls
    else:
        assert calls["exit"] == 0, calls


@pytest.mark.parametrize("revisit", ["off", "on"])
async def test_with_revisit_off_no_revisit_code_runs(
    make_async_queue: Callable[..., AsyncQueue], monkeypatch: pytest.MonkeyPatch, revisit: str
) -> None:
    calls = counting(monkeypatch)
    async with sites(ok) as (site,):
        q = make_async_queue(allow_private=True, request_timeout=5.0, revisit=revisit)
        await q.enqueue_many([site.url(f"/p/{i}") for i in range(PAGES)])
        counts = await run_until_done(q, PAGES)
    assert counts["done"] == PAGES, counts
    assert calls["exit"] == 0
    assert calls["revisit"] == (PAGES if revisit == "on" else 0), calls


#: Commands that change the owed-lines ledger (includes/owed.lua's writes).
LEDGER_WRITES = frozenset({"HSET", "HDEL", "ZADD", "ZREM", "DEL"})


@pytest.mark.backends("single")  # one server's MONITOR
@pytest.mark.parametrize("revisit", ["off", "on"])
async def test_a_line_written_before_its_settle_writes_nothing_to_the_ledger(
    make_async_queue: Callable[..., AsyncQueue], redis_url: str, tmp_path: Path, revisit: str
) -> None:
    async with sites(ok) as (site,):
        q = make_async_queue(allow_private=True, request_timeout=5.0, revisit=revisit)
        await q.enqueue_many([site.url(f"/p/{i}") for i in range(PAGES)])
        sink = JsonlSink(tmp_path / "results.jsonl")
        worker = Worker(q, concurrency=4, sink=sink, report=False)
        m = Monitor(redis_url)
        task = asyncio.create_task(worker.run_async())
        await until(lambda: worker.stats.done >= PAGES, 15.0, "every page done")
        worker.stop()
        await asyncio.wait_for(task, 30)
        commands = m.stop()
        await sink.close()
    ledger = (q.keys.owed, q.keys.owed_due)
    writes = [c for c in commands if c[0] in LEDGER_WRITES and len(c) > 1 and c[1] in ledger]
    assert len((tmp_path / "results.jsonl").read_text().splitlines()) == PAGES
    if revisit == "on":  # the control: a done page's line waits for its settle's answer
        assert len(writes) >= PAGES, writes
    else:
        assert writes == [], writes[:5]
