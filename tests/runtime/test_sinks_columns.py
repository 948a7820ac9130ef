"""Issue 38 items 4, 5, 20, 21, 22: what the CSV and database sinks keep of a results line.

- item 4: ``changed``, ``not_modified``, ``skipped`` and ``meta`` (the JSONL line's) are columns;
  an existing SQLite table gets them by a migration (ADD COLUMN), an existing CSV file keeps
  its own header;
- item 5: every line and row carries the crawl it belongs to (``crawl_id``, new after
  ``crawl --new``), and a view ``<table>_latest`` holds each URL's latest row;
- item 20: with named fields (``--extract``), a CSV file has a column per field;
- item 21: ``--results x.json`` writes a JSON array, an extension it does not write is refused;
- item 22: a new CSV file names its columns as the tables do (``job_id``, ``parent_id``), an
  old one keeps its ``id`` and ``parent``.
"""

from __future__ import annotations

import contextlib
import csv
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from scrapeq.engine.config.settings import Settings
from scrapeq.engine.queue import AsyncQueue
from scrapeq.errors import ConfigError
from scrapeq.runtime.sinks import CsvSink, JsonlSink, SqliteSink, sink_from_url
from scrapeq.runtime.worker import Worker
from support.cli_helpers import run, scrub_env
from support.records import record
from support.sites import sites, threaded_site, tree

#: The CSV header scrapeq wrote before issue 38 (items 4, 5, 22).
OLD_CSV_HEADER = (
    "id,url,final_url,domain,lane,outcome,status,attempts,elapsed_ms,bytes,finished_at,error,"
    "depth,parent,parent_url,result,links,body_path\n"
)
#: The table scrapeq created before issue 38.
OLD_TABLE = (
    "CREATE TABLE results (job_id TEXT PRIMARY KEY NOT NULL, url TEXT NOT NULL, final_url TEXT,"
    " domain TEXT, lane TEXT, depth INTEGER, parent_id TEXT, parent_url TEXT, outcome TEXT NOT"
    " NULL, status INTEGER, attempts INTEGER, error TEXT, elapsed_ms REAL, bytes INTEGER,"
    " finished_at TEXT, result TEXT, links TEXT, body_path TEXT)"
)
SETTLED = {"changed": False, "not_modified": True, "skipped": "budget", "meta": {"page": 2}}


def _rows(db: Path, table: str = "results") -> list[dict[str, Any]]:
    with contextlib.closing(sqlite3.connect(db)) as conn:
        conn.row_factory = sqlite3.Row
        return [dict(r) for r in conn.execute(f"SELECT * FROM {table}")]


def _csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


# --- item 4: what the settle decided ---------------------------------------------------------


async def test_sqlite_rows_keep_what_the_settle_decided(tmp_path: Path) -> None:
    sink = SqliteSink(tmp_path / "r.db")
    await sink.write(record("a1", **SETTLED))
    await sink.write(record("a2"))
    await sink.close()
    rows = {r["job_id"]: r for r in _rows(tmp_path / "r.db")}
    a1 = rows["a1"]
    assert (a1["changed"], a1["not_modified"], a1["skipped"]) == (0, 1, "budget")
    assert json.loads(a1["meta"]) == {"page": 2}
    assert (rows["a2"]["changed"], rows["a2"]["meta"]) == (None, None), "not said: NULL"


async def test_an_existing_sqlite_table_gets_the_new_columns(tmp_path: Path) -> None:
    """A table made by an earlier scrapeq keeps its rows and gets the columns it lacks."""
    db = tmp_path / "r.db"
    with contextlib.closing(sqlite3.connect(db)) as conn:
        conn.execute(OLD_TABLE)
        conn.execute(
            "INSERT INTO results (job_id, url, outcome) VALUES ('old', 'http://x/', 'done')"
        )
        conn.commit()
    sink = SqliteSink(db)
    await sink.open()
    await sink.write(record("a1", **SETTLED, crawl_id="c1"))
    await sink.close()
    rows = {r["job_id"]: r for r in _rows(db)}
    assert rows["old"]["url"] == "http://x/" and rows["old"]["changed"] is None
    assert (rows["a1"]["changed"], rows["a1"]["skipped"], rows["a1"]["crawl_id"]) == (
        0, "budget", "c1",
    )  # fmt: skip
    # a second sink (another worker) finds the table migrated already
    again = SqliteSink(db)
    await again.open()
    await again.close()


