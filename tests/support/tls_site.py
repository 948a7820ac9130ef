"""An HTTPS site on loopback that refuses clients whose TLS handshake is not a browser's.

The site reads the client's first TLS record (the ClientHello) *before* the handshake, without
consuming it (``MSG_PEEK``), and parses it: the cipher suites and the extensions. A client is
taken for a browser when its hello has what Chrome sends and Python's ``ssl`` (OpenSSL, so
aiohttp) never does: GREASE values (RFC 8701: ``0x?a?a``) among the cipher suites and the
extensions, and the ALPS extension (``0x4469``, or ``0x44cd`` in newer Chrome). Anything else
is refused as such sites do: the connection is closed before any handshake byte is answered.
A browser's connection is handed to an ``ssl``-wrapped HTTP/1.1 responder.

The certificate is made at test time with the ``openssl`` command: a CA (``ca.pem``: what
the client under test must trust, e.g. through ``SSL_CERT_FILE``) and a leaf for
``127.0.0.1``, ``shop.test`` and ``public.example``.

Served by threads (one accepting, one per connection), so a test whose own event loop blocks
(the CLI run in this process) can use it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ALPS = frozenset({0x4469, 0x44CD})
COMPRESS_CERTIFICATE = 0x001B


def is_grease(value: int) -> bool:
    """RFC 8701's reserved values: 0x0a0a, 0x1a1a, ... 0xfafa."""
    return (value & 0x0F0F) == 0x0A0A and (value >> 8) == (value & 0xFF)


@dataclass(frozen=True)
class Hello:
    """What one ClientHello offered."""

    ciphers: tuple[int, ...]
    extensions: tuple[int, ...]

    @property
    def grease(self) -> bool:
        return any(map(is_grease, self.ciphers)) and any(map(is_grease, self.extensions))

    @property
    def alps(self) -> bool:
        return bool(ALPS.intersection(self.extensions))

    @property
    def browser(self) -> bool:
        return self.grease and self.alps


def parse_client_hello(record: bytes) -> Hello | None:
    """The hello of a TLS handshake record, or None when it is not one."""
    if len(record) < 9 or record[0] != 0x16 or record[5] != 0x01:
        return None
    body = record[9:]
    pos = 2 + 32  # client_version, random
    pos += 1 + body[pos]  # session id
    n = int.from_bytes(body[pos : pos + 2], "big")
    ciphers = tuple(int.from_bytes(body[i : i + 2], "big") for i in range(pos + 2, pos + 2 + n, 2))
    pos += 2 + n
    pos += 1 + body[pos]  # compression methods
    end = pos + 2 + int.from_bytes(body[pos : pos + 2], "big")
    pos += 2
    extensions = []
    while pos + 4 <= min(end, len(body)):
        kind = int.from_bytes(body[pos : pos + 2], "big")
        size = int.from_bytes(body[pos + 2 : pos + 4], "big")
        extensions.append(kind)
        pos += 4 + size
    return Hello(ciphers, tuple(extensions))


def make_certificates(folder: Path) -> tuple[Path, Path, Path]:
    """(ca.pem, leaf.pem, leaf.key) for 127.0.0.1 and shop.test, made by ``openssl``."""
    openssl = shutil.which("openssl")
    if openssl is None:  # Debian's openssl is in the base image; under CI a missing part fails
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true but the openssl command is missing (apt-get install openssl)")
        pytest.skip("the openssl command is needed to make the test certificate")

    def run(*args: str) -> None:
        subprocess.run([openssl, *args], cwd=folder, check=True, capture_output=True)

    run(
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=scrapeq test CA",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=keyCertSign",
    )
    run(
        "req",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-keyout",
        "leaf.key",
        "-out",
        "leaf.csr",
        "-subj",
        "/CN=shop.test",
    )
    (folder / "leaf.ext").write_text(
        "subjectAltName=DNS:shop.test,DNS:public.example,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n"
        "extendedKeyUsage=serverAuth\n"
    )
    run("x509", "-req", "-in", "leaf.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
        "-CAcreateserial", "-out", "leaf.pem", "-days", "2", "-extfile", "leaf.ext")  # fmt: skip
    return folder / "ca.pem", folder / "leaf.pem", folder / "leaf.key"


class FingerprintSite:
    """The site: ``hellos`` (every ClientHello parsed), ``served`` (request lines answered)."""

    def __init__(self, folder: Path) -> None:
        self.ca, cert, key = make_certificates(folder)
        self._tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self._tls.load_cert_chain(cert, key)
        self._tls.set_alpn_protocols(["http/1.1"])
        self._sock = socket.create_server(("127.0.0.1", 0))
        self._sock.settimeout(0.2)
        self.port = self._sock.getsockname()[1]
        self.hellos: list[Hello] = []
        self.served: list[str] = []
        self.refused = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="fingerprint-site", daemon=True)

    def url(self, path: str = "/", host: str = "127.0.0.1") -> str:
        return f"https://{host}:{self.port}{path}"

    @property
    def domain(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._sock.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _peek_hello(self, conn: socket.socket) -> bytes:
        """The first TLS record, peeked: still unread for the handshake that may follow."""
        deadline = time.monotonic() + 5
        data = b""
        while time.monotonic() < deadline:
            data = conn.recv(16384 + 5, socket.MSG_PEEK)
            if not data:
                return b""
            if len(data) >= 5 and len(data) >= 5 + int.from_bytes(data[3:5], "big"):
                return data[: 5 + int.from_bytes(data[3:5], "big")]
            time.sleep(0.01)
        return data

    def _serve(self, conn: socket.socket) -> None:
        conn.settimeout(5)
        with contextlib.closing(conn):
            try:
                hello = parse_client_hello(self._peek_hello(conn))
            except (OSError, IndexError):
                return
            if hello is None:
                return
            self.hellos.append(hello)
            if not hello.browser:
                self.refused += 1
                return  # closed before the handshake: not a browser
            try:
                with self._tls.wrap_socket(conn, server_side=True) as tls:
                    self._answer(tls)
            except (OSError, ssl.SSLError):
                return

    def _answer(self, tls: ssl.SSLSocket) -> None:
        head = b""
        while b"\r\n\r\n" not in head and len(head) < 65536:
            chunk = tls.recv(4096)
            if not chunk:
                return
            head += chunk
        line = head.split(b"\r\n", 1)[0].decode("latin-1")
        self.served.append(line)
        path = line.split(" ")[1] if line.count(" ") >= 2 else "/"
        headers = {
            k.strip().lower(): v.strip()
            for k, _, v in (h.partition(":") for h in head.decode("latin-1").split("\r\n")[1:] if h)
        }
        extra = ""
        if path == "/redirect":
            status, body = "302 Found", b""
            extra = "Location: /page\r\nSet-Cookie: hop=1; Path=/\r\n"
        elif path == "/big":
            status, body = "200 OK", b"x" * 200_000
        elif path == "/cookie":
            status, body = "200 OK", headers.get("cookie", "").encode()
        else:
            title = f"browser only {path}"
            status, body = "200 OK", f"<html><title>{title}</title></html>".encode()
        tls.sendall(
            f"HTTP/1.1 {status}\r\nContent-Type: text/html\r\nContent-Length: {len(body)}\r\n"
            f"{extra}Connection: close\r\n\r\n".encode()
            + body
        )


@contextlib.contextmanager
def fingerprint_site(folder: Path) -> Iterator[FingerprintSite]:
    site = FingerprintSite(folder)
    site.start()
    try:
        yield site
    finally:
        site.stop()
