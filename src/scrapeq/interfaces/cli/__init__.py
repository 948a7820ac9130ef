"""The ``scrapeq`` command line: thin, it parses, calls the library and renders.

Exit codes: 0 success, 2 bad usage or bad input (one line on stderr), 1 any other error.
No traceback for user errors.

The commands live by group in this package (docs/DESIGN.md, "Module map"): ``workers``
(worker, crawl), ``enqueueing`` (enqueue), ``queues`` (status, audit, queue), ``jobs`` (dead,
job), ``per_domain`` (breakers, breaker, domains, domain), ``services`` (demo, dashboard,
server); ``common`` holds what they share. This module builds the app, registers them below in
the order ``--help`` lists them, and runs it (:func:`main`).
"""

from __future__ import annotations

import functools
import inspect
import logging
import logging.handlers
import sys
from collections.abc import Callable, Iterator, MutableMapping
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer

from scrapeq.engine.config.settings import (
    CONFIG_FILE_NAME,
    ENV_PREFIX,
    UNIQUE_MODES,
    Settings,
    load_settings,
)
from scrapeq.errors import (
    ConfigError,
    ConfigProblems,
    InvalidURL,
    NotFound,
    PayloadTooLarge,
    ScrapeqError,
)
from scrapeq.interfaces.cli import (
    coercion,
    enqueueing,
    frontier,
    jobs,
    per_domain,
    proxies,
    queues,
    services,
    workers,
)
from scrapeq.interfaces.cli.common import Context, _error_line, close_opened, log, setup_logging

__all__ = ["app", "command", "main"]

app = typer.Typer(
    name="scrapeq",
    help="A Redis-backed job queue for web scraping built around failure isolation.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _package_version() -> str:
    """The installed distribution's version (the package's own when not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("scrapeq")
    except PackageNotFoundError:
        from scrapeq import __version__

        return __version__


def _setting_default(name: str) -> str:
    """A setting's default as text (for --help)."""
    return str(Settings.__dataclass_fields__[name].default)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"scrapeq {_package_version()}")
        raise typer.Exit()


def _env_help(text: str, env: str, default: str) -> str:
    """Help of a global option that ``load_settings`` also reads from the environment (typer
    does not read it, so flag > env > file > default holds): its variable and its default."""
    return f"{text} \\[env var: {env}; default: {default}]"


@app.callback()
def _global(
    ctx: typer.Context,
    redis: Annotated[
        str | None,
        typer.Option(
            "--redis",
            metavar="URL",
            help=_env_help(
                "Redis URL: redis://, rediss:// or unix://.",
                f"{ENV_PREFIX}REDIS_URL",
                "the embedded Redis of --data-dir",
            ),
        ),
    ] = None,
    queue: Annotated[
        str | None,
        typer.Option(
            "--queue",
            metavar="NAME",
            help=_env_help("Queue name.", f"{ENV_PREFIX}QUEUE", _setting_default("queue")),
        ),
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            metavar="FILE",
            help=_env_help(
                "Settings file to read.", f"{ENV_PREFIX}CONFIG", f"./{CONFIG_FILE_NAME} if any"
            ),
        ),
    ] = None,
    data_dir: Annotated[
        Path | None,
        typer.Option(
            "--data-dir",
            metavar="DIR",
            help=_env_help(
                "Where the embedded Redis keeps its data.",
                f"{ENV_PREFIX}DATA_DIR",
                "$XDG_DATA_HOME/scrapeq, else ~/.local/share/scrapeq",
            ),
        ),
    ] = None,
    verbose: Annotated[
        int,
        typer.Option("-v", "--verbose", count=True, help="Per-job log lines (a count: -v, -vv)."),
    ] = 0,
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version."
        ),
    ] = False,
) -> None:
    """Global options come before the command: scrapeq --redis URL --queue Q COMMAND."""
    overrides = {"redis_url": redis, "queue": queue, "data_dir": data_dir}
    settings = _load_settings(config, overrides, verbose)
    ctx.obj = Context(settings, verbose, config, overrides)


