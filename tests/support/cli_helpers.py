"""What the CLI tests share: ``scrapeq`` run in this process, and a clean environment."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from scrapeq.interfaces.cli import main


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``scrapeq ARGV...`` in this process: (exit code, stdout, stderr)."""
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def scrub_env(monkeypatch: pytest.MonkeyPatch, workdir: Path, columns: int | None = None) -> None:
    """No SCRAPEQ_* setting of the caller's leaks in; the working folder is ``workdir`` (no
    scrapeq.toml found by accident); ``columns`` widens rich's tables (it folds long cells)."""
    for name in list(os.environ):
        if name.startswith("SCRAPEQ_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(workdir)
    if columns is not None:
        monkeypatch.setenv("COLUMNS", str(columns))
