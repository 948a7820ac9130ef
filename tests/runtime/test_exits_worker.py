"""Exits as failure domains (issue 23) end to end: the worker through real tinyproxy exits
(tests/support/proxy_proc.py) in front of sites that ban by source address
(tests/support/proxy_fleet.py).

A dead exit costs a few requests and no site's breaker; a tier that every site of a kind
refuses sends just those sites up a tier; a proxy asking for credentials is the exit's
failure; a block page is a ban; the pool's state is visible and its passwords never are.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Callable
from typing import Any

import pytest

from scrapeq import AsyncQueue
from scrapeq.runtime.reporter import Reporter
from support.proxy_fleet import BLOCK_MARKER, DomainSpec, Fleet
from support.proxy_proc import TinyproxySet
from support.workers import run_until_done


def queue(
    make_async_queue: Callable[..., AsyncQueue], proxy: tuple[str, ...], **extra: Any
) -> AsyncQueue:
    return make_async_queue(
        proxy=proxy, allow_private=True, backoff_base=0.05, backoff_cap=0.2,
        request_timeout=2.0, domain_concurrency=2, **extra,
    )  # fmt: skip


async def test_a_dead_exit_costs_three_requests_and_no_breaker(
    tinyproxies: TinyproxySet, make_async_queue: Callable[..., AsyncQueue]
) -> None:
    live, dead = tinyproxies("127.0.0.2"), tinyproxies("127.0.0.3")
    dead.kill()  # its port refuses connections now
    specs = [DomainSpec(f"d{i}") for i in range(6)]
    with Fleet(specs) as fleet:
        q = queue(make_async_queue, (f"{live.url} tier=dc", f"{dead.url} tier=dc"))
        urls = [fleet.url(d.name, f"/p/{i}") for d in specs for i in range(5)]
        await q.enqueue_many(urls)
        counts = await run_until_done(q, len(urls))
        stats = await q.stats()
        exits = {e["name"]: e for e in await q.exits_info()}
    assert counts["done"] == len(urls) and counts["dead"] == 0, counts
    assert stats.get("trips", 0) == 0, "no site is charged for a dead proxy"
    assert exits[dead.url]["state"] == "open"
    # three failures in a row rest it; jobs claimed through it before the third settled
    # fail too: at most the claims in flight beside them
    assert 3 <= exits[dead.url]["failures"] <= 3 + 16, exits[dead.url]
    assert exits[live.url]["ok"] == len(urls)


async def test_sites_refusing_a_tier_move_up_alone(
    tinyproxies: TinyproxySet, make_async_queue: Callable[..., AsyncQueue]
) -> None:
    dc = [tinyproxies(f"127.0.0.{n}") for n in (2, 3)]
    res = tinyproxies("127.0.0.6")
    dc_ips = frozenset(p.exit_ip for p in dc)
    specs = [DomainSpec("strict", banned=dc_ips), DomainSpec("open1"), DomainSpec("open2")]
    with Fleet(specs) as fleet:
        pool = (*(f"{p.url} tier=datacenter" for p in dc), f"{res.url} tier=residential")
        q = queue(make_async_queue, pool)
        urls = [fleet.url(d.name, f"/p/{i}") for d in specs for i in range(8)]
        await q.enqueue_many(urls)
        counts = await run_until_done(q, len(urls))
        stats = await q.stats()
        hits = fleet.snapshot()
        tiers = {d["domain"]: d.get("tier") for d in await q.domains_info()}
    assert counts["done"] == len(urls), counts
    assert stats.get("trips", 0) == 0
    strict = "strict"
    through_res = [h for h in hits if h.source == res.exit_ip]
    assert {h.domain for h in through_res} == {strict}, "only the strict site pays for residential"
    assert len(through_res) == 8, "one residential request per page of the strict site"
    assert (
        sum(1 for h in hits if h.domain == strict and h.banned) <= 2 + 2
    )  # each dc exit once (+ in flight)
    assert tiers[fleet.domain("strict")] == 1 and tiers[fleet.domain("open1")] == 0


async def test_a_block_page_is_a_ban_by_its_marker(
    tinyproxies: TinyproxySet, make_async_queue: Callable[..., AsyncQueue]
) -> None:
    a, b = tinyproxies("127.0.0.2"), tinyproxies("127.0.0.3")
    specs = [DomainSpec("blocky", banned=frozenset({b.exit_ip}), ban_status=200)]
    with Fleet(specs) as fleet:
        q = queue(make_async_queue, (a.url, b.url), ban_markers=(BLOCK_MARKER,))
        urls = [fleet.url("blocky", f"/p/{i}") for i in range(10)]
        await q.enqueue_many(urls)
        counts = await run_until_done(q, len(urls))
        exits = {e["name"]: e for e in await q.exits_info()}
        served = fleet.served()
    assert counts["done"] == 10 and served["blocky"] == 10
    assert exits[b.url]["bans"] >= 1 and exits[b.url]["ok"] == 0


async def test_a_proxy_asking_for_credentials_is_the_exits_failure(
    tinyproxies: TinyproxySet, make_async_queue: Callable[..., AsyncQueue]
) -> None:
    good = tinyproxies("127.0.0.2")
    locked = tinyproxies("127.0.0.3", auth=("bob", "hunter2"))
    specs = [DomainSpec(f"d{i}") for i in range(4)]
    with Fleet(specs) as fleet:
        q = queue(make_async_queue, (good.url, locked.bare_url))  # no credentials: 407
        urls = [fleet.url(d.name, f"/p/{i}") for d in specs for i in range(4)]
        await q.enqueue_many(urls)
        counts = await run_until_done(q, len(urls))
        stats = await q.stats()
        exits = {e["name"]: e for e in await q.exits_info()}
    assert counts["done"] == len(urls) and stats.get("trips", 0) == 0
    assert exits[locked.bare_url]["state"] == "open" and exits[locked.bare_url]["failures"] >= 3
    assert "hunter2" not in repr(exits)


async def test_a_proxy_refusing_wrong_credentials_with_401_is_the_exits_failure(
    tinyproxies: TinyproxySet, make_async_queue: Callable[..., AsyncQueue]
) -> None:
    """Issue 38 item 9: tinyproxy 1.11 answers wrong credentials with its own 401 (and
    ``WWW-Authenticate``), where squid answers 407: that 401 is the exit's failure, not the
    site's answer. Every job ends done through the good exit; the bad exit rests."""
    good = tinyproxies("127.0.0.2")
    locked = tinyproxies("127.0.0.3", auth=("bob", "hunter2"))
    wrong = f"http://bob:wrong-pass@{locked.host}:{locked.port}"
    specs = [DomainSpec(f"d{i}") for i in range(5)]
    with Fleet(specs) as fleet:
        q = queue(make_async_queue, (good.url, wrong))
        urls = [fleet.url(d.name, f"/p/{i}") for d in specs for i in range(8)]
        await q.enqueue_many(urls)
        counts = await run_until_done(q, len(urls))
        stats = await q.stats()
        exits = {e["name"]: e for e in await q.exits_info()}
    bad = next(e for name, e in exits.items() if name != good.url)
    assert counts["done"] == len(urls) and counts["dead"] == 0, counts
    assert stats.get("dead:http_401", 0) == 0 and stats.get("trips", 0) == 0, stats
    assert bad["state"] == "open" and bad["failures"] >= 3, bad
    assert exits[good.url]["ok"] == len(urls)
    assert "wrong-pass" not in repr(exits)


