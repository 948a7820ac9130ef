"""Every command of the CLI, fed each class of bad input it can meet.

The commands are enumerated from the typer app: a command missing from ``COMMANDS`` fails
``test_every_command_is_in_the_table``, so a new command gets its row (and its cases) here.

Each case asserts what docs/INTERFACE.md promises for bad input: exactly one line on stderr,
the documented exit code (``EXIT``), no traceback, nothing written to stdout, and nothing
changed: the Redis the command was pointed at (or the test's own server, seeded with a queue)
holds the same keys and values afterwards, and no file appeared in the working folder.

Commands run in this process through :func:`scrapeq.interfaces.cli.main` (fast); a few run
as ``python -m scrapeq`` subprocesses, the way users meet them. Every unreachable target is on
loopback and answers (or refuses) at once: no case waits for a timeout.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
import typer

from scrapeq import Queue, Settings
from scrapeq.engine.server.embedded import find_redis_server
from scrapeq.engine.server.launcher import free_port
from scrapeq.interfaces.cli import app, main
from support.secured_redis import Server
from support.sites import NotRedis

SCRAPEQ = [sys.executable, "-m", "scrapeq"]

#: The exit code each class of bad input ends with (docs/INTERFACE.md, "Exit codes").
EXIT = {
    "unknown option": 2,
    "bad value": 2,
    "bad URL": 2,
    "missing file": 2,
    "unreachable Redis": 1,
    "wrong DB": 1,
    "wrong password": 1,
    "no password": 1,
    "non-Redis port": 1,
}


#: A port nothing listens on (connections are refused at once).
CLOSED_PORT = free_port()
#: The dashboard must fail before it binds; its port is free when the module is collected.
DASHBOARD_PORT = str(free_port())
#: The URLFrontier service must fail before it binds too.
FRONTIER_PORT = str(free_port())
MISSING = "/nonexistent-scrapeq-test/missing"


@dataclass(frozen=True)
class Spec:
    """How to drive one command.

    Attributes:
        argv: the arguments that make a valid call (after the command's path).
        bad_values: argument tails that are bad values (a number out of range, an unknown
            choice, a flag given a value, an extra argument...).
        bad_urls: argument tails with URLs the command must refuse (enqueue, crawl).
        missing_files: argument tails naming files or folders that do not exist.
        redis: the command talks to the Redis of --redis (the server commands do not).
    """

    argv: tuple[str, ...] = ()
    bad_values: tuple[tuple[str, ...], ...] = ()
    bad_urls: tuple[tuple[str, ...], ...] = ()
    missing_files: tuple[tuple[str, ...], ...] = ()
    redis: bool = True


URL = "https://shop-1.example.com/p/9"
DOMAIN = "shop-1.example.com"

COMMANDS: dict[tuple[str, ...], Spec] = {
    ("worker",): Spec(
        ("--burst",),
        bad_values=(
            ("--concurrency", "0"),
            ("--processes", "x"),
            ("--log-format", "xml"),
            ("--handler", "no_such_module_xyz:handle"),
            ("--lease", "-1"),
            ("--burst=yes",),
        ),
        missing_files=(("--results", f"{MISSING}/r.jsonl"), ("--save-bodies", MISSING)),
    ),
    ("crawl",): Spec(
        (URL,),
        bad_values=(
            ("--scope", "planet"),
            ("--max-depth", "-1"),
            ("--max-pages", "0"),
            ("--handler", "nomodule"),
        ),
        bad_urls=(("ftp://x.example.com/",), ("not a url",), (URL, "http://")),
        missing_files=(("--results", f"{MISSING}/r.jsonl"), ("--save-bodies", MISSING)),
    ),
    ("enqueue",): Spec(
        (URL,),
        bad_values=(
            ("--delay", "abc"),
            ("--lane", "urgent"),
            ("--payload", "[1]"),
            ("--unique=sometimes",),
            ("--max-attempts", "0"),
            ("--expires", "-1"),
            ("--delay", "1e308"),
            ("--delay", "inf"),
            ("--expires", "1e308"),
            ("--max-attempts", "99999999999999999999"),
        ),
        bad_urls=(("ftp://x.example.com/",), ("not a url",), ("http://",)),
        missing_files=(("--file", MISSING),),
    ),
    ("status",): Spec(bad_values=(("--limit", "0"), ("--json=yes",))),
    ("audit",): Spec(bad_values=(("--repair=1",),)),
    ("breakers",): Spec(
        bad_values=(
            ("--state", "ajar"),
            ("--sort", "colour"),
            ("--limit", "0"),
            ("--limit", "many"),
        ),
    ),
    ("domains",): Spec(
        bad_values=(("--state", "ajar"), ("--sort", "colour"), ("--limit", "-3")),
    ),
    ("proxies",): Spec(),
    ("proxies", "probe"): Spec(
        ("--all",),
        bad_values=(("nosuch",), ("--all", "0123456789ab"), ("--all=1",)),
    ),
    ("demo",): Spec(("--duration", "1"), bad_values=(("--duration", "0"),)),
    ("dashboard",): Spec(
        ("--port", DASHBOARD_PORT),
        bad_values=(("--port", "70000"), ("--port", "http")),
    ),
    ("dead", "list"): Spec(bad_values=(("--limit", "0"), ("--limit", "100001"))),
    ("dead", "replay"): Spec(
        ("--all",), bad_values=(("--domain", DOMAIN), ("--id", "zz9", "--reset-attempts=2"))
    ),
    ("dead", "purge"): Spec(
        ("--all", "--yes"),
        bad_values=(("--older-than", "-5"), ("--domain", DOMAIN)),
    ),
    ("job", "show"): Spec(("zz9",), bad_values=(("--json=1",), ("extra",))),
    ("job", "list"): Spec(
        bad_values=(("--state", "pending"), ("--limit", "0"), ("--limit", "1001"), ("extra",))
    ),
    ("job", "cancel"): Spec(
        ("zz9",),
        bad_values=(("--domain", DOMAIN), ("--force=no",)),
    ),
    ("queue", "list"): Spec(bad_values=(("--json=1",), ("extra",))),
    ("queue", "clear"): Spec(("default", "--yes"), bad_values=(("other",),)),
    ("breaker", "reset"): Spec((DOMAIN,), bad_values=(("other.example.com",),)),
    ("breaker", "trip"): Spec(
        (DOMAIN,),
        bad_values=(("--cooldown", "-1"), ("--cooldown", "1e12"), ("--cooldown", "1e308")),
    ),
    ("domain", "set"): Spec(
        (DOMAIN, "--delay", "1"),
        bad_values=(
            ("--concurrency", "0"),
            ("--delay", "x"),
            ("--delay", "1e308"),
            ("--concurrency", "99999999999999999999"),
        ),
    ),
    ("server", "status"): Spec(bad_values=(("--json=1",), ("extra",)), redis=False),
    ("server", "stop"): Spec(bad_values=(("extra",),), redis=False),
    ("frontier", "serve"): Spec(
        ("--grpc", f"127.0.0.1:{FRONTIER_PORT}"),
        bad_values=(
            ("--grpc", "nowhere"),
            ("--grpc", "0.0.0.0:7071"),
            ("--token", "too-short"),
            ("--max-unacked", "1"),
            ("--tls-cert", __file__),
            ("extra",),
        ),
        missing_files=(("--tls-cert", f"{MISSING}/c.pem", "--tls-key", f"{MISSING}/k.pem"),),
    ),
}

#: Spellings that are not a domain (``host[:port]`` as scrapeq writes it): a blank, a space,
#: a URL, capitals, a path. Every command naming a domain refuses them before any look.
BAD_DOMAINS = ("", "a b", f"https://{DOMAIN}/", "Shop-1.Example.com", f"{DOMAIN}/p/1")
DOMAIN_ARGS = [
    ("breaker", "reset", "{}"),
    ("breaker", "trip", "{}"),
    ("domain", "set", "{}", "--delay", "1"),
    ("dead", "list", "--domain", "{}"),
    ("dead", "replay", "--domain", "{}"),
    ("dead", "purge", "--domain", "{}"),
    ("job", "cancel", "--domain", "{}"),
    ("job", "list", "--domain", "{}"),
]


def leaf_commands(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """Every runnable command of the CLI (``("dead", "list")``...), from the app itself; a
    group that runs without a command (``proxies``) is one too."""
    children = getattr(command, "commands", None)
    if children is None or (path and getattr(command, "invoke_without_command", False)):
        yield path
    if children is None:
        return
    for name, child in children.items():
        yield from leaf_commands(child, (*path, name))


def test_every_command_is_in_the_table() -> None:
    found = set(leaf_commands(typer.main.get_command(app)))
    assert found - set(COMMANDS) == set(), "add the new commands to COMMANDS"
    assert set(COMMANDS) - found == set(), "COMMANDS names commands that are gone"


# --- the targets ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def not_redis() -> Iterator[str]:
    with NotRedis() as url:
        yield url


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in list(os.environ):
        if name.startswith("SCRAPEQ_"):
            monkeypatch.delenv(name)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))


def seed(url: str) -> None:
    """A queue: pending jobs, a dead letter, an open breaker (the server emptied first)."""
    r = redis.Redis.from_url(url)
    r.flushall()
    r.close()
    q = Queue.from_url(url, settings=Settings(domain_concurrency=10))
    q.enqueue_many([URL.replace("9", str(i)) for i in range(3)] + ["https://shop-2.example.com/"])
    (job,) = q.claim(1).jobs
    q.fail(job, "http_404", "gone")
    q.breaker_trip("shop-2.example.com", cooldown=600)
    q.close()


@pytest.fixture(scope="module")
def seeded_once(redis_server: str) -> dict[str, Any]:
    seed(redis_server)
    return snapshot(redis_server)


@pytest.fixture
def seeded(redis_server: str, seeded_once: dict[str, Any]) -> str:
    """The test server holding the seeded queue (seeded again only if a test changed it)."""
    if snapshot(redis_server) != seeded_once:
        seed(redis_server)
    return redis_server


def snapshot(url: str) -> dict[str, Any]:
    """Every key of the server with its serialised value and whether it expires (not the TTL
    itself: a key's TTL counts down while a slow subprocess runs)."""
    r = redis.Redis.from_url(url)
    try:
        return {k: (r.dump(k), r.pttl(k) >= 0) for k in sorted(r.keys("*"))}
    finally:
        r.close()


# --- the cases ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    kind: str
    path: tuple[str, ...]
    tail: tuple[str, ...]
    target: str  # which Redis: seeded, closed, password, nopassword, db, notredis


def _cases() -> Iterator[Any]:
    for path, spec in COMMANDS.items():
        base = (*path, *spec.argv)
        yield Case("unknown option", path, (*base, "--no-such-option"), "seeded")
        yield Case("missing file", path, ("--config", f"{MISSING}.toml", *base), "seeded")
        yield Case("bad value", path, ("--queue", "a{b}", *base), "seeded")
        yield Case("bad value", path, ("--redis", "localhost:6379", *base), "seeded")
        for tail in spec.bad_values:
            yield Case("bad value", path, (*base, *tail), "seeded")
        for tail in spec.bad_urls:
            yield Case("bad URL", path, (*path, *tail), "seeded")
        for tail in spec.missing_files:
            yield Case("missing file", path, (*base, *tail), "seeded")
        if spec.redis:
            yield Case("unreachable Redis", path, base, "closed")
            yield Case("wrong password", path, base, "password")
            yield Case("no password", path, base, "nopassword")
            yield Case("wrong DB", path, base, "db")
            yield Case("non-Redis port", path, base, "notredis")

        for argv in DOMAIN_ARGS:
            if argv[: len(path)] == path:
                for bad in BAD_DOMAINS:
                    tail = tuple(bad if a == "{}" else a for a in argv)
                    yield Case("bad value", path, tail, "seeded")


CASES = list(_cases())


def _id(case: Case) -> str:
    """The case's test id: the same in every process (pytest-xdist's workers each collect the
    module, each with its own free ports), so a port chosen at collection shows as ``PORT``."""
    tail = " ".join(case.tail[len(case.path) :])
    tail = tail.replace(f"--port {DASHBOARD_PORT}", "--port PORT")
    tail = tail.replace(f"127.0.0.1:{FRONTIER_PORT}", "127.0.0.1:PORT")
    return f"{' '.join(case.path)}: {case.kind}: {tail}"


@pytest.fixture
def target_url(request: pytest.FixtureRequest, seeded: str) -> str:
    kind = request.param
    if kind == "seeded":
        return seeded
    if kind == "closed":
        return f"redis://127.0.0.1:{CLOSED_PORT}/0"
    if kind == "db":
        return seeded.removesuffix("/0") + "/99"
    if kind == "notredis":
        return str(request.getfixturevalue("not_redis"))
    server: Server = request.getfixturevalue("passworded")
    return server.url(":wrong-password" if kind == "password" else "")


def _check(code: int, out: str, err: str, case: Case) -> None:
    where = f"{_id(case)}\nexit {code}\nstdout: {out!r}\nstderr: {err!r}"
    assert code == EXIT[case.kind], where
    assert len(err.splitlines()) == 1 and err.endswith("\n"), where
    assert err.startswith("scrapeq: error: ") or case.kind == "bad URL", where
    assert "Traceback" not in out + err, where
    # enqueue's summary stays on stdout when every URL was refused (``--json``: its counts)
    assert out == "" or (case.kind == "bad URL" and out == "added 0 jobs\n"), where


@pytest.mark.parametrize(
    "case,target_url",
    [pytest.param(c, c.target, id=_id(c)) for c in CASES],
    indirect=["target_url"],
)
def test_bad_input_is_one_line_the_documented_code_and_changes_nothing(
    capsys: pytest.CaptureFixture[str],
    seeded: str,
    target_url: str,
    tmp_path: Path,
    case: Case,
) -> None:
    before = snapshot(seeded)
    code = main(["--redis", target_url, "--data-dir", str(tmp_path / "data"), *case.tail])
    out, err = capsys.readouterr()
    _check(code, out, err, case)
    assert snapshot(seeded) == before, _id(case)
    assert list(Path.cwd().iterdir()) == [], _id(case)


@pytest.mark.parametrize(
    "argv,kind",
    [
        (["status", "--no-such-option"], "unknown option"),
        (["enqueue", "ftp://x.example.com/"], "bad URL"),
        (["breakers", "--sort", "colour"], "bad value"),
    ],
)
def test_bad_input_in_a_subprocess(seeded: str, tmp_path: Path, argv: list[str], kind: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCRAPEQ_")}
    before = snapshot(seeded)
    proc = subprocess.run(
        [*SCRAPEQ, "--redis", seeded, *argv],
        capture_output=True, text=True, env=env, timeout=60, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    _check(proc.returncode, proc.stdout, proc.stderr, Case(kind, (argv[0],), tuple(argv), ""))
    assert snapshot(seeded) == before


def test_unreachable_redis_in_a_subprocess(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCRAPEQ_")}
    proc = subprocess.run(
        [*SCRAPEQ, "--redis", f"redis://127.0.0.1:{CLOSED_PORT}/0", "enqueue", URL],
        capture_output=True, text=True, env=env, timeout=60, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    _check(proc.returncode, proc.stdout, proc.stderr,
           Case("unreachable Redis", ("enqueue",), ("enqueue", URL), ""))  # fmt: skip
    assert "cannot reach Redis" in proc.stderr


def test_enqueue_file_lines_that_are_not_utf8_are_refused_one_per_line(
    capsys: pytest.CaptureFixture[str], seeded: str, tmp_path: Path
) -> None:
    redis_url = seeded
    mixed = tmp_path / "mixed.txt"
    mixed.write_bytes(b"https://a.example.com/1\n\xff\xfe/x\nhttps://b.example.com/2\r\n")
    code = main(["--redis", redis_url, "enqueue", "--file", str(mixed)])
    out, err = capsys.readouterr()
    assert (code, out, err) == (0, "added 2 jobs\n", "line 2: \\xff\\xfe/x: not UTF-8 text\n")
    binary = tmp_path / "binary.bin"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\xff")
    before = snapshot(redis_url)
    code = main(["--redis", redis_url, "enqueue", "--file", str(binary)])
    out, err = capsys.readouterr()
    assert code == 2 and "not UTF-8 text" in err and "Traceback" not in err, err
    assert snapshot(redis_url) == before


# --- issue 21, items 10 and 11: input that took the CLI down, or reached the terminal raw -------


def _one_line_refusal(code: int, out: str, err: str) -> None:
    """Exit 2, one ``scrapeq: error:`` line on stderr, nothing on stdout, no traceback."""
    _check(code, out, err, Case("bad value", (), (), ""))


def test_a_payload_nested_990_levels_is_one_line(
    capsys: pytest.CaptureFixture[str], seeded: str
) -> None:
    before = snapshot(seeded)
    deep = '{"a":' + "[" * 990 + "]" * 990 + "}"
    code = main(["--redis", seeded, "enqueue", URL, "--payload", deep])
    out, err = capsys.readouterr()
    _one_line_refusal(code, out, err)
    assert "--payload" in err and "nested" in err, err
    assert snapshot(seeded) == before


def test_a_config_with_a_5000_deep_array_is_one_line(
    capsys: pytest.CaptureFixture[str], seeded: str, tmp_path: Path
) -> None:
    config = tmp_path / "deep.toml"
    config.write_text("lanes = " + "[" * 5000 + "]" * 5000 + "\n")
    code = main(["--redis", seeded, "--config", str(config), "status"])
    out, err = capsys.readouterr()
    _one_line_refusal(code, out, err)
    assert str(config) in err and "nested" in err, err


@pytest.mark.parametrize("where", ["/dev/null", "/dev/null/sub", "a file"])
@pytest.mark.parametrize("how", ["flag", "env"])
def test_a_data_dir_that_cannot_be_a_folder_is_one_line(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    where: str,
    how: str,
) -> None:
    if where == "a file":
        where = str(tmp_path / "file")
        Path(where).write_text("not a folder\n")
    args = ["--data-dir", where] if how == "flag" else []
    if how == "env":
        monkeypatch.setenv("SCRAPEQ_DATA_DIR", where)
    code = main([*args, "status"])
    out, err = capsys.readouterr()
    _one_line_refusal(code, out, err)
    assert "data_dir" in err and where in err, err


def test_the_cli_bounds_are_reached_not_passed(
    capsys: pytest.CaptureFixture[str], seeded: str
) -> None:
    """The largest duration and count are taken as they are; one past them is refused."""
    from scrapeq.engine.config.limits import MAX_COUNT, MAX_DURATION_S

    code = main(["--redis", seeded, "domain", "set", DOMAIN, "--concurrency", str(MAX_COUNT),
                 "--delay", str(MAX_DURATION_S)])  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 0 and err == "" and f"concurrency {MAX_COUNT}" in out, (out, err)
    for flag, bound in (("--concurrency", MAX_COUNT), ("--delay", MAX_DURATION_S)):
        code = main(["--redis", seeded, "domain", "set", DOMAIN, flag, str(bound + 1)])
        out, err = capsys.readouterr()
        _one_line_refusal(code, out, err)
        assert flag in err and str(bound) in err, err


@pytest.mark.parametrize("age", ["1e308", "inf", "1e12"])
def test_a_purge_age_past_the_bound_is_one_line(
    capsys: pytest.CaptureFixture[str], seeded: str, age: str
) -> None:
    before = snapshot(seeded)
    code = main(["--redis", seeded, "dead", "purge", "--older-than", age])
    out, err = capsys.readouterr()
    _one_line_refusal(code, out, err)
    assert "--older-than" in err, err
    assert snapshot(seeded) == before


ESCAPE = "\x1b]0;owned\x07"


def test_control_characters_of_input_are_escaped_in_error_lines(
    capsys: pytest.CaptureFixture[str], seeded: str, tmp_path: Path
) -> None:
    urls = tmp_path / "urls.txt"
    urls.write_text(f"https://a.example.com/{ESCAPE}\nftp://{ESCAPE}/\nhttps://ok.example.com/\n")
    runs = [
        ["enqueue", "--file", str(urls)],
        ["enqueue", f"ftp://x.example.com/{ESCAPE}"],
        ["enqueue", URL, "--lane", ESCAPE],
        ["dead", "replay", "--id", ESCAPE],
        ["job", "cancel", ESCAPE],
        ["job", "show", ESCAPE],
        ["status", f"--{ESCAPE}"],
        ["--queue", ESCAPE, "status"],
    ]
    for argv in runs:
        main(["--redis", seeded, *argv])
        _, err = capsys.readouterr()
        assert err, argv
        assert not any(c in err for c in "\x1b\x07"), (argv, err)
        assert "\\x1b]0;owned\\x07" in err, (argv, err)


def test_a_utf8_bom_does_not_fail_the_first_url(
    capsys: pytest.CaptureFixture[str], seeded: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    urls = tmp_path / "bom.txt"
    urls.write_bytes(b"\xef\xbb\xbfhttps://bom.example.com/1\r\nhttps://bom.example.com/2\r\n")
    code = main(["--redis", seeded, "--queue", "bom", "enqueue", "--file", str(urls)])
    out, err = capsys.readouterr()
    assert (code, out, err) == (0, "added 2 jobs\n", "")
    monkeypatch.setattr(sys, "stdin", open(urls, "rb"))  # noqa: SIM115 (closed by enqueue)
    code = main(["--redis", seeded, "--queue", "bom2", "enqueue", "--file", "-"])
    out, err = capsys.readouterr()
    assert (code, out, err) == (0, "added 2 jobs\n", "")


def test_a_misspelt_environment_variable_is_named_once_with_the_setting_meant(
    seeded: str,
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCRAPEQ_")}
    env |= {
        "SCRAPEQ_DOMAIN_CONCURENCY": "4",
        # not settings, but read by scrapeq (or its tests): no warning
        "SCRAPEQ_CONFIG": "",
        "SCRAPEQ_DASHBOARD_TOKEN": "x" * 20,
        "SCRAPEQ_REDIS_SERVER": find_redis_server().as_posix(),
    }
    proc = subprocess.run(
        [*SCRAPEQ, "--redis", seeded, "status", "--json"],
        capture_output=True, text=True, env=env, timeout=60, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert "SCRAPEQ_DOMAIN_CONCURENCY" in lines[0], lines
    assert "SCRAPEQ_DOMAIN_CONCURRENCY" in lines[0], lines
    assert "WARNING" in lines[0], lines
