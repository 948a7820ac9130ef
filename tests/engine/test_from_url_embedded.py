"""``Queue.from_url(None)`` and ``AsyncQueue.from_url(None)`` reach the Redis the CLI uses when
no URL is set: the embedded server of ``data_dir`` (issue 21, item 15)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scrapeq import AsyncQueue, Queue, Settings
from support.cli_helpers import run, scrub_env


@pytest.fixture
def data_dir(data_dir: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """conftest's short data folder, with a clean environment."""
    scrub_env(monkeypatch, tmp_path)
    return data_dir


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
