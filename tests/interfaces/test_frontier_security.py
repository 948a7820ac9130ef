"""The URLFrontier service's bearer token and TLS, and `scrapeq frontier serve` as a process:
its one-line refusals, a restart between two calls, and several services on one queue."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from scrapeq.engine.config.settings import Settings
from scrapeq.engine.server.launcher import free_port
from scrapeq.interfaces.frontier import urlfrontier_pb2 as pb
from support.frontier import Client, FrontierProcess, discovered, known
from support.processes import catches, wait_until

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "t" * 24


def test_a_token_is_required_on_every_call(frontier_loop: Any, redis_url: str) -> None:
    service = FrontierProcess(frontier_loop, redis_url, Settings(), token=TOKEN)
    client = Client(service.target)
    try:
        with pytest.raises(grpc.RpcError) as caught:
            client.stub.ListCrawls(pb.Local(), timeout=10)
        assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
        with pytest.raises(grpc.RpcError) as caught:
            client.put([discovered("http://a.example/")], metadata=[("authorization", "Bearer x")])
        assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
        with pytest.raises(grpc.RpcError) as caught:
            client.get()
        assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
        auth = [("authorization", f"Bearer {TOKEN}")]
        acks = client.put([discovered("http://a.example/")], metadata=auth)
        assert [a.status for a in acks] == [pb.AckMessage.OK]
        assert client.stub.CountURLs(pb.CountUrlParams(), metadata=auth, timeout=10).value == 1
    finally:
        client.close()
        service.close()


@pytest.fixture(scope="module")
def tls_pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return cert, key


def test_tls_serves_a_client_that_trusts_the_certificate(
    frontier_loop: Any, redis_url: str, tls_pair: tuple[Path, Path]
) -> None:
    cert, key = tls_pair
    service = FrontierProcess(
        frontier_loop, redis_url, Settings(), token=TOKEN, tls_cert=cert, tls_key=key
    )
    creds = grpc.composite_channel_credentials(
        grpc.ssl_channel_credentials(cert.read_bytes()),
        grpc.access_token_call_credentials(TOKEN),
    )
    client = Client(service.target, creds)
    plain = Client(service.target)
    try:
        assert [a.status for a in client.put([discovered("http://t.example/")])] == [
            pb.AckMessage.OK
        ]
        with pytest.raises(grpc.RpcError):  # no TLS: no answer
            plain.stub.ListCrawls(pb.Local(), timeout=3)
    finally:
        client.close()
        plain.close()
        service.close()


# --- as a process --------------------------------------------------------------------------------


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCRAPEQ_")}
    env["PYTHONPATH"] = str(ROOT / "src")
    return env


def _serve(redis_url: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "scrapeq", "--redis", redis_url, "frontier", "serve", *args],
        env=_env(),
        stderr=subprocess.PIPE,
        text=True,
    )


def _stop(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=20)


@pytest.fixture
def served(redis_url: str) -> Iterator[Any]:
    """``scrapeq frontier serve`` processes on loopback ports: ``served(port)`` starts one and
    answers it (``_stop`` it to stop it); all are stopped after the test."""
    started: list[subprocess.Popen[str]] = []

    def serve(port: int) -> subprocess.Popen[str]:
        proc = _serve(redis_url, "--grpc", f"127.0.0.1:{port}")
        started.append(proc)
        assert proc.stderr is not None
        line = proc.stderr.readline()
        assert line.startswith(f"frontier on 127.0.0.1:{port} "), line
        return proc

    yield serve
    for proc in started:
        _stop(proc)


def test_binding_off_loopback_without_a_token_is_refused_in_one_line(redis_url: str) -> None:
    proc = _serve(redis_url, "--grpc", "0.0.0.0:7071")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert err.strip().splitlines() == [
        "scrapeq: error: --grpc: 0.0.0.0 is reachable from other machines: a token is "
        "required (--token or SCRAPEQ_FRONTIER_TOKEN)"
    ]


def test_a_process_restarted_between_two_calls_keeps_every_lease(served: Any) -> None:
    port = free_port()
    first = served(port)
    client = Client(f"127.0.0.1:{port}")
    try:
        client.put([discovered("http://p.example/1"), discovered("http://p.example/2")])
        got = client.get(key="p.example", delay_requestable=60)
        assert len(got) == 2
        _stop(first)
        served(port)  # the same address: the client's channel reconnects
        assert client.get(key="p.example", delay_requestable=60) == []  # still leased
        acks = client.put([known(got[0].url, 0, meta=got[0])])
        assert [a.status for a in acks] == [pb.AckMessage.OK]
    finally:
        client.close()
    # another service on the same queue: the leases are the queue's, not a process's
    other_port = free_port()
    served(other_port)
    other = Client(f"127.0.0.1:{other_port}")
    try:
        assert other.get(key="p.example", delay_requestable=60) == []
        acks = other.put([known(got[1].url, 0, meta=got[1])])
        assert [a.status for a in acks] == [pb.AckMessage.OK]
        assert other.stats("p.example").inProcess == 0
    finally:
        other.close()


def test_sigterm_stops_the_service(redis_url: str) -> None:
    proc = _serve(redis_url, "--grpc", f"127.0.0.1:{free_port()}")
    assert proc.stderr is not None
    assert proc.stderr.readline().startswith("frontier on ")
    # the service's SIGTERM handler is installed (not a sleep: its SigCgt mask says so)
    wait_until(lambda: catches(proc.pid, signal.SIGTERM), 10, "the SIGTERM handler")
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=20)
    assert proc.returncode == 0
