"""``scrapeq enqueue``'s input and its batches: URL arguments and ``--file`` lines, added
1,000 at a time, and what a run that fails part-way added.

A failure after the first batch (Redis lost, a reply cut, ``maxmemory`` reached, Ctrl-C)
leaves a queue that holds part of the file. The run then says what it knows: the jobs added
for certain (batches whose answers came back), the line to resume from (the first line of
the batch that was not answered), and whether that batch was *sent*: a call whose answer was
lost may or may not have been applied, since Redis runs a script whole or not at all but the
client cannot tell which. ``--resume-from LINE`` with ``--unique`` then skips what that batch
did add (pending jobs hold their URL's fingerprint); without ``--unique`` it may add that
batch twice, which the message says.

Each call is sent once (:func:`send_once`): redis-py would otherwise send a call again after
a lost reply, and a script that ran the first time would run twice.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any

import typer

from scrapeq.errors import (
    ConfigError,
    InvalidRequest,
    InvalidURL,
    NotFound,
    PayloadTooLarge,
    ScrapeqError,
)
from scrapeq.interfaces import render

if TYPE_CHECKING:  # the queue and its Redis client are the command's to import, when it runs
    from scrapeq.engine.lua.scripts import EnqueueSpec
    from scrapeq.engine.model.request import Request
    from scrapeq.engine.queue import EnqueueResult, Queue
    from scrapeq.engine.server.connection import SyncClient

__all__ = [
    "BATCH",
    "EnqueueFailed",
    "EnqueueRun",
    "Item",
    "count_added",
    "failure_lines",
    "read_items",
    "resume_problem",
    "say_failure",
    "send_once",
    "stdin_bytes",
]

#: URLs validated and added per batch: the unit a failure leaves uncertain.
BATCH = 1000
#: Refusals of the input (exit 2): before any batch is answered, one line as any bad input.
_USER_ERRORS = (ConfigError, InvalidURL, NotFound, PayloadTooLarge)


@dataclass(frozen=True, slots=True)
class Item:
    """One URL of the input: where it came from (``argument 3``, ``line 17``), its line of
    ``--file`` or ``--requests`` (None for an argument) and the URL or request, or the
    reason a line cannot be one."""

    where: str
    line: int | None
    url: str | Request | InvalidURL | InvalidRequest


def read_items(
    urls: Iterable[str], stream: IO[Any] | None, *, first_line: int = 1
) -> Iterator[Item]:
    """The arguments, then the stream's lines from ``first_line`` on (numbered from the
    file's first line); blank lines and ``#`` comments are skipped, and a line that is not
    UTF-8 comes as an :class:`InvalidURL`, reported and skipped like an invalid URL."""
    for i, u in enumerate(urls, 1):
        yield Item(f"argument {i}", None, u)
    if stream is None:
        return
    for n, raw in enumerate(stream, 1):
        if n < first_line:
            continue
        if n == 1:  # a UTF-8 byte order mark (Windows editors write one) is not the URL's
            raw = raw.removeprefix(b"\xef\xbb\xbf" if isinstance(raw, bytes) else "\ufeff")
        try:
            text = (raw.decode("utf-8") if isinstance(raw, bytes) else raw).strip()
        except UnicodeDecodeError:
            shown = raw.decode("utf-8", "backslashreplace").strip()
            yield Item(f"line {n}", n, InvalidURL(shown, "not UTF-8 text"))
            continue
        if text and not text.startswith("#"):
            yield Item(f"line {n}", n, text)


def send_once(client: SyncClient) -> None:
    """Send each call of ``client`` once: a lost answer raises instead of sending the call
    again (a plain client; a cluster client keeps its own retries across failovers)."""
    import redis
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    if isinstance(client, redis.Redis):
        client.set_retry(Retry(NoBackoff(), 0))


def count_added(results: Sequence[EnqueueResult], ids: list[str] | None) -> int:
    """How many of an ``enqueue_many``'s ``results`` were added (the others the queue
    skipped: pending, or in the seen-set); their ids appended to ``ids`` (None: not kept)."""
    added = [r.id for r in results if r.added]
    if ids is not None:
        ids.extend(added)
    return len(added)


@dataclass
class _Batch:
    """The URLs read since the last answered batch, and the lines they span."""

    specs: list[EnqueueSpec] = field(default_factory=list)
    first: Item | None = None  # the first URL read since the last answered batch
    last_line: int | None = None  # the last file line read


class EnqueueFailed(Exception):
    """The run stopped part-way; ``report`` says what it added and where to resume."""

    def __init__(self, report: dict[str, Any], cause: BaseException) -> None:
        super().__init__(report["error"])
        self.report = report
        self.cause = cause


@dataclass
class EnqueueRun:
    """One ``scrapeq enqueue``: validate and add the input in batches of :data:`BATCH`.

    Attributes:
        queue: where the jobs go.
        options: ``Queue.prepare`` keywords shared by every URL.
        keep_ids: keep the ids of the jobs added (``--json``).
        resume_from: the file line this run starts at (``--resume-from``; 1: the start).
        template: makes each URL's request (``--method``, ``--header``...); None: a GET.
        added, skipped, invalid, ids: what happened so far, for certain.
    """

    queue: Queue
    options: dict[str, Any]
    keep_ids: bool = False
    resume_from: int = 1
    template: Callable[[str], Request] | None = None
    added: int = 0
    skipped: int = 0  # duplicates: pending, or in the seen-set
    invalid: int = 0
    ids: list[str] = field(default_factory=list)
    _batch: _Batch = field(default_factory=_Batch)
    _sent: bool = False  # the current batch's call went out (its answer may be lost)
    _answered: int = 0  # batches answered
    _resume: int = 1  # the line a re-run starts at: the one after the last answered batch's

    def run(self, items: Iterable[Item], report: Callable[[str, Exception], None]) -> None:
        """Add ``items``; ``report(where, exc)`` is told each refused URL.

        Raises:
            EnqueueFailed: Redis failed or refused, or the run was interrupted, after the
                first URL was read; its report says what was added and where to resume.
        """
        self._resume = self.resume_from
        try:
            for item in items:
                self._take(item, report)
                if len(self._batch.specs) >= BATCH:
                    self._flush()
            if self._batch.specs:
                self._flush()
        except (ScrapeqError, KeyboardInterrupt) as exc:
            if isinstance(exc, _USER_ERRORS) and not self._answered:
                raise  # refused before anything was added: one line, as any bad input
            raise EnqueueFailed(self.failure(exc), exc) from exc

    def _take(self, item: Item, report: Callable[[str, Exception], None]) -> None:
        if self._batch.first is None:
            self._batch.first = item
        if item.line is not None:
            self._batch.last_line = item.line
        try:
            target = item.url
            if isinstance(target, InvalidURL | InvalidRequest):
                raise target
            if self.template is not None and isinstance(target, str):
                target = self.template(target)
            self._batch.specs.append(self.queue.prepare(target, **self.options))
        except (InvalidURL, ConfigError) as exc:
            self.invalid += 1
            report(item.where, exc)

    def _flush(self) -> None:
        self._sent = True
        results = self.queue.enqueue_many(self._batch.specs)
        self._sent = False
        added = count_added(results, self.ids if self.keep_ids else None)
        self.added += added
        self.skipped += len(results) - added
        last = self._batch.last_line
        self._resume = self.resume_from if last is None else last + 1
        self._answered += 1
        self._batch = _Batch()

    def summary(self) -> dict[str, Any]:
        """The ``--json`` document of a run that went through."""
        return {"added": self.added, "skipped": self.skipped, "ids": self.ids,
                "invalid": self.invalid}  # fmt: skip

    def failure(self, exc: BaseException) -> dict[str, Any]:
        """The ``--json`` document of a run that stopped part-way (``exc``: why)."""
        uncertain = None
        if self._sent and self._batch.specs:
            uncertain = [self._resume, self._batch.last_line or self._resume]
        first = self._batch.first
        args_pending = first is not None and first.line is None
        return {
            **self.summary(),
            "resume_from_line": None if args_pending else self._resume,
            "uncertain_lines": uncertain,
            "error": str(exc) or type(exc).__name__,
        }


def failure_lines(report: dict[str, Any], unique: str) -> list[str]:
    """What a failed run says on stderr, after its error line: the jobs added for certain,
    the batch whose answer was lost, and how to resume."""
    added, skipped = report["added"], report["skipped"]
    out = f"added {added} job{'s' if added != 1 else ''} for certain"
    if skipped:
        out += f" (skipped {skipped} duplicate{'s' if skipped != 1 else ''})"
    uncertain = report["uncertain_lines"]
    if uncertain is not None:
        lo, hi = uncertain
        out += (f"; lines {lo}-{hi} were sent without a full answer: they may or may not "
                "have been added")  # fmt: skip
    line = report["resume_from_line"]
    if line is None:
        return [out, "the URL arguments were not all added: run the same command again"
                + (" (--unique skips what was added)" if unique != "off" else "")]  # fmt: skip
    hint = f"resume with --resume-from {line} and the same options"
    if uncertain is None:
        hint += ": nothing from that line on was sent"
    elif unique != "off":
        hint += f" (--unique={unique} skips what lines {uncertain[0]}-{uncertain[1]} added)"
    else:
        hint += (f"; without --unique, lines {uncertain[0]}-{uncertain[1]} may then be added "
                 "twice")  # fmt: skip
    return [out, hint]


def resume_problem(urls: list[str] | None, file: str | None, line: int | None) -> str | None:
    """What is wrong with ``--resume-from LINE`` beside these arguments (None: nothing);
    ``file``: ``--file``'s or ``--requests``'."""
    if line is None:
        return None
    if file is None or urls:
        return (
            "--resume-from LINE restarts --file (or --requests) at a line: give the URLs in "
            "the file alone"
        )
    if line < 1:
        return f"--resume-from takes a line number from 1, got {line}"
    return None


def say_failure(failed: EnqueueFailed, unique: str, *, as_json: bool) -> int:
    """Tell a run that stopped part-way: its error, what it added and where to resume, on
    stderr, and the whole report as the ``--json`` document. Answers the exit code: 2 for
    bad input, 130 for Ctrl-C, else 1."""
    typer.echo(render.printable(f"scrapeq: error: {failed.report['error']}"), err=True)
    for line in failure_lines(failed.report, unique):
        typer.echo(render.printable(f"scrapeq: {line}"), err=True)
    if as_json:
        typer.echo(json.dumps(failed.report, indent=2))
    if isinstance(failed.cause, KeyboardInterrupt):
        return 130
    return 2 if isinstance(failed.cause, _USER_ERRORS) else 1


def stdin_bytes() -> Any:
    """Standard input as bytes (as text when it has no byte stream: a test's StringIO)."""
    return getattr(sys.stdin, "buffer", sys.stdin)
