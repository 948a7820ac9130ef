"""Issue 24: results where users keep them. ``--results`` takes a path (JSONL; ``.csv``: CSV)
or ``sqlite:///path.db``; the SQLite sink writes batches in one transaction, upserts by job id
(a job written again updates its row), checks the table's layout before any job is claimed,
and a store that fails makes the worker release the job (no attempt spent) and go on when
the store is back. Results lines and rows carry the parent's URL.
"""

from __future__ import annotations

import asyncio
import contextlib
import csv
import json
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest

from scrapeq.engine.config.settings import Settings
from scrapeq.engine.queue import AsyncQueue
from scrapeq.errors import ConfigError
from scrapeq.runtime.sinks import CsvSink, JsonlSink, SqliteSink, sink_from_url, sqlite
from scrapeq.runtime.worker import Worker
from support.cli_helpers import run, scrub_env
from support.records import record
from support.sites import ok, sites, threaded_site, tree


def _rows(db: Path, table: str = "results") -> list[dict[str, Any]]:
    with contextlib.closing(sqlite3.connect(db)) as conn:
        conn.row_factory = sqlite3.Row
        return [dict(r) for r in conn.execute(f"SELECT * FROM {table}")]


def test_sink_from_url_picks_the_sink(tmp_path: Path) -> None:
    assert isinstance(sink_from_url(tmp_path / "r.jsonl"), JsonlSink)
    assert isinstance(sink_from_url(str(tmp_path / "r.CSV")), CsvSink)
    rel = sink_from_url("sqlite:///data/r.db?table=pages")
    assert isinstance(rel, SqliteSink) and rel.path == Path("data/r.db") and rel.table == "pages"
    absolute = sink_from_url(f"sqlite:///{tmp_path}/r.db")
    assert isinstance(absolute, SqliteSink) and absolute.path == tmp_path / "r.db"
    for bad in ("mysql://h/db", "sqlite://host/r.db", "sqlite:///r.db?table=x;drop",
                "sqlite:///r.db?tabel=x"):  # fmt: skip
        with pytest.raises(ConfigError):
            sink_from_url(bad)


async def test_sqlite_batches_in_transactions_and_upserts_by_job_id(tmp_path: Path) -> None:
    sink = SqliteSink(tmp_path / "r.db")
    await sink.open()
    await asyncio.gather(*(sink.write(record(f"a{i}")) for i in range(300)))
    assert sink.rows == 300 and sink.batches < 300 / 10, "writes waiting together share one"
    # a job written again (re-delivered after a crash between write and ack) updates its row
    await sink.close()
    # usable after close (connects again): a job written again updates its row
    await sink.write(record("a7", attempts=2, outcome="dead", result=None, error="gone"))
    await sink.close()
    rows = {r["job_id"]: r for r in _rows(tmp_path / "r.db")}
    assert len(rows) == 300
    a7 = rows["a7"]
    assert (a7["attempts"], a7["outcome"], a7["result"], a7["error"]) == (2, "dead", None, "gone")
    assert json.loads(rows["a1"]["result"]) == {"title": "t", "tags": ["a"]}


@pytest.mark.parametrize(
    ("ddl", "said"),
    [
        ("CREATE TABLE results (job_id TEXT PRIMARY KEY, url TEXT)", "has no column final_url"),
        ("CREATE TABLE results (" + ", ".join(sqlite.COLUMNS) + ")", "must be its primary key"),
    ],
)
async def test_a_table_it_cannot_use_is_refused_before_any_write(
    tmp_path: Path, ddl: str, said: str
) -> None:
    with sqlite3.connect(tmp_path / "r.db") as conn:
        conn.execute(ddl)
    sink = SqliteSink(tmp_path / "r.db")
    with pytest.raises(ConfigError, match=said):
        await sink.open()
    await sink.close()


_TYPED = {"depth": "INTEGER", "status": "INTEGER", "attempts": "INTEGER", "bytes": "INTEGER",
          "elapsed_ms": "REAL", "changed": "INTEGER", "not_modified": "INTEGER"}  # fmt: skip


def _ddl(strict: bool, **types: str) -> str:
    columns = ", ".join(
        f"{c} {types.get(c, _TYPED.get(c, 'TEXT'))}" + (" PRIMARY KEY" if c == "job_id" else "")
        for c in sqlite.COLUMNS
    )
    return f"CREATE TABLE results ({columns})" + (" STRICT" if strict else "")


