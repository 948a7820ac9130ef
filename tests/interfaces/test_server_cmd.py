"""``scrapeq server status|stop``, the embedded Redis's announcement, and a demo that cleans up.

The commands run in this process (``scrapeq.interfaces.cli.main``) against real embedded
servers in short
folders under /tmp (unix socket paths must stay under ~104 bytes), stopped after each test.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from scrapeq.engine.server.embedded import ServerFiles, stop_server
from scrapeq.interfaces.cli import main
from support.processes import alive, marked_processes, redis_servers_under

pytestmark = pytest.mark.usefixtures("clean_env")


@pytest.fixture
def data_dir() -> Iterator[Path]:
    """A not-yet-existing data folder with a short path; its server is stopped afterwards."""
    root = Path(tempfile.mkdtemp(prefix="sq"))  # the session's short root (conftest)
    path = root / "data"
    try:
        yield path
    finally:
        stop_server(path, save=False)
        shutil.rmtree(root, ignore_errors=True)


def run(capsys: pytest.CaptureFixture[str], data_dir: Path, *argv: str) -> tuple[int, str, str]:
    code = main(["--data-dir", str(data_dir), *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_status_when_nothing_ever_ran_starts_nothing(
    capsys: pytest.CaptureFixture[str], data_dir: Path
) -> None:
    code, out, err = run(capsys, data_dir, "server", "status")
    assert (code, err) == (0, "")
    assert out.splitlines()[0].split(None, 1) == ["state", "not running"]
    assert f"data dir  {data_dir}" in out
    code, out, _ = run(capsys, data_dir, "server", "status", "--json")
    doc = json.loads(out)
    assert (code, doc["running"], doc["pid"], doc["used_memory"]) == (0, False, None, None)
    assert doc["socket"] == str(data_dir / "redis.sock")
    assert not data_dir.exists(), "status starts no server and makes no folder"


def test_first_start_is_announced_once_on_stderr(
    capsys: pytest.CaptureFixture[str], data_dir: Path
) -> None:
    code, out, err = run(capsys, data_dir, "status", "--json")
    assert code == 0
    assert json.loads(out)["counts"]["done"] == 0, "stdout stays one JSON document"
    pid = int(ServerFiles.for_dir(data_dir).pidfile.read_text())
    (line,) = [line for line in err.splitlines() if "embedded Redis started" in line]
    assert f"(pid {pid})" in line
    assert f"listening on {data_dir / 'redis.sock'}" in line
    assert f"data in {data_dir}" in line
    assert "`scrapeq server stop`" in line

    code, _, err = run(capsys, data_dir, "status", "--json")
    assert code == 0 and "embedded Redis started" not in err, "a running server is reused"


def test_announcement_is_a_json_line_with_log_format_json(
    capsys: pytest.CaptureFixture[str], data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SCRAPEQ_LOG_FORMAT", "json")
    code, _, err = run(capsys, data_dir, "status", "--json")
    assert code == 0
    # the log lines are JSON; the CLI's own messages stay plain (an empty queue's hint)
    (doc,) = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    assert doc["logger"] == "scrapeq.embedded" and doc["data_dir"] == str(data_dir)
    assert doc["socket"] == str(data_dir / "redis.sock") and doc["pid"] > 0


def test_status_shows_pid_socket_data_dir_and_memory(
    capsys: pytest.CaptureFixture[str], data_dir: Path
) -> None:
    assert run(capsys, data_dir, "status")[0] == 0
    pid = int(ServerFiles.for_dir(data_dir).pidfile.read_text())

    code, out, err = run(capsys, data_dir, "server", "status")
    assert (code, err) == (0, "")
    rows = dict(line.split(None, 1) for line in out.replace("data dir", "data_dir").splitlines())
    assert rows["state"] == "running"
    assert rows["pid"] == str(pid)
    assert rows["socket"] == str(data_dir / "redis.sock")
    assert rows["data_dir"] == str(data_dir)
    assert rows["memory"][0].isdigit()

    code, out, _ = run(capsys, data_dir, "server", "status", "--json")
    doc = json.loads(out)
    assert (code, doc["running"], doc["pid"]) == (0, True, pid)
    assert doc["used_memory"] > 0 and doc["url"] == f"unix://{data_dir}/redis.sock"


def test_stop_saves_waits_removes_the_pidfile_and_is_idempotent(
    capsys: pytest.CaptureFixture[str], data_dir: Path
) -> None:
    code, _, err = run(capsys, data_dir, "enqueue", "https://shop-1.example.com/p/1")
    assert code == 0, err
    files = ServerFiles.for_dir(data_dir)
    pid = int(files.pidfile.read_text())

    code, out, err = run(capsys, data_dir, "server", "stop")
    assert (code, err) == (0, "")
    assert out.strip() == f"stopped the embedded Redis (pid {pid}) in {data_dir}"
    assert not alive(pid), "stop returns once the process is gone"
    assert not files.pidfile.exists() and not files.socket.exists()
    assert (data_dir / "dump.rdb").is_file(), "SHUTDOWN SAVE wrote a snapshot"

    code, out, err = run(capsys, data_dir, "server", "stop")
    assert (code, out.strip(), err) == (0, f"no embedded Redis running in {data_dir}", "")
    assert "not running" in run(capsys, data_dir, "server", "status")[1]

    code, out, err = run(capsys, data_dir, "status", "--json")
    assert code == 0 and "embedded Redis started" in err, "the next command starts it again"
    assert json.loads(out)["counts"]["ready"] == 1, "with its data"


def test_stop_a_server_that_cannot_save_is_one_line_and_leaves_it_running(
    capsys: pytest.CaptureFixture[str], data_dir: Path
) -> None:
    assert run(capsys, data_dir, "status")[0] == 0
    pid = int(ServerFiles.for_dir(data_dir).pidfile.read_text())
    blocker = data_dir / "dump.rdb"  # a non-empty folder where the snapshot must go
    (blocker / "x").mkdir(parents=True)

    code, out, err = run(capsys, data_dir, "server", "stop")
    assert code == 1 and out == ""
    assert err.startswith("scrapeq: error: the embedded redis-server refused to shut down: ")
    assert alive(pid), "a server that could not save keeps its data in memory: still running"

    shutil.rmtree(blocker)
    code, out, _ = run(capsys, data_dir, "server", "stop")
    assert code == 0 and out.startswith("stopped") and not alive(pid)


def test_server_commands_say_when_redis_url_points_elsewhere(
    capsys: pytest.CaptureFixture[str], data_dir: Path
) -> None:
    code, out, err = run(
        capsys, data_dir, "--redis", "redis://:hunter2@127.0.0.1:1/0", "server", "status"
    )
    assert code == 0 and "not running" in out
    assert "redis_url is set (redis://:***@127.0.0.1:1/0)" in err and "hunter2" not in err


@pytest.mark.slow
def test_demo_runs_on_a_private_server_and_leaves_no_process_behind(tmp_path: Path) -> None:
    mark = secrets.token_hex(8)  # in the environment of every process the demo starts
    short_tmp = Path(tempfile.mkdtemp(prefix="sqd"))  # the demo's TMPDIR
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "TMPDIR": str(short_tmp),
        "SQTEST_DEMO": mark,
    }
    try:
        done = subprocess.run(
            [sys.executable, "-m", "scrapeq", "demo", "--duration", "2"],
            env=env,
            cwd=tmp_path,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=90,
        )
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        assert "naive" in done.stdout, done.stdout[-2000:]
        assert redis_servers_under(short_tmp, tmp_path) == [], "its redis-server is gone"
        assert marked_processes("SQTEST_DEMO", mark) == [], "so is every other process"
        assert list(short_tmp.iterdir()) == [], "its temporary folder is removed"
        assert not (tmp_path / ".local" / "share" / "scrapeq").exists(), (
            "the user's embedded server is neither used nor started"
        )
        assert "embedded Redis started" not in done.stderr
    finally:
        for pid in redis_servers_under(short_tmp, tmp_path) + marked_processes("SQTEST_DEMO", mark):
            os.kill(pid, signal.SIGKILL)
        shutil.rmtree(short_tmp, ignore_errors=True)
