"""A password in a job's URL (``user:password@``) is never shown by the CLI listings, nor its
user (issue 36: a user may be a key, ``https://TOKEN@host``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from scrapeq import Queue, Settings
from support.cli_helpers import run, scrub_env

SECRET = "s3cret-pw"
URL = f"https://bob:{SECRET}@shop-1.example.com/p/1"
SHOWN = "https://***:***@shop-1.example.com/p/1"


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    scrub_env(monkeypatch, tmp_path, columns=400)


@pytest.fixture
def dead_id(redis_url: str) -> Any:
    q = Queue.from_url(redis_url, settings=Settings())
    q.enqueue(URL)
    (job,) = q.claim(1).jobs
    assert job.url == URL, "the stored URL keeps its credentials (the fetch needs them)"
    q.fail(job, "http_401", f"refused by {URL}")
    q.close()
    return job.id


@pytest.mark.parametrize(
    "argv",
    [
        ["dead", "list"],
        ["dead", "list", "--json"],
        ["job", "show", "{id}"],
        ["job", "show", "{id}", "--json"],
    ],
)
def test_cli_listings_redact_url_passwords(
    capsys: Any, redis_url: str, dead_id: str, argv: list[str]
) -> None:
    code, out, err = run(capsys, "--redis", redis_url, *[a.format(id=dead_id) for a in argv])
    assert code == 0, err
    assert SECRET not in out and "bob" not in out
    assert "***:***@shop-1.example.com" in out
    if "--json" in argv:
        doc = json.loads(out)
        row = doc[0] if isinstance(doc, list) else doc
        assert row["url"] == SHOWN
        assert row["errors"][-1]["message"] == f"refused by {SHOWN}"