@pytest.mark.parametrize(
    ("types", "said"),
    [
        ({"finished_at": "INTEGER"}, "column finished_at is INTEGER, the sink writes TEXT"),
        ({"elapsed_ms": "INT"}, "column elapsed_ms is INT, the sink writes REAL"),
        ({"result": "BLOB"}, "column result is BLOB, the sink writes TEXT"),
        ({"status": "REAL"}, "column status is REAL, the sink writes INTEGER"),
    ],
)
async def test_a_strict_table_whose_column_types_do_not_fit_is_refused(
    tmp_path: Path, types: dict[str, str], said: str
) -> None:
    """Issue 38 item 3: a STRICT table refuses a value of another type at every write (an
    ISO text in an INTEGER finished_at): it is refused before any."""
    with sqlite3.connect(tmp_path / "r.db") as conn:
        conn.execute(_ddl(True, **types))
    sink = SqliteSink(tmp_path / "r.db")
    with pytest.raises(ConfigError, match=said):
        await sink.open()
    await sink.close()
    assert _rows(tmp_path / "r.db") == []


@pytest.mark.parametrize("strict", [True, False])
async def test_tables_whose_types_hold_the_values_are_used(tmp_path: Path, strict: bool) -> None:
    """A STRICT table of ANY columns; a table that is not STRICT takes any value in any
    column (SQLite types are affinities), so its declared types are not checked."""
    types = {"finished_at": "INTEGER", "result": "BLOB"} if not strict else {"url": "ANY"}
    with sqlite3.connect(tmp_path / "r.db") as conn:
        conn.execute(_ddl(strict, **types))
    sink = SqliteSink(tmp_path / "r.db")
    await sink.open()
    await sink.write(record("a1"))
    await sink.close()
    (row,) = _rows(tmp_path / "r.db")
    assert (row["finished_at"], row["url"]) == ("2026-01-01T00:00:00+00:00", "http://x.test/a1")


async def test_a_crawl_into_sqlite_has_one_row_per_page_with_the_parents_url(
    redis_url: str, tmp_path: Path
) -> None:
    db = tmp_path / "r.db"
    async with sites(tree) as (site,):
        q = AsyncQueue.from_url(redis_url, settings=Settings(allow_private=True))
        try:
            await q.enqueue_many([site.url("/")], unique="seen")
            sink = sink_from_url(f"sqlite:///{db}?table=pages")
            await Worker(q, burst=True, follow_links=True, sink=sink).run_async()
        finally:
            await q.close()
    rows = {r["url"]: r for r in _rows(db, "pages")}
    assert sorted(rows) == sorted(site.url(p) for p in ("/", "/a", "/b", "/a/1"))
    assert rows[site.url("/")]["parent_url"] is None
    assert rows[site.url("/a/1")]["parent_url"] == site.url("/a")
    assert rows[site.url("/a/1")]["parent_id"] == rows[site.url("/a")]["job_id"]
    assert rows[site.url("/b")]["final_url"] == site.url("/b")
    assert all(r["outcome"] == "done" and r["status"] == 200 for r in rows.values())