async def test_a_sites_own_401_through_a_proxy_with_credentials_stays_the_sites(
    tinyproxies: TinyproxySet, make_async_queue: Callable[..., AsyncQueue]
) -> None:
    """The other side of item 9: a proxy that accepts our credentials passes a site's 401
    on; that is the site's answer (a permanent failure of the page), not the exit's."""
    exit_ = tinyproxies("127.0.0.2", auth=("bob", "hunter2"))
    specs = [DomainSpec("login", banned=frozenset({exit_.exit_ip}), ban_status=401)]
    with Fleet(specs) as fleet:
        q = queue(make_async_queue, (exit_.url,))
        urls = [fleet.url("login", f"/p/{i}") for i in range(4)]
        await q.enqueue_many(urls)
        counts = await run_until_done(q, len(urls))
        stats = await q.stats()
        (info,) = await q.exits_info()
    assert counts["dead"] == len(urls) and stats.get("dead:http_401") == len(urls), stats
    assert info["state"] == "closed" and info["failures"] == 0, info


@pytest.mark.parametrize("status", [403, 429])
async def test_with_no_pool_a_403_is_still_the_sites_answer(
    make_async_queue: Callable[..., AsyncQueue], status: int
) -> None:
    """Without proxies nothing changes: a 403 is a page failure, a 429 a throttle."""
    specs = [DomainSpec("d", banned=frozenset({"127.0.0.1"}), ban_status=status)]
    with Fleet(specs) as fleet:
        q = queue(make_async_queue, ())
        await q.enqueue(fleet.url("d", "/x"))
        (job,) = (await q.claim(1)).jobs
        assert job.exit is None


