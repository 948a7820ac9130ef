"""What runs beside the queue: ``demo``, ``dashboard`` and the embedded Redis (``server``)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Annotated

import typer

from scrapeq.engine.config.settings import Settings
from scrapeq.errors import ConfigError
from scrapeq.interfaces.cli.common import (
    Context,
    _bind_problem,
    _console,
    _die,
    _emit_json,
    _settings,
)
from scrapeq.interfaces.parsing import seconds_option


def demo(
    ctx: typer.Context,
    duration: Annotated[
        float, typer.Option(parser=seconds_option(1), help="Seconds the scrapeq phase runs.")
    ] = 60,
) -> None:
    """Replay the one-hanging-site incident on a local fleet and report.

    The report sets it beside a naive retry loop run against the same fleet.
    Without --redis the demo runs its own Redis in a temporary folder and stops it
    at the end: your embedded server (data_dir) is neither used nor started.

    Examples:
      scrapeq demo --duration 30
    """
    from scrapeq.demo.scenario import render_report, run_demo

    settings = _settings(ctx)
    console = _console()
    with _demo_redis(settings) as url:
        report = run_demo(settings, redis_url=url, duration=duration, console=console)
    render_report(report, console)


@contextlib.contextmanager
def _demo_redis(settings: Settings) -> Iterator[str]:
    """The configured Redis, or a private throwaway one (the demo's queue is dropped anyway)."""
    if settings.redis_url is not None:
        yield Context(settings).checked_url()
        return
    from scrapeq.engine.server.embedded import private_server

    with private_server() as url:
        yield url


def dashboard(
    ctx: typer.Context,
    host: Annotated[str, typer.Option(help="Address to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port to bind.")] = 8000,
    token: Annotated[
        str | None,
        typer.Option(
            envvar="SCRAPEQ_DASHBOARD_TOKEN",
            help="Required on every request (16+ characters); required off loopback.",
            show_default=False,
        ),
    ] = None,
    allowed_host: Annotated[
        list[str] | None,
        typer.Option(help="Another name the Host header may carry (a proxy's); repeatable."),
    ] = None,
    read_only: Annotated[
        bool, typer.Option("--read-only", help="Hide and refuse every action.")
    ] = False,
) -> None:
    """Serve the web dashboard and /metrics (Prometheus text format).

    Examples:
      scrapeq dashboard --port 8000
      export SCRAPEQ_DASHBOARD_TOKEN=$(openssl rand -hex 16)
      scrapeq dashboard --host 0.0.0.0 --allowed-host dash.example.com --read-only
    """
    from scrapeq.interfaces.web import check_token, serve

    try:
        check_token(token, host)
    except ConfigError as exc:
        _die(f"--{exc.name}: {str(exc).partition(': ')[2]}", 2)
    context = Context(_settings(ctx))
    context.checked_url()
    listening = False

    def ready(base: str) -> None:
        nonlocal listening
        listening = True
        note = " read-only," if read_only else ""
        auth = " token required" if token else " loopback only"
        typer.echo(f"dashboard on {base}/ ({note}{auth}; metrics: /metrics)", err=True)

    try:
        serve(
            context.async_queue,
            host=host,
            port=port,
            on_ready=ready,
            token=token,
            allowed_hosts=allowed_host or (),
            read_only=read_only,
        )
    except OSError as exc:
        if listening:  # not a bind failure: a bug or the machine's, keep the traceback
            raise
        _die(f"cannot serve the dashboard on {host}:{port}: {_bind_problem(exc)}", 1)


server_app = typer.Typer(
    help="The embedded Redis: the private redis-server of --data-dir.", no_args_is_help=True
)


@server_app.command("status")
def server_status(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON document on stdout.")] = False,
) -> None:
    """Whether the embedded Redis runs: pid, socket, data dir, memory. Starts nothing.

    Examples:
      scrapeq server status
      scrapeq --data-dir /srv/scrapeq server status --json
    """
    from scrapeq.engine.server.embedded import server_info

    settings = _settings(ctx)
    _note_redis_url(settings)
    info = server_info(settings.data_dir)
    if as_json:
        _emit_json(info.as_dict())
        return
    rows = [("state", "running" if info.running else "not running")]
    if info.running:
        rows += [("pid", str(info.pid) if info.pid is not None else "unknown")]
    rows += [("socket", str(info.files.socket)), ("data dir", str(info.files.data_dir))]
    if info.running:
        rows += [("memory", info.used_memory_human or "unknown")]
    for name, value in rows:
        typer.echo(f"{name:<9} {value}")


@server_app.command("stop")
def server_stop(ctx: typer.Context) -> None:
    """Stop the embedded Redis: SHUTDOWN SAVE, wait for it to exit, remove its pidfile.

    Stopping a server that does not run is no error. The next command that needs
    Redis (without --redis) starts it again, with its data.

    Examples:
      scrapeq server stop
    """
    from scrapeq.engine.server.embedded import server_info, stop_server

    settings = _settings(ctx)
    _note_redis_url(settings)
    info = server_info(settings.data_dir)
    if not stop_server(settings.data_dir):
        typer.echo(f"no embedded Redis running in {info.files.data_dir}")
        return
    pid = f" (pid {info.pid})" if info.pid is not None else ""
    typer.echo(f"stopped the embedded Redis{pid} in {info.files.data_dir}")


def _note_redis_url(settings: Settings) -> None:
    """Say on stderr that the commands use another server than the embedded one."""
    if settings.redis_url is not None:
        from scrapeq.engine.server.connection import redact

        typer.echo(
            f"scrapeq: note: redis_url is set ({redact(settings.redis_url)}): the other "
            "commands use that server, not this embedded one",
            err=True,
        )
