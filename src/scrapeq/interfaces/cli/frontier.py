"""``frontier serve``: the URLFrontier gRPC API on this Redis's queues (the ``frontier`` extra)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from scrapeq.errors import ConfigError
from scrapeq.interfaces.cli.common import Context, _die, _settings

if TYPE_CHECKING:
    from scrapeq.interfaces.frontier.server import ServeOptions

#: The variable ``--token`` is also read from (``server.TOKEN_ENV``; not imported: grpc).
TOKEN_ENV = "SCRAPEQ_FRONTIER_TOKEN"

frontier_app = typer.Typer(
    help="The URLFrontier gRPC API (crawler-commons/url-frontier 2.x) on scrapeq queues.",
    no_args_is_help=True,
)


@frontier_app.command("serve")
def frontier_serve(
    ctx: typer.Context,
    grpc_address: Annotated[
        str, typer.Option("--grpc", metavar="HOST:PORT", help="Address to bind.")
    ] = "127.0.0.1:7071",
    token: Annotated[
        str | None,
        typer.Option(
            envvar=TOKEN_ENV,
            help="Bearer token every call must carry (16+ characters); required off loopback.",
            show_default=False,
        ),
    ] = None,
    tls_cert: Annotated[
        Path | None, typer.Option(metavar="PEM", help="TLS certificate chain (with --tls-key).")
    ] = None,
    tls_key: Annotated[
        Path | None, typer.Option(metavar="PEM", help="TLS private key (with --tls-cert).")
    ] = None,
    prefix: Annotated[
        str, typer.Option(help="Queue name of a crawl ID: this prefix + the ID.")
    ] = "frontier.",
    max_unacked: Annotated[
        int, typer.Option(min=2, max=1_000_000, help="PutURLs items read ahead of their acks.")
    ] = 1024,
) -> None:
    """Serve the URLFrontier API: a crawl ID is a queue, a queue key a domain.

    GetURLs claims (the lease is delay_requestable and rides in the metadata
    key scrapeq.lease); a known URL sent back with its lease completes the
    claim or schedules its next visit; one whose lease ended is refused (FAIL).
    All state is in Redis: restart or run several services at will.

    Examples:
      scrapeq frontier serve --grpc 127.0.0.1:7071
      export SCRAPEQ_FRONTIER_TOKEN=$(openssl rand -hex 16)
      scrapeq frontier serve --grpc 0.0.0.0:7071 --tls-cert c.pem --tls-key k.pem
    """
    options = _options(grpc_address, token, tls_cert, tls_key, prefix, max_unacked)
    context = Context(_settings(ctx))
    url = context.checked_url()

    def ready(bound: int) -> None:
        auth = "token required" if token else "loopback only"
        tls = ", TLS" if tls_cert else ""
        where = f"{options.host}:{bound}"
        typer.echo(f"frontier on {where} ({auth}{tls}; crawls: {prefix}<ID>)", err=True)

    import asyncio  # here, not with the module: ~20 ms to import

    from scrapeq.interfaces.frontier.server import run

    try:
        asyncio.run(run(options, context.settings, url, ready=ready))
    except RuntimeError as exc:  # grpc's bind failure
        _die(f"cannot serve the frontier on {grpc_address}: {exc}", 1)


def _options(
    address: str,
    token: str | None,
    tls_cert: Path | None,
    tls_key: Path | None,
    prefix: str,
    max_unacked: int,
) -> ServeOptions:
    """The checked options, or one line and exit (2 for bad input, 1 without the extra)."""
    try:
        from scrapeq.interfaces.frontier.server import ServeOptions, parse_address
    except ImportError as exc:
        _die(f"frontier serve needs grpcio: pip install 'scrapeq[frontier]' ({exc})", 1)
    for flag, given in (("--tls-cert", tls_cert), ("--tls-key", tls_key)):
        if given is not None and not given.is_file():
            _die(f"{flag}: no such file: {given}", 2)
    try:
        host, port = parse_address(address)
        options = ServeOptions(host, port, token, tls_cert, tls_key, prefix, max_unacked)
        options.check()
    except ConfigError as exc:
        flag = {"host": "grpc", "tls": "tls-cert"}.get(exc.name, exc.name.replace("_", "-"))
        _die(f"--{flag}: {exc.reason}", 2)
    return options
