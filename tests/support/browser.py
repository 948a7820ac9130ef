"""The dashboard's browser: Debian's chromium (``/usr/bin/chromium``) driven by Playwright for
Python, never a browser Playwright downloads."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path("/usr/bin/chromium")


def need_browser() -> Any:
    """The Playwright module, when the browser is there; skip (workstation) or fail (CI)."""
    if not CHROMIUM.exists():
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true but /usr/bin/chromium is missing (.ci/run installs it)")
        pytest.skip("no /usr/bin/chromium (apt-get install chromium)")
    from playwright import async_api

    return async_api
