"""The runnable examples stay runnable."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def test_crawl_example_runs_end_to_end() -> None:
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / "crawl.py")], capture_output=True, text=True, timeout=90
    )
    assert proc.returncode == 0, proc.stderr
    assert "done 19, dead 1" in proc.stdout
    assert "http_404" in proc.stdout