async def test_csv_lines_keep_what_the_settle_decided(tmp_path: Path) -> None:
    sink = CsvSink(tmp_path / "r.csv")
    await sink.write(record("a1", **SETTLED, crawl_id="c1"))
    await sink.close()
    (row,) = _csv(tmp_path / "r.csv")
    assert (row["changed"], row["not_modified"], row["skipped"]) == ("false", "true", "budget")
    assert json.loads(row["meta"]) == {"page": 2} and row["crawl_id"] == "c1"


# --- item 22 (and 4): the CSV file's column names ------------------------------------------------


async def test_a_new_csv_file_names_columns_as_the_tables_do(tmp_path: Path) -> None:
    sink = CsvSink(tmp_path / "r.csv")
    await sink.write(record("b2", parent="b1", depth=1))
    await sink.close()
    header = (tmp_path / "r.csv").read_text().splitlines()[0].split(",")
    assert header[:2] == ["job_id", "url"] and "parent_id" in header
    assert "id" not in header and "parent" not in header
    (row,) = _csv(tmp_path / "r.csv")
    assert (row["job_id"], row["parent_id"]) == ("b2", "b1")


async def test_an_old_csv_file_keeps_its_own_header(tmp_path: Path) -> None:
    """A file written before (``id``, ``parent``, no settle columns) is appended to with its
    own columns: nothing is refused, the old readers go on working."""
    path = tmp_path / "r.csv"
    path.write_text(
        OLD_CSV_HEADER + "a0,http://x.test/a0,,x.test,normal,done,200,1,1.5,10,,,0,,,,,\n"
    )
    sink = CsvSink(path)
    await sink.open()
    await sink.write(record("a1", parent="a0", **SETTLED))
    await sink.close()
    text = path.read_text()
    assert text.startswith(OLD_CSV_HEADER) and text.count("\n") == 3
    rows = _csv(path)
    assert [(r["id"], r["parent"]) for r in rows] == [("a0", ""), ("a1", "a0")]


async def test_a_csv_file_with_another_header_is_still_refused(tmp_path: Path) -> None:
    path = tmp_path / "r.csv"
    path.write_text("name,price\nx,1\n")
    sink = CsvSink(path)
    with pytest.raises(ConfigError, match="not scrapeq's CSV header"):
        await sink.open()
    await sink.close()


# --- item 20: a column per named field ----------------------------------------------------------


async def test_csv_with_named_fields_has_a_column_each(tmp_path: Path) -> None:
    sink = CsvSink(tmp_path / "r.csv", result_fields=("title", "tags"))
    await sink.write(record("a1", result={"title": "Shoe", "tags": ["x", "y"]}))
    await sink.write(record("a2", result=None, outcome="dead", error="gone"))
    await sink.write(record("a3", result={"title": "Hat", "extra": 1}))
    await sink.close()
    rows = {r["job_id"]: r for r in _csv(tmp_path / "r.csv")}
    a1 = rows["a1"]
    assert (a1["result.title"], json.loads(a1["result.tags"])) == ("Shoe", ["x", "y"])
    assert a1["result"] == "", "every field has its column: no JSON cell"
    assert (rows["a2"]["result.title"], rows["a2"]["result"]) == ("", "")
    # a result that does not fit the columns is kept whole in the result cell
    assert json.loads(rows["a3"]["result"]) == {"title": "Hat", "extra": 1}
    assert rows["a3"]["result.title"] == "Hat"


