"""The dashboard's browser: Debian's chromium (``/usr/bin/chromium``) driven by Playwright for
Python, never a browser Playwright downloads."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path("/usr/bin/chromium")

#: The modules that start chromium run in one process of ``make test``, one test at a time:
#: four chromiums at once on two cores, beside the other tests, pushed pages past the
#: deadlines these tests hold the browser to. The group is dispatched first (the largest).
ONE_CHROMIUM_AT_A_TIME = pytest.mark.xdist_group("chromium")


def need_browser() -> Any:
    """The Playwright module, when the browser is there; skip (workstation) or fail (CI)."""
    if not CHROMIUM.exists():
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true but /usr/bin/chromium is missing (.ci/run installs it)")
        pytest.skip("no /usr/bin/chromium (apt-get install chromium)")
    from playwright import async_api

    return async_api