def _load_settings(config: Path | None, overrides: dict[str, Any], verbose: int) -> Settings:
    """The settings; what loading them logs (a misspelt ``SCRAPEQ_*`` variable) is held, then
    written in the log format they choose (text when they cannot be loaded)."""
    held = logging.handlers.BufferingHandler(capacity=100)
    logging.getLogger("scrapeq").handlers[:] = [held]
    log_format = "text"
    try:
        settings = load_settings(config_file=config, overrides=overrides)
        log_format = settings.log_format
    finally:
        setup_logging(verbose, log_format)
        for record in held.buffer:
            logging.getLogger(record.name).handle(record)
    return settings


# --- the command tree, in the order --help lists it (typer: commands first, then groups) -------


def _register_commands() -> None:
    """Every command and group on ``app``, from the modules of this package."""
    for command in (
        workers.worker,
        workers.crawl,
        enqueueing.enqueue,
        queues.status,
        queues.audit,
        per_domain.breakers,
        per_domain.domains,
        services.demo,
        services.dashboard,
    ):
        app.command()(command)
    for group, name in (
        (jobs.dead_app, "dead"),
        (jobs.job_app, "job"),
        (queues.queue_app, "queue"),
        (per_domain.breaker_app, "breaker"),
        (per_domain.domain_app, "domain"),
        (proxies.proxies_app, "proxies"),
        (services.server_app, "server"),
        (frontier.frontier_app, "frontier"),
    ):
        app.add_typer(group, name=name)


_register_commands()


# --- entry point -------------------------------------------------------------------------------

_USER_ERRORS = (ConfigError, InvalidURL, NotFound, PayloadTooLarge)


