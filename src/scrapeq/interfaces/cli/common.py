"""What every command shares: the settings in force, the queue, one-line errors, JSON and
rich output, the options several commands take, and the checks of a domain argument."""

from __future__ import annotations

import contextlib
import errno
import gc
import importlib
import json
import logging
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from scrapeq.engine.config.settings import Settings, load_settings
from scrapeq.engine.model.urls import domain_of
from scrapeq.errors import InvalidURL, NotFound, RedisUnavailable
from scrapeq.interfaces import render
from scrapeq.interfaces.parsing import count_option, seconds_option
from scrapeq.runtime.logs import formatter

# The engine's queue and connections (redis-py: ~0.1 s to import), asyncio and rich are
# imported by the commands that use them, when they run: ``--version`` and ``--help`` load no
# Redis client (issue 38, item 18; tests/interfaces/test_cli_startup.py). The same holds in
# every module of this package.
if TYPE_CHECKING:
    from rich.console import Console

    from scrapeq.engine.queue import AsyncQueue, Queue

log = logging.getLogger("scrapeq")

#: The parsers of duration (>= 0 s) and count (>= 1) options: bounded (issue 21, item 10).
_SECONDS = seconds_option()
_COUNT = count_option()


@dataclass
class Context:
    """What the global options decided: the settings in force (and ``-v``)."""

    settings: Settings
    verbose: int = 0
    #: how ``settings`` were loaded (the config file, the global flags), for a command whose
    #: defaults differ from the library's (``crawl`` obeys robots.txt): :meth:`with_defaults`
    config: Path | None = None
    overrides: dict[str, Any] = field(default_factory=dict)

    def with_defaults(self, **defaults: Any) -> Settings:
        """The settings loaded again with these defaults in place of the built-in ones: a
        value from the config file, the environment or a flag still wins."""
        return load_settings(config_file=self.config, overrides=self.overrides, defaults=defaults)

    def redis_url(self) -> str:
        from scrapeq.engine.server.connection import resolve_url

        return resolve_url(self.settings.redis_url, self.settings.data_dir)

    def checked_url(self) -> str:
        """The Redis URL after one PING through it, for commands that connect later.

        Raises:
            RedisUnavailable: the URL cannot be used (one line, password hidden).
        """
        from scrapeq.engine.server.connection import check_reachable, sync_client

        url = self.redis_url()
        client = sync_client(url, self.settings.cluster)
        try:
            check_reachable(client, url)
        finally:
            client.close()
        return url

    def queue(self) -> Queue:
        _settled_import("scrapeq.engine.server.connection", "scrapeq.engine.facades.sync_queue")
        from scrapeq.engine.facades.sync_queue import Queue
        from scrapeq.engine.server.connection import check_reachable, sync_client

        url = self.redis_url()
        client = sync_client(url, self.settings.cluster)
        check_reachable(client, url)
        queue = Queue(client, settings=self.settings)
        _OPENED.append(queue)
        return queue

    def async_queue(self) -> AsyncQueue:
        from scrapeq.engine.facades.async_queue import AsyncQueue
        from scrapeq.engine.server.connection import async_client

        return AsyncQueue(
            async_client(self.redis_url(), self.settings.cluster), settings=self.settings
        )


def _settled_import(*modules: str) -> None:
    """Import what a command needs (the sync queue and redis-py: ~50,000 objects that live as
    long as the process) with the garbage collector paused, then freeze everything so far out
    of later collections (``gc.freeze``): else the collector walks them all once while they
    are imported and again when the process exits, ~0.03 s of a short command (issue 38,
    item 18). Once per process: nothing is frozen when the modules are already there."""
    if all(name in sys.modules for name in modules):
        return
    enabled = gc.isenabled()
    gc.disable()
    try:
        for name in modules:
            importlib.import_module(name)
    finally:
        gc.freeze()
        if enabled:
            gc.enable()


#: The queues commands opened in this process, closed when the command returns
#: (:func:`close_opened`): a CLI run in-process (tests, ``main([...])``) leaves no socket open.
_OPENED: list[Queue] = []


def close_opened() -> None:
    """Close the queues the commands opened (idempotent; a close that fails is ignored)."""
    while _OPENED:
        with contextlib.suppress(Exception):
            _OPENED.pop().close()


def _settings(ctx: typer.Context, **flags: Any) -> Settings:
    root: Context = ctx.obj
    if not any(v is not None for v in flags.values()):
        return root.settings
    return root.settings.replace(**{k: v for k, v in flags.items() if v is not None})


def setup_logging(verbose: int, log_format: str = "text") -> None:
    """One line per record on stderr, text or JSON (:mod:`scrapeq.runtime.logs`); per-job lines
    only with ``-v``."""
    level = logging.DEBUG if verbose > 0 else logging.INFO
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter(log_format))
    root = logging.getLogger("scrapeq")
    root.handlers[:] = [handler]
    root.setLevel(level)
    root.propagate = False


def _die(message: str, code: int) -> NoReturn:
    _error_line(f"scrapeq: error: {message}")
    raise typer.Exit(code)


def _error_line(line: str) -> None:
    """One line on stderr; what it echoes of the input cannot steer the terminal (issue 21,
    item 11): control characters are written escaped (``\\x1b``)."""
    typer.echo(render.printable(line), err=True)


