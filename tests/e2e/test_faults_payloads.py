"""Payload limits end to end (issue 10, defect 2): ``scrapeq enqueue --payload`` at the limit.

The command runs as a real process with ``SCRAPEQ_MAX_PAYLOAD`` set small, so the payloads
stay tiny: a payload whose JSON text is exactly ``max_payload`` bytes is enqueued, one byte
more is refused in one line on stderr, exit 2, with nothing written.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import redis

from scrapeq import Queue, Settings
from support.workers import SCRAPEQ, clean_env

LIMIT = 256
URL = "https://shop-1.example.com/p/1"


def _compact_object(size: int) -> str:
    """A JSON object of ``size`` bytes as people and programs write it: no spaces."""
    head = '{"sku":42,"tags":["a","b"],"note":"'
    return head + "y" * (size - len(head) - 2) + '"}'


# The CLI's --payload is a JSON object (a string is a usage error,
# tests/interfaces/test_cli_ops.py); payloads are measured as stored, compact, so a spaced
# object is measured without its spaces
SHAPES = {"compact_object": _compact_object}


def _enqueue(redis_url: str, cwd: Path, payload: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [SCRAPEQ, "--redis", redis_url, "enqueue", URL, "--payload", payload, "--json"],
        env=clean_env(max_payload=LIMIT),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=30,
    )


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_a_payload_of_exactly_max_payload_bytes_is_enqueued(
    redis_url: str, tmp_path: Path, shape: str
) -> None:
    text = SHAPES[shape](LIMIT)
    assert len(text.encode()) == LIMIT
    done = _enqueue(redis_url, tmp_path, text)
    assert done.returncode == 0, done.stderr
    (job_id,) = json.loads(done.stdout)["ids"]
    q = Queue.from_url(redis_url, settings=Settings())
    try:
        job = q.get_job(job_id)
        assert job is not None
        stored: Any = job.payload
        assert stored == json.loads(text), "the payload is stored as given"
    finally:
        q.close()


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_one_byte_over_max_payload_is_one_line_exit_2_and_nothing_enqueued(
    redis_url: str, tmp_path: Path, shape: str
) -> None:
    text = SHAPES[shape](LIMIT + 1)
    refused = _enqueue(redis_url, tmp_path, text)
    assert refused.returncode == 2, (refused.stdout, refused.stderr)
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1, refused.stderr
    assert "max_payload" in lines[0] and f"{LIMIT + 1}" in lines[0], lines[0]
    assert refused.stdout == ""
    client = redis.Redis.from_url(redis_url)
    try:
        assert client.keys("sq:*") == [], "nothing of a refused enqueue is written"
    finally:
        client.close()