async def test_a_store_that_fails_releases_the_job_and_the_worker_goes_on(
    redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another connection holds the file's write lock: the writes fail (busy), the jobs are
    released without spending an attempt; once the lock is gone they are written and done."""
    monkeypatch.setattr(sqlite, "BUSY_TIMEOUT", 0.05)
    db = tmp_path / "r.db"
    sink = SqliteSink(db)
    await sink.open()
    blocker = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
    blocker.execute("BEGIN EXCLUSIVE")
    threading.Timer(1.5, blocker.rollback).start()
    async with sites(ok) as (site,):
        q = AsyncQueue.from_url(redis_url, settings=Settings(allow_private=True))
        try:
            await q.enqueue_many([site.url(f"/{i}") for i in range(5)])
            await asyncio.wait_for(Worker(q, burst=True, sink=sink).run_async(), 30)
            counts = (await q.status())["counts"]
        finally:
            await q.close()
            blocker.close()
    rows = _rows(db)
    assert counts["done"] == 5 and counts["dead"] == 0
    assert len(rows) == 5 and {r["attempts"] for r in rows} == {1}, "no attempt spent"
    assert sum(site.hits.values()) > 5, "the jobs were fetched again after their release"


def test_cli_crawl_into_sqlite_and_csv(
    capsys: Any, redis_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    scrub_env(monkeypatch, tmp_path)
    with threaded_site(tree) as site:
        code, _, err = run(capsys, "--redis", redis_url, "crawl", site.url("/"),
                           "--allow-private", "--results", "sqlite:///out/r.db")  # fmt: skip
        assert code == 2 and "--results sqlite:///out/r.db: folder out does not exist" in err
        (tmp_path / "out").mkdir()
        code, _, err = run(capsys, "--redis", redis_url, "crawl", site.url("/"),
                           "--allow-private", "--results", "sqlite:///out/r.db")  # fmt: skip
        assert code == 0, err
        assert len(_rows(tmp_path / "out" / "r.db")) == 4
        code, _, err = run(capsys, "--redis", redis_url, "--queue", "other", "crawl",
                           site.url("/"), "--allow-private", "--results", "pages.csv")  # fmt: skip
        assert code == 0, err
    with open(tmp_path / "pages.csv", newline="", encoding="utf-8") as f:
        lines = list(csv.DictReader(f))
    assert len(lines) == 4
    leaf = next(r for r in lines if r["url"] == site.url("/a/1"))
    assert leaf["parent_url"] == site.url("/a") and leaf["depth"] == "2"
    assert json.loads(leaf["result"])["redirects"] == 0, "a nested result is JSON text"


def test_cli_refuses_a_table_it_cannot_use_before_claiming(
    capsys: Any, redis_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    scrub_env(monkeypatch, tmp_path)
    with sqlite3.connect(tmp_path / "r.db") as conn:
        conn.execute("CREATE TABLE pages (job_id TEXT PRIMARY KEY, url TEXT)")
    code, _, err = run(capsys, "--redis", redis_url, "enqueue", "http://127.0.0.1:9/x",
                       "--allow-private")  # fmt: skip
    assert code == 0, err
    code, _, err = run(capsys, "--redis", redis_url, "worker", "--burst", "--allow-private",
                       "--results", "sqlite:///r.db?table=pages")  # fmt: skip
    assert code == 2
    assert (
        err.strip()
        .splitlines()[-1]
        .startswith(
            "scrapeq: error: --results sqlite:///r.db?table=pages: table pages has no column"
        )
    ), err
    assert "Traceback" not in err
    code, out, _ = run(capsys, "--redis", redis_url, "status", "--json")
    assert json.loads(out)["counts"]["ready"] == 1, "nothing was claimed"


def test_jsonl_lines_carry_the_parents_url(
    capsys: Any, redis_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    scrub_env(monkeypatch, tmp_path)
    with threaded_site(tree) as site:
        code, _, err = run(capsys, "--redis", redis_url, "crawl", site.url("/"),
                           "--allow-private", "--results", "r.jsonl")  # fmt: skip
    assert code == 0, err
    rows = {r["url"]: r for r in map(json.loads, (tmp_path / "r.jsonl").read_text().splitlines())}
    assert rows[site.url("/a/1")]["parent_url"] == site.url("/a")
    assert rows[site.url("/")]["parent_url"] is None


def test_cli_results_into_a_redis_stream(
    capsys: Any, redis_url: str, redis_client: Any, monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:  # fmt: skip
    """``--results redis-stream://host:port/db?key=K``: the RedisStreamSink from the CLI."""
    scrub_env(monkeypatch, tmp_path)
    target = redis_url.replace("redis://", "redis-stream://") + "?key=pages&maxlen=100"
    with threaded_site(tree) as site:
        code, _, err = run(capsys, "--redis", redis_url, "crawl", site.url("/"),
                           "--allow-private", "--results", target)  # fmt: skip
    assert code == 0, err
    entries = redis_client.xrange("pages")
    urls = {json.loads(fields["record"])["url"] for _, fields in entries}
    assert urls == {site.url(p) for p in ("/", "/a", "/b", "/a/1")}
    code, _, err = run(capsys, "--redis", redis_url, "worker", "--burst", "--results",
                       "redis-stream://127.0.0.1:9/0")  # fmt: skip
    assert code == 2 and "--results redis-stream://127.0.0.1:9/0:" in err, err


async def test_a_sink_failing_again_and_again_pauses_claims_longer_each_time(
    redis_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A store down for a while: each failure after claims resumed doubles the pause (and the
    job's release delay), so a worker does not fetch the queue through and back; the job
    spends no attempt and is written once the store answers."""
    from scrapeq.runtime import lines as lines_module
    from scrapeq.runtime.sinks import CallableSink

    monkeypatch.setattr(lines_module, "SINK_PAUSE_MIN", 0.1)
    q = AsyncQueue.from_url(redis_url, settings=Settings(allow_private=True))
    written: list[dict[str, Any]] = []
    calls = 0

    def flaky(record: dict[str, Any]) -> None:
        nonlocal calls
        calls += 1
        if calls <= 3:
            raise OSError("database is down")
        written.append(record)

    caplog.set_level("WARNING", logger="scrapeq")
    async with sites(ok) as (site,):
        await q.enqueue(site.url("/x"))
        try:
            await asyncio.wait_for(Worker(q, burst=True, sink=CallableSink(flaky)).run_async(), 30)
        finally:
            await q.close()
    pauses = [r.message.split("pausing claims ")[1].split(" s")[0] for r in caplog.records
              if "sink failed" in r.message]  # fmt: skip
    assert pauses == ["0.1", "0.2", "0.4"]
    assert len(written) == 1 and written[0]["attempts"] == 1
