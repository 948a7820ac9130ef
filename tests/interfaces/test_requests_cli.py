"""``scrapeq enqueue`` with requests (issue 23): the request flags, ``--requests FILE.jsonl``
(bad lines reported like ``--file``'s, resumable), bad input exit 2 with nothing enqueued, and
end to end through ``scrapeq worker`` against a loopback echo site."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from scrapeq import Queue
from support.cli_helpers import run
from support.sites import Site, echo, threaded_site

pytestmark = pytest.mark.usefixtures("clean_env")


@pytest.fixture
def echo_site() -> Iterator[Site]:
    """An echo site served from its own thread (the CLI runs its own event loop here)."""
    with threaded_site(echo) as site:
        yield site


def jobs(redis_url: str) -> list[Any]:
    q = Queue.from_url(redis_url)
    try:
        return q.claim(100).jobs
    finally:
        q.close()


def test_request_flags_make_every_url_a_request(
    redis_url: str, capsys: Any, tmp_path: Path
) -> None:
    body = tmp_path / "body.bin"
    body.write_bytes(b"\x00raw")
    base = ["--redis", redis_url, "enqueue", "--allow-private"]
    code, out, err = run(capsys, *base, "https://a.example.com/api", "--json-body", '{"q": 1}',
                         "--header", "Authorization: Bearer t", "--header", "X-A: 1",
                         "--cookie", "sid=abc", "--meta", '{"k": "v"}')  # fmt: skip
    assert (code, out.strip(), err) == (0, "added 1 job", "")
    assert run(capsys, *base, "https://b.example.com/up", "--method", "put", "--data",
               f"@{body}")[0] == 0  # fmt: skip
    assert run(capsys, *base, "https://c.example.com/f", "--form", "a=1", "--form", "b=x y")[0] == 0
    got = {j.domain: j.request for j in jobs(redis_url)}
    a = got["a.example.com"]
    assert (a.method, a.body, a.cookies, a.meta) == ("POST", b'{"q":1}', (("sid", "abc"),),
                                                      {"k": "v"})  # fmt: skip
    assert ("Authorization", "Bearer t") in a.headers and ("X-A", "1") in a.headers
    assert (got["b.example.com"].method, got["b.example.com"].body) == ("PUT", b"\x00raw")
    assert (got["c.example.com"].method, got["c.example.com"].body) == ("POST", b"a=1&b=x+y")


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (["--header", "X-A: 1\r\nX-B: 2"], "CR, LF"),
        (["--header", "no colon"], "'Name: value'"),
        (["--method", "GE T"], "HTTP method"),
        (["--json-body", "{nope"], "--json-body"),
        (["--data", "@/nonexistent/body"], "cannot read"),
        (["--data", "x", "--json-body", "1"], "one of"),
        (["--cookie", "a=b;c"], "cookie"),
    ],
)
def test_bad_request_flags_exit_2_with_one_line_and_nothing_enqueued(
    redis_url: str, capsys: Any, flags: list[str], words: str
) -> None:
    code, out, err = run(capsys, "--redis", redis_url, "enqueue", "https://a.example.com/", *flags)
    assert code == 2 and words in err and len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err and out == ""
    assert jobs(redis_url) == []


def test_body_over_max_payload_exits_2_and_enqueues_nothing(redis_url: str, capsys: Any) -> None:
    code, _, err = run(capsys, "--redis", redis_url, "enqueue", "https://a.example.com/",
                       "https://b.example.com/", "--data", "x" * 2000)  # fmt: skip
    assert code == 0  # the default max_payload holds it
    code, _, err = run(capsys, "--redis", redis_url, "enqueue", "https://c.example.com/",
                       "--data", "x" * (1024 * 1024 + 1))  # fmt: skip
    assert code == 2 and "over max_payload" in err and "Traceback" not in err
    assert len(jobs(redis_url)) == 2


def test_requests_file_reports_bad_lines_and_resumes(
    redis_url: str, capsys: Any, tmp_path: Path
) -> None:
    path = tmp_path / "requests.jsonl"
    lines = [
        json.dumps({"url": "https://a.example.com/s", "method": "POST", "json": {"q": 1}}),
        "# a comment",
        "{not json",
        json.dumps(
            {"url": "https://a.example.com/s", "method": "POST", "json": {"q": 2}, "meta": {"n": 2}}
        ),
        json.dumps({"url": "https://a.example.com/s", "headers": {"X": "a\nb"}}),
        json.dumps({"url": "https://a.example.com/s", "bogus": 1}),
        json.dumps({"url": "https://b.example.com/raw", "method": "PUT", "body64": "AP8="}),
        json.dumps({"url": "ftp://a.example.com/"}),
    ]
    path.write_text("\n".join(lines) + "\n")
    code, out, err = run(capsys, "--redis", redis_url, "enqueue", "--requests", str(path),
                         "--unique", "--json")  # fmt: skip
    assert code == 0, err
    assert json.loads(out)["added"] == 3 and json.loads(out)["invalid"] == 4
    said = err.strip().splitlines()
    assert [line.split(":")[0] for line in said] == ["line 3", "line 5", "line 6", "line 8"]
    assert "CR, LF" in said[1] and "bogus" in said[2]
    # the same file again from line 4: the unique POST of line 4 is a duplicate
    code, out, _ = run(capsys, "--redis", redis_url, "enqueue", "--requests", str(path),
                       "--unique", "--json", "--resume-from", "4")  # fmt: skip
    assert (code, json.loads(out)["added"], json.loads(out)["skipped"]) == (0, 0, 2)
    bodies = sorted(j.request.body for j in jobs(redis_url))
    assert bodies == [b"\x00\xff", b'{"q":1}', b'{"q":2}']


def test_requests_file_refuses_other_inputs(redis_url: str, capsys: Any, tmp_path: Path) -> None:
    code, _, err = run(capsys, "--redis", redis_url, "enqueue", "--requests", "x.jsonl",
                       "--method", "POST")  # fmt: skip
    assert code == 2 and "--requests" in err


def test_end_to_end_cli_enqueue_and_worker_send_the_request(
    redis_url: str, capsys: Any, tmp_path: Path, echo_site: Site
) -> None:
    path = tmp_path / "requests.jsonl"
    path.write_text(
        json.dumps(
            {
                "url": echo_site.url("/login"),
                "method": "POST",
                "form": {"u": "me"},
                "cookies": {"sid": "1"},
                "meta": {"step": "login"},
            }
        )
        + "\n"
    )
    base = ["--redis", redis_url]
    assert run(capsys, *base, "enqueue", "--requests", str(path), "--allow-private")[0] == 0
    assert run(capsys, *base, "enqueue", echo_site.url("/api"), "--json-body", '{"a": 1}',
               "--header", "X-Key: k", "--allow-private")[0] == 0  # fmt: skip
    results = tmp_path / "results.jsonl"
    code, _, err = run(capsys, *base, "worker", "--burst", "--allow-private", "--results",
                       str(results), "--handler", "support.sites:echoed")  # fmt: skip
    assert code == 0, err
    rows = {
        r["url"].rsplit("/", 1)[1]: r for r in map(json.loads, results.read_text().splitlines())
    }
    assert rows["login"]["meta"] == {"step": "login"} and rows["api"]["meta"] is None
    login, api = rows["login"]["result"], rows["api"]["result"]
    assert (login["method"], login["body"], login["cookies"]) == ("POST", "u=me", {"sid": "1"})
    assert (api["method"], api["body"]) == ("POST", '{"a":1}')
    assert ["X-Key", "k"] in api["headers"] and ["Content-Type", "application/json"] in api[
        "headers"
    ]
    assert echo_site.hits == {"/login": 1, "/api": 1}


def test_job_show_names_the_request_and_hides_its_secrets(redis_url: str, capsys: Any) -> None:
    code, out, _ = run(capsys, "--redis", redis_url, "enqueue", "https://a.example.com/x",
                       "--json-body", '{"q": 1}', "--header", "Authorization: Bearer s3cret",
                       "--cookie", "sid=t0ken", "--json")  # fmt: skip
    (job_id,) = json.loads(out)["ids"]
    code, out, err = run(capsys, "--redis", redis_url, "job", "show", job_id)
    assert code == 0, err
    assert "POST" in out and "Authorization: ***" in out and "body 7 bytes" in out
    code, out, _ = run(capsys, "--redis", redis_url, "job", "show", job_id, "--json")
    request = json.loads(out)["request"]
    assert (request["method"], request["body_bytes"]) == ("POST", 7)
    assert "s3cret" not in out and "t0ken" not in out
