"""The CLI as users and scripts drive it: commands, --json schemas, exit codes, messages."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import redis

from scrapeq import Queue, Settings
from scrapeq.engine.server.launcher import free_port
from support.cli_helpers import run

pytestmark = pytest.mark.usefixtures("clean_env")

SCRAPEQ = [sys.executable, "-m", "scrapeq"]


def urls(n: int, shop: int = 1) -> list[str]:
    return [f"https://shop-{shop}.example.com/p/{i}" for i in range(n)]


def test_enqueue_arguments_and_json_ids(capsys: Any, redis_url: str) -> None:
    code, out, err = run(capsys, "--redis", redis_url, "enqueue", *urls(3), "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["added"] == 3 and len(doc["ids"]) == 3 and doc["invalid"] == 0
    code, out, _ = run(capsys, "--redis", redis_url, "enqueue", *urls(2, 2), "--lane", "bulk")
    assert (code, out.strip()) == (0, "added 2 jobs")


def test_enqueue_file_reports_bad_lines_with_numbers_and_adds_the_rest(
    capsys: Any, redis_url: str, tmp_path: Path
) -> None:
    f = tmp_path / "urls.txt"
    f.write_text("https://a.example.com/1\nftp://nope\n\n# comment\nhttp://127.0.0.1/x\n"
                 "https://b.example.com/2\n")  # fmt: skip
    code, out, err = run(capsys, "--redis", redis_url, "enqueue", "--file", str(f))
    assert code == 0
    assert out.strip() == "added 2 jobs"
    lines = err.strip().splitlines()
    assert lines[0].startswith("line 2: ftp://nope") and "scheme" in lines[0]
    assert lines[1].startswith("line 5:") and "private" in lines[1]
    assert "Traceback" not in err


def test_enqueue_all_invalid_exits_2_and_writes_nothing(capsys: Any, redis_url: str) -> None:
    code, _, err = run(capsys, "--redis", redis_url, "enqueue", "ftp://x", "not a url")
    assert code == 2 and "argument 1" in err and "argument 2" in err
    assert redis.Redis.from_url(redis_url).keys("sq:*") == []


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["enqueue", "https://a.example.com/", "--lane", "urgent"], "unknown lane 'urgent'"),
        (["enqueue", "https://a.example.com/", "--payload", "{bad"], "--payload"),
        (["enqueue", "--file", "/nonexistent/urls.txt"], "cannot read /nonexistent/urls.txt"),
        (["breaker", "reset", "nowhere.example.com"], "unknown domain 'nowhere.example.com'"),
        (["breaker", "trip", "nowhere.example.com"], "unknown domain 'nowhere.example.com'"),
    ],
)
def test_user_errors_exit_2_with_one_line(
    capsys: Any, redis_url: str, argv: list[str], needle: str
) -> None:
    code, out, err = run(capsys, "--redis", redis_url, *argv)
    assert code == 2, (out, err)
    assert needle in err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert redis.Redis.from_url(redis_url).keys("sq:*") == []


def test_bad_setting_in_environment_names_it(
    capsys: Any, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SCRAPEQ_BREAKER_COOLDOWN", "abc")
    code, _, err = run(capsys, "--redis", redis_url, "status")
    assert code == 2 and "breaker_cooldown" in err and "Traceback" not in err


def test_bad_setting_in_config_file(capsys: Any, redis_url: str, tmp_path: Path) -> None:
    cfg = tmp_path / "scrapeq.toml"
    cfg.write_text("lease = -1\n")
    code, _, err = run(capsys, "--redis", redis_url, "--config", str(cfg), "status")
    assert code == 2 and "'lease'" in err


def test_unreachable_redis_exits_1_without_traceback(capsys: Any) -> None:
    code, _, err = run(capsys, "--redis", "redis://127.0.0.1:1/0", "status")
    assert code == 1 and "cannot reach Redis" in err and "Traceback" not in err


#: One command of each kind: a read, a write, the worker, the server, the demo. (The dashboard
#: must fail before it binds: its port is only free when the module is collected.)
EVERY_KIND = [
    ["status"],
    ["dead", "list", "--json"],
    ["enqueue", "https://a.example.com/"],
    ["worker", "--burst"],
    ["dashboard", "--port", str(free_port())],
    ["demo", "--duration", "1"],
]


@pytest.mark.parametrize("argv", EVERY_KIND, ids=lambda a: a[0])
def test_a_database_the_server_lacks_is_one_line_for_every_command(
    capsys: Any, redis_url: str, argv: list[str]
) -> None:
    url = redis_url.removesuffix("/0") + "/99"
    code, out, err = run(capsys, "--redis", url, *argv)
    assert code == 1, (out, err)
    assert err == (
        f"scrapeq: error: Redis at {url} has no database 99 (DB index is out of range): "
        "pick one below the server's 'databases' setting\n"
    )


@pytest.mark.parametrize("argv", EVERY_KIND, ids=lambda a: a[0])
def test_a_port_where_something_else_answers_is_one_line_for_every_command(
    capsys: Any, not_redis_url: str, argv: list[str]
) -> None:
    code, out, err = run(capsys, "--redis", not_redis_url, *argv)
    assert code == 1, (out, err)
    assert err.startswith(f"scrapeq: error: {not_redis_url} does not answer like a Redis server")
    assert len(err.splitlines()) == 1


def test_subprocess_protocol_error_prints_no_traceback(not_redis_url: str) -> None:
    proc = subprocess.run([*SCRAPEQ, "--redis", not_redis_url, "status"],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.startswith("scrapeq: error: ") and len(proc.stderr.splitlines()) == 1


def test_dashboard_on_a_port_in_use_is_one_line(capsys: Any, redis_url: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        code, out, err = run(capsys, "--redis", redis_url, "dashboard", "--port", str(port))
    assert code == 1, (out, err)
    assert err == (
        f"scrapeq: error: cannot serve the dashboard on 127.0.0.1:{port}: "
        "Address already in use (choose another --port)\n"
    )


def test_dashboard_on_an_address_not_of_this_machine_is_one_line(
    capsys: Any, redis_url: str
) -> None:
    # 192.0.2.1 is TEST-NET-1: never a local address, so bind fails at once, nothing is sent.
    code, _, err = run(
        capsys, "--redis", redis_url, "dashboard", "--host", "192.0.2.1", "--token", "t" * 16
    )
    assert code == 1
    assert err == (
        "scrapeq: error: cannot serve the dashboard on 192.0.2.1:8000: "
        "Cannot assign requested address\n"
    )


def test_bad_redis_url_exits_2(capsys: Any) -> None:
    code, _, err = run(capsys, "--redis", "http://localhost:6379", "status")
    assert code == 2 and "redis_url" in err


@pytest.mark.parametrize("query", ["db=x", "socket_timeout=soon", "colour=blue"])
def test_a_url_option_redis_py_refuses_exits_2_in_one_line(
    capsys: Any, redis_url: str, query: str
) -> None:
    code, _, err = run(capsys, "--redis", f"{redis_url}?{query}", "status")
    assert code == 2, err
    assert err.startswith("scrapeq: error: setting 'redis_url': ") and len(err.splitlines()) == 1


def test_status_json_follows_interface_schema(capsys: Any, redis_url: str) -> None:
    q = Queue.from_url(redis_url)
    q.enqueue_many(urls(3))
    q.enqueue(urls(1, 2)[0], lane="critical", delay=60)
    (job,) = q.claim(1).jobs
    q.fail(job, "http_404")
    code, out, _ = run(capsys, "--redis", redis_url, "status", "--json")
    assert code == 0
    doc = json.loads(out)
    assert set(doc) == {
        "queue", "counts", "lanes", "domains", "breakers", "paused_until", "paused_until_ms",
        "alarms", "owed_lines",
    }  # fmt: skip
    assert doc["breakers"] == {"closed": 2, "open": 0, "retired": 0}  # shop-1, shop-2
    assert doc["counts"] == {
        "enqueued": 4, "ready": 2, "delayed": 1, "inflight": 0, "done": 0, "dead": 1,
        "cancelled": 0,
    }  # fmt: skip
    assert set(doc["lanes"]) == {"critical", "normal", "bulk"}
    assert set(doc["lanes"]["normal"]) == {
        "ready", "delayed", "oldest_ready_age", "oldest_ready_age_ms",
    }  # fmt: skip
    assert set(doc["domains"][0]) == {
        "domain", "state", "ready", "delayed", "inflight", "done", "dead",
        "consecutive_failures", "window_failures", "window_calls", "open_until", "open_until_ms",
        "concurrency", "adaptive", "limit", "interval", "interval_ms", "baseline", "baseline_ms",
        "latency", "latency_ms",
    }  # fmt: skip
    q.close()


def test_status_of_an_empty_queue_is_zeros_not_an_error(
    capsys: Any, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Monitoring polls before the first enqueue: the full schema, the configured lanes at 0.
    monkeypatch.setenv("SCRAPEQ_LANES", "fast=-60,slow=600")
    code, out, err = run(capsys, "--redis", redis_url, "status", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc == {
        "queue": "default",
        "counts": dict.fromkeys(
            ("enqueued", "ready", "delayed", "inflight", "done", "dead", "cancelled"), 0
        ),
        "lanes": {
            lane: {"ready": 0, "delayed": 0, "oldest_ready_age": 0.0, "oldest_ready_age_ms": 0}
            for lane in ("fast", "slow")
        },
        "domains": [],
        "breakers": {"closed": 0, "open": 0, "retired": 0},
        "paused_until": None,
        "paused_until_ms": None,
        "alarms": [],
        "owed_lines": 0,
    }
    assert err.strip() == "scrapeq: queue 'default' is empty; no queues on this Redis yet"
    code, out, _ = run(capsys, "--redis", redis_url, "status")
    assert code == 0 and "queue default" in out and "fast" in out
    assert redis.Redis.from_url(redis_url).keys("sq:*") == []  # looking created nothing


def test_empty_queue_hint_names_the_known_queues(capsys: Any, redis_url: str) -> None:
    for name in ("shops", "news"):
        q = Queue.from_url(redis_url, settings=Settings(queue=name))
        q.enqueue(urls(1)[0])
        q.close()
    code, out, err = run(capsys, "--redis", redis_url, "--queue", "shpos", "status", "--json")
    assert code == 0 and json.loads(out)["counts"]["enqueued"] == 0
    assert err.strip() == "scrapeq: queue 'shpos' is empty; known queues: news, shops"
    code, _, err = run(capsys, "--redis", redis_url, "--queue", "shops", "status", "--json")
    assert code == 0 and err == ""  # no hint for a queue that exists
    code, _, err = run(capsys, "--redis", redis_url, "--queue", "shpos", "breaker", "reset",
                       "shop-1.example.com")  # fmt: skip
    assert code == 2
    assert err == (
        "scrapeq: error: unknown domain 'shop-1.example.com' "
        "(queue 'shpos' is empty; known queues: news, shops)\n"
    )


def test_empty_queue_hint_scans_a_bounded_number_of_keys(
    capsys: Any, redis_url: str, redis_client: redis.Redis
) -> None:
    redis_client.mset({f"other:{i}": 1 for i in range(20_000)})  # a Redis shared with others
    redis_client.config_resetstat()
    code, _, err = run(capsys, "--redis", redis_url, "status", "--json")
    assert code == 0
    assert err.strip() == (
        "scrapeq: queue 'default' is empty; no queues among the first keys scanned"
    )
    assert redis_client.info("commandstats")["cmdstat_scan"]["calls"] == 5


@pytest.mark.parametrize(
    "argv,expected",
    [
        (["dead", "list", "--json"], "[]"),
        (["dead", "list"], ""),
        (["dead", "replay", "--all"], "replayed 0 dead letters"),
        (["dead", "replay", "--domain", "shop-1.example.com"], "replayed 0 dead letters"),
        (["dead", "purge"], "purged 0 dead letters"),
        (["breakers", "--json"], "[]"),
        (["domains", "--json"], "[]"),
    ],
)
def test_commands_on_an_empty_queue_answer_nothing_and_exit_0(
    capsys: Any, redis_url: str, argv: list[str], expected: str
) -> None:
    code, out, err = run(capsys, "--redis", redis_url, *argv)
    assert code == 0, err
    assert expected in out
    assert err.strip() == "scrapeq: queue 'default' is empty; no queues on this Redis yet"
    assert redis.Redis.from_url(redis_url).keys("sq:*") == []


def test_dead_replay_of_an_id_on_an_empty_queue_is_not_a_dead_letter(
    capsys: Any, redis_url: str
) -> None:
    code, _, err = run(capsys, "--redis", redis_url, "dead", "replay", "--id", "zz9")
    assert code == 2 and "not a dead letter: zz9" in err
    assert redis.Redis.from_url(redis_url).keys("sq:*") == []


def test_status_table_shows_lanes_domains_and_alarms(capsys: Any, redis_url: str) -> None:
    q = Queue.from_url(redis_url, settings=Settings(breaker_max_trips=1))
    q.enqueue_many(urls(2))
    for _ in range(5):
        (job,) = q.claim(1).jobs
        if q.retry(job, kind="timeout", delay=0) != "retried":
            break
    code, out, _ = run(capsys, "--redis", redis_url, "status")
    assert code == 0
    assert "lanes" in out and "critical" in out and "shop-1.example.com" in out
    assert "retired" in out and "ALARM domain_retired" in out
    q.close()


def test_dead_list_replay_and_purge(capsys: Any, redis_url: str) -> None:
    q = Queue.from_url(redis_url, settings=Settings(domain_concurrency=10))
    q.enqueue_many(urls(3) + urls(2, 2))
    for job in q.claim(10).jobs:
        q.fail(job, "http_404", "gone")
    code, out, _ = run(capsys, "--redis", redis_url, "dead", "list", "--json")
    rows = json.loads(out)
    assert code == 0 and len(rows) == 5
    assert rows[0]["dead_reason"] == "http_404" and rows[0]["last_error"]["message"] == "gone"
    code, out, _ = run(
        capsys, "--redis", redis_url, "dead", "list", "--domain", "shop-2.example.com"
    )
    assert code == 0 and "shop-2.example.com" in out and "shop-1.example.com" not in out
    code, out, _ = run(capsys, "--redis", redis_url, "dead", "replay", "--id", rows[0]["id"])
    assert (code, out.strip()) == (0, "replayed 1 dead letter")
    code, out, err = run(capsys, "--redis", redis_url, "dead", "replay", "--id", "zz9")
    assert code == 2 and "not a dead letter: zz9" in err
    code, out, _ = run(
        capsys, "--redis", redis_url, "dead", "replay", "--domain", "shop-2.example.com",
        "--reset-attempts",
    )  # fmt: skip
    assert code == 0 and "replayed" in out
    code, _, err = run(capsys, "--redis", redis_url, "dead", "replay")
    assert code == 2 and "exactly one" in err
    code, out, _ = run(capsys, "--redis", redis_url, "dead", "purge", "--all", "--yes")
    assert code == 0 and out.strip().startswith("purged ")
    assert q.status()["counts"]["dead"] == 0
    q.close()


def test_breakers_and_domains(capsys: Any, redis_url: str) -> None:
    q = Queue.from_url(redis_url)
    q.enqueue_many(urls(2) + urls(1, 2))
    code, out, _ = run(capsys, "--redis", redis_url, "breaker", "trip", "shop-1.example.com",
                       "--cooldown", "30")  # fmt: skip
    assert (code, out.strip()) == (0, "shop-1.example.com: open")
    code, out, _ = run(capsys, "--redis", redis_url, "breakers", "--json")
    states = {b["domain"]: b["state"] for b in json.loads(out)}
    assert states == {"shop-1.example.com": "open", "shop-2.example.com": "closed"}
    code, out, _ = run(capsys, "--redis", redis_url, "breaker", "reset", "shop-1.example.com")
    assert (code, out.strip()) == (0, "shop-1.example.com: closed")
    code, _, err = run(capsys, "--redis", redis_url, "breaker", "reset", "nope.example.com")
    assert code == 2 and "unknown domain" in err
    code, out, _ = run(capsys, "--redis", redis_url, "domain", "set", "shop-2.example.com",
                       "--delay", "2.5", "--concurrency", "1")  # fmt: skip
    assert code == 0 and "delay 2.5s, concurrency 1" in out
    code, out, _ = run(capsys, "--redis", redis_url, "domains", "--json")
    by = {d["domain"]: d for d in json.loads(out)}
    assert by["shop-2.example.com"]["delay"] == 2.5 and by["shop-2.example.com"]["concurrency"] == 1
    code, out, _ = run(capsys, "--redis", redis_url, "breakers")
    assert code == 0 and "shop-1.example.com" in out
    code, _, err = run(capsys, "--redis", redis_url, "domain", "set", "x.example.com",
                       "--concurrency", "0")  # fmt: skip
    assert code == 2
    q.close()


def test_help_has_examples() -> None:
    out = subprocess.run([*SCRAPEQ, "enqueue", "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "Examples" in out.stdout


def test_subprocess_stdin_enqueue_and_json_status(redis_url: str, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCRAPEQ_")}
    data = "\n".join(urls(50)) + "\nftp://bad\n"
    argv = [*SCRAPEQ, "--redis", redis_url, "enqueue", "--file", "-"]
    proc = subprocess.run(argv, input=data, capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "added 50 jobs"
    assert proc.stderr.strip().startswith("line 51: ftp://bad")
    proc = subprocess.run([*SCRAPEQ, "--redis", redis_url, "status", "--json"],
                          capture_output=True, text=True, env=env, timeout=60)  # fmt: skip
    assert proc.returncode == 0
    assert json.loads(proc.stdout)["counts"]["ready"] == 50


def test_subprocess_usage_error_exits_2(redis_url: str) -> None:
    proc = subprocess.run([*SCRAPEQ, "--redis", redis_url, "worker", "--concurrency", "0"],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert proc.returncode == 2 and "Traceback" not in proc.stderr


@pytest.mark.slow
def test_enqueue_streams_a_large_file(capsys: Any, redis_url: str, tmp_path: Path) -> None:
    f = tmp_path / "big.txt"
    with f.open("w") as out:
        for i in range(30_000):
            out.write(f"https://shop-{i % 50}.example.com/p/{i}\n")
            if i % 10_000 == 0:
                out.write("ftp://bad\n")
    code, out, err = run(capsys, "--redis", redis_url, "enqueue", "--file", str(f))
    assert code == 0 and out.strip() == "added 30000 jobs"
    assert len(err.strip().splitlines()) == 3
    assert Queue.from_url(redis_url).status()["counts"]["ready"] == 30_000


def test_worker_refuses_a_results_path_it_cannot_write(
    capsys: Any, redis_url: str, tmp_path: Path
) -> None:
    (tmp_path / "afile").write_text("")
    code, _, err = run(capsys, "--redis", redis_url, "worker", "--burst",
                       "--results", str(tmp_path / "afile" / "r.jsonl"))  # fmt: skip
    assert code == 2 and "--results" in err and len(err.strip().splitlines()) == 1


def test_usage_errors_are_one_line(capsys: Any, redis_url: str) -> None:
    code, out, err = run(capsys, "--redis", redis_url, "dead", "list", "--limit", "0")
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and err.startswith("scrapeq: error:")
    code, _, err = run(capsys, "worker", "--bogus")
    assert code == 2 and "--bogus" in err and len(err.strip().splitlines()) == 1


def test_worker_timeouts_flags_reach_the_settings(
    capsys: Any, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[Settings] = []

    def fake_run(settings: Settings, url: str, options: Any, slot: int) -> int:
        seen.append(settings)
        return 0

    monkeypatch.setattr("scrapeq.interfaces.cli.workers.run_worker_process", fake_run)
    monkeypatch.setenv("SCRAPEQ_MAX_JOB_TIME", "300")
    code, _, err = run(capsys, "--redis", redis_url, "worker", "--handler-timeout", "2.5")
    assert code == 0, err
    assert (seen[-1].handler_timeout, seen[-1].max_job_time) == (2.5, 300.0)
    code, _, err = run(capsys, "--redis", redis_url, "worker", "--max-job-time", "45")
    assert code == 0, err
    assert (seen[-1].handler_timeout, seen[-1].max_job_time) == (60.0, 45.0)
    code, _, err = run(capsys, "--redis", redis_url, "worker", "--handler-timeout", "0")
    assert code == 2 and "handler_timeout" in err and len(err.strip().splitlines()) == 1
