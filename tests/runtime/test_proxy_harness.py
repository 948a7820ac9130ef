"""The real parts of the proxy tests (issue 23): tinyproxy exits bound to their own loopback
address (tests/support/proxy_proc.py) in front of a fleet of sites that ban by source address
(tests/support/proxy_fleet.py); then today's worker with a pool of two exits, one of them banned."""

from __future__ import annotations

import asyncio
import http.client
import time
import urllib.error
import urllib.request
from collections.abc import Callable

import pytest

from scrapeq import AsyncQueue
from scrapeq.runtime.worker import Worker
from support.proxy_fleet import BLOCK_MARKER, DomainSpec, Fleet
from support.proxy_proc import Tinyproxy, TinyproxySet


def fetch(url: str, proxy: str | None) -> tuple[int, str]:
    """GET ``url`` through ``proxy`` (none: direct); answers (status, body)."""
    handler = urllib.request.ProxyHandler({"http": proxy} if proxy else {})
    opener = urllib.request.build_opener(handler)
    try:
        with opener.open(url, timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, exc.read().decode(errors="replace")


def test_the_site_sees_the_exit_address_of_each_proxy(tinyproxies: TinyproxySet) -> None:
    a, b = tinyproxies("127.0.0.2"), tinyproxies("127.0.0.3")
    with Fleet([DomainSpec("d00")]) as fleet:
        assert fetch(fleet.url("d00", "/a"), a.url)[0] == 200
        assert fetch(fleet.url("d00", "/b"), b.url)[0] == 200
        assert fetch(fleet.url("d00", "/c"), None)[0] == 200
        hits = fleet.snapshot()
    assert [(h.source, h.path) for h in hits] == [
        ("127.0.0.2", "/a"),
        ("127.0.0.3", "/b"),
        ("127.0.0.1", "/c"),
    ]


def test_a_domain_bans_one_exit_and_a_tier_of_them(tinyproxies: TinyproxySet) -> None:
    exits = [tinyproxies(f"127.0.0.{n}") for n in (2, 3, 4)]
    datacenter = frozenset({"127.0.0.2", "127.0.0.3"})
    specs = [
        DomainSpec("one", banned=frozenset({"127.0.0.3"})),
        DomainSpec("tier", banned=datacenter, ban_status=429),
        DomainSpec("page", banned=datacenter, ban_status=200),
        DomainSpec("open"),
    ]
    with Fleet(specs) as fleet:
        got = {
            (name, p.exit_ip): fetch(fleet.url(name, "/x"), p.url)
            for name in ("one", "tier", "page", "open")
            for p in exits
        }
        hits = fleet.snapshot()
        by_source, served = fleet.by_source(), fleet.served()
    status = {key: answer[0] for key, answer in got.items()}
    assert [status["one", ip] for ip in ("127.0.0.2", "127.0.0.3", "127.0.0.4")] == [200, 403, 200]
    assert [status["tier", ip] for ip in ("127.0.0.2", "127.0.0.3", "127.0.0.4")] == [429, 429, 200]
    assert all(status["page", p.exit_ip] == 200 for p in exits), "a block page is a 200"
    assert BLOCK_MARKER in got["page", "127.0.0.2"][1]
    assert BLOCK_MARKER not in got["page", "127.0.0.4"][1]
    assert by_source == {"127.0.0.2": 4, "127.0.0.3": 4, "127.0.0.4": 4}
    assert sum(h.banned for h in hits) == 5
    assert served == {"one": 1, "tier": 1, "page": 1, "open": 1}


def test_a_proxy_with_credentials_refuses_a_request_without_them(tinyproxies: TinyproxySet) -> None:
    guarded = tinyproxies("127.0.0.2", auth=("scraper", "s3cret"))
    assert guarded.url == f"http://scraper:s3cret@127.0.0.2:{guarded.port}"
    with Fleet([DomainSpec("d00")]) as fleet:
        assert fetch(fleet.url("d00"), guarded.bare_url)[0] == 407
        # tinyproxy 1.11 answers wrong credentials with 401 (and WWW-Authenticate), not 407
        wrong = guarded.bare_url.replace("http://", "http://scraper:nope@")
        assert fetch(fleet.url("d00"), wrong)[0] == 401
        assert fetch(fleet.url("d00"), guarded.url)[0] == 200
        hits = fleet.snapshot()
    assert [h.source for h in hits] == ["127.0.0.2"], "a refused request never reached the site"


def test_connect_tunnels_to_any_port_from_the_exit_address(tinyproxies: TinyproxySet) -> None:
    """No ``ConnectPort`` restriction: a tunnel to the fleet's (high, plain) port works, and
    what goes through it leaves from the exit address (the path HTTPS takes)."""
    proxy = tinyproxies("127.0.0.5")
    with Fleet([DomainSpec("d00")]) as fleet:
        conn = http.client.HTTPConnection(proxy.host, proxy.port, timeout=5)
        try:
            conn.set_tunnel("127.0.0.1", fleet.ports["d00"])
            conn.request("GET", "/tunnelled")
            response = conn.getresponse()
            assert response.status == 200 and b"d00" in response.read()
        finally:
            conn.close()
        (hit,) = fleet.snapshot()
    assert (hit.source, hit.path) == ("127.0.0.5", "/tunnelled")


def test_a_killed_proxy_refuses_connections(tinyproxies: TinyproxySet) -> None:
    proxy = tinyproxies("127.0.0.2")
    with Fleet([DomainSpec("d00")]) as fleet:
        assert fetch(fleet.url("d00"), proxy.url)[0] == 200
        proxy.kill()
        assert not proxy.running
        with pytest.raises(urllib.error.URLError) as caught:
            fetch(fleet.url("d00"), proxy.url)
        assert isinstance(caught.value.reason, ConnectionRefusedError)
        assert len(fleet.snapshot()) == 1


def test_an_exit_outside_loopback_is_refused() -> None:
    with pytest.raises(ValueError, match=r"127\.0\.0\.0/8"):
        Tinyproxy("10.0.0.2")


# --- today's worker with a pool of two exits, one of them banned -----------------------------


async def test_one_banned_exit_trips_no_breaker_and_every_job_is_done(
    tinyproxies: TinyproxySet, make_async_queue: Callable[..., AsyncQueue]
) -> None:
    """The issue's first finding, with real proxies: ``proxy = "A,B"``, two sites that answer
    403 to B's address alone. A serves both, so neither site's breaker should trip and every
    job should end done (before the exits engine, B's bans were charged to the sites and their
    breakers tripped: 2 trips, 12 of 40 done in 8 s)."""
    a, b = tinyproxies("127.0.0.2"), tinyproxies("127.0.0.3")
    banning = [DomainSpec(f"s{i}", banned=frozenset({b.exit_ip})) for i in range(2)]
    with Fleet(banning) as fleet:
        q = make_async_queue(
            proxy=(a.url, b.url),
            allow_private=True,
            backoff_base=0.05,
            backoff_cap=0.2,
            request_timeout=2.0,
            domain_concurrency=2,
        )
        urls = [fleet.url(d.name, f"/p/{i}") for d in banning for i in range(20)]
        await q.enqueue_many(urls)
        worker = Worker(q, concurrency=8)
        task = asyncio.create_task(worker.run_async())
        deadline = time.monotonic() + 8
        try:
            while time.monotonic() < deadline and not task.done():
                if (await q.status())["counts"]["done"] == len(urls):
                    break
                await asyncio.sleep(0.05)
        finally:
            worker.stop()
            await asyncio.wait_for(task, 30)
        counts, stats = (await q.status())["counts"], await q.stats()
        sources = fleet.by_source()
    assert sources[a.exit_ip] > 0 and sources[b.exit_ip] > 0, "both exits were used"
    assert stats.get("trips", 0) == 0, f"breakers tripped on sites exit A serves: {stats}"
    assert counts["done"] == len(urls), counts
