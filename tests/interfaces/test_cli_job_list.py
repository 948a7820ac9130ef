"""``scrapeq job list``: find a pending job's id by state and domain, with bounded reads
(issue 21, item 15)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from scrapeq import Queue, Settings
from scrapeq.engine.ops import listing
from support.cli_helpers import run, scrub_env

ONE, TWO, BUSY = "shop-1.example.com", "shop-2.example.com", "busy.example.com"


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    scrub_env(monkeypatch, tmp_path, columns=200)


@pytest.fixture
def queue(redis_url: str) -> Any:
    """shop-1: 3 ready (one critical), 2 delayed, 1 dead; shop-2: 2 delayed; busy: at its cap
    of 1 with 1 in flight and 2 ready."""
    q = Queue.from_url(redis_url, settings=Settings(domain_concurrency=1))
    q.enqueue_many([f"https://{ONE}/p/{i}" for i in range(5)])
    q.enqueue_many([f"https://{TWO}/p/{i}" for i in range(2)])
    for _ in range(2):  # the head of shop-1 and of shop-2, in turn
        for job in q.claim(10).jobs:
            assert q.retry(job, kind="http_503", delay=600) == "retried"
    (job,) = [j for j in q.claim(10).jobs if j.domain == ONE]
    assert q.fail(job, "http_404", "gone") == "dead"
    q.enqueue(f"https://{ONE}/urgent", lane="critical")
    q.enqueue_many([f"https://{BUSY}/p/{i}" for i in range(3)])
    held = q.claim(10).jobs
    for job in held:
        if job.domain != BUSY:
            q.release(job, delay=0, shutdown=True)
    yield q
    q.close()


def job_list(capsys: pytest.CaptureFixture[str], url: str, *argv: str) -> list[dict[str, Any]]:
    code, out, err = run(capsys, "--redis", url, "job", "list", *argv, "--json")
    assert code == 0, err
    rows: list[dict[str, Any]] = json.loads(out)
    return rows


def test_pending_jobs_by_default(
    queue: Queue, redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = job_list(capsys, redis_url)
    by_state: dict[str, list[str]] = {}
    for row in rows:
        by_state.setdefault(row["state"], []).append(row["domain"])
    assert sorted(by_state) == ["delayed", "inflight", "ready"]
    assert sorted(by_state["delayed"]) == [ONE, ONE, TWO, TWO]
    assert by_state["inflight"] == [BUSY]
    assert sorted(by_state["ready"]) == [BUSY, BUSY, ONE, ONE, ONE]  # busy: at its cap
    for row in rows:  # what job show says of each
        assert row["id"] and row["url"].startswith("https://") and row["lane"]
    (inflight,) = [r for r in rows if r["state"] == "inflight"]
    assert inflight["lease"]["deadline_at"].endswith("+00:00")


def test_one_state_of_one_domain_in_order(
    queue: Queue, redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    ready = job_list(capsys, redis_url, "--state", "ready", "--domain", ONE)
    assert ready[0]["url"] == f"https://{ONE}/urgent"  # most urgent first: the critical lane
    assert [r["state"] for r in ready] == ["ready"] * 3
    assert (
        len(job_list(capsys, redis_url, "--state", "ready", "--domain", ONE, "--limit", "2")) == 2
    )
    delayed = job_list(capsys, redis_url, "--state", "delayed", "--domain", TWO)
    assert [r["domain"] for r in delayed] == [TWO, TWO]
    assert all(r["eligible_at_ms"] > r["now_ms"] for r in delayed)
    (dead,) = job_list(capsys, redis_url, "--state", "dead")
    assert (dead["domain"], dead["dead_reason"]) == (ONE, "http_404")
    assert job_list(capsys, redis_url, "--state", "inflight", "--domain", ONE) == []
    for job in job_list(capsys, redis_url, "--state", "ready", "--domain", ONE):
        code, out, _ = run(capsys, "--redis", redis_url, "job", "show", job["id"], "--json")
        assert code == 0 and json.loads(out)["state"] == "ready"


def test_the_table_names_the_ids(
    queue: Queue, redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, "--redis", redis_url, "job", "list", "--domain", TWO)
    assert code == 0, err
    for row in job_list(capsys, redis_url, "--domain", TWO):
        assert row["id"] in out
    assert "delayed" in out and f"https://{TWO}/p/0" in out


@pytest.mark.parametrize(
    "argv",
    [
        ["--state", "done"],
        ["--state", "pending"],
        ["--domain", "https://shop-1.example.com/"],
        ["--limit", "0"],
        ["--limit", "many"],
    ],
)
def test_bad_input_is_one_line_exit_2(
    argv: list[str], redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, "--redis", redis_url, "job", "list", *argv)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_a_domain_filter_reads_a_bounded_prefix(
    redis_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(listing, "SCAN_LIMIT", 4)
    monkeypatch.setattr(listing, "_PAGE", 2)
    q = Queue.from_url(redis_url, settings=Settings(domain_concurrency=20))
    q.enqueue_many([f"https://{ONE}/p/{i}" for i in range(6)])
    q.enqueue(f"https://{TWO}/late", delay=3600)
    for job in q.claim(20).jobs:
        q.retry(job, kind="timeout", delay=60)
    found = q.list_jobs("delayed", domain=TWO)
    assert (found.jobs, found.partial) == ([], True)  # TWO's job is the 7th: not read
    assert len(q.list_jobs("delayed", domain=ONE, limit=3).jobs) == 3
    code, out, err = run(capsys, "--redis", redis_url, "job", "list", "--state", "delayed",
                         "--domain", TWO, "--json")  # fmt: skip
    assert code == 0 and json.loads(out) == []
    assert "first 4" in err
    q.close()


def test_partitions_are_merged(redis_url: str) -> None:
    q = Queue.from_url(redis_url, settings=Settings(partitions=3))
    q.enqueue_many([f"https://shop-{i}.example.com/p" for i in range(12)], delay=10)
    got = q.list_jobs("delayed", limit=5)
    assert len(got.jobs) == 5
    assert [j.eligible_ms for j in got.jobs] == sorted(j.eligible_ms or 0 for j in got.jobs)
    assert len(q.list_jobs("delayed", limit=50).jobs) == 12
    assert [j.job.domain for j in q.list_jobs("delayed", domain="shop-7.example.com").jobs] == [
        "shop-7.example.com"
    ]
    q.close()