async def test_the_progress_line_says_when_every_exit_is_down(
    make_async_queue: Callable[..., AsyncQueue], caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 38 item 16: the exits-down alarm was in ``status`` and the dashboard, while the
    worker's log said only ``done/s=0.0``."""
    pool = ("http://127.0.0.1:9001", "http://127.0.0.1:9002")
    q = queue(make_async_queue, pool, proxy_cooldown=60)
    await q.enqueue_many([f"https://d{i}.example/" for i in range(8)])
    while claimed := (await q.claim(1)).jobs:
        (job,) = claimed
        down = q.releasing(job, delay=0, kind="released:proxy_error")
        await q.settle_many([dataclasses.replace(down, exit_result="down")])
    assert {e["state"] for e in await q.exits_info()} == {"open"}
    reporter = Reporter(q, log_every=0.01)
    with caplog.at_level(logging.INFO, logger="scrapeq.worker.progress"):
        for _ in range(2):  # a rate needs two samples
            reporter._next_progress = 0.0
            await reporter._progress()
    (line,) = [r.getMessage() for r in caplog.records if r.name == "scrapeq.worker.progress"]
    assert re.search(r" exits_down=2/2 \(all proxies resting: next back in \d+ s\)$", line), line


async def test_every_exit_down_for_long_dead_letters_no_job(
    tinyproxies: TinyproxySet, make_async_queue: Callable[..., AsyncQueue]
) -> None:
    """Issue 38 item 8 through a worker: two dead exits with short rests are probed again
    and again (each probe carries a job); no probe spends a release of its job, so with
    max_releases 2 and some twenty probes in 4 s no job goes dead."""
    dead = [tinyproxies(f"127.0.0.{n}") for n in (2, 3)]
    for p in dead:
        p.kill()
    specs = [DomainSpec(f"d{i}") for i in range(5)]
    with Fleet(specs) as fleet:
        q = queue(make_async_queue, tuple(p.url for p in dead), proxy_cooldown=0.2,
                  proxy_cooldown_max=0.2, max_releases=2)  # fmt: skip
        urls = [fleet.url(d.name, f"/p/{i}") for d in specs for i in range(4)]
        await q.enqueue_many(urls)
        counts = await run_until_done(q, len(urls), timeout=4.0)
        exits = await q.exits_info()
    probes = sum(e["failures"] for e in exits) - 6  # after the three failures of each
    assert probes >= 6, exits
    assert counts["dead"] == 0 and counts["done"] == 0, counts
