"""The demo fleet's site modes that only the soak uses (the demo's own are in test_demo)."""

from __future__ import annotations

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
