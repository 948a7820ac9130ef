"""The results line of a worker's attempts, one owner (issue 39): :class:`Lines`.

A line is **recorded** (the attempt's record, :func:`~scrapeq.runtime.records.make_record`,
named after this run's crawl), then either **written** before its settle (a done or dead
job by the worker's own verdict, at least once: docs/DESIGN.md "Results lines"), or, when
the settle script decides part of it (whether a retry ends dead; what a done page's line
says of its content and its budgets, as the job's claim said: ``Job.line_waits``,
``lua/includes/lines.lua``), **owed** with its settlement (the owed-lines ledger,
:mod:`.owed`), written from the settle's answer
(:func:`~scrapeq.runtime.records.settled_line`) and **acknowledged** once its sink took it.

Before, the worker routed the line (``_run_job``), the attempt phase wrote it
(``_write_result``, ``_write_done_line``), the settle phase wrote a dead one
(``_write_dead_line``), and the worker reached into the ledger's state; a sink failure's
pause of claims is the one thing shared with the worker (:class:`ClaimPause`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from scrapeq.engine.lua.scripts import Settled, Settlement
from scrapeq.engine.model.job import Job
from scrapeq.engine.model.urls import redact_text
from scrapeq.engine.queue import AsyncQueue
from scrapeq.errors import RedisUnavailable, ScriptError
from scrapeq.runtime.backoff import backoff
from scrapeq.runtime.owed import OwedLines
from scrapeq.runtime.records import (
    CRAWL_FLAG,
    SINK_REFUSED,
    about,
    settled_line,
    write_or_refused,
    write_refused,
)
from scrapeq.runtime.sinks import RecordRefused, Sink

log = logging.getLogger("scrapeq.worker")

#: First pause of claiming after the sink failed, seconds (as after our own network failed:
#: ``attempt.OURS_PAUSE``).
SINK_PAUSE_MIN = 2.0
#: Longest pause of claiming while the sink keeps failing (a database gone away): the pause
#: doubles from SINK_PAUSE_MIN with each failure in a row, and a write that works ends it.
SINK_PAUSE_MAX = 60.0

#: Settlement outcomes that end the job by the worker's own verdict: their results line is
#: written before the settle, unless the settle decides part of it (:func:`waits`).
ENDS_BY_VERDICT = frozenset({"done", "fail"})

Submit = Callable[[Settlement, Job], Awaitable[Settled]]


class ClaimPause:
    """Until when (monotonic) a worker's claim loop pauses: our own network failed
    (``attempt.OURS_PAUSE``), or the sink (:meth:`Lines.sink_failed`)."""

    __slots__ = ("until",)

    def __init__(self) -> None:
        self.until = 0.0


def waits(job: Job, settlement: Settlement) -> bool:
    """Whether the line of ``settlement`` waits for the settle's answer: any outcome but a
    ``done`` or ``fail`` (the settle says whether it ends the job), and a done page whose
    claim said so (``job.line_waits``: ``always``, or ``follow`` when it has follow-ups;
    the rule is ``lua/includes/lines.lua``'s, applied here without knowing why)."""
    if settlement.outcome not in ENDS_BY_VERDICT:
        return True
    rule = job.line_waits
    if rule is None or settlement.outcome != "done":
        return False
    return rule == "always" or (rule == "follow" and bool(settlement.follow))


class Lines:
    """A worker's results lines: record, write, owe, acknowledge (see the module's doc).

    It holds the owed-lines ledger's side of the worker (:attr:`ledger`), the crawl its lines
    name, and the count of sink failures in a row; it pauses claims through ``pause``, and
    stops retrying a settled job's line once ``stopping`` is set."""

    def __init__(
        self,
        queue: AsyncQueue,
        sink: Sink | None,
        ledger: OwedLines,
        pause: ClaimPause,
        stopping: asyncio.Event,
    ) -> None:
        self.queue, self.sink, self.ledger = queue, sink, ledger
        self._pause, self._stopping = pause, stopping
        self.crawl_id: str | None = None  # the crawl this run's lines name (name_crawl)
        self._sink_failures = 0  # pauses for sink failures in a row (each one is longer)

    async def name_crawl(self) -> None:
        """With a sink: the crawl this run's results lines belong to (``crawl_id``), the
        queue's once-per-crawl flag :data:`~scrapeq.runtime.records.CRAWL_FLAG`, set to now
        by the crawl's first worker (``crawl --new`` forgets it: a new crawl, a new id)."""
        if self.sink is None:
            return
        now = datetime.now(tz=UTC).isoformat(timespec="milliseconds")
        try:
            self.crawl_id = (await self.queue.once_flag(CRAWL_FLAG, now)).holder or None
        except (RedisUnavailable, ScriptError) as exc:
            log.warning("the queue's crawl could not be read, results lines carry no "
                        "crawl_id: %s", exc)  # fmt: skip

    def record(self, record: dict[str, Any]) -> dict[str, Any]:
        """The attempt's ``record`` as this run's line: named after its crawl."""
        record["crawl_id"] = self.crawl_id
        return record

    async def write_settled(
        self, job: Job, settlement: Settlement, record: dict[str, Any], submit: Submit
    ) -> None:
        """A line that :func:`waits` for the settle's answer: owed with ``settlement``
        (settled through ``submit``), written from the answer (a dead job's, a done page's
        with what the script decided; none for another answer: the job lives on) and
        acknowledged. Whether a retry, throttle or release ends the job, and what a done
        page's line says of its content and its budgets, are the settle script's to say
        (docs/DESIGN.md); a kill before the write loses no line (:mod:`.owed`)."""
        owed = self.owe(settlement, record)
        line = settled_line(record, await submit(owed, job))
        if line is None:
            return
        if line["outcome"] == "dead":
            written = await self._write_dead(job, line)
        else:
            written = await self._write_done(job, line)
        if owed.line is not None:  # too large for the ledger: only in memory, nothing owed
            self.acknowledge(job.id, written)

    def owe(self, settlement: Settlement, record: dict[str, Any]) -> Settlement:
        """``settlement`` carrying ``record`` into the owed-lines ledger (:mod:`.owed`)."""
        return self.ledger.owe(settlement, record)

    def acknowledge(self, job_id: str, written: bool) -> None:
        """The owed line of ``job_id`` is in the sink (acknowledged with the next batch), or
        its write failed (it stays owed: a take-over writes it)."""
        if written:
            self.ledger.written(job_id)
        else:
            self.ledger.failed.add(job_id)

    async def write(self, job: Job, settlement: Settlement, record: dict[str, Any]) -> Settlement:
        """Write the line of a done or dead job by the worker's own verdict, before its settle
        (at least once); answers the settlement to buffer: a sink failure releases the job
        (claims pause), a record the sink refused for its content ends it dead."""
        assert self.sink is not None
        try:
            # a record the sink refuses for its content is written without its result, the
            # job dead (runtime/records.py): written again, it would be refused again
            try:  # write_or_refused(self.sink, record, dead=True), without its frame
                await self.sink.write(record)
                written = record
            except RecordRefused as refused:
                written = await write_refused(self.sink, record, refused, dead=True)
        except Exception as exc:
            # Our fault, not the job's nor the site's: give the job back (no attempt spent)
            # and pause claiming, longer with each failure in a row (2, 4 ... 60 s), so a sink
            # that is down (a database gone away) does not fetch the queue through and back.
            pause = self.sink_failed()
            log.warning("job %s: sink failed, releasing it; pausing claims %.1f s: %s", job.id,
                        pause, redact_text(str(exc)), extra=about(job, "sink_failed"))  # fmt: skip
            released = self.queue.releasing(job, delay=pause)
            # the request through the job's exit was made all the same: counted there
            # (and the cookies it got are the session's all the same)
            return dataclasses.replace(
                released, exit_result=settlement.exit_result, bytes_in=settlement.bytes_in,
                jar=settlement.jar,
            )  # fmt: skip
        self._sink_failures = 0
        if written is not record and settlement.outcome == "done":
            dead = self.queue.failing(job, SINK_REFUSED, str(written["error"]),
                                      domain_failed=settlement.domain_failed)  # fmt: skip
            return dataclasses.replace(
                dead, latency_ms=settlement.latency_ms, overload=settlement.overload,
                exit_result=settlement.exit_result, bytes_in=settlement.bytes_in,
                jar=settlement.jar,
            )  # fmt: skip
        return settlement

    def sink_failed(self) -> float:
        """A results line failed: claims pause, longer with each failure in a row (2, 4 ...
        60 s); answers the pause, seconds."""
        if time.monotonic() >= self._pause.until:  # claims had resumed: longer
            self._sink_failures += 1
        pause = backoff(SINK_PAUSE_MIN, self._sink_failures, SINK_PAUSE_MAX)
        self._pause.until = max(self._pause.until, time.monotonic() + pause)
        return pause

    async def _write_done(self, job: Job, record: dict[str, Any]) -> bool:
        """The results line of a job the settle script answered ``done`` (the line says what
        it decided: ``changed``, ``skipped``). The job is settled: a sink failure cannot give
        it back, so claims pause (as for any sink failure) and the line is written again
        after the pause, until it is or the worker stops (then it is left owed in Redis, for
        another worker to take over: runtime/owed.py). Whether it was written."""
        assert self.sink is not None
        while True:
            try:
                await write_or_refused(self.sink, record, dead=False)
            except Exception as exc:
                if self._stopping.is_set() or isinstance(exc, RecordRefused):
                    # (refused even without its result: it stays owed, a take-over tries it)
                    log.error("job %s: done, but its results line could not be written (sink "
                              "failed); it stays owed: %s", job.id, redact_text(str(exc)),
                              extra=about(job, "sink_failed"))  # fmt: skip
                    return False
                pause = self.sink_failed()
                log.warning("job %s: done; sink failed, writing its line again in %.1f s: %s",
                            job.id, pause, redact_text(str(exc)),
                            extra=about(job, "sink_failed"))  # fmt: skip
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopping.wait(), pause)
                continue
            self._sink_failures = 0
            return True

    async def _write_dead(self, job: Job, record: dict[str, Any]) -> bool:
        """The results line of a job already dead: a sink failure cannot give it back, and the
        dead letter holds it (``scrapeq dead list``), so it is logged, not retried here (the
        line stays owed: a take-over writes it later, runtime/owed.py). Whether it was
        written."""
        assert self.sink is not None
        try:
            await write_or_refused(self.sink, record, dead=True)
        except Exception as exc:
            log.warning("job %s: dead letter kept, but its results line failed: %s", job.id, exc,
                        extra=about(job, "sink_failed"))  # fmt: skip
            return False
        return True
