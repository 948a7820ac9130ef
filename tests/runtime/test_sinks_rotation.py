"""Issue 38 item 1: a results file deleted or rotated mid-run loses no line.

The JSONL and CSV sinks keep one descriptor open; when the path stops naming the open file
(``rm``, or logrotate's rename without ``copytruncate``) they open the path again, log one
warning, and write on there (a new CSV file gets its header first). A line that lands in a
file deleted while it was written is written again to the new one.

"The old content" is read the way a person deleting the file would have seen it: a
descriptor is opened on the file, the file is unlinked, and the descriptor read at once.
"""

from __future__ import annotations

import asyncio
import csv
import io
import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from scrapeq import AsyncQueue
from scrapeq.runtime.sinks import CsvSink, JsonlSink
from scrapeq.runtime.sinks.csvfile import csv_header
from scrapeq.runtime.worker import Worker
from support.records import record
from support.sites import ok, sites

HEADER = csv_header()


def _delete(path: Path) -> str:
    """``rm path``: the content the file had when it was unlinked."""
    fd = os.open(path, os.O_RDONLY)
    try:
        path.unlink()
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
    finally:
        os.close(fd)
    return b"".join(chunks).decode("utf-8")


def _jsonl_ids(text: str) -> list[str]:
    assert text == "" or text.endswith("\n"), f"a partial line: {text[-80:]!r}"
    return [json.loads(line)["id"] for line in text.splitlines()]


def _csv_ids(text: str) -> list[str]:
    assert text.startswith(HEADER), f"no header: {text[:80]!r}"
    return [row["job_id"] for row in csv.DictReader(io.StringIO(text, newline=""))]


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "scrapeq.sinks" and r.levelno == logging.WARNING
    ]


@pytest.mark.parametrize("kind", ["jsonl", "csv"])
async def test_a_deleted_file_is_made_again_and_no_line_is_lost(
    tmp_path: Path, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="scrapeq.sinks")
    out = tmp_path / f"res.{kind}"
    sink = JsonlSink(out) if kind == "jsonl" else CsvSink(out)
    ids = _jsonl_ids if kind == "jsonl" else _csv_ids
    if isinstance(sink, CsvSink):
        await sink.open()
    for i in range(10):
        await sink.write(record(f"a{i}"))
    old = _delete(out)
    for i in range(10, 30):
        await sink.write(record(f"a{i}"))
    await sink.close()
    assert ids(old) == [f"a{i}" for i in range(10)]
    assert ids(out.read_text(encoding="utf-8")) == [f"a{i}" for i in range(10, 30)]
    (warning,) = _warnings(caplog)
    assert str(out) in warning and "\n" not in warning


@pytest.mark.parametrize("kind", ["jsonl", "csv"])
async def test_a_rotated_file_is_left_to_the_rotation_and_a_new_one_written(
    tmp_path: Path, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    """logrotate without copytruncate: the file is renamed (``res.1``) and, with ``create``,
    an empty file made in its place."""
    caplog.set_level(logging.WARNING, logger="scrapeq.sinks")
    out = tmp_path / f"res.{kind}"
    sink = JsonlSink(out) if kind == "jsonl" else CsvSink(out)
    ids = _jsonl_ids if kind == "jsonl" else _csv_ids
    if isinstance(sink, CsvSink):
        await sink.open()
    for i in range(5):
        await sink.write(record(f"a{i}"))
    out.rename(tmp_path / "res.1")
    out.touch()  # logrotate's "create"
    for i in range(5, 12):
        await sink.write(record(f"a{i}"))
    await sink.close()
    assert ids((tmp_path / "res.1").read_text(encoding="utf-8")) == [f"a{i}" for i in range(5)]
    assert ids(out.read_text(encoding="utf-8")) == [f"a{i}" for i in range(5, 12)]
    assert len(_warnings(caplog)) == 1


async def test_a_csv_file_truncated_in_place_gets_its_header_again(tmp_path: Path) -> None:
    """logrotate's copytruncate: the same file, cut to 0 bytes."""
    out = tmp_path / "res.csv"
    sink = CsvSink(out)
    await sink.open()
    await sink.write(record("a0"))
    os.truncate(out, 0)
    await sink.write(record("a1"))
    await sink.close()
    assert _csv_ids(out.read_text(encoding="utf-8")) == ["a1"]


async def test_two_sinks_on_one_file_both_follow_a_deletion(tmp_path: Path) -> None:
    """Two writers of one file (two worker processes): the new CSV file has one header."""
    out = tmp_path / "res.csv"
    one, two = CsvSink(out), CsvSink(out)
    await one.open()
    await two.open()
    await one.write(record("a0"))
    await two.write(record("b0"))
    old = _delete(out)
    await asyncio.gather(*(s.write(record(f"{p}{i}")) for i in (1, 2) for p, s in
                           (("a", one), ("b", two))))  # fmt: skip
    await one.close()
    await two.close()
    assert _csv_ids(old) == ["a0", "b0"]
    new = out.read_text(encoding="utf-8")
    assert new.count(HEADER) == 1
    assert sorted(_csv_ids(new)) == ["a1", "a2", "b1", "b2"]


@pytest.mark.parametrize("kind", ["jsonl", "csv"])
async def test_a_worker_whose_results_file_is_deleted_mid_run_loses_no_line(
    make_async_queue: Callable[..., AsyncQueue],
    tmp_path: Path,
    kind: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The issue's run, smaller: jobs through a worker, the file deleted once it has lines;
    every job's line is in the old content or the new file."""
    caplog.set_level(logging.WARNING, logger="scrapeq.sinks")
    jobs = 600
    out = tmp_path / f"res.{kind}"
    sink: Any = JsonlSink(out) if kind == "jsonl" else CsvSink(out)
    ids = _jsonl_ids if kind == "jsonl" else _csv_ids
    q = make_async_queue(allow_private=True, request_timeout=5.0)
    olds: list[str] = []

    async def delete_when_written() -> None:
        while not out.exists() or out.stat().st_size < 100 * 150:
            await asyncio.sleep(0.005)
        olds.append(await asyncio.to_thread(_delete, out))

    async with sites(ok) as (site,):
        enqueued = await q.enqueue_many([site.url(f"/p/{i}") for i in range(jobs)])
        deleter = asyncio.create_task(delete_when_written())
        worker = Worker(q, concurrency=20, burst=True, sink=sink)
        await asyncio.wait_for(worker.run_async(), 120)
        await asyncio.wait_for(deleter, 5)
    counts = (await q.status())["counts"]
    assert counts["done"] == jobs
    (old,) = olds
    before, after = ids(old), ids(out.read_text(encoding="utf-8"))
    assert before and after, "the file was deleted mid-run"
    assert set(before) | set(after) == {r.id for r in enqueued}, "no line lost"
    # a line written between the unlink and the read above is in both: at most one
    assert len(before) + len(after) - jobs in (0, 1), "each line once"
    assert len(_warnings(caplog)) == 1
