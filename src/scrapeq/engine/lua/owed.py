"""The owed-lines ledger's calls (``lua/includes/owed.lua``): acknowledge the results lines a
sink took, and take over the lines a dead worker left owed. Apart from ``scripts.py`` because
they are one concern (issue 25's at-least-once results lines) and keep that module short."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from scrapeq.engine.lua.args import Settled
from scrapeq.engine.lua.scripts import Call, _call

__all__ = ["OWED_CALL", "OwedLine", "owed_ack", "owed_take"]


#: Most ids one ``owed_ack-1.lua`` call takes, and most lines one ``owed_take-1.lua`` gives.
OWED_CALL = 1000


def owed_ack(ids: Sequence[str]) -> Call[int]:
    """Acknowledge owed results lines (a sink took them); answers how many were owed."""
    return _call("owed_ack", int, ids=list(ids))


@dataclass(frozen=True, slots=True)
class OwedLine:
    """A results line owed to a sink (``lua/includes/owed.lua``), as ``owed_take`` answers.

    Attributes:
        job_id: the job.
        record: the attempt's results record, JSON text, as the worker sent it.
        answer: the settle's answer for the job (parsed as the settle's own answers are): the
            line is built from the two (``runtime/records.py``, ``_settled_line``).
    """

    job_id: str
    record: str
    answer: Settled


def owed_take(n: int) -> Call[list[OwedLine]]:
    """Take up to ``n`` owed lines whose deadline passed (each given a new one)."""

    def parse(raw: list[Any]) -> list[OwedLine]:
        out = []
        for job_id, stored in zip(raw[0::2], raw[1::2], strict=True):
            record, _, answer = str(stored).partition("\n")
            out.append(OwedLine(str(job_id), record, Settled.parse(answer)))
        return out

    return _call("owed_take", parse, n=n)
