"""Whether an answer that came through a proxy is the proxy refusing our credentials (issue 38,
item 9), so that it is the exit's failure (``ours``), not the site's answer.

Through a proxy a plain ``http://`` request is sent to the proxy itself, which answers for the
site; a proxy that refuses our credentials answers in its own name:

* squid and most gateways answer ``407`` with ``Proxy-Authenticate``: the header says it
  (a site has no business sending it; :func:`names_the_proxy`);
* tinyproxy 1.11 answers wrong credentials with ``401`` and ``WWW-Authenticate: Basic
  realm="Tinyproxy"``, which reads like any site's login page. A ``401`` through a proxy is
  therefore checked by asking the proxy itself: a ``CONNECT`` to the same target with the same
  credentials (:func:`connect_status`), answered ``401`` or ``407`` by the proxy alone when it
  refuses them. A proxy found to accept them is not asked again for a while
  (:class:`ProxyAuthCheck`), so a site whose pages answer 401 costs its proxy one small request
  a minute, not one per page.

For ``https://`` targets the proxy answers ``CONNECT`` before any request: aiohttp raises
``ClientHttpProxyError`` with its status, read by :mod:`.classify`.
"""

from __future__ import annotations

import asyncio
import base64
import ssl
import time
from collections.abc import Mapping
from typing import Final
from urllib.parse import unquote, urlsplit

from scrapeq.runtime.classify import ProxyRefused

__all__ = ["ProxyAuthCheck", "connect_status", "names_the_proxy"]

#: Statuses a proxy refuses our credentials with.
REFUSED: Final = frozenset({401, 407})
#: Seconds a proxy found to accept our credentials is not asked again.
TRUSTED_FOR: Final = 60.0
#: Seconds the check may take at most (within the fetch's own deadline).
CHECK_TIMEOUT: Final = 5.0


def names_the_proxy(status: int, headers: Mapping[str, str]) -> bool:
    """Whether a plain-http answer through a proxy is the proxy's own refusal: a 407, or any
    answer carrying ``Proxy-Authenticate``."""
    if status == 407:
        return True
    return any(key.lower() == "proxy-authenticate" for key in headers)


def _authority(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


async def connect_status(proxy: str, target: str, timeout: float = CHECK_TIMEOUT) -> int | None:
    """The status the proxy at ``proxy`` (its URL, credentials included) answers a
    ``CONNECT`` to ``target``'s host and port with; None when it cannot be asked (unreachable,
    no answer in ``timeout`` seconds, not HTTP)."""
    p, t = urlsplit(proxy), urlsplit(target)
    if not p.hostname or not t.hostname:
        return None
    secure = p.scheme.lower() == "https"
    port = p.port or (443 if secure else 80)
    target_port = t.port or (443 if t.scheme.lower() == "https" else 80)
    where = _authority(t.hostname, target_port)
    lines = [f"CONNECT {where} HTTP/1.1", f"Host: {where}"]
    if p.username is not None:
        pair = f"{unquote(p.username)}:{unquote(p.password or '')}".encode()
        lines.append(f"Proxy-Authorization: Basic {base64.b64encode(pair).decode()}")
    writer = None
    try:
        async with asyncio.timeout(timeout):
            context = ssl.create_default_context() if secure else None
            reader, writer = await asyncio.open_connection(p.hostname, port, ssl=context)
            writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())
            await writer.drain()
            first = await reader.readline()
    except (OSError, TimeoutError, ssl.SSLError):
        return None
    finally:
        if writer is not None:
            writer.close()
    parts = first.split()
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/") or not parts[1].isdigit():
        return None
    return int(parts[1])


class ProxyAuthCheck:
    """Tells a proxy's refusal of our credentials from a site's answer, per proxy URL."""

    def __init__(self) -> None:
        self._trusted: dict[str, float] = {}  # proxy URL -> monotonic time it is trusted until

    async def check(self, proxy: str, target: str, status: int, headers: Mapping[str, str]) -> None:
        """Raise :class:`ProxyRefused` when the answer (``status``, ``headers``) to a plain-http
        request for ``target`` through ``proxy`` is the proxy refusing our credentials."""
        if urlsplit(target).scheme.lower() != "http":
            return  # through a tunnel the answer is the site's: the proxy answered CONNECT
        if names_the_proxy(status, headers):
            raise ProxyRefused(f"the proxy refused our credentials (HTTP {status})")
        if status != 401 or self._trusted.get(proxy, 0.0) > time.monotonic():
            return
        answer = await connect_status(proxy, target)
        if answer in REFUSED:
            raise ProxyRefused(f"the proxy refused our credentials (HTTP {answer})")
        if answer is not None:
            self._trusted[proxy] = time.monotonic() + TRUSTED_FOR
