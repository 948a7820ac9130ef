"""``--help`` as users read it: flags show no type, global options show their environment
variable and default, ``-v`` counts; the settings' precedence (flag > env > file > default)."""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from scrapeq.interfaces.cli import command, main
from support.cli_helpers import scrub_env


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    scrub_env(monkeypatch, tmp_path, columns=200)  # one option a line: nothing folded


def help_text(capsys: pytest.CaptureFixture[str], *path: str) -> str:
    code = main([*path, "--help"])
    out, err = capsys.readouterr()
    assert (code, err) == (0, ""), err
    return out


def all_paths(cmd: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    yield path
    for name, child in getattr(cmd, "commands", {}).items():
        yield from all_paths(child, (*path, name))


def option_row(text: str, option: str) -> str:
    rows = [line for line in text.splitlines() if re.search(rf"│ {re.escape(option)}\b", line)]
    assert len(rows) == 1, (option, text)
    return rows[0]


def test_no_help_shows_a_type_for_a_flag(capsys: pytest.CaptureFixture[str]) -> None:
    paths = list(all_paths(command()))
    assert len(paths) > 20
    for path in paths:
        text = help_text(capsys, *path)
        assert "<bool>" not in text, path
        assert "--help" in option_row(text, "--help") and "<" not in option_row(text, "--help")


def test_flags_of_worker_and_listings_show_no_type(capsys: pytest.CaptureFixture[str]) -> None:
    worker = help_text(capsys, "worker")
    assert "<" not in option_row(worker, "--burst")
    assert "<" not in option_row(worker, "--allow-private")
    assert "<int" in option_row(worker, "--concurrency")  # options with values keep theirs
    assert "<" not in option_row(help_text(capsys, "status"), "--json")


def test_global_options_show_their_environment_variable_and_default(
    capsys: pytest.CaptureFixture[str],
) -> None:
    text = help_text(capsys)
    assert "[env var: SCRAPEQ_REDIS_URL; default: the embedded Redis" in option_row(text, "--redis")
    assert "[env var: SCRAPEQ_QUEUE; default: default]" in option_row(text, "--queue")
    assert "[env var: SCRAPEQ_CONFIG; default: ./scrapeq.toml if any]" in option_row(
        text, "--config"
    )
    assert "[env var: SCRAPEQ_DATA_DIR; default: $XDG_DATA_HOME/scrapeq" in option_row(
        text, "--data-dir"
    )
    verbose = option_row(text, "--verbose")
    assert "-v" in verbose and "<int>" not in verbose


def test_verbose_is_a_count(capsys: pytest.CaptureFixture[str], redis_url: str) -> None:
    for flags in (["-v"], ["-vv"], ["-v", "-v", "--verbose"]):
        code = main([*flags, "--redis", redis_url, "status", "--json"])
        _, err = capsys.readouterr()
        assert code == 0, err


def queue_of(capsys: pytest.CaptureFixture[str], redis_url: str, *argv: str) -> str:
    code = main(["--redis", redis_url, *argv, "status", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    return str(json.loads(out)["queue"])


def test_flag_beats_environment_beats_file_beats_default(
    capsys: pytest.CaptureFixture[str],
    redis_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert queue_of(capsys, redis_url) == "default"
    (tmp_path / "scrapeq.toml").write_text('queue = "from-file"\n')
    assert queue_of(capsys, redis_url) == "from-file"
    monkeypatch.setenv("SCRAPEQ_QUEUE", "from-env")
    assert queue_of(capsys, redis_url) == "from-env"
    assert queue_of(capsys, redis_url, "--queue", "from-flag") == "from-flag"
    other = tmp_path / "other.toml"
    other.write_text('queue = "other-file"\n')
    monkeypatch.delenv("SCRAPEQ_QUEUE")
    monkeypatch.setenv("SCRAPEQ_CONFIG", str(other))
    assert queue_of(capsys, redis_url) == "other-file"
    assert queue_of(capsys, redis_url, "--config", str(tmp_path / "scrapeq.toml")) == "from-file"


def option_names(cmd: Any) -> list[str]:
    """Every name of every visible option of a command (``--json``, ``--no-allow-private``)."""
    names = []
    for param in getattr(cmd, "params", []):
        if getattr(param, "hidden", False) or not getattr(param, "opts", None):
            continue
        if param.param_type_name == "option":
            names += [*param.opts, *param.secondary_opts]
    return names


def prose(text: str) -> list[list[str]]:
    """The paragraphs of a help above its first panel (usage, description, examples), each
    a list of its lines (right-stripped)."""
    head = text.split("╭", 1)[0]
    paragraphs = re.split(r"\n\s*\n", head)
    return [[line.rstrip() for line in p.splitlines() if line.strip()] for p in paragraphs]


def command_at(path: tuple[str, ...]) -> Any:
    cmd = command()
    for name in path:
        cmd = cmd.commands[name]
    return cmd


def test_every_help_is_readable_at_80_columns(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 21: at 80 columns option names were cut (``--no-allow-priv…``,
    ``--domain-concurr…``). Every option name appears whole, nothing is cut, no line is wider."""
    wide = {path: help_text(capsys, *path) for path in all_paths(command())}
    monkeypatch.setenv("COLUMNS", "80")
    for path in all_paths(command()):
        text = help_text(capsys, *path)
        # the description and examples above the panels: a line typer keeps as written
        # (any line of a paragraph of several) fits, so rich never folds it into a stub
        for paragraph in prose(wide[path]):
            if len(paragraph) > 1:
                assert all(len(line) <= 79 for line in paragraph), (path, paragraph)
        assert "…" not in text, (path, [line for line in text.splitlines() if "…" in line])
        assert max(len(line) for line in text.splitlines()) <= 80, path
        # the summary a group's command list shows is one line of the docstring: typer
        # keeps its line breaks there, which left a stub line in the panel
        summary = inspect.cleandoc(command_at(path).help or "").split("\n\n")[0]
        assert "\n" not in summary, (path, summary)
        for name in option_names(command_at(path)):
            assert re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", text), (path, name, text)


def test_no_allow_private_is_its_own_flag_and_still_overrides_the_settings(
    capsys: pytest.CaptureFixture[str], redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--no-allow-private`` (a row of its own in --help now) refuses private addresses
    that the environment allows; with ``--allow-private`` too it is a usage error."""
    monkeypatch.setenv("SCRAPEQ_ALLOW_PRIVATE", "true")
    private = "http://127.0.0.1:9/x"
    code = main(["--redis", redis_url, "enqueue", private, "--no-allow-private"])
    _, err = capsys.readouterr()
    assert code == 2 and "private address not allowed" in err
    code = main(["--redis", redis_url, "enqueue", private, "--allow-private", "--no-allow-private"])
    _, err = capsys.readouterr()
    assert code == 2 and err.count("\n") == 1 and "contradict" in err
    assert main(["--redis", redis_url, "enqueue", private]) == 0
