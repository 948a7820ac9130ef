"""``scrapeq proxies`` and the tier column of ``domains`` (issue 23), through the CLI."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from scrapeq import Queue, Settings
from scrapeq.engine.model.exits import ExitPool
from support.cli_helpers import run, scrub_env

POOL = (
    "http://127.0.0.1:9001 tier=datacenter\n"
    "http://127.0.0.1:9002 tier=datacenter  # a comment\n"
    "http://bob:hunter2@127.0.0.1:9101 tier=residential cost=0.002\n"
)


@pytest.fixture
def pool_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    scrub_env(monkeypatch, tmp_path, columns=200)
    path = tmp_path / "proxies.txt"
    path.write_text(POOL)
    return path


def test_proxies_lists_state_and_counts_and_never_a_password(
    capsys: pytest.CaptureFixture[str], redis_url: str, pool_file: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    monkeypatch.setenv("SCRAPEQ_PROXY_FILE", str(pool_file))
    settings = Settings(queue="px", proxy_file=str(pool_file), domain_concurrency=4)
    q = Queue.from_url(redis_url, settings=settings)
    try:
        q.enqueue_many([f"https://a.example/{i}" for i in range(2)])
        jobs = q.claim(2).jobs
        ban = dataclasses.replace(q.releasing(jobs[0], delay=0, kind="banned"), exit_result="ban")
        ok = dataclasses.replace(q.done(jobs[1]), exit_result="ok", bytes_in=512, latency_ms=40)
        q.settle_many([ban, ok])
    finally:
        q.close()
    code, out, err = run(capsys, "--redis", redis_url, "--queue", "px", "proxies", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["tiers"] == ["datacenter", "residential"]
    by_id = {e["id"]: e for e in doc["exits"]}
    pool = ExitPool.from_settings(settings)
    assert [e["id"] for e in doc["exits"]] == [e.id for e in pool.exits]
    assert by_id[jobs[0].exit]["bans"] == 1 and by_id[jobs[0].exit]["requests"] == 1
    assert by_id[jobs[1].exit]["ok"] == 1 and by_id[jobs[1].exit]["bytes"] == 512
    assert by_id[jobs[1].exit]["success_rate"] == 1.0
    res = next(e for e in doc["exits"] if e["tier"] == "residential")
    assert res["cost"] == 0.002 and res["spend"] == 0.0  # not used yet
    assert by_id[jobs[0].exit]["spend"] is None  # no cost given
    assert "hunter2" not in out and "bob" not in out and "***:***@" in out
    code, out, err = run(capsys, "--redis", redis_url, "--queue", "px", "proxies")
    assert code == 0 and "hunter2" not in out and "datacenter" in out
    code, out, err = run(capsys, "--redis", redis_url, "--queue", "px", "proxies", "--domain",
                         "a.example", "--json")  # fmt: skip
    assert code == 0, err
    one = json.loads(out)
    assert one["tier"] == "datacenter"
    assert [b["id"] for b in one["benched"]] == [jobs[0].exit]
    assert one["per_tier"]["datacenter"] == {"requests": 2, "bytes": 512}
    code, out, err = run(capsys, "--redis", redis_url, "--queue", "px", "domains", "--json")
    assert code == 0, err
    (row,) = json.loads(out)
    assert (row["tier"], row["benched_exits"]) == ("datacenter", 1)


def test_proxies_without_a_pool_lists_none_and_says_so(
    capsys: pytest.CaptureFixture[str], redis_url: str, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    scrub_env(monkeypatch, tmp_path)
    code, out, err = run(capsys, "--redis", redis_url, "proxies", "--json")
    assert code == 0 and "no proxies configured" in err
    assert json.loads(out) == {"tiers": [], "exits": []}


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("ftp://127.0.0.1:1", "unsupported proxy scheme"),
        ("http://127.0.0.1:1 tier=Bad!", "bad tier name"),
        ("http://127.0.0.1:1 speed=9", "unknown attribute"),
        ("http://127.0.0.1:1 cost=-1", "cost must be a number"),
    ],
)
def test_a_bad_pool_line_is_one_line_naming_file_and_line(
    capsys: pytest.CaptureFixture[str], redis_url: str, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, line: str, message: str,
) -> None:  # fmt: skip
    scrub_env(monkeypatch, tmp_path)
    path = tmp_path / "pool.txt"
    path.write_text("http://127.0.0.1:9001\n" + line + "\n")
    monkeypatch.setenv("SCRAPEQ_PROXY_FILE", str(path))
    code, out, err = run(capsys, "--redis", redis_url, "proxies")
    assert code == 2, (out, err)
    assert message in err and f"{path}:2" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


async def test_dashboard_proxies_page_data_domain_exits_and_metrics_series(
    redis_url: str, pool_file: Path
) -> None:
    """/api/exits, a domain's exits on /api/domain/{d}, and per-exit /metrics series, with
    no password anywhere."""
    from aiohttp.test_utils import TestClient, TestServer

    from scrapeq import AsyncQueue
    from scrapeq.interfaces.web import create_app

    settings = Settings(queue="pxweb", proxy_file=str(pool_file), domain_concurrency=4)
    q = AsyncQueue.from_url(redis_url, settings=settings)
    try:
        await q.enqueue_many([f"https://a.example/{i}" for i in range(2)])
        jobs = (await q.claim(2)).jobs
        ban = dataclasses.replace(q.releasing(jobs[0], delay=0, kind="banned"), exit_result="ban")
        ok = dataclasses.replace(q.done(jobs[1]), exit_result="ok", bytes_in=512)
        await q.settle_many([ban, ok])
        async with TestClient(TestServer(create_app(q))) as client:
            resp = await client.get("/api/exits")
            assert resp.status == 200
            text = await resp.text()
            doc = json.loads(text)
            assert [e["tier"] for e in doc["exits"]] == ["datacenter", "datacenter", "residential"]
            assert "hunter2" not in text
            one = await (await client.get("/api/domain/a.example")).json()
            assert one["exits"]["tier"] == "datacenter"
            assert [b["id"] for b in one["exits"]["benched"]] == [jobs[0].exit]
            metrics = await (await client.get("/metrics")).text()
    finally:
        await q.close()
    assert "hunter2" not in metrics and "bob" not in metrics
    labels = f'exit="{jobs[0].exit}",queue="pxweb",result="ban",tier="datacenter"'
    line = f"scrapeq_exit_requests_total{{{labels}}} 1.0"
    assert line in metrics, [m for m in metrics.splitlines() if "exit_requests" in m]
    assert f'scrapeq_exit_bytes_total{{exit="{jobs[1].exit}"' in metrics


def test_every_bad_pool_line_is_reported_at_once_and_socks_is_refused(
    capsys: pytest.CaptureFixture[str], redis_url: str, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """Issue 38 item 15: the checker named socks5:// as a remedy the default fetcher then
    refused, and stopped at the first bad line: each bad line is one line now, socks
    refused with no such advice."""
    scrub_env(monkeypatch, tmp_path)
    path = tmp_path / "pool.txt"
    path.write_text("http://127.0.0.1:9001\nsocks5://127.0.0.1:1080\nftp://127.0.0.1:1\n"
                    "http://127.0.0.1:9002\nhttp://127.0.0.1:1 tier=Bad!\n")  # fmt: skip
    monkeypatch.setenv("SCRAPEQ_PROXY_FILE", str(path))
    code, out, err = run(capsys, "--redis", redis_url, "proxies")
    assert code == 2, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 3, lines
    assert all(f"{path}:{n}:" in line for n, line in zip((2, 3, 5), lines, strict=True)), lines
    assert "socks" in lines[0] and "not supported" in lines[0]
    assert "socks5://" not in lines[1] and "socks4://" not in lines[1], "no advice to use socks"
    assert "Traceback" not in err


def test_crawl_checks_the_pool_before_enqueuing_its_seeds(
    capsys: pytest.CaptureFixture[str], redis_url: str, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    scrub_env(monkeypatch, tmp_path)
    path = tmp_path / "pool.txt"
    path.write_text("socks5://127.0.0.1:1080\n")
    monkeypatch.setenv("SCRAPEQ_PROXY_FILE", str(path))
    code, _out, err = run(capsys, "--redis", redis_url, "--queue", "socks", "crawl",
                         "https://a.example/")  # fmt: skip
    assert code == 2 and "not supported" in err and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1, err
    q = Queue.from_url(redis_url, settings=Settings(queue="socks"))
    try:
        assert q.counts()["ready"] == 0 and q.stats().get("enqueued", 0) == 0
    finally:
        q.close()


def test_a_socks_proxy_setting_is_refused_when_loaded() -> None:
    from scrapeq.errors import ConfigError

    with pytest.raises(ConfigError, match="not supported"):
        Settings(proxy=("socks5://127.0.0.1:1080",))


def test_proxies_probe_ends_a_rest_by_id_or_name_and_refuses_an_unknown_exit(
    capsys: pytest.CaptureFixture[str], redis_url: str, pool_file: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """Issue 38 item 16: ``scrapeq proxies probe EXIT|--all``."""
    monkeypatch.setenv("SCRAPEQ_PROXY_FILE", str(pool_file))
    settings = Settings(queue="pp", proxy_file=str(pool_file), domain_concurrency=8)
    pool = ExitPool.from_settings(settings)
    first, _second, res = pool.exits
    q = Queue.from_url(redis_url, settings=settings)
    try:
        q.enqueue_many([f"https://d{i}.example/" for i in range(20)])
        while True:  # the first exit fails until it rests
            (job,) = q.claim(1).jobs
            if job.exit == first.id:
                down = q.releasing(job, delay=0, kind="released:proxy_error")
                q.settle_many([dataclasses.replace(down, exit_result="down")])
                if q.exits_info()[0]["state"] == "open":
                    break
            else:
                q.settle_many([dataclasses.replace(q.done(job), exit_result="ok")])
    finally:
        q.close()
    base = ("--redis", redis_url, "--queue", "pp", "proxies")
    code, out, err = run(capsys, *base, "probe", first.name, res.id)
    assert code == 0, err
    assert out.splitlines() == [
        f"{first.name} ({first.id}): rest ended; the next claim sends it a probe",
        f"{res.name} ({res.id}): not resting",
    ]
    code, out, err = run(capsys, *base, "--json")
    assert code == 0 and json.loads(out)["exits"][0]["state"] == "half_open", out
    code, out, err = run(capsys, *base, "probe", "--all")
    assert code == 0 and len(out.splitlines()) == 3 and "hunter2" not in out, out
    for bad in ("http://bob:hunter2@127.0.0.1:9999", "nosuch", ""):
        code, out, err = run(capsys, *base, "probe", bad)
        assert code == 2 and out == "" and len(err.strip().splitlines()) == 1, (bad, err)
        assert "hunter2" not in err and "Traceback" not in err
    code, out, err = run(capsys, *base, "probe")
    assert code == 2 and "EXIT... or --all" in err
