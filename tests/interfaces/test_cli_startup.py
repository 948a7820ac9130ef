"""The CLI starts without what its command does not use (issue 38, item 18): importing
``scrapeq`` loads no client library, and the CLI loads no HTTP client (aiohttp is the
worker's, the dashboard's and the sitemap reader's), so ``scrapeq --version`` or
``status`` does not pay for them. Checked by module, not by time: timings are for benches."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import scrapeq

_LOADED = "import json, sys; {}; print(json.dumps(sorted(sys.modules)))"


def _modules_after(statement: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", _LOADED.format(statement)],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout  # fmt: skip
    return set(json.loads(out))


def test_importing_scrapeq_loads_no_client_library() -> None:
    loaded = _modules_after("import scrapeq")
    assert not {"redis", "aiohttp", "typer"} & loaded


def test_the_cli_loads_no_http_client() -> None:
    loaded = _modules_after("import scrapeq.interfaces.cli")
    assert "aiohttp" not in loaded
    assert not any(m.startswith("scrapeq.runtime.worker") for m in loaded)


def test_the_cli_loads_no_redis_client() -> None:
    """Building the command tree imports neither redis-py (~0.1 s: its asyncio and cluster
    clients come with the package) nor the engine's queue: the commands import them when
    they run."""
    loaded = _modules_after("import scrapeq.interfaces.cli")
    assert not any(m == "redis" or m.startswith("redis.") for m in loaded)
    assert not {"scrapeq.engine.queue", "scrapeq.engine.server.connection", "asyncio"} & loaded


@pytest.mark.parametrize("flag", ["--version", "--help"])
def test_version_and_help_load_no_redis_client(flag: str) -> None:
    loaded = _modules_after_command(flag)
    assert not any(m == "redis" or m.startswith("redis.") for m in loaded)
    assert not {"scrapeq.engine.facades.async_queue", "scrapeq.engine.facades.sync_queue"} & loaded
    assert "scrapeq.engine.server.embedded" not in loaded  # nothing to stop: none was started


def test_a_command_still_loads_what_it_uses() -> None:
    """The check above is not vacuous: a command that reads the queue imports the client (here
    against a port where nothing listens: it fails, after the import)."""
    loaded = _modules_after_command("--redis", "redis://127.0.0.1:1/0", "status")
    assert {"redis", "scrapeq.engine.facades.sync_queue"} <= loaded


def _modules_after_command(*argv: str) -> set[str]:
    """The modules loaded once ``scrapeq ARGV`` has run (in a fresh interpreter)."""
    statement = (
        f"from scrapeq.interfaces.cli import main; main({list(argv)!r}); sys.stdout.write('\\n')"
    )
    out = subprocess.run(
        [sys.executable, "-c", _LOADED.format(statement)],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout  # fmt: skip
    return set(json.loads(out.splitlines()[-1]))


def test_every_public_name_is_there_on_first_use() -> None:
    for name in scrapeq.__all__:
        assert getattr(scrapeq, name) is not None
    assert sorted(dir(scrapeq)) == sorted(scrapeq.__all__)


def test_status_and_enqueue_load_no_pydantic_and_no_http_client() -> None:
    """typer 0.29 would coerce their values with pydantic (~0.07 s): the CLI's own coercion
    answers them (scrapeq.interfaces.cli.coercion). Against a port where nothing listens:
    the commands fail after parsing their values and importing the queue."""
    for argv in (
        ["--redis", "redis://127.0.0.1:1/0", "-v", "status", "--json"],
        ["--redis", "redis://127.0.0.1:1/0", "enqueue", "https://example.com/a", "--lane", "x"],
    ):
        loaded = _modules_after_command(*argv)
        assert "scrapeq.engine.facades.sync_queue" in loaded, argv
        assert not any(m.split(".")[0] in ("pydantic", "pydantic_core") for m in loaded), argv
        assert not {"typer._adapters", "aiohttp"} & loaded, argv


def test_a_command_builds_its_own_options_only() -> None:
    """typer builds a command's options from its signature (~25 ms for the whole tree): the
    root builds a command or group when it is first looked up, so ``status`` builds its own;
    ``--help`` lists them all, so it builds them all (tests/interfaces/test_cli_help.py)."""
    statement = (
        "from scrapeq.interfaces.cli import command, main; "
        "main(['--redis', 'redis://127.0.0.1:1/0', 'status']); "
        "print(); print(sorted(command().commands._built))"
    )
    done = subprocess.run(
        [sys.executable, "-c", statement], capture_output=True, text=True, timeout=60
    )
    assert done.stdout.splitlines()[-1] == "['status']", done.stderr


def test_the_command_ends_its_process_without_the_interpreters_finalization() -> None:
    """``scrapeq`` (``run``) flushes its output and ends the process at once: the interpreter
    freeing every module took a stopping worker past its exit bound on a loaded machine (a
    clean-clone CI run: 1.5 s after its last wait, against 0.13-0.23 s quiet). An atexit
    handler is part of that finalization, so it does not run; the output and the exit code
    are the command's."""
    code = (
        "import atexit, sys\n"
        "atexit.register(lambda: print('finalized', flush=True))\n"
        "sys.argv = ['scrapeq', '--version']\n"
        "from scrapeq.interfaces.cli import run\n"
        "run()\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"scrapeq {scrapeq.__version__}", done.stdout
    assert "finalized" not in done.stdout + done.stderr
