"""Issue 24: the PostgreSQL sink, against a real private cluster (tests/support/pg_proc.py): batches
in one transaction, upsert by job id, JSONB results, the table's layout checked before any
job is claimed, a database that goes away makes the worker release its jobs and go on, and
``--results postgresql://...`` from the CLI.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psycopg
import pytest

from scrapeq.engine.config.settings import Settings
from scrapeq.engine.queue import AsyncQueue
from scrapeq.errors import ConfigError
from scrapeq.runtime.sinks import PostgresSink, _batch, sink_from_url
from support.cli_helpers import run, scrub_env
from support.records import record
from support.sites import ok, sites, threaded_site, tree
from support.tcpproxy import TcpProxy


def _table(url: str) -> str:
    return urlsplit(url).query.removeprefix("table=")


def _rows(url: str) -> list[dict[str, Any]]:
    base = url.split("?")[0]
    with psycopg.connect(base) as db, db.cursor(row_factory=psycopg.rows.dict_row) as cur:
        return list(cur.execute(f"SELECT * FROM {_table(url)}"))


@pytest.fixture
def proxy(postgres_server: str) -> Iterator[TcpProxy]:
    parts = urlsplit(postgres_server)
    assert parts.hostname is not None and parts.port is not None
    with TcpProxy(parts.hostname, parts.port) as p:
        yield p


def test_sink_from_url_gives_the_postgres_sink() -> None:
    sink = sink_from_url("postgresql://u:secret@127.0.0.1:5/db?table=pages&sslmode=disable")
    assert isinstance(sink, PostgresSink) and sink.table == "pages"
    assert "secret" not in sink.shown
    with pytest.raises(ConfigError):
        sink_from_url("postgresql://127.0.0.1/db?table=a-b")


async def test_postgres_batches_in_transactions_and_upserts_by_job_id(postgres_url: str) -> None:
    sink = sink_from_url(postgres_url)
    assert isinstance(sink, PostgresSink)
    await sink.open()
    await asyncio.gather(*(sink.write(record(f"a{i}")) for i in range(300)))
    assert sink.rows == 300 and sink.batches < 300 / 10, "writes waiting together share one"
    await sink.write(record("a7", attempts=2, outcome="dead", result=None, error="gone"))
    await sink.close()
    rows = {r["job_id"]: r for r in _rows(postgres_url)}
    assert len(rows) == 300
    a7 = rows["a7"]
    assert (a7["attempts"], a7["outcome"], a7["result"], a7["error"]) == (2, "dead", None, "gone")
    assert rows["a1"]["result"] == {"title": "t", "tags": ["a"]}, "JSONB, read back as JSON"
    assert rows["a1"]["finished_at"].year == 2026


async def test_a_record_the_database_refuses_fails_alone(postgres_url: str) -> None:
    """A NUL in a text is refused by PostgreSQL: that record's write fails (its job is
    released), the others of its batch are kept."""
    sink = sink_from_url(postgres_url)
    await sink.open()
    outcomes = await asyncio.gather(
        *(sink.write(record(f"b{i}", error="a\x00b" if i == 3 else None)) for i in range(20)),
        return_exceptions=True,
    )
    await sink.close()
    failed = [i for i, o in enumerate(outcomes) if isinstance(o, Exception)]
    assert failed == [3]
    assert len(_rows(postgres_url)) == 19


@pytest.mark.parametrize(
    ("ddl", "said"),
    [
        ("CREATE TABLE {t} (job_id text PRIMARY KEY, url text)", "has no column final_url"),
        ("CREATE TABLE {t} (job_id text, url text, final_url text, domain text, lane text, "
         "depth int, parent_id text, parent_url text, outcome text, status int, attempts int, "
         "error text, elapsed_ms float, bytes int, finished_at timestamptz, result jsonb, "
         "links jsonb, body_path text)", "must be its primary key"),
    ],
)  # fmt: skip
async def test_a_table_it_cannot_use_is_refused(postgres_url: str, ddl: str, said: str) -> None:
    with psycopg.connect(postgres_url.split("?")[0]) as db:
        db.execute(ddl.format(t=_table(postgres_url)))
    sink = sink_from_url(postgres_url)
    with pytest.raises(ConfigError, match=said):
        await sink.open()
    await sink.close()


_COLUMNS = {"job_id": "text PRIMARY KEY", "url": "text", "final_url": "text",
            "domain": "text", "lane": "text", "depth": "int", "parent_id": "text",
            "parent_url": "text", "outcome": "text", "status": "int", "attempts": "int",
            "error": "text", "elapsed_ms": "float", "bytes": "bigint",
            "finished_at": "timestamptz", "result": "jsonb", "links": "jsonb",
            "body_path": "text"}  # fmt: skip


def _ddl(table: str, **types: str) -> str:
    return (
        f"CREATE TABLE {table} ("
        + ", ".join(f"{c} {types.get(c, t)}" for c, t in _COLUMNS.items())
        + ")"
    )


@pytest.mark.parametrize(
    ("types", "said"),
    [
        ({"finished_at": "integer"},
         "column finished_at is integer, the sink writes timestamp with time zone"),
        ({"status": "text"}, "column status is text, the sink writes integer"),
        ({"result": "integer"}, "column result is integer, the sink writes jsonb"),
        ({"url": "bytea"}, "column url is bytea, the sink writes text"),
        ({"elapsed_ms": "integer"}, "column elapsed_ms is integer, the sink writes double"),
        ({"depth": "int[]"}, "column depth is integer[], the sink writes integer"),
    ],
)  # fmt: skip
async def test_a_table_whose_column_types_do_not_fit_is_refused(
    postgres_url: str, types: dict[str, str], said: str
) -> None:
    """Issue 38 item 3: a table whose ``finished_at`` is an integer was accepted, then every
    write failed (0 of 20 rows in 40 s): the types are checked with the columns."""
    table = _table(postgres_url)
    with psycopg.connect(postgres_url.split("?")[0]) as db:
        db.execute(_ddl(table, **types))
    sink = sink_from_url(postgres_url)
    with pytest.raises(ConfigError, match=re.escape(said)) as caught:
        await sink.open()
    await sink.close()
    assert "\n" not in str(caught.value).strip() and table in str(caught.value)
    assert _rows(postgres_url) == [], "nothing written"


async def test_a_table_of_compatible_types_is_used(postgres_url: str) -> None:
    """Types a value of the sink is stored in as it is: varchar, other integer and number
    widths, json, timestamp without time zone, a domain over text."""
    table = _table(postgres_url)
    with psycopg.connect(postgres_url.split("?")[0]) as db:
        db.execute(f"CREATE DOMAIN {table}_d AS text")
        db.execute(_ddl(table, url="varchar(2000)", domain=f"{table}_d", status="smallint",
                        attempts="bigint", bytes="numeric", elapsed_ms="real",
                        finished_at="timestamp", result="json", links="text"))  # fmt: skip
    sink = sink_from_url(postgres_url)
    await sink.open()
    await asyncio.gather(*(sink.write(record(f"c{i}")) for i in range(20)))
    await sink.close()
    rows = _rows(postgres_url)
    assert len(rows) == 20 and rows[0]["result"] == {"title": "t", "tags": ["a"]}


async def test_a_database_that_goes_away_releases_the_jobs_and_the_worker_goes_on(
    postgres_url: str, proxy: TcpProxy, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The route to the database stalls for 2 s: the writes time out, their jobs are released
    (no attempt spent); once it flows again every job is written, once, and done."""
    from scrapeq.runtime.worker import Worker

    monkeypatch.setattr(_batch, "WRITE_TIMEOUT", 0.5)
    sink = sink_from_url(
        postgres_url.replace(f":{urlsplit(postgres_url).port}/", f":{proxy.port}/")
    )
    await sink.open()
    proxy.blackhole()
    threading.Timer(2.0, proxy.resume).start()
    async with sites(ok) as (site,):
        q = AsyncQueue.from_url(redis_url, settings=Settings(allow_private=True))
        try:
            await q.enqueue_many([site.url(f"/{i}") for i in range(10)])
            await asyncio.wait_for(Worker(q, burst=True, sink=sink).run_async(), 60)
            counts = (await q.status())["counts"]
        finally:
            await q.close()
    rows = _rows(postgres_url)
    assert counts["done"] == 10 and counts["dead"] == 0
    assert len(rows) == 10 and {r["attempts"] for r in rows} == {1}, "no attempt spent"
    assert sum(site.hits.values()) > 10, "released jobs were fetched again"


