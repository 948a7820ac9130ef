"""``Queue.from_url(None)`` and ``AsyncQueue.from_url(None)`` reach the Redis the CLI uses when
no URL is set: the embedded server of ``data_dir`` (issue 21, item 15)."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from cli_helpers import run, scrub_env
from scrapeq import AsyncQueue, Queue, Settings
from scrapeq.engine.embedded import stop_server


@pytest.fixture
def data_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """A short data folder (a unix socket path) whose server is stopped afterwards."""
    scrub_env(monkeypatch, tmp_path)
    root = Path(tempfile.mkdtemp(prefix="sq"))  # the session's short root (conftest)
    path = root / "data"
    try:
        yield path
    finally:
        stop_server(path)
        shutil.rmtree(root, ignore_errors=True)


def status(capsys: pytest.CaptureFixture[str], data_dir: Path) -> dict[str, int]:
    code, out, err = run(capsys, "--data-dir", str(data_dir), "status", "--json")
    assert code == 0, err
    counts: dict[str, int] = json.loads(out)["counts"]
    return counts


def test_sync_queue_from_none_is_the_clis_embedded_redis(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    q = Queue.from_url(None, settings=Settings(data_dir=data_dir))
    try:
        q.enqueue("https://shop-1.example.com/p/1")
    finally:
        q.close()
    assert status(capsys, data_dir)["enqueued"] == 1


async def test_async_queue_from_none_is_the_clis_embedded_redis(
    data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, "--data-dir", str(data_dir), "enqueue", "https://a.example.com/")
    assert code == 0, err
    q = AsyncQueue.from_url(None, settings=Settings(data_dir=data_dir))
    try:
        assert (await q.counts())["enqueued"] == 1
        await q.enqueue("https://b.example.com/")
    finally:
        await q.close()
    assert status(capsys, data_dir)["enqueued"] == 2
