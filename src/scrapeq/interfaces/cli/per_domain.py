"""Domain listings and steering: ``breakers``, ``breaker reset|trip``, ``domains`` and
``domain set``."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from scrapeq.engine.config.specs import FETCHERS
from scrapeq.engine.model.exits import ExitPool
from scrapeq.engine.model.job import ms_to_iso
from scrapeq.engine.ops.status import learned_timing
from scrapeq.errors import InvalidURL
from scrapeq.interfaces import render
from scrapeq.interfaces.cli.common import (
    _COUNT,
    _SECONDS,
    Context,
    _console,
    _die,
    _domain_arg,
    _emit_json,
    _existing_queue,
    _settings,
    _unknown_domain_hint,
)
from scrapeq.interfaces.parsing import concurrency_option

#: ``--state`` of ``domains`` and ``breakers``: a domain's breaker states.
DOMAIN_STATES = ("closed", "open", "half_open", "retired")
_STATE_HELP = f"Only domains in this state ({', '.join(DOMAIN_STATES)}); may be repeated."
_SORT_HELP = f"Order by one of: {', '.join(render.DOMAIN_SORTS)}."
_LIMIT_HELP = "Show at most N domains."


def breakers(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON document on stdout.")] = False,
    state: Annotated[list[str] | None, typer.Option(metavar="STATE", help=_STATE_HELP)] = None,
    sort: Annotated[
        str, typer.Option(metavar="KEY", help=_SORT_HELP + " state: worth a look first.")
    ] = "state",
    limit: Annotated[int | None, typer.Option(parser=_COUNT, metavar="N", help=_LIMIT_HELP)] = None,
) -> None:
    """Every domain's circuit breaker: state, failures, window, trips, cooldown.

    Examples:
      scrapeq breakers --state open --state half_open
      scrapeq breakers --sort failures --limit 20 --json
    """
    _check_listing(state, sort)
    infos = _existing_queue(ctx).domains_info()
    rows = render.pick_domains(infos, states=state, sort=sort, limit=limit)
    if as_json:
        size = ctx.obj.settings.breaker_window
        _emit_json([_breaker_json(d, size) for d in rows])
        return
    _console().print(render.breakers_table(rows, total=len(infos)))


def _check_listing(states: list[str] | None, sort: str) -> None:
    """``--state`` and ``--sort`` of ``domains``/``breakers``: a usage error before any look."""
    for state in states or ():
        if state not in DOMAIN_STATES:
            _die(f"--state takes {', '.join(DOMAIN_STATES)}; got {state!r}", 2)
    if sort not in render.DOMAIN_SORTS:
        _die(f"--sort takes {', '.join(render.DOMAIN_SORTS)}; got {sort!r}", 2)


def _breaker_json(info: dict[str, Any], window_size: int) -> dict[str, Any]:
    """One breaker: its recent window as counts (failures among the last calls recorded)."""
    keys = ("domain", "state", "consecutive_failures")
    out = {k: info[k] for k in keys}
    out["window_failures"] = info["window_failures"]
    out["window_calls"] = info["window_calls"]
    out["window_size"] = window_size
    out["trips"] = info["trips"]
    _time_fields(out, "open_until", info["open_until"])
    return out


def _time_fields(out: dict[str, Any], name: str, ms: int | float | None) -> None:
    """A point in time in JSON: ``name`` ISO 8601 UTC text and ``name_ms`` the integer ms
    since the epoch (both null when unset). docs/INTERFACE.md, "JSON output"."""
    out[name] = ms_to_iso(ms)
    out[f"{name}_ms"] = None if ms is None else int(ms)


breaker_app = typer.Typer(help="Steer one domain's breaker by hand.", no_args_is_help=True)


@breaker_app.command("reset")
def breaker_reset(
    ctx: typer.Context, domain: Annotated[str, typer.Argument(help="host[:port]")]
) -> None:
    """Close a domain's breaker (a retired domain is un-retired)."""
    _domain_arg(domain)
    q = Context(_settings(ctx)).queue()
    with _unknown_domain_hint(q):
        state = q.breaker_reset(domain)
    typer.echo(f"{domain}: {state}")


@breaker_app.command("trip")
def breaker_trip(
    ctx: typer.Context,
    domain: Annotated[str, typer.Argument(help="host[:port]")],
    cooldown: Annotated[
        float | None,
        typer.Option(parser=_SECONDS, help="Seconds open (default: the next cooldown)."),
    ] = None,
) -> None:
    """Open a domain's breaker now: its jobs wait, nothing is fetched from it."""
    _domain_arg(domain)
    q = Context(_settings(ctx)).queue()
    with _unknown_domain_hint(q):
        state = q.breaker_trip(domain, cooldown=cooldown)
    typer.echo(f"{domain}: {state}")


_URL_HELP = (
    "A page: its domain's row and the page's revisit state (estimated change rate, next "
    "visit, expected freshness)."
)


