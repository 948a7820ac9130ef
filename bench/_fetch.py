"""The one fetch every sync peer of bench/incident.py runs (RQ, Dramatiq, Celery): no import
of any queue library, so an RQ worker loads it with nothing but RQ installed.

It fetches with the standard library's ``urllib`` (as ``requests`` would: the 30 s timeout is
a socket timeout, per connect and per read, not a total deadline) and raises
:class:`FetchError` for what is worth a retry (a network error, a timeout, a 5xx, 408 or
429), so each library's own retry settings decide. A 4xx is a plain failure.
"""

from __future__ import annotations

import urllib.error
import urllib.request

TIMEOUT = 30.0
RETRIES = 3

_opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class FetchError(Exception):
    """A failure worth a retry."""


def fetch(url: str) -> int:
    """Fetch ``url`` (the whole body); its status, or FetchError when worth a retry."""
    try:
        with _opener.open(url, timeout=TIMEOUT) as resp:
            resp.read()
            status = int(resp.status)
    except urllib.error.HTTPError as exc:
        exc.read()
        status = exc.code
    except OSError as exc:  # timeouts, refused and reset connections
        raise FetchError(f"{url}: {exc}") from exc
    if status >= 500 or status in (408, 429):
        raise FetchError(f"{url}: HTTP {status}")
    return status
