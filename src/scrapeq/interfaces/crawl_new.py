"""``scrapeq crawl --new``: a crawl of the same seeds started again, and what a crawl with
nothing to do says."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from scrapeq.engine.lua.scripts import Renewed

__all__ = ["NEW_HELP", "new_crawl_line", "nothing_to_do_line"]

NEW_HELP = (
    "Start a new crawl: forget what this queue has seen (its seen-set, max-pages counts); "
    "asks on a terminal, else needs --yes."
)


def new_crawl_line(queue: str, done: Renewed) -> str:
    """What ``--new`` did, one line."""
    return (
        f"crawl: new crawl of queue {queue!r}: seen-set forgotten ({done.seen_keys} keys), "
        f"{done.domains} domains' page counts reset"
    )


def nothing_to_do_line(seeds: int, seen: int) -> str:
    """Why a crawl that added no seed and finds no job has nothing to do, and what to do."""
    if seeds and seen == seeds:
        return f"crawl: all {seeds} seeds were seen before; --new starts a new crawl"
    return f"crawl: {seen} of {seeds} seeds were seen before, none added; --new starts a new crawl"
