"""The settings and CLI references are generated: ``docs/reference/*.md`` are what
``scripts/gen_reference.py`` writes from the settings and the ``--help`` texts (``make lint``
runs the same check)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from scrapeq.engine.config.settings import SETTING_NAMES

ROOT = next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").exists())
SCRIPT = ROOT / "scripts" / "gen_reference.py"


@pytest.fixture(scope="module")
def gen() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_reference", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_checked_in_references_are_what_the_script_writes() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--check"], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr


def test_check_fails_on_a_stale_reference_and_writing_mends_it(
    gen: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings, cli = tmp_path / "settings.md", tmp_path / "cli.md"
    stale = gen.settings_reference().replace("| `lease` | `60` |", "| `lease` | `45` |")
    settings.write_text(stale, encoding="utf-8")
    cli.write_text(gen.cli_reference(), encoding="utf-8")
    monkeypatch.setattr(gen, "ROOT", tmp_path)
    monkeypatch.setattr(gen, "SETTINGS_MD", settings)
    monkeypatch.setattr(gen, "CLI_MD", cli)
    assert gen.main(["--check"]) == 1
    assert settings.read_text(encoding="utf-8") == stale, "check mode writes nothing"
    assert gen.main([]) == 0
    assert gen.main(["--check"]) == 0 and "| `lease` | `60` |" in settings.read_text()


def test_the_references_cover_every_setting_and_every_command(gen: ModuleType) -> None:
    from scrapeq.interfaces.cli import command

    settings = gen.settings_reference()
    for name in SETTING_NAMES:
        assert f"| `{name}` |" in settings, name
    cli = gen.cli_reference()
    commands = command().commands
    assert len(commands) > 10
    for name, sub in commands.items():
        assert f"## `scrapeq {name}`" in cli, name
        for child in getattr(sub, "commands", {}):
            assert f"## `scrapeq {name} {child}`" in cli, (name, child)
    assert max(len(line) for line in cli.splitlines() if line.startswith(("│", "╭"))) <= 80


def test_a_setting_with_no_meaning_fails_the_script(
    gen: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    from scrapeq.engine.config import docs as setting_docs

    docs = dict(setting_docs.SETTING_DOCS)
    del docs["lease"]
    monkeypatch.setattr(setting_docs, "SETTING_DOCS", docs)
    with pytest.raises(SystemExit, match="lacks \\['lease'\\]"):
        gen.settings_reference()