def test_cli_crawl_into_postgres(
    capsys: Any, redis_url: str, postgres_url: str, monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:  # fmt: skip
    scrub_env(monkeypatch, tmp_path)
    with threaded_site(tree) as site:
        code, _, err = run(capsys, "--redis", redis_url, "crawl", site.url("/"),
                           "--allow-private", "--results", postgres_url)  # fmt: skip
    assert code == 0, err
    rows = {r["url"]: r for r in _rows(postgres_url)}
    assert len(rows) == 4
    assert rows[site.url("/a/1")]["parent_url"] == site.url("/a")
    assert json.dumps(rows[site.url("/")]["result"])  # JSONB


def test_cli_says_when_the_database_is_unreachable(
    capsys: Any, redis_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    scrub_env(monkeypatch, tmp_path)
    code, _, err = run(capsys, "--redis", redis_url, "worker", "--burst", "--results",
                       "postgresql://u:secret@127.0.0.1:9/db?table=pages")  # fmt: skip
    assert code == 2, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("scrapeq: error: --results postgresql://***:***@127.0.0.1:9/db"), last
    assert "secret" not in err and "Traceback" not in err


def _nul_text(job: Any, response: Any) -> dict[str, Any]:
    """An API's JSON answer whose text holds ``\\u0000``: legal JSON, refused by jsonb."""
    return {"text": "a\x00b"} if response.url.endswith("/nul") else {"text": "fine"}


async def test_a_record_the_database_refuses_ends_its_job_dead_with_the_reason(
    postgres_url: str, redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 38 item 2: a record PostgreSQL refuses for its content (a ``\\u0000`` in a JSON
    text) was released like a store that is down: fetched again 21 times, claims paused each
    time, and then dead with no row and an empty error. It is written once, as the job's dead
    row with the store's reason, its page fetched once, and no claim pauses."""
    from scrapeq.runtime.worker import Worker

    caplog.set_level("WARNING", logger="scrapeq")
    sink = sink_from_url(postgres_url)
    async with sites(ok) as (site,):
        q = AsyncQueue.from_url(redis_url, settings=Settings(allow_private=True))
        try:
            await q.enqueue_many([site.url("/nul"), site.url("/ok")])
            worker = Worker(q, burst=True, sink=sink, handler=_nul_text)
            await asyncio.wait_for(worker.run_async(), 30)
            counts = (await q.status())["counts"]
            dead = await q.dead_letters()
        finally:
            await q.close()
    rows = {r["url"].rsplit("/", 1)[1]: r for r in _rows(postgres_url)}
    assert site.hits["/nul"] == 1, "not fetched again"
    assert (counts["done"], counts["dead"]) == (1, 1)
    nul = rows["nul"]
    assert nul["outcome"] == "dead" and nul["result"] is None
    assert "unsupported Unicode escape sequence" in nul["error"], nul["error"]
    assert nul["error"].startswith("sink_refused: ")
    assert rows["ok"]["result"] == {"text": "fine"}
    assert dead[0].dead_reason == "sink_refused"
    assert not [r for r in caplog.records if "pausing claims" in r.message], "no pause"


async def test_an_existing_postgres_table_gets_the_new_columns(postgres_url: str) -> None:
    """Issue 38 items 4, 5: a table made by an earlier scrapeq (no changed, not_modified,
    skipped, meta, crawl_id) keeps its rows and gets those columns, and a view of each URL's
    latest row."""
    table = _table(postgres_url)
    with psycopg.connect(postgres_url.split("?")[0]) as db:
        db.execute(_ddl(table))
        db.execute(
            f"INSERT INTO {table} (job_id, url, outcome) VALUES ('old', 'http://x/', 'done')"
        )
    sink = sink_from_url(postgres_url)
    await sink.open()
    await sink.write(record("a1", changed=True, not_modified=False, skipped="budget",
                            meta={"page": 2}, crawl_id="c1"))  # fmt: skip
    await sink.write(record("a2", url="http://x/", finished_at="2026-02-01T00:00:00+00:00"))
    await sink.close()
    rows = {r["job_id"]: r for r in _rows(postgres_url)}
    assert rows["old"]["changed"] is None
    a1 = rows["a1"]
    assert (a1["changed"], a1["not_modified"], a1["skipped"], a1["meta"], a1["crawl_id"]) == (
        True, False, "budget", {"page": 2}, "c1",
    )  # fmt: skip
    latest = _rows(postgres_url.replace(f"table={table}", f"table={table}_latest"))
    assert sorted(r["job_id"] for r in latest) == ["a1", "a2"], "http://x/'s latest is a2"
    again = sink_from_url(postgres_url)
    await again.open()  # migrated already
    await again.close()


async def test_a_refused_line_written_after_the_settle_keeps_its_outcome(
    postgres_url: str, redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 38 item 2, with revisit on: the line is written after the settle (the job is
    done already): a refusal wrote it again after each pause, for ever. It is written once
    without its result, still done."""
    from scrapeq.runtime.worker import Worker

    caplog.set_level("WARNING", logger="scrapeq")
    sink = sink_from_url(postgres_url)
    async with sites(ok) as (site,):
        q = AsyncQueue.from_url(redis_url, settings=Settings(allow_private=True, revisit="on"))
        try:
            await q.enqueue(site.url("/nul"))
            worker = Worker(q, burst=True, sink=sink, handler=_nul_text, max_runtime=3)
            await asyncio.wait_for(worker.run_async(), 30)
            owed = await q.owed_count()
        finally:
            await q.close()
    (row,) = _rows(postgres_url)
    assert (row["outcome"], row["result"], row["changed"]) == ("done", None, True)
    assert row["error"].startswith("sink_refused: unsupported Unicode escape sequence")
    assert site.hits["/nul"] == 1 and owed == 0
    assert not [r for r in caplog.records if "writing its line again" in r.message]