def run() -> NoReturn:
    """The ``scrapeq`` command and ``python -m scrapeq``: :func:`main` on ``sys.argv``, then
    the process ends at once, its output flushed, without the interpreter's finalization
    (:func:`scrapeq.runtime.process_exit.exit_now`: a stopping worker keeps to its exit
    bound on a loaded machine)."""
    from scrapeq.runtime.process_exit import exit_now

    exit_now(main())


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; answers the exit code (0, 1 or 2). Never a traceback for user errors.

    Usage errors and the library's errors become one line on stderr. A command that fails
    (1 or 2) stops the embedded Redis it started: a first command with a typo leaves nothing
    running.
    """
    before = len(_started_servers())
    try:
        code = _main(sys.argv[1:] if argv is None else list(argv))
    finally:
        close_opened()
    if code in (1, 2):
        _stop_started(_started_servers()[before:])
    return code


def _started_servers() -> tuple[Path, ...]:
    """The embedded servers this process started: none while :mod:`scrapeq.engine.server.embedded`
    is not even imported (``--version`` and ``--help`` do not load it, nor a Redis client)."""
    embedded = sys.modules.get("scrapeq.engine.server.embedded")
    return () if embedded is None else tuple(embedded.started_servers())


def _stop_started(data_dirs: tuple[Path, ...]) -> None:
    """Stop the embedded servers this failed command started (SHUTDOWN SAVE: nothing lost)."""
    from scrapeq.engine.server.embedded import stop_server

    for data_dir in dict.fromkeys(data_dirs):
        try:
            if stop_server(data_dir):
                log.info("stopped the embedded Redis this command started in %s: the command "
                         "failed", data_dir)  # fmt: skip
        except ScrapeqError as exc:
            log.warning("the embedded Redis this command started in %s keeps running: %s",
                        data_dir, exc)  # fmt: skip


def _main(argv: list[str]) -> int:
    args = _bare_unique(argv)
    try:
        rv = command().main(args=args, prog_name="scrapeq", standalone_mode=False)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except ConfigProblems as exc:  # every bad line of a proxy file: one line each
        for line in exc.lines():
            _fail(line, 2)
        return 2
    except _USER_ERRORS as exc:
        return _fail(str(exc), 2)
    except ScrapeqError as exc:
        return _fail(str(exc), 1)
    except (KeyboardInterrupt, typer.Abort):
        return _fail("interrupted", 130)
    except Exception as exc:
        # typer's usage errors (bad option, bad value): click exceptions, duck-typed since
        # typer vendors click.
        format_message = getattr(exc, "format_message", None)
        code = getattr(exc, "exit_code", None)
        if callable(format_message) and isinstance(code, int):
            return _fail(str(format_message()), code)
        raise
    return rv if isinstance(rv, int) else 0


@functools.cache
def command() -> Any:
    """The app as a click command, its flags tidied for ``--help``: a flag (``--json``,
    ``--burst``, ``-v``, ``--help``) takes no value, so it shows no ``<bool>``/``<int>``.
    Its values are coerced without pydantic where typer's coercion would answer the same
    (:mod:`.coercion`). Built once per process, each command or group when first looked up
    (:class:`_LazyCommands`): typer takes ~25 ms to build the whole tree."""
    registered = app.registered_commands, app.registered_groups
    app.registered_commands, app.registered_groups = [], []
    try:  # the root group alone: its callback and the global options
        root: Any = typer.main.get_command(app)
    finally:
        app.registered_commands, app.registered_groups = registered
    _tidy(root)
    root.commands = _LazyCommands(_builders())
    return root


def _tidy(cmd: Any) -> None:
    _hide_flag_types(cmd)
    coercion.install(cmd)


def _builders() -> dict[str, Callable[[], Any]]:
    """How typer builds each command and group of ``app`` (``typer.main.get_group_from_info``
    does the same for all at once), in the order ``--help`` lists them."""
    options = {
        "pretty_exceptions_short": app.pretty_exceptions_short,
        "rich_markup_mode": app.rich_markup_mode,
        "suggest_commands": getattr(app, "suggest_commands", True),
    }
    builders: dict[str, Callable[[], Any]] = {}
    for info in app.registered_commands:
        assert info.callback is not None
        name = info.name or typer.main.get_command_name(info.callback.__name__)
        builders[name] = _build(typer.main.get_command_from_info, info, options)
    for group in app.registered_groups:
        assert group.name
        builders[group.name] = _build(typer.main.get_group_from_info, group, options)
    return builders


def _build(build: Callable[..., Any], info: Any, options: dict[str, Any]) -> Callable[[], Any]:
    accepted = inspect.signature(build).parameters  # typer's keywords differ by version
    return functools.partial(build, info, **{k: v for k, v in options.items() if k in accepted})


class _LazyCommands(MutableMapping[str, Any]):
    """The root's commands by name (typer and click read them by name, or all to list them):
    each built, tidied and kept when first read, so ``scrapeq status`` builds the options of
    ``status`` only."""

    def __init__(self, builders: dict[str, Callable[[], Any]]) -> None:
        self._builders = builders
        self._built: dict[str, Any] = {}

    def __getitem__(self, name: str) -> Any:
        if name not in self._built:
            built = self._builders[name]()
            _tidy(built)
            self._built[name] = built
        return self._built[name]

    def __setitem__(self, name: str, cmd: Any) -> None:
        self._builders.setdefault(name, lambda: cmd)
        self._built[name] = cmd

    def __delitem__(self, name: str) -> None:
        del self._builders[name]
        self._built.pop(name, None)

    def __iter__(self) -> Iterator[str]:
        return iter(self._builders)

    def __len__(self) -> int:
        return len(self._builders)


def _hide_flag_types(cmd: Any) -> None:
    params = list(getattr(cmd, "params", []))
    help_option = getattr(cmd, "get_help_option", None)
    if callable(help_option):
        params.append(help_option(typer.Context(cmd)))
    for param in params:
        if getattr(param, "is_flag", False) or getattr(param, "count", False):
            param.metavar = ""
    for child in getattr(cmd, "commands", {}).values():
        _hide_flag_types(child)


def _bare_unique(argv: list[str]) -> list[str]:
    """``enqueue --unique`` without ``=MODE`` is ``--unique=pending`` (typer options have no
    optional values); ``--unique MODE`` with a mode name is left as it is."""
    if "enqueue" not in argv:
        return argv
    start = argv.index("enqueue") + 1
    out = argv[:start]
    for i, arg in enumerate(argv[start:], start):
        if arg == "--":
            return out + argv[i:]
        bare = arg == "--unique" and (i + 1 == len(argv) or argv[i + 1] not in UNIQUE_MODES)
        out.append("--unique=pending" if bare else arg)
    return out


def _fail(message: str, code: int) -> int:
    _error_line(f"scrapeq: error: {message}")
    return code


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
