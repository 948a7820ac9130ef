"""Features that are off cost nothing in the worker either (issue 40): with no proxy, none of
the exit's code runs on an attempt (the ban rules, the proxy's credential check, the session's
jar); with ``revisit = off``, none of the revisit's (what the answer says of the content).

Counted, not timed: each of those functions is wrapped to count its calls while a real worker
fetches pages of a local site; the control runs the same jobs with the feature on.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from scrapeq import AsyncQueue
from scrapeq.runtime import attempt
from scrapeq.runtime.bans import BanRules
from scrapeq.runtime.proxy_auth import ProxyAuthCheck
from support.sites import ok, proxy, sites
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
