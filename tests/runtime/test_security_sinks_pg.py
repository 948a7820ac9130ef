"""Issue 36 item 7: a PostgreSQL password never reaches an error line.

libpq takes the password in the user info (``postgresql://u:pw@h/db``), as a ``password`` query
parameter (``postgresql://u@h/db?password=pw``, its documented URI form) or as a keyword/value
pair (``host=h password=pw``). Each is redacted wherever a URL or a libpq message is shown,
and libpq's own message about a bad percent-escape (which quotes the token) is not echoed.
Against a real private cluster (tests/support/pg_proc.py).
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from scrapeq.engine.model.urls import redact_text, redact_url
from scrapeq.errors import ConfigError
from scrapeq.runtime.sinks import PostgresSink, sink_from_url
from support.cli_helpers import run, scrub_env


def _secret() -> str:
    return "PGSECRET" + uuid.uuid4().hex[:10]


def _base(postgres_server: str) -> str:
    """``postgresql://postgres@127.0.0.1:PORT``: the cluster without a database."""
    parts = urlsplit(postgres_server)
    return f"{parts.scheme}://{parts.netloc}"


def _worker(capsys: Any, redis_url: str, results: str) -> tuple[int, str, str]:
    return run(capsys, "--redis", redis_url, "worker", "--burst", "--results", results)


@pytest.fixture
def cli_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    scrub_env(monkeypatch, tmp_path)


@pytest.mark.usefixtures("cli_env")
@pytest.mark.parametrize(
    "shape",
    [
        "{base}/nodb_{tag}?password={s}",  # a missing database
        "{base}/postgres?password={s}&table=a-b",  # a bad table name
        "{base}/postgres?table=a-b&password={s}",
        "{base}/nodb_{tag}?sslpassword={s}&password={s}",
        "{base}/postgres?password={s}&table=ok_{tag}&bogus_option=1",  # libpq refuses an option
    ],
)
def test_cli_error_lines_hide_a_password_query_parameter(
    capsys: Any, redis_url: str, postgres_server: str, shape: str
) -> None:
    secret = _secret()
    url = shape.format(base=_base(postgres_server), s=secret, tag=uuid.uuid4().hex[:6])
    code, out, err = _worker(capsys, redis_url, url)
    assert code == 2, (code, err)
    assert "Traceback" not in err
    assert secret not in out + err, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("scrapeq: error: --results postgresql://***@127.0.0.1:"), last
    assert "password=***" in last, last


@pytest.mark.usefixtures("cli_env")
@pytest.mark.parametrize(
    "shape",
    [
        "{base}/postgres?table=t_{tag}",
        "{base}/postgres?password=pw%zz{s}&table=t_{tag}",
    ],
)
def test_a_bad_percent_escape_is_not_echoed(
    capsys: Any, redis_url: str, postgres_server: str, shape: str
) -> None:
    """libpq says ``invalid percent-encoded token: "pw%zz..."``: the token is the password."""
    secret = _secret()
    parts = urlsplit(postgres_server)
    base = f"postgresql://postgres:pw%zz{secret}@{parts.hostname}:{parts.port}"
    url = shape.format(base=base, s=secret, tag=uuid.uuid4().hex[:6])
    code, out, err = _worker(capsys, redis_url, url)
    assert code == 2, (code, err)
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert secret not in out + err and "pw%zz" not in err, err
    assert "percent" in err, "says what is wrong"


def test_the_sink_hides_a_password_parameter_and_still_uses_it(postgres_url: str) -> None:
    """The password reaches libpq (the cluster trusts loopback, so any password works)."""
    secret = _secret()
    sink = sink_from_url(f"{postgres_url}&password={secret}")
    assert isinstance(sink, PostgresSink)
    assert secret not in sink.shown and "password=***" in sink.shown
    assert secret in sink._conninfo, "libpq gets the real password"


async def test_a_database_error_line_never_holds_the_password(postgres_server: str) -> None:
    secret = _secret()
    sink = PostgresSink(f"{_base(postgres_server)}/nodb_{uuid.uuid4().hex[:6]}?password={secret}")
    with pytest.raises(ConfigError) as info:
        await sink.open()
    assert secret not in str(info.value) and "does not exist" in str(info.value)


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("postgresql://crawler@h/db?password=SECRET", "postgresql://***@h/db?password=***"),
        ("postgresql://h/db?sslmode=disable&password=SECRET&x=1",
         "postgresql://h/db?sslmode=disable&password=***&x=1"),
        ("host=h password=SECRET dbname=db", "host=h password=*** dbname=db"),
        ("host=h password = 'SEC RET' dbname=db", "host=h password = *** dbname=db"),
        ("host=h password='SE\\'CRET' dbname=db", "host=h password=*** dbname=db"),
        ("PASSWORD=SECRET", "PASSWORD=***"),
        ("sslpassword=SECRET", "sslpassword=***"),
    ],
)  # fmt: skip
def test_redact_text_knows_libpq_password_forms(text: str, shown: str) -> None:
    assert redact_text(text) == shown
    assert redact_url(text) == shown
