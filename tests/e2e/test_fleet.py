"""The demo fleet's site modes that only the soak uses (the demo's own are in test_demo)."""

from __future__ import annotations

import contextlib
import time
import urllib.error
import urllib.request
from collections import Counter

from scrapeq.demo.fleet import Fleet, Mode, SiteSpec


def test_a_flaky_site_answers_500_to_a_share_of_requests() -> None:
    spec = SiteSpec("flaky.example.com", Mode.FLAKY, latency_ms=1, fail_share=0.5)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    seen: Counter[int] = Counter()
    with Fleet([spec], seed=7) as fleet:
        for i in range(60):
            url = f"http://127.0.0.1:{fleet.ports[spec.name]}/p/{i}"
            try:
                with opener.open(url, timeout=10) as resp:
                    seen[resp.status] += 1
            except urllib.error.HTTPError as exc:
                seen[exc.code] += 1
        counts = fleet.stats()[spec.name]
    assert set(seen) == {200, 500} and 10 <= seen[500] <= 50, seen
    assert counts.requests == 60
    assert counts.statuses == {str(code): n for code, n in seen.items()}


def _status(opener: urllib.request.OpenerDirector, url: str) -> int:
    try:
        with opener.open(url, timeout=10) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        assert exc.headers.get("Retry-After") is None, "a limiter as most run: no Retry-After"
        return exc.code


def test_a_limit_site_refuses_past_its_rate_with_503_and_no_retry_after() -> None:
    spec = SiteSpec("limit.example.com", Mode.LIMIT, latency_ms=1, rate=5)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with Fleet([spec], seed=7) as fleet:
        url = f"http://127.0.0.1:{fleet.ports[spec.name]}/p"
        seen = Counter(_status(opener, url) for _ in range(20))
    assert seen[200] >= 5 and seen[503] >= 5, seen  # a burst of 5, then about 5 a second


def test_a_capacity_site_queues_past_k_and_refuses_past_2k() -> None:
    import concurrent.futures

    spec = SiteSpec("cap.example.com", Mode.CAPACITY, latency_ms=200, capacity=2)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with Fleet([spec], seed=7) as fleet:
        url = f"http://127.0.0.1:{fleet.ports[spec.name]}/p"
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            seen = Counter(pool.map(lambda _: _status(opener, url), range(8)))
    assert seen[200] >= 4 and seen[503] >= 2, seen  # 2 served, 2 queued, the rest refused


def test_paths_records_each_request_and_how_it_ended_until_reset() -> None:
    specs = [
        SiteSpec("shop.example.com", latency_ms=1),
        SiteSpec("gone.example.com", Mode.GONE, latency_ms=1),
        SiteSpec("hang.example.com", Mode.HANG),
        SiteSpec("drip.example.com", Mode.DRIP),
    ]
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with Fleet(specs, track_paths=True) as fleet:
        base = {s.name: f"http://127.0.0.1:{fleet.ports[s.name]}" for s in specs}
        for path in ("/p/1", "/p/1", "/p/2"):
            with opener.open(base["shop.example.com"] + path, timeout=10) as resp:
                resp.read()
        assert _status(opener, base["gone.example.com"] + "/p/3") == 404
        with contextlib.suppress(OSError):  # timed out
            opener.open(base["hang.example.com"] + "/p/4", timeout=0.5)
        with opener.open(base["drip.example.com"] + "/p/5", timeout=10) as resp:
            resp.read(2)  # then the client hangs up, the body unfinished
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # the sites notice the closed connections
            paths = fleet.paths()
            hang, drip = paths["hang.example.com"], paths["drip.example.com"]
            if hang.get("/p/4", (0, []))[1] and drip.get("/p/5", (0, []))[1]:
                break
            time.sleep(0.2)
        assert paths["shop.example.com"] == {"/p/1": (2, ["200", "200"]), "/p/2": (1, ["200"])}
        assert paths["gone.example.com"] == {"/p/3": (1, ["404"])}
        assert paths["hang.example.com"] == {"/p/4": (1, ["gave_up"])}
        assert paths["drip.example.com"] == {"/p/5": (1, ["gave_up"])}
        fleet.reset_paths()
        assert fleet.paths() == {s.name: {} for s in specs}
        with opener.open(base["shop.example.com"] + "/p/1", timeout=10) as resp:
            resp.read()
        assert fleet.paths()["shop.example.com"] == {"/p/1": (1, ["200"])}
    # Off by default (a long run's record would grow with every URL).
    with Fleet(specs[:1]) as fleet:
        with opener.open(f"http://127.0.0.1:{fleet.ports['shop.example.com']}/p/1") as resp:
            resp.read()
        assert fleet.paths() == {"shop.example.com": {}}
