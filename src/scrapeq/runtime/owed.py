"""The owed-lines phase: no results line is lost to a worker killed between a settle's answer
and the line's write (:class:`OwedLines`).

A line the worker writes from the settle's answer (a done page with revisit on, or with
follow-ups under ``max_pages``/``max_bytes``; a retry, throttle or release the settle may make
dead: the claim's ``Job.line_waits``, ``lua/includes/lines.lua``) used to exist only in the worker's
memory between the settle and the sink's write. Its settle item now carries the attempt's
record (``line``), and the settle script that makes the line due keeps the record and its
answer in the queue's owed-lines ledger, in the same call (``engine/lua/includes/owed.lua``).
The worker acknowledges the line once its sink took it (acknowledgements are batched, every
:data:`ACK_EVERY` seconds). Every ``lease / 3`` seconds a worker with a sink takes over the
lines nobody acknowledged within ``lease`` seconds of their settle (their worker died, or its
sink keeps failing): it builds each with :func:`~scrapeq.runtime.records.settled_line`, the
one home of the line's shape, from the stored record and answer, writes it to its own sink
and acknowledges it. A line written whose acknowledgement was lost (a kill between the two)
is written again: at least once, like every results line (docs/DESIGN.md "Results lines").

A worker without a sink sends no record and stores nothing. A ``burst`` worker ends only
once no line is owed (:meth:`OwedLines.settled`): it waits for the lines of the others and
takes over the overdue ones.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import time
from collections.abc import Callable
from typing import Any

import orjson

from scrapeq.engine.config.limits import MAX_OWED_LINE
from scrapeq.engine.config.settings import Settings
from scrapeq.engine.lua.scripts import Settlement
from scrapeq.engine.queue import AsyncQueue
from scrapeq.runtime.records import settled_line, write_or_refused
from scrapeq.runtime.reporter import RedisHealth
from scrapeq.runtime.sinks import Sink

log = logging.getLogger("scrapeq.worker")

#: Seconds between two batches of acknowledgements (one script call per partition each).
ACK_EVERY = 0.05
#: Owed lines taken over per partition in one call.
TAKE_BATCH = 100
#: Longest pause of a burst worker waiting for lines owed by others, seconds.
BURST_POLL = 0.5


def record_text(record: dict[str, Any]) -> str | None:
    """A results record as a settle item's ``line``: JSON text on one line (orjson, or
    ``json`` for what orjson refuses: integers over 64 bits); None when it is over
    :data:`~scrapeq.engine.config.limits.MAX_OWED_LINE` bytes (the ledger does not keep it: the line
    is then only in this worker's memory until written, as before the ledger; logged)."""
    try:
        data = orjson.dumps(record)
    except TypeError:
        text = json.dumps(record, ensure_ascii=False, separators=(",", ":"), default=str)
        data = text.encode("utf-8", "replace")
    if len(data) > MAX_OWED_LINE:
        log.warning(
            "job %s: results record of %d bytes is over the owed-lines ledger's %d: it is "
            "not kept in Redis until written",
            record.get("id"), len(data), MAX_OWED_LINE,
            extra={"job_id": record.get("id"), "kind": "owed_too_large"},
        )  # fmt: skip
        return None
    return data.decode("utf-8")


class OwedLines:
    """The worker's side of the owed-lines ledger: records sent with settlements, lines
    acknowledged once written, overdue lines taken over. Held by the worker's
    :class:`~scrapeq.runtime.lines.Lines` (issue 39: composed, no longer a mixin over the
    worker's state): it reads the worker's queue, sink and settings, and reports Redis
    failures through the worker's ``redis_failed``."""

    def __init__(
        self,
        queue: AsyncQueue,
        sink: Sink | None,
        settings: Settings,
        health: RedisHealth,
        redis_failed: Callable[[Exception, str], None],
        loops_end: asyncio.Event,
    ) -> None:
        self.queue, self.sink, self.settings = queue, sink, settings
        self._health, self._redis_failed, self._loops_end = health, redis_failed, loops_end
        self.acks: list[str] = []  # owed lines written, to acknowledge
        self.failed: set[str] = set()  # owed lines this worker's sink failed to write (still owed)

    def owe(self, settlement: Settlement, record: dict[str, Any]) -> Settlement:
        """``settlement`` carrying ``record`` (the line's record before the settle's answer)
        into the ledger; as it is when the record is too large to keep there."""
        text = record_text(record)
        return settlement if text is None else dataclasses.replace(settlement, line=text)

    def written(self, job_id: str) -> None:
        """The line owed for ``job_id`` is in the sink: acknowledged with the next batch."""
        self.acks.append(job_id)

    async def flush_acks(self) -> bool:
        """Send the acknowledgements waiting; False when Redis did not take them (kept for
        the next try: a line acknowledged late may meanwhile be written again elsewhere)."""
        if not self.acks:
            return True
        ids, self.acks = self.acks, []
        sent = time.monotonic()
        try:
            await self.queue.owed_ack(ids)
        except asyncio.CancelledError:
            self.acks = ids + self.acks
            raise
        except Exception as exc:
            self.acks = ids + self.acks
            self._redis_failed(exc, "acknowledging results lines")
            return False
        self._health.ok(sent)
        return True

    async def take_over(self) -> int:
        """Write the owed lines whose deadline passed into this worker's sink, and acknowledge
        them; answers how many were written. A line whose write fails stays owed (taken over
        again ``lease`` seconds later)."""
        assert self.sink is not None
        written = 0
        while True:
            taken = await self.queue.owed_take(TAKE_BATCH)
            for owed in taken:
                line = settled_line(json.loads(owed.record), owed.answer)
                if line is not None:
                    try:
                        await write_or_refused(self.sink, line, dead=False)
                    except Exception as exc:
                        where = {"job_id": owed.job_id, "kind": "sink_failed"}
                        log.warning("job %s: an owed results line could not be written, it "
                                    "stays owed: %s", owed.job_id, exc, extra=where)  # fmt: skip
                        self.failed.add(owed.job_id)
                        continue
                    written += 1
                    self.failed.discard(owed.job_id)
                self.written(owed.job_id)
            await self.flush_acks()
            if len(taken) < TAKE_BATCH * self.settings.partitions:
                break
        if written:
            log.info("wrote %d results lines owed by a worker that did not (taken over)", written)
        return written

    async def loop(self) -> None:
        """Acknowledge written lines every :data:`ACK_EVERY` seconds; take over the overdue
        ones every ``lease / 3`` (this task must never die)."""
        period = max(self.settings.lease / 3, ACK_EVERY)
        next_take = time.monotonic() + period
        while not self._loops_end.is_set():
            await asyncio.sleep(ACK_EVERY)
            await self.flush_acks()
            if time.monotonic() < next_take:
                continue
            next_take = time.monotonic() + period
            try:
                await self.take_over()
            except Exception as exc:
                self._redis_failed(exc, "taking over owed results lines")

    async def settled(self) -> bool:
        """A burst worker's last check: whether no results line is owed any more (always,
        without a sink), or only lines this worker's sink failed to write (they stay owed for
        another worker: a broken sink must not hold a burst for ever). Else it takes over the
        overdue ones and the caller waits."""
        if self.sink is None:
            return True
        try:
            if await self.flush_acks():
                owed = await self.queue.owed_count()
                if owed == 0:
                    return True
                if owed <= len(self.failed):
                    log.warning("burst: %d results lines this worker's sink could not write "
                                "stay owed, for another worker to write", owed)  # fmt: skip
                    return True
            await self.take_over()
        except Exception as exc:
            self._redis_failed(exc, "reading owed results lines")
        return False

    async def close(self, deadline: float) -> None:
        """The last acknowledgements, until ``deadline`` (monotonic): what Redis does not take
        by then is written again by a take-over (at least once)."""
        if not self.acks:
            return
        try:
            await asyncio.wait_for(self.flush_acks(), max(deadline - time.monotonic(), 0))
        except TimeoutError:
            self._health.unanswered()
        if self.acks:
            log.warning("%d results lines written but not acknowledged: they may be written "
                        "again by another worker", len(self.acks))  # fmt: skip
