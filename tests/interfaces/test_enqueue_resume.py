"""``enqueue --file`` that fails part-way says what it added and where to resume (issue 21,
item 6): through a proxy that cuts replies, and at ``maxmemory`` with ``noeviction``, each
failed run exits 1 with one JSON document (``--json``) or lines on stderr naming the jobs
added for certain and the line to resume from; ``--resume-from`` that line with ``--unique``
then adds exactly the rest.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import redis

from scrapeq import Queue
from support.cli_helpers import run
from support.redis_proc import RedisProcess
from support.tcpproxy import TcpProxy

pytestmark = pytest.mark.usefixtures("clean_env")


def url_file(path: Path, n: int) -> list[str]:
    urls = [f"https://shop-{i % 40}.example.com/p/{i}" for i in range(n)]
    path.write_text("".join(u + "\n" for u in urls))
    return urls


def enqueued(url: str) -> tuple[int, int]:
    """(jobs ever created, jobs ready) of the default queue."""
    q = Queue.from_url(url)
    try:
        c = q.status()["counts"]
    finally:
        q.close()
    return c["enqueued"], c["ready"]


def test_cut_replies_each_failure_says_what_was_added_and_a_resume_adds_the_rest(
    capsys: Any, redis_url: str, tmp_path: Path
) -> None:
    lines = 30_000
    urls = url_file(tmp_path / "urls.txt", lines)
    failures: list[dict[str, Any]] = []
    with TcpProxy.for_redis_url(redis_url) as proxy:
        via = proxy.url(redis_url)
        start = 1
        for attempt in range(60):
            # seeded: the same cuts every run of the test; 8% of reply chunks, as the issue's
            proxy.cut_replies(0.08, seed=attempt)
            argv = ["--redis", via, "enqueue", "--file", str(tmp_path / "urls.txt"), "--unique",
                    "--json", "--resume-from", str(start)]  # fmt: skip
            code, out, err = run(capsys, *argv)
            if code == 1 and out == "" and "cannot reach Redis" in err:
                continue  # the connection check's answer was cut: nothing was read or sent
            doc = json.loads(out)  # one JSON document on stdout, failed or not
            if code == 0:
                break
            assert code == 1, err
            assert "Traceback" not in err and "--resume-from" in err
            assert doc["error"] and doc["resume_from_line"] >= start
            # every line before the resume line is in the queue, for certain
            created, _ = enqueued(redis_url)
            assert created >= doc["resume_from_line"] - 1
            # ... and none after the lines whose answer was lost
            last = (doc["uncertain_lines"] or [0, doc["resume_from_line"] - 1])[1]
            assert created <= last
            failures.append(doc)
            start = doc["resume_from_line"]
        else:
            pytest.fail("60 runs did not get through")
    assert len(failures) >= 2, "the proxy cut too few replies: the test proves little"
    assert proxy.cuts >= len(failures)
    created, ready = enqueued(redis_url)
    assert (created, ready) == (lines, lines), "every line once, none twice"
    r = redis.Redis.from_url(redis_url, decode_responses=True)
    assert r.hlen("sq:{default}:unique") == len(set(urls))


def test_a_failure_in_text_mode_says_it_on_stderr(
    capsys: Any, redis_url: str, tmp_path: Path
) -> None:
    url_file(tmp_path / "urls.txt", 3_000)
    with TcpProxy.for_redis_url(redis_url) as proxy:
        via = proxy.url(redis_url)
        proxy.cut_replies(1.0, min_bytes=1000)  # an enqueue's answer, not a PING's
        code, out, err = run(capsys, "--redis", via, "enqueue", "--file",
                             str(tmp_path / "urls.txt"))  # fmt: skip
    assert code == 1 and out == ""
    assert "Traceback" not in err
    assert "added 0 jobs" in err and "--resume-from 1" in err and "lines 1-1000" in err
    assert "may or may not" in err  # the lost reply: honest about the batch
    assert "without --unique" in err  # ... and that a plain re-run may add it twice


@pytest.mark.backends("single")
def test_at_maxmemory_with_noeviction_the_json_says_what_was_added(
    capsys: Any, tmp_path: Path
) -> None:
    lines = 20_000
    url_file(tmp_path / "urls.txt", lines)
    (tmp_path / "data").mkdir()
    server = RedisProcess(tmp_path / "data", "--maxmemory", "3mb",
                          "--maxmemory-policy", "noeviction").start()  # fmt: skip
    try:
        argv = ["--redis", server.url, "enqueue", "--file", str(tmp_path / "urls.txt"),
                "--unique", "--json"]  # fmt: skip
        code, out, err = run(capsys, *argv)
        assert code == 1, err
        doc = json.loads(out)
        assert "maxmemory" in doc["error"] or "OOM" in doc["error"]
        created, _ = enqueued(server.url)
        assert 0 < doc["added"] <= created < lines
        assert doc["resume_from_line"] == doc["added"] + 1
        redis.Redis.from_url(server.url).config_set("maxmemory", "0")
        code, out, err = run(capsys, *argv, "--resume-from", str(doc["resume_from_line"]))
        assert code == 0, err
        assert enqueued(server.url) == (lines, lines)
    finally:
        server.stop()


def test_resume_from_skips_the_lines_before_it(capsys: Any, redis_url: str, tmp_path: Path) -> None:
    urls = url_file(tmp_path / "urls.txt", 10)
    code, out, err = run(capsys, "--redis", redis_url, "enqueue", "--file",
                         str(tmp_path / "urls.txt"), "--resume-from", "4", "--json")  # fmt: skip
    assert code == 0, err
    assert json.loads(out)["added"] == 7
    q = Queue.from_url(redis_url)
    try:
        got = sorted(j.url for j in q.claim(20).jobs)
    finally:
        q.close()
    assert got == sorted(urls[3:])


@pytest.mark.parametrize(
    "argv",
    [
        ["https://a.example.com/", "--resume-from", "2"],
        ["https://a.example.com/", "--file", "urls.txt", "--resume-from", "2"],
        ["--file", "urls.txt", "--resume-from", "0"],
    ],
)
def test_resume_from_needs_a_file_alone(
    capsys: Any, redis_url: str, tmp_path: Path, argv: list[str]
) -> None:
    url_file(tmp_path / "urls.txt", 3)
    code, out, err = run(capsys, "--redis", redis_url, "enqueue", *argv)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "--resume-from" in err
    assert redis.Redis.from_url(redis_url).keys("sq:*") == []


class _Interrupted:
    """Standard input that is interrupted (Ctrl-C) after ``n`` lines."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __enter__(self) -> _Interrupted:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def __iter__(self) -> Any:
        for i in range(self.n):
            yield f"https://shop-{i % 7}.example.com/p/{i}\n"
        raise KeyboardInterrupt


def test_ctrl_c_says_what_was_added_and_sent_nothing_more(
    capsys: Any, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sys.stdin", _Interrupted(1500))
    code, out, err = run(capsys, "--redis", redis_url, "enqueue", "--file", "-", "--json")
    assert code == 130, err
    doc = json.loads(out)
    assert (doc["added"], doc["resume_from_line"], doc["uncertain_lines"]) == (1000, 1001, None)
    assert "nothing from that line on was sent" in err
    assert enqueued(redis_url) == (1000, 1000)
