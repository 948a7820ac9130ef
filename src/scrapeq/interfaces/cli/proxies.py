"""``proxies``: the exit pool (``proxy``, ``proxy_file``) as the queue's scripts judge it;
``proxies probe``: end exits' rests by hand (issue 38, item 16)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from scrapeq.engine.model.exits import DIRECT, Exit, ExitPool
from scrapeq.engine.model.job import ms_to_iso
from scrapeq.engine.model.urls import redact_url
from scrapeq.interfaces import render
from scrapeq.interfaces.cli.common import (
    _console,
    _die,
    _emit_json,
    _existing_queue,
    _settings,
)

proxies_app = typer.Typer(invoke_without_command=True)  # its help: the callback's docstring


@proxies_app.callback(invoke_without_command=True)
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
    own); credentials (user and password) are never shown. `proxies probe`
    ends resting proxies' rests by hand.

    Examples:
      scrapeq proxies
      scrapeq proxies --json
      scrapeq proxies --domain shop-43.example.com
      scrapeq proxies probe 3f2a9c0b1d4e
    """
    if ctx.invoked_subcommand is not None:
        return
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


@proxies_app.command("probe")
def probe(
    ctx: typer.Context,
    exits: Annotated[
        list[str] | None,
        typer.Argument(metavar="EXIT...", help="Exit ids or names as `proxies` shows them."),
    ] = None,
    every: Annotated[bool, typer.Option("--all", help="Every exit of the pool.")] = False,
) -> None:
    """End resting proxies' rests now: the next claim sends each one probe job.

    A proxy that is down (its cooldown running) may carry a probe at once; the
    probe's answer puts it back in rotation, a failed probe rests it again (and
    costs its job nothing). A proxy not resting is left as it is.

    Examples:
      scrapeq proxies probe 3f2a9c0b1d4e
      scrapeq proxies probe http://10.0.0.7:3128
      scrapeq proxies probe --all
    """
    if bool(exits) == every:
        _die("proxies probe: give EXIT... or --all (one of them)", 2)
    pool = ExitPool.from_settings(_settings(ctx))
    queue = _existing_queue(ctx)
    if not pool:
        _die("proxies probe: no proxies configured (settings proxy, proxy_file)", 2)
    chosen = list(pool.exits) if every else [_exit_named(pool, name) for name in exits or ()]
    was_down = queue.exits_probe(list(dict.fromkeys(e.id for e in chosen)))
    for e in dict.fromkeys(chosen):
        if was_down[e.id]:
            typer.echo(f"{e.name} ({e.id}): rest ended; the next claim sends it a probe")
        else:
            typer.echo(f"{e.name} ({e.id}): not resting")


def _exit_named(pool: ExitPool, name: str) -> Exit:
    """The exit ``name`` names: its id, ``direct``, its name as ``proxies`` shows it, or its
    URL; one line and exit 2 for none, or for a name two exits share."""
    wanted = name.strip()
    found = [
        e for e in pool.exits
        if wanted in (e.id, e.name) or (e.url is not None and wanted == e.url)
        or (e.url is None and wanted.lower() == DIRECT)
    ]  # fmt: skip
    shown = redact_url(wanted)
    if not found:
        _die(f"proxies probe: no exit {shown!r} in the pool (scrapeq proxies lists them)", 2)
    if len(found) > 1:
        ids = ", ".join(e.id for e in found)
        _die(f"proxies probe: {shown!r} names {len(found)} exits ({ids}): give its id", 2)
    return found[0]


__all__ = ["probe", "proxies", "proxies_app"]