def _emit_json(value: Any) -> None:
    typer.echo(json.dumps(value, indent=2, default=str))


#: ``--fetcher`` of ``enqueue``, ``worker`` and ``crawl``: what fetches the jobs (issue 42).
FetcherOpt = Annotated[
    str | None,
    typer.Option(
        metavar="NAME",
        help="http (default), impersonate (a browser's TLS fingerprint), browser (rendered"
        " by chromium; both extras) or auto (each domain's, chosen by the fleet on evidence).",
    ),
]


def _fetcher_name(fetcher: str | None) -> str | None:
    """``--fetcher``'s value, checked (exit 2 for an unknown one)."""
    from scrapeq.engine.config.specs import FETCHERS

    if fetcher is not None and fetcher not in FETCHERS:
        _die(f"--fetcher takes {' or '.join(FETCHERS)}, got {fetcher!r}", 2)
    return fetcher


#: ``--allow-private`` and ``--no-allow-private`` are two flags, one help row each: as one
#: switch its ``--no-`` form took a column of its own, which cut option names at 80 columns.
AllowPrivate = Annotated[
    bool,
    typer.Option("--allow-private", help="Allow private addresses (loopback, LAN, link-local)."),
]
RefusePrivate = Annotated[
    bool, typer.Option("--no-allow-private", help="Refuse them, whatever the settings say.")
]


def _private(allow: bool, refuse: bool) -> bool | None:
    """The ``allow_private`` the flags ask for: None (the settings decide) unless one is given."""
    if allow and refuse:
        _die("--allow-private and --no-allow-private contradict each other", 2)
    return True if allow else (False if refuse else None)


def _console() -> Console:
    from rich.console import Console  # for the commands that print rich output only

    # Piped output is not folded at 80 columns: lines stay greppable.
    width = None if sys.stdout.isatty() else 200
    return Console(highlight=False, soft_wrap=False, width=width)


def _existing_queue(ctx: typer.Context) -> Queue:
    """The queue for a command that reads or tidies it; a queue never used is no error.

    Monitoring may poll before the first enqueue, so such a queue answers zeros and empty
    lists. A hint on stderr names the queues that do exist, in case the name is a typo.
    """
    q = Context(_settings(ctx)).queue()
    if not q.exists():
        typer.echo(f"scrapeq: {_empty_queue_note(q)}", err=True)
    return q


def _empty_queue_note(q: Queue) -> str:
    """``queue 'shpos' is empty; known queues: shops`` (as much as a cheap look finds)."""
    known = _known_queues(q)
    if known is None:
        return f"queue {q.name!r} is empty"
    names, complete = known
    if not names:
        if complete:
            return f"queue {q.name!r} is empty; no queues on this Redis yet"
        return f"queue {q.name!r} is empty; no queues among the first keys scanned"
    more = "" if complete else " (and maybe more: only the first keys were scanned)"
    return f"queue {q.name!r} is empty; known queues: {', '.join(names)}{more}"


#: A hint must stay cheap on a big Redis: at most this many SCAN calls of COUNT 1000 each.
_SCAN_CALLS = 5


def _known_queues(q: Queue) -> tuple[list[str], bool] | None:
    """The queues a bounded SCAN finds, and whether it saw every key; None if SCAN failed.

    Failure is tolerated (e.g. an ACL user without SCAN): the hint just names none.
    """
    try:
        return q.known_queues(max_calls=_SCAN_CALLS)
    except RedisUnavailable:
        return None


def _domain_arg(domain: str | None) -> str | None:
    """A domain given on the command line: ``host[:port]`` as scrapeq spells it, else a usage
    error (exit 2) naming the spelling meant, if any; None stays None."""
    if domain is None:
        return None
    spelled: set[str] = set()
    for scheme in ("http", "https"):
        with contextlib.suppress(InvalidURL):
            spelled.add(domain_of(f"{scheme}://{domain}/"))
    if domain in spelled:
        return domain
    hint = f"; did you mean {min(spelled)!r}?" if spelled else ""
    _die(f"{domain!r} is not a domain: give host[:port], e.g. shop-43.example.com{hint}", 2)


def _confirm(question: str, refusal: str) -> None:
    """Ask ``question`` on a terminal; without one, stop with ``refusal`` (exit 2)."""
    if not sys.stdin.isatty():
        _die(refusal, 2)
    if not typer.confirm(question, default=False, err=True):  # stdout keeps the result only
        _die("not confirmed: nothing done", 1)


def _bind_problem(exc: OSError) -> str:
    """Why an address could not be bound, in the OS's words, with a hint when there is one."""
    # asyncio re-raises bind errors with the address in the text: keep only the OS's reason.
    # (A host that does not resolve is a gaierror, whose negative errno strerror() lacks.)
    reason = os.strerror(exc.errno) if exc.errno and exc.errno > 0 else exc.strerror or str(exc)
    return f"{reason} (choose another --port)" if exc.errno == errno.EADDRINUSE else reason


@contextlib.contextmanager
def _unknown_domain_hint(q: Queue) -> Iterator[None]:
    """Add the empty-queue hint to an unknown domain's error when the queue was never used."""
    try:
        yield
    except NotFound as exc:
        if q.exists():
            raise
        raise NotFound(f"{exc} ({_empty_queue_note(q)})") from None
