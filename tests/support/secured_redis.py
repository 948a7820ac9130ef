"""Secured redis-servers for the tests of a Redis that asks for credentials (a password, an
ACL user) or speaks TLS only, started by scrapeq's launcher
(:class:`scrapeq.engine.server.launcher.RedisProcess`) like every other server of the tests."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import redis

from scrapeq.engine.server import launcher
from scrapeq.errors import RedisUnavailable

#: The default user's password; the '@' must be percent-encoded in a URL.
PASSWORD = "s3cret@pw"


@dataclass
class Server:
    """A redis-server the tests started; ``admin`` talks to it as the default user."""

    port: int
    scheme: str
    query: str
    admin: redis.Redis

    def url(self, userinfo: str = "", query: str | None = None) -> str:
        at = f"{userinfo}@" if userinfo else ""
        tail = self.query if query is None else query
        return f"{self.scheme}://{at}127.0.0.1:{self.port}/0" + (f"?{tail}" if tail else "")


class _Secured(launcher.RedisProcess):
    """The launcher's server, ready once ``admin_url`` answers PING: the launcher's raw PING
    meets ``-NOAUTH`` behind a password, and nothing at all on a TLS-only port."""

    def __init__(
        self, binary: Path, port: int, args: list[str], admin_url: str, workdir: Path
    ) -> None:
        super().__init__(workdir, *args, port=port, binary=binary, log=workdir / "redis.log")
        self.admin_url = admin_url

    def _ready(self) -> bool:
        try:
            with redis.Redis.from_url(self.admin_url, socket_connect_timeout=1) as client:
                return bool(client.ping())
        except redis.RedisError:
            return False


@contextlib.contextmanager
def running(
    binary: Path, port: int, args: list[str], admin_url: str, workdir: Path
) -> Iterator[Server]:
    """Run ``binary`` with ``args`` (the last ``--port`` wins) until the block ends, once
    ``admin_url`` answers PING."""
    server = _Secured(binary, port, args, admin_url, workdir)
    try:
        server.start(10.0)
    except RedisUnavailable as exc:
        log = server.log.read_text(errors="replace") if server.log else ""
        raise RuntimeError(f"{binary} {args} did not start ({exc}):\n{log}") from None
    admin = redis.Redis.from_url(admin_url, decode_responses=True)
    try:
        scheme, _, rest = admin_url.partition("://")
        yield Server(port, scheme, rest.partition("?")[2], admin)
    finally:
        admin.close()
        server.stop()
