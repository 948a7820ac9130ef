"""``proxies``: the exit pool (``proxy``, ``proxy_file``) as the queue's scripts judge it."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from scrapeq.engine.exits import ExitPool
from scrapeq.engine.job import ms_to_iso
from scrapeq.interfaces import render
from scrapeq.interfaces.cli.common import (
    _console,
    _emit_json,
    _existing_queue,
    _settings,
)


def proxies(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON document on stdout.")] = False,
    domain: Annotated[
        str | None,
        typer.Option(metavar="HOST", help="One domain's tier, benched exits and use per tier."),
    ] = None,
) -> None:
    """Each proxy of the pool: state, tier, requests, bans, success rate, latency, bytes.

    The pool is this command's proxy and proxy_file settings (the workers'
    own); credentials (user and password) are never shown.

    Examples:
      scrapeq proxies
      scrapeq proxies --json
      scrapeq proxies --domain shop-43.example.com
    """
    pool = ExitPool.from_settings(_settings(ctx))
    queue = _existing_queue(ctx)
    if not pool:
        # not an error: monitoring may run where no pool is configured
        typer.echo("no proxies configured (settings proxy, proxy_file)", err=True)
    if domain is not None:
        info = queue.domain_exits(domain)
        if as_json:
            _emit_json({"domain": domain, **_with_times(info)})
            return
        _console().print(render.domain_exits_table(domain, info))
        return
    exits = queue.exits_info()
    if as_json:
        _emit_json({"tiers": list(pool.tiers), "exits": [_exit_json(e) for e in exits]})
        return
    _console().print(render.exits_table(exits))


def _exit_json(e: dict[str, Any]) -> dict[str, Any]:
    out = dict(e)
    out["open_until"] = ms_to_iso(e["open_until_ms"]) if e["open_until_ms"] else None
    out["last_used"] = ms_to_iso(e["last_used_ms"]) if e["last_used_ms"] else None
    return out


def _with_times(info: dict[str, Any]) -> dict[str, Any]:
    benched = [{**b, "until": ms_to_iso(b["until_ms"])} for b in info["benched"]]
    return {**info, "benched": benched}


__all__ = ["proxies"]
