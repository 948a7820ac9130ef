"""The demo end to end, shortened: the fleet, scrapeq, the naive loop, the report."""

from __future__ import annotations

import io
import json

import pytest
import redis
from rich.console import Console

from scrapeq.demo.scenario import DemoReport, render_report, run_demo
from scrapeq.engine.config.settings import Settings

# One process runs every test of the module, so the shared run happens once (the module
# fixture is per process: split over two, its 14 s ran twice).
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("demo")]

HANG, GONE, ERROR = "shop-43.example.com", "shop-42.example.com", "shop-41.example.com"


@pytest.fixture(scope="module")
def demo_run(redis_server: str) -> tuple[DemoReport, str]:
    """One shortened run (10 s scrapeq, 4 s naive, a tenth of the jobs) shared by the tests.

    The run uses a fresh queue name, so it shares the session's server directly (the
    per-test ``redis_url`` fixture would flush it between the tests reading the report).
    """
    out = io.StringIO()
    console = Console(file=out, width=200)
    report = run_demo(
        Settings(),
        redis_url=redis_server,
        duration=10,
        naive_duration=4,
        scale=0.1,
        console=console,
    )
    return report, out.getvalue()


def test_fetch_figures_are_the_fleets_and_match_the_worker(
    demo_run: tuple[DemoReport, str],
) -> None:
    report, _ = demo_run
    for site in report.scrapeq.faulty:
        # The fleet counted exactly the requests the worker says it started.
        assert site.fetches == site.client_fetches, site
    assert report.scrapeq.faulty_fetches == sum(s.fetches for s in report.scrapeq.faulty)


def test_the_hanging_site_costs_a_handful_of_fetches(demo_run: tuple[DemoReport, str]) -> None:
    report, _ = demo_run
    hang = report.scrapeq.site(HANG)
    s = report.settings
    probes = sum(1 for t in report.transitions if t.site == HANG and t.kind == "half_open")
    # Trip after breaker_failures, plus the other in-flight slot, plus one probe a half-open.
    assert hang.fetches <= s["breaker_failures"] + s["domain_concurrency"] - 1 + probes
    assert hang.fetches < hang.jobs / 10
    assert hang.statuses == {}  # it never answered
    assert hang.done == 0 and hang.failed == 0 and hang.pending == hang.jobs


def test_healthy_shops_get_their_work_done(demo_run: tuple[DemoReport, str]) -> None:
    report, _ = demo_run
    phase = report.scrapeq
    assert phase.healthy_total > 0
    assert phase.healthy_done >= 0.9 * phase.healthy_total
    assert phase.healthy_fetches >= phase.healthy_done
    for fresh in phase.freshness:
        assert fresh.done > 0 and fresh.p50 is not None
        assert fresh.p50 <= (fresh.p95 or 0) <= (fresh.p99 or 0)
    assert phase.peak_faulty_inflight <= len(phase.faulty) * report.settings["domain_concurrency"]


def test_delisted_pages_die_at_once_fetched_once(demo_run: tuple[DemoReport, str]) -> None:
    report, _ = demo_run
    gone = report.scrapeq.site(GONE)
    assert gone.jobs > 0
    assert report.dead_letters[GONE] == {"http_404": gone.jobs}
    assert gone.fetches == gone.jobs == gone.failed
    assert gone.statuses == {"404": gone.jobs}
    assert gone.breaker == "closed"  # a missing page says nothing about the site


def test_the_503_site_trips_its_breaker(demo_run: tuple[DemoReport, str]) -> None:
    report, _ = demo_run
    assert any(t.site == ERROR and t.kind == "trip" for t in report.transitions)
    error = report.scrapeq.site(ERROR)
    assert error.trips is not None and error.trips >= 1
    assert error.fetches < error.jobs


def test_the_naive_loop_spends_more_on_faulty_sites(demo_run: tuple[DemoReport, str]) -> None:
    report, _ = demo_run
    naive = report.naive
    assert naive is not None and not report.interrupted
    assert naive.faulty_fetches > report.scrapeq.faulty_fetches
    assert naive.site(HANG).fetches > report.scrapeq.site(HANG).fetches
    # raise_for_status retries a 404: more than one fetch per delisted page it got to.
    gone = naive.site(GONE)
    assert gone.fetches > gone.failed + gone.done


def test_report_is_json_and_renders(demo_run: tuple[DemoReport, str]) -> None:
    report, progress = demo_run
    data = json.loads(json.dumps(report.as_dict()))
    assert data["queue"] == report.queue
    assert data["scrapeq"]["healthy_total"] == report.scrapeq.healthy_total
    assert "[scrapeq" in progress and "[naive" in progress  # line mode: not a terminal
    out = io.StringIO()
    render_report(report, Console(file=out, width=200))
    text = out.getvalue()
    assert "side by side" in text and HANG in text and "http_404" in text


def test_the_run_leaves_no_keys(demo_run: tuple[DemoReport, str], redis_server: str) -> None:
    report, _ = demo_run
    client = redis.Redis.from_url(redis_server)
    try:
        assert not list(client.scan_iter(match=f"sq:{{{report.queue}}}:*"))
    finally:
        client.close()
