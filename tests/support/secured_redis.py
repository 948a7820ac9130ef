"""Secured redis-servers for the tests of a Redis that asks for credentials (a password, an
ACL user) or speaks TLS only."""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import redis

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


@contextlib.contextmanager
def _running(
    binary: Path, port: int, args: list[str], admin_url: str, workdir: Path
) -> Iterator[Server]:
    """Run ``binary`` with ``args`` until the block ends, once ``admin_url`` answers PING."""
    proc = subprocess.Popen(
        [str(binary), *args, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", str(workdir), "--daemonize", "no"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    admin = redis.Redis.from_url(admin_url, decode_responses=True)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                admin.ping()
                break
            except redis.ConnectionError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    proc.kill()
                    output = proc.communicate(timeout=5)[0].decode(errors="replace")
                    raise RuntimeError(f"{binary} {args} did not start:\n{output}") from None
                time.sleep(0.05)
        scheme, _, rest = admin_url.partition("://")
        yield Server(port, scheme, rest.partition("?")[2], admin)
    finally:
        admin.close()
        proc.terminate()
        try:
            proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
