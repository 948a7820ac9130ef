"""Running the URLFrontier service: the gRPC server, its TLS and its bearer token."""

from __future__ import annotations

import asyncio
import hmac
import logging
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from scrapeq.engine.config.settings import Settings
from scrapeq.engine.server.connection import aclose_client, async_client
from scrapeq.errors import ConfigError
from scrapeq.interfaces.frontier import urlfrontier_pb2_grpc as pb_grpc
from scrapeq.interfaces.frontier.crawls import Crawls
from scrapeq.interfaces.frontier.service import FrontierService
from scrapeq.interfaces.web.security import MIN_TOKEN_CHARS, is_loopback

__all__ = ["Running", "ServeOptions", "parse_address", "run", "start"]

log = logging.getLogger("scrapeq.frontier")

#: The environment variable ``scrapeq frontier serve --token`` is also read from.
TOKEN_ENV = "SCRAPEQ_FRONTIER_TOKEN"


@dataclass(frozen=True, slots=True)
class ServeOptions:
    """How ``scrapeq frontier serve`` runs.

    Attributes:
        host, port: the address to bind (a port of 0 picks a free one).
        token: the bearer token every call must carry (``authorization: Bearer <token>``);
            required for an address other machines can reach.
        tls_cert, tls_key: PEM files; both or neither.
        prefix: queue name = prefix + crawl ID.
        max_unacked: a PutURLs stream's items read ahead of their acks at most.
    """

    host: str = "127.0.0.1"
    port: int = 7071
    token: str | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None
    prefix: str = "frontier."
    max_unacked: int = 1024

    def check(self) -> None:
        """Refuse what cannot run safely (:class:`ConfigError`, one line)."""
        if self.token is not None and len(self.token) < MIN_TOKEN_CHARS:
            raise ConfigError("token", f"must be at least {MIN_TOKEN_CHARS} characters")
        if self.token is None and not is_loopback(self.host):
            raise ConfigError(
                "host",
                f"{self.host} is reachable from other machines: a token is required "
                f"(--token or {TOKEN_ENV})",
            )
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ConfigError("tls", "--tls-cert and --tls-key go together")
        if self.max_unacked < 2:
            raise ConfigError("max_unacked", "must be at least 2")


def parse_address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT``) as (host, port); :class:`ConfigError` otherwise."""
    host, sep, port = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise ConfigError("grpc", f"{text!r} is not HOST:PORT")
    return host, int(port)


class _TokenGuard(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Refuse (UNAUTHENTICATED) every call without ``authorization: Bearer <token>``."""

    def __init__(self, token: str) -> None:
        self._expected = f"Bearer {token}".encode()

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        given = dict(details.invocation_metadata or ()).get("authorization", "")
        given_bytes = given.encode() if isinstance(given, str) else bytes(given)
        if hmac.compare_digest(given_bytes, self._expected):
            return await continuation(details)
        return _refusal(details)


def _refusal(details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
    async def deny(request: Any, context: grpc.aio.ServicerContext) -> None:
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, "a bearer token is required")

    method = str(details.method).rpartition("/")[2]
    if method in ("PutURLs", "PutDiscovered"):
        return grpc.stream_stream_rpc_method_handler(deny)
    if method in ("GetURLs", "ListURLs"):
        return grpc.unary_stream_rpc_method_handler(deny)
    return grpc.unary_unary_rpc_method_handler(deny)


@dataclass
class Running:
    """A started service: its gRPC server, the port it listens on, its Redis client."""

    server: grpc.aio.Server
    port: int
    crawls: Crawls

    async def stop(self, grace: float | None = None) -> None:
        """Stop serving (calls in progress get ``grace`` seconds), then close the client."""
        await self.server.stop(grace)
        await aclose_client(self.crawls.client)


async def start(options: ServeOptions, settings: Settings, redis_url: str) -> Running:
    """Start the service (its options checked first)."""
    options.check()
    client = async_client(redis_url, settings.cluster)
    crawls = Crawls(client, settings, options.prefix)
    interceptors = [_TokenGuard(options.token)] if options.token else []
    server = grpc.aio.server(interceptors=interceptors)
    host = f"[{options.host}]" if ":" in options.host else options.host
    address = f"{host}:{options.port}"
    service = FrontierService(crawls, max_unacked=options.max_unacked, node=address)
    pb_grpc.add_URLFrontierServicer_to_server(service, server)  # type: ignore[no-untyped-call]
    if options.tls_cert is not None and options.tls_key is not None:
        pair = (options.tls_key.read_bytes(), options.tls_cert.read_bytes())
        port = server.add_secure_port(address, grpc.ssl_server_credentials([pair]))
    else:
        port = server.add_insecure_port(address)
    service.node = f"{host}:{port}"  # the port bound, when 0 asked for any
    await server.start()
    return Running(server, port, crawls)


async def run(
    options: ServeOptions,
    settings: Settings,
    redis_url: str,
    *,
    ready: Callable[[int], None] | None = None,
) -> None:
    """Serve until SIGINT or SIGTERM; ``ready`` is called with the port once listening."""
    running = await start(options, settings, redis_url)
    if ready is not None:
        ready(running.port)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await running.stop(grace=5)
