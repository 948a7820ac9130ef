"""``scrapeq worker --metrics-port``: each process serves its own /metrics on loopback."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from scrapeq import Queue, Settings
from scrapeq.engine.server.launcher import free_port
from scrapeq.interfaces.cli import main

pytestmark = pytest.mark.usefixtures("clean_env")


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=2) as resp:
        return bytes(resp.read())


def test_a_metrics_port_in_use_is_one_line(
    capsys: pytest.CaptureFixture[str], redis_url: str
) -> None:
    Queue.from_url(redis_url, settings=Settings()).enqueue("https://shop-1.example.com/")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        code = main(["--redis", redis_url, "worker", "--burst", "--metrics-port", str(port)])
    _, err = capsys.readouterr()
    assert code == 1
    assert f"cannot serve metrics on 127.0.0.1:{port}: Address already in use" in err
    assert "Traceback" not in err


async def test_worker_process_serves_its_metrics(redis_url: str) -> None:
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "scrapeq", "--redis", redis_url, "worker",
        "--metrics-port", str(port), "--max-runtime", "20",
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 20
        text = ""
        while time.monotonic() < deadline:
            try:
                text = await asyncio.to_thread(_get, f"http://127.0.0.1:{port}/metrics")
                break
            except OSError:
                await asyncio.sleep(0.1)
        assert b"scrapeq_worker_claim_duration_seconds_count" in text
        assert b'queue="default"' in text
    finally:
        proc.terminate()
        await asyncio.wait_for(proc.wait(), 30)
