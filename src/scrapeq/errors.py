"""The one error tree of scrapeq.

Every exception the library raises on purpose derives from :class:`ScrapeqError`::

    ScrapeqError
    ├── ConfigError            a setting has a bad value (names the setting)
    │   └── InvalidRequest     a job's request refused at enqueue (names the part)
    ├── InvalidURL             a URL refused at enqueue (names the reason)
    ├── PayloadTooLarge        a payload over ``max_payload``, or more than Redis accepts
    ├── RedisUnavailable       no Redis to talk to (unreachable, or no binary to embed)
    ├── ScriptError            a Lua script answered with an unexpected error code
    ├── StaleLease             a token no longer matches the job's lease (fencing)
    ├── NotFound               a job, dead letter or domain that does not exist
    └── HandlerSignal          control flow raised by a user handler
        ├── Retry              retry this job (optionally after ``delay`` seconds)
        ├── Permanent          fail this job now, no retry (``reason``)
        ├── Banned             the site banned the exit this job went through
        └── NeedsBrowser       the page must be rendered (fetcher ``auto``)

Control-flow signals live under the same root so ``except ScrapeqError`` in user code
never swallows a plain bug, and a bug never masquerades as a signal.
"""

from __future__ import annotations

import math

__all__ = [
    "Banned",
    "ConfigError",
    "ConfigProblems",
    "HandlerSignal",
    "InvalidRequest",
    "InvalidURL",
    "NeedsBrowser",
    "NotFound",
    "PayloadTooLarge",
    "Permanent",
    "RedisUnavailable",
    "Retry",
    "ScrapeqError",
    "ScriptError",
    "StaleLease",
]


class ScrapeqError(Exception):
    """Root of every error scrapeq raises on purpose."""


class ConfigError(ScrapeqError, ValueError):
    """A setting has a bad value.

    Args:
        name: the setting's name as INTERFACE.md spells it (``breaker_cooldown``).
        message: what is wrong with it.
    """

    def __init__(self, name: str, message: str) -> None:
        self.name = name
        self.reason = message
        super().__init__(f"setting {name!r}: {message}")


class ConfigProblems(ConfigError):
    """Several problems of one setting found at once (every bad line of a ``proxy_file``):
    the CLI writes one line each.

    Args:
        name: the setting's name.
        problems: what is wrong, one problem each (two at least).
    """

    def __init__(self, name: str, problems: list[str]) -> None:
        super().__init__(name, "; ".join(problems))
        self.problems = tuple(problems)

    def lines(self) -> list[str]:
        """One message a problem, each as a :class:`ConfigError` of its own would say it."""
        return [f"setting {self.name!r}: {p}" for p in self.problems]


class InvalidRequest(ConfigError):
    """A job's request (method, header, body, cookie, meta) refused at enqueue.

    Args:
        name: the part refused (``headers``, ``method``, ``body``...).
        message: what is wrong with it.
    """

    def __init__(self, name: str, message: str) -> None:
        super().__init__(name, message)
        self.args = (f"request {name}: {message}",)

    def __str__(self) -> str:
        return str(self.args[0])


class InvalidURL(ScrapeqError, ValueError):
    """A URL that is refused at enqueue; it never reaches Redis."""

    def __init__(self, url: str, reason: str) -> None:
        self.url = url
        self.reason = reason
        shown = url if len(url) <= 120 else url[:117] + "..."
        super().__init__(f"{shown}: {reason}")


class PayloadTooLarge(ScrapeqError, ValueError):
    """A job's payload is over ``max_payload``, or a call is larger than Redis accepts."""


class RedisUnavailable(ScrapeqError):
    """Redis cannot be reached, or no redis-server binary exists to embed."""


class ScriptError(ScrapeqError):
    """A Lua script returned an error code the client does not expect."""


class StaleLease(ScrapeqError):
    """The lease token presented no longer owns the job: another attempt does."""


class NotFound(ScrapeqError, LookupError):
    """A job, dead letter or domain that does not exist."""


class HandlerSignal(ScrapeqError):
    """Base of the control-flow signals a handler may raise."""


class Retry(HandlerSignal):
    """Ask for this job to be retried.

    Args:
        delay: seconds to wait before the retry, a finite number ``>= 0``; ``None`` uses the
            full-jitter backoff.
        reason: a short text kept in the job's error history.

    Raises:
        ConfigError: (a :class:`ValueError`) ``delay`` is not a finite number ``>= 0``
            (``inf``, ``nan``, negative, not a number) or is over 100 years
            (:data:`scrapeq.engine.config.limits.MAX_DURATION_S`): such a retry could never be
            scheduled.
    """

    def __init__(self, delay: float | None = None, reason: str = "retry requested") -> None:
        if delay is not None and not _finite_seconds(delay):
            raise ConfigError(
                "delay", f"Retry delay must be a finite number of seconds >= 0, got {delay!r}"
            )
        if delay is not None:
            # the bound's one home (imported here: limits imports this module)
            from scrapeq.engine.config.limits import duration_error

            why = duration_error(delay)
            if why is not None:
                raise ConfigError("delay", f"Retry delay {why}")
        self.delay = delay
        self.reason = reason
        super().__init__(reason)


class Permanent(HandlerSignal):
    """Fail this job at once: it goes to the dead letters without another attempt.

    Args:
        reason: why; kept as the dead letter's reason.
    """

    def __init__(self, reason: str = "permanent") -> None:
        self.reason = reason
        super().__init__(reason)


class Banned(HandlerSignal):
    """The page is a ban: the site refuses the exit (proxy) this job went through.

    With an exit pool (``proxy``, ``proxy_file``) the (exit, domain) pair is benched and the
    job goes through another exit, spending a release, not an attempt; the domain's breaker
    is charged only when no usable exit is left for it. Without a pool it is a retry charged
    to the domain (the site refuses us).

    Args:
        reason: why (a block page's marker, say); kept in the job's error history.
    """

    def __init__(self, reason: str = "banned") -> None:
        self.reason = reason
        super().__init__(reason)


class NeedsBrowser(HandlerSignal):
    """The page must be rendered by a browser: what the raw HTML holds is not its content
    (a grid a script fills, say).

    For a job whose fetcher is ``auto`` fetched without the browser, the worker renders the
    same page at once and runs the handler again on the rendered DOM (no attempt spent for
    it), and the settle moves the job's domain to ``browser`` for the whole fleet
    (``lua/includes/auto.lua``). Raised for any other job (or on a rendered page) it is the
    handler's error: a retry.

    Args:
        reason: why (kept in the job's error history when it is the handler's error).
    """

    def __init__(self, reason: str = "needs a browser") -> None:
        self.reason = reason
        super().__init__(reason)


def _finite_seconds(value: object) -> bool:
    """Whether ``value`` is a number of seconds a queue can schedule: finite and ``>= 0``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        return math.isfinite(value) and value >= 0
    except OverflowError:  # an int too large for a float
        return False
