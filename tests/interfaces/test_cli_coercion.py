"""The CLI's coercion of option values without pydantic (scrapeq.interfaces.cli.coercion)
answers what typer's own coercion answers: the same value, or the same error, for every
parameter of the command tree and a spread of values, plain and bad (issue 38, item 18)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer

from scrapeq.interfaces.cli import command, main

_coercion = pytest.importorskip("typer._coercion", reason="typer < 0.29 has no pydantic step")

VALUES: list[Any] = [
    None, "", "x", "ü", " a ", "0", "7", "007", "-1", "+5", " 7", "1_000", "1.5", "2", "auto",
    "65535", "65536", "1000000", "1000001", "٣", "9" * 150, "-", "a//b/", "dir/", "/tmp", ".",
    "\x1b[31m", (), ("a", "b"), ["x"], [1], 0, 3, -2, 2.5, True, False, Path("/tmp"),
]  # fmt: skip


def parameters(cmd: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[str, Any, Any]]:
    """(the command's path, the command, a parameter) for every parameter, --help included."""
    for param in [*cmd.params, cmd.get_help_option(typer.Context(cmd))]:
        if param is not None:
            yield " ".join(path) or "scrapeq", cmd, param
    for name, child in getattr(cmd, "commands", {}).items():
        yield from parameters(child, (*path, name))


def outcome(coerce: Any, value: Any, param: Any, ctx: Any) -> tuple[str, Any]:
    try:
        got = coerce(value, param=param, ctx=ctx)
    except Exception as exc:
        text = exc.format_message() if hasattr(exc, "format_message") else str(exc)
        return f"raises {type(exc).__name__}", text
    return f"answers {type(got).__name__}", got


def test_every_parameter_is_coerced_as_typer_does(tmp_path: Path) -> None:
    unreadable = tmp_path / "file"
    unreadable.write_text("x")
    values = [*VALUES, str(tmp_path), str(unreadable), f"{tmp_path}/"]
    root = command()
    compared = 0
    for where, cmd, param in parameters(root):
        ours = param.get_runtime_param()
        assert type(ours).__name__ == "_Fast", (where, param.name)
        typers = _coercion.build_runtime_param(param.type_descriptor)
        ctx = typer.Context(cmd)
        for value in values:
            expected = outcome(typers.coerce, value, param, ctx)
            assert outcome(ours.coerce, value, param, ctx) == expected, (where, param.name, value)
            compared += 1
    assert compared > 100 * len(values)


def test_a_command_answers_without_pydantic() -> None:
    """The rules cover what the common commands are given: their values reach the command as
    typer's would (a bad one still fails the way typer says, checked above)."""
    import subprocess
    import sys

    statement = (
        "import json, sys; from scrapeq.interfaces.cli import main; "
        "code = main(['-vv', '--queue', 'q', '--data-dir', '/nonexistent/x', '--redis', "
        "'redis://127.0.0.1:1/0', 'enqueue', 'https://example.com/', '--lane', 'bulk', "
        "'--delay', '1.5', '--max-attempts', '3']); "
        "print(code, json.dumps(sorted(m for m in sys.modules if 'pydantic' in m)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", statement], capture_output=True, text=True, timeout=60
    ).stdout.split()
    assert out[0] == "1"  # nothing listens on port 1: it failed after parsing every value
    assert out[1:] == ["[]"]


def test_a_bad_value_is_refused_as_before(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--redis", "redis://127.0.0.1:1/0", "dead", "list", "--limit", "x"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("scrapeq: error: Invalid value for '--limit'"), err