def test_cli_extract_into_csv_has_a_column_per_field(
    capsys: Any, redis_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    scrub_env(monkeypatch, tmp_path)
    with threaded_site(tree) as site:
        code, _, err = run(capsys, "--redis", redis_url, "crawl", site.url("/"),
                           "--allow-private", "--results", "pages.csv",
                           "--extract", "title", "--extract", "links[]=a::attr(href)")  # fmt: skip
    assert code == 0, err
    rows = {r["url"]: r for r in _csv(tmp_path / "pages.csv")}
    home = rows[site.url("/")]
    assert home["result.title"] == "t"
    assert json.loads(home["result.links"]) == ["/a", "/b"]


# --- item 5: the crawl a row belongs to ---------------------------------------------------------


async def test_rows_carry_their_crawl_and_a_view_has_each_urls_latest(
    redis_url: str, tmp_path: Path
) -> None:
    db = tmp_path / "r.db"
    out = tmp_path / "r.jsonl"
    async with sites(tree) as (site,):
        q = AsyncQueue.from_url(redis_url, settings=Settings(allow_private=True))
        try:
            for _ in range(2):
                await q.enqueue_many([site.url("/")], unique="seen")
                sink = sink_from_url(f"sqlite:///{db}")
                await Worker(q, burst=True, follow_links=True, sink=sink).run_async()
                await q.new_crawl()
            await q.enqueue_many([site.url("/")], unique="seen")
            await Worker(q, burst=True, follow_links=True, sink=JsonlSink(out)).run_async()
        finally:
            await q.close()
    rows = _rows(db)
    assert len(rows) == 8, "4 pages, crawled twice"
    crawls = sorted({r["crawl_id"] for r in rows})
    assert len(crawls) == 2 and None not in crawls
    latest = _rows(db, "results_latest")
    assert len(latest) == 4 and {r["url"] for r in latest} == {r["url"] for r in rows}
    second = [r for r in rows if r["crawl_id"] != rows[0]["crawl_id"]]
    assert {r["crawl_id"] for r in latest} == {second[0]["crawl_id"]}
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(lines) == 4 and len({x["crawl_id"] for x in lines}) == 1
    assert lines[0]["crawl_id"] not in crawls, "a third crawl"


# --- item 21: .json is a JSON array, unknown extensions refused ----------------------------------


async def test_a_json_path_is_written_as_one_json_array(tmp_path: Path) -> None:
    path = tmp_path / "pages.json"
    sink = sink_from_url(str(path))
    assert not isinstance(sink, JsonlSink | CsvSink)
    await sink.open()  # type: ignore[attr-defined]
    assert json.loads(path.read_text()) == []
    for i in range(3):
        await sink.write(record(f"a{i}"))
        assert len(json.loads(path.read_text())) == i + 1, "a valid array after every record"
    await sink.close()
    # a later run adds to the same array
    sink = sink_from_url(str(path))
    await sink.write(record("a3"))
    await sink.close()
    text = path.read_text()
    assert text.startswith("[\n") and ",\n" in text and text.endswith("]\n")
    assert [r["id"] for r in json.loads(text)] == ["a0", "a1", "a2", "a3"]


async def test_a_json_file_that_is_not_an_array_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "pages.json"
    path.write_text('{"a": 1}\n')
    sink = sink_from_url(str(path))
    with pytest.raises(ConfigError, match="not a JSON array"):
        await sink.open()  # type: ignore[attr-defined]
    await sink.close()
    assert path.read_text() == '{"a": 1}\n', "left as it was"


@pytest.mark.parametrize("name", ["pages.xlsx", "pages.xml", "pages.jsonl.gz", "pages.txt"])
def test_an_extension_it_does_not_write_is_refused(name: str) -> None:
    with pytest.raises(ConfigError, match=r"\.jsonl.*\.csv.*\.json"):
        sink_from_url(name)


@pytest.mark.parametrize("name", ["pages.jsonl", "p.NDJSON", "p.jl", "results", "/dev/stdout"])
def test_json_lines_paths(name: str) -> None:
    assert isinstance(sink_from_url(name), JsonlSink)


def test_cli_refuses_results_xlsx_with_one_line(
    capsys: Any, redis_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    scrub_env(monkeypatch, tmp_path)
    code, _, err = run(capsys, "--redis", redis_url, "enqueue", "http://127.0.0.1:9/x",
                       "--allow-private")  # fmt: skip
    assert code == 0, err
    code, _, err = run(capsys, "--redis", redis_url, "worker", "--burst", "--results",
                       "pages.xlsx")  # fmt: skip
    assert code == 2
    assert err.strip().splitlines()[-1].startswith("scrapeq: error: --results pages.xlsx:"), err
    assert not (tmp_path / "pages.xlsx").exists()


async def test_two_writers_of_one_json_file_keep_it_one_array(tmp_path: Path) -> None:
    """Two sinks on one file (two worker processes) take turns under the file's lock: one
    array holding every record."""
    import asyncio

    path = tmp_path / "pages.json"
    a, b = sink_from_url(str(path)), sink_from_url(str(path))
    await asyncio.gather(*(s.write(record(f"a{i}")) for i in range(50) for s in (a, b)))
    await a.close()
    await b.close()
    assert len(json.loads(path.read_text())) == 100


def test_cli_crawl_into_a_json_array(
    capsys: Any, redis_url: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    scrub_env(monkeypatch, tmp_path)
    with threaded_site(tree) as site:
        code, _, err = run(capsys, "--redis", redis_url, "crawl", site.url("/"),
                           "--allow-private", "--results", "pages.json")  # fmt: skip
    assert code == 0, err
    pages = json.loads((tmp_path / "pages.json").read_text())
    assert sorted(p["url"] for p in pages) == sorted(site.url(x) for x in ("/", "/a", "/b", "/a/1"))
