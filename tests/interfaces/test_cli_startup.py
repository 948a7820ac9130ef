"""The CLI starts without what its command does not use (issue 38, item 18): importing
``scrapeq`` loads no client library, and the CLI loads no HTTP client (aiohttp is the
worker's, the dashboard's and the sitemap reader's), so ``scrapeq --version`` or
``status`` does not pay for them. Checked by module, not by time: timings are for benches."""

from __future__ import annotations

import json
import subprocess
import sys

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


def test_every_public_name_is_there_on_first_use() -> None:
    for name in scrapeq.__all__:
        assert getattr(scrapeq, name) is not None
    assert sorted(dir(scrapeq)) == sorted(scrapeq.__all__)
