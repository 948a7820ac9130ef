"""The runnable examples stay runnable, on public imports only."""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import scrapeq
from scrapeq.engine.server.embedded import stop_server

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_crawl_example_runs_end_to_end_on_the_clis_embedded_redis() -> None:
    root = Path(tempfile.mkdtemp(prefix="sq"))  # the session's short root (conftest)
    data_dir = root / "data"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCRAPEQ_")}
    env["SCRAPEQ_DATA_DIR"] = str(data_dir)
    try:
        proc = subprocess.run(
            [sys.executable, str(EXAMPLES / "crawl.py")],
            capture_output=True, text=True, timeout=90, env=env, cwd=root,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        assert "done 19, dead 1" in proc.stdout
        assert "http_404" in proc.stdout
        # the CLI finds the same Redis and queue with nothing but its data folder
        status = subprocess.run(
            [sys.executable, "-m", "scrapeq", "--queue", "example", "status", "--json"],
            capture_output=True, text=True, timeout=60, env=env, cwd=root,
        )  # fmt: skip
        assert status.returncode == 0, status.stderr
        counts = json.loads(status.stdout)["counts"]
        assert (counts["done"], counts["dead"]) == (19, 1)
    finally:
        stop_server(data_dir)
        shutil.rmtree(root, ignore_errors=True)


def test_examples_import_only_the_public_surface() -> None:
    for path in EXAMPLES.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("scrapeq"):
                if node.module == "scrapeq":
                    assert all(a.name in scrapeq.__all__ for a in node.names), path
                else:  # an integration's own package (scrapeq.contrib.scrapy) is public too
                    assert (node.module or "").startswith("scrapeq.contrib."), (path, node.module)