def domains(
    ctx: typer.Context,
    url: Annotated[str | None, typer.Argument(metavar="[URL]", help=_URL_HELP)] = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON document on stdout.")] = False,
    state: Annotated[list[str] | None, typer.Option(metavar="STATE", help=_STATE_HELP)] = None,
    sort: Annotated[str, typer.Option(metavar="KEY", help=_SORT_HELP)] = "name",
    limit: Annotated[int | None, typer.Option(parser=_COUNT, metavar="N", help=_LIMIT_HELP)] = None,
) -> None:
    """Every domain's politeness (delay, concurrency) and counts.

    Examples:
      scrapeq domains --sort ready --limit 10
      scrapeq domains --state retired --json
      scrapeq domains https://shop.example.com/p/1
    """
    _check_listing(state, sort)
    if url is not None:
        _page(ctx, url, as_json)
        return
    infos = _existing_queue(ctx).domains_info()
    rows = render.pick_domains(infos, states=state, sort=sort, limit=limit)
    tiers = ExitPool.from_settings(_settings(ctx)).tiers
    for d in rows:  # the scripts count tiers from 0, cheapest first: their names here
        if "tier" in d and isinstance(d["tier"], int):
            d["tier"] = tiers[d["tier"]] if d["tier"] < len(tiers) else str(d["tier"])
    if as_json:
        _emit_json([_domain_json(d) for d in rows])
        return
    _console().print(render.domains_table(rows, total=len(infos)))


def _page(ctx: typer.Context, url: str, as_json: bool) -> None:
    """``domains URL``: the page's domain's row and the page's revisit state."""
    q = _existing_queue(ctx)
    try:
        page = q.page_info(url)
    except InvalidURL as exc:
        _die(str(exc), 2)
    infos = q.domains_info([page["domain"]])
    if as_json:
        _emit_json({"domain": _domain_json(infos[0]) if infos else None, "page": page})
        return
    if infos:
        _console().print(render.domains_table(infos))
    _console().print(render.page_revisit_line(page))


def _domain_json(info: dict[str, Any]) -> dict[str, Any]:
    keys = ("domain", "state", "ready", "delayed", "inflight", "done", "dead", "enqueued")
    out = {k: info[k] for k in keys}
    out["window_failures"] = info["window_failures"]
    out["window_calls"] = info["window_calls"]
    out["delay"] = info["delay_ms"] / 1000
    out["delay_ms"] = int(info["delay_ms"])
    out["concurrency"] = info["concurrency"]
    out["adaptive"] = info["adaptive"]
    limit = info["limit"]
    out["limit"] = round(limit, 2) if isinstance(limit, float) else limit
    out.update(learned_timing(info))
    for key in ("revisit_load", "revisit_pages", "revisit_budget", "freshness", "revisits_skipped",
                "bytes",
                "skipped", "max_pages_skipped"):  # fmt: skip
        if key in info:  # revisit = on, or a per-domain budget (max_bytes, max_pages)
            out[key] = info[key]
    if "fetcher" in info:  # domain set --fetcher (issue 42)
        out["fetcher"] = info["fetcher"]
    if "browser_wait_for" in info:  # domain set --browser-wait-for
        out["browser_wait_for"] = info["browser_wait_for"]
    if "auto_fetcher" in info:  # fetcher auto: the fleet's decision (lua/includes/auto.lua)
        out["auto_fetcher"] = info["auto_fetcher"]
        out["auto_patterns"] = info["auto_patterns"]
    if "tier" in info:  # with an exit pool (proxy, proxy_file)
        out["tier"] = info["tier"]
        out["benched_exits"] = info["benched_exits"]
    return out


domain_app = typer.Typer(help="Per-domain politeness overrides.", no_args_is_help=True)


@domain_app.command("set")
def domain_set(
    ctx: typer.Context,
    domain: Annotated[str, typer.Argument(help="host[:port]")],
    delay: Annotated[
        float | None, typer.Option(parser=_SECONDS, help="Minimum seconds between request starts.")
    ] = None,
    concurrency: Annotated[
        str | None,
        typer.Option(
            parser=concurrency_option,
            help="Jobs in flight at once: a number, or auto (learned).",
        ),
    ] = None,
    fetcher: Annotated[
        str | None,
        typer.Option(
            metavar="NAME",
            help="What fetches its jobs that name none: http, impersonate, browser, auto "
            "(chosen by the fleet on evidence), or default (the worker's fetcher setting).",
        ),
    ] = None,
    browser_wait_for: Annotated[
        str | None,
        typer.Option(
            metavar="CSS",
            help="A selector the browser fetcher waits for on its pages ('' removes it).",
        ),
    ] = None,
) -> None:
    """Set a domain's politeness overrides.

    Examples:
      scrapeq domain set shop-43.example.com --delay 2 --concurrency 1
      scrapeq domain set shop-43.example.com --concurrency auto
      scrapeq domain set shop-43.example.com --fetcher impersonate
      scrapeq domain set shop.example.com --browser-wait-for '.price'
    """
    _domain_arg(domain)
    if (delay, concurrency, fetcher, browser_wait_for) == (None, None, None, None):
        _die("give --delay, --concurrency, --fetcher and/or --browser-wait-for", 2)
    if fetcher is not None and fetcher not in (*FETCHERS, "default"):
        _die(f"--fetcher takes {', '.join((*FETCHERS, 'default'))}, got {fetcher!r}", 2)
    q = Context(_settings(ctx)).queue()
    conc = int(concurrency) if concurrency not in (None, "auto") else concurrency
    got = q.domain_set(domain, delay=delay, concurrency=conc, fetcher=fetcher,
                       browser_wait_for=browser_wait_for)  # fmt: skip
    limit = f"auto (now {got['concurrency']})" if got["adaptive"] else str(got["concurrency"])
    line = f"{domain}: delay {got['delay']:g}s, concurrency {limit}"
    if got["fetcher"] is not None:
        line += f", fetcher {got['fetcher']}"
    if got["browser_wait_for"] is not None:
        line += f", browser waits for {got['browser_wait_for']}"
    typer.echo(line)
