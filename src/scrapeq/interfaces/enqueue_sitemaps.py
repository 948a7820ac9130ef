"""``enqueue --sitemap`` and ``crawl --sitemaps``: the pages of sitemaps into the queue, in
batches of 1,000, and what a run says.

:class:`~scrapeq.runtime.sitemaps.SitemapReader` reads the files (streaming, bounded, hostile
XML refused: see its module); each page becomes a ``GET`` job whose request ``meta`` carries
``sitemap_priority`` and, when the sitemap gave a valid one, ``lastmod`` (epoch seconds), for
a later revisit policy. De-duplication is the queue's (``unique``), as for any enqueue.

Each batch is validated (``Queue.prepare``: a URL refused there is counted as invalid and its
first few are named) and sent in one ``enqueue_many`` call, sent once (:func:`send_once`): a
run that fails part-way says how many jobs it added for certain, and that the batch in flight
may or may not have been added.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import urljoin

from scrapeq.engine.config.settings import Settings
from scrapeq.engine.lua.scripts import EnqueueSpec
from scrapeq.engine.model.request import Request
from scrapeq.engine.queue import Queue
from scrapeq.errors import InvalidURL, ScrapeqError
from scrapeq.interfaces.enqueue_file import count_added
from scrapeq.runtime.fetch import Fetcher, Robots
from scrapeq.runtime.sitemaps import Entry, Limits, Problem, SitemapReader, Source, Tally

__all__ = [
    "BATCH",
    "SitemapFailed",
    "SitemapRun",
    "exit_code",
    "read_robots_sitemaps",
    "read_sitemaps",
    "summary",
    "summary_line",
]

#: Jobs validated and added per ``enqueue_many`` call.
BATCH: Final = 1000
#: Invalid page URLs named one a line; the rest are counted.
_NAMED: Final = 10

_REASONS: Final = {
    "cross_host": "on another host",
    "not_http": "not http(s)",
    "no_loc": "without a loc",
    "too_deep": "sitemaps nested too deep",
    "too_many_files": "sitemaps over the 1,000-file limit",
}


class SitemapFailed(ScrapeqError):
    """Redis failed or refused part-way; the message says what was added for certain."""


@dataclass
class SitemapRun:
    """The jobs one run adds: ``options`` are ``Queue.prepare``'s keywords for every page.

    Attributes:
        added, duplicates, invalid: what happened so far, for certain.
        ids: the ids added (with ``keep_ids``).
    """

    queue: Queue
    options: dict[str, Any]
    report: Callable[[str], None]
    keep_ids: bool = False
    added: int = 0
    duplicates: int = 0  # pending, or in the seen-set
    invalid: int = 0
    ids: list[str] = field(default_factory=list)
    _specs: list[EnqueueSpec] = field(default_factory=list)

    def add(self, entries: Iterable[Entry]) -> None:
        """Validate ``entries``; send every full batch."""
        for entry in entries:
            try:
                # revisits: priority feeds the weight, and a lastmod newer than the last visit
                # makes the page due now: the engine's rule (script_args.sitemap_schedule)
                spec = self.queue.prepare(
                    Request(entry.loc, meta=entry.meta()), **self.options,
                    sitemap_priority=entry.priority, lastmod=entry.lastmod,
                )  # fmt: skip
            except InvalidURL as exc:
                self.invalid += 1
                if self.invalid <= _NAMED:
                    self.report(str(exc))
                continue
            self._specs.append(spec)
            if len(self._specs) >= BATCH:
                self.flush()

    def flush(self) -> None:
        """Send what is held.

        Raises:
            SitemapFailed: the call failed; what was added before it is said.
        """
        if not self._specs:
            return
        try:
            results = self.queue.enqueue_many(self._specs)
        except ScrapeqError as exc:
            held = len(self._specs)
            raise SitemapFailed(
                f"{exc}; added {self.added} jobs for certain, the last batch of {held} may or "
                "may not have been added: run the same command again (with --unique, what "
                "was added is skipped)"
            ) from exc
        self._specs = []
        added = count_added(results, self.ids if self.keep_ids else None)
        self.added += added
        self.duplicates += len(results) - added


async def read_sitemaps(
    run: SitemapRun,
    settings: Settings,
    sources: list[Source],
    report: Callable[[Problem], None],
    *,
    limits: Limits | None = None,
) -> Tally:
    """Read ``sources`` (and the sitemaps their indexes list) into ``run``."""
    async with Fetcher(settings) as fetcher:
        return await _read_into(run, fetcher, sources, report, limits)


async def read_robots_sitemaps(
    run: SitemapRun,
    settings: Settings,
    seeds: list[str],
    report: Callable[[Problem], None],
    *,
    limits: Limits | None = None,
) -> Tally:
    """Read the sitemaps the ``Sitemap:`` lines of each seed's robots.txt name into ``run``
    (each origin's robots.txt once; its sitemaps may list that host's pages)."""
    sources: list[Source] = []
    async with Fetcher(settings) as fetcher:
        robots = Robots(fetcher, None, "")
        for seed in dict.fromkeys(seeds):
            try:
                found = await robots.sitemaps(seed)
            except ScrapeqError as exc:  # a private or invalid address: the seed's own fault
                report(Problem(seed, f"robots.txt not read: {exc}", "warning"))
                continue
            # the protocol wants absolute URLs; a relative one is read against the seed
            sources += [Source(urljoin(seed, url), site=seed) for url in found]
        return await _read_into(run, fetcher, dict.fromkeys(sources), report, limits)


async def _read_into(
    run: SitemapRun,
    fetcher: Fetcher,
    sources: Iterable[Source],
    report: Callable[[Problem], None],
    limits: Limits | None,
) -> Tally:
    """Read ``sources`` (and the sitemaps their indexes list) into ``run``, then send what
    it holds; what was read."""
    reader = SitemapReader(fetcher, limits=limits, report=report)
    async for batch in reader.read(sources):
        run.add(batch)
    run.flush()
    return reader.tally


def summary_line(tally: Tally, run: SitemapRun, unique: str) -> str:
    """``3 sitemap files read, 120 URLs found: added 100 jobs, skipped 15 duplicates; 5
    entries skipped (3 on another host, 2 not http(s))``."""
    files = f"{tally.files} sitemap file{'s' if tally.files != 1 else ''} read"
    out = f"{files}, {tally.found} URL{'s' if tally.found != 1 else ''} found: "
    out += f"added {run.added} job{'s' if run.added != 1 else ''}"
    if unique != "off":
        out += f", skipped {run.duplicates} duplicate{'s' if run.duplicates != 1 else ''}"
    if run.invalid:
        out += f", {run.invalid} invalid"
    skipped = sum(tally.skipped.values())
    if skipped:
        why = ", ".join(f"{n} {_REASONS.get(k, k)}" for k, n in sorted(tally.skipped.items()))
        out += f"; {skipped} entr{'ies' if skipped != 1 else 'y'} skipped ({why})"
    errors = len(tally.errors)
    if errors:
        out += f"; {errors} sitemap{'s' if errors != 1 else ''} refused or unreadable"
    return out


def summary(tally: Tally, run: SitemapRun) -> dict[str, Any]:
    """The ``--json`` document."""
    return {
        "added": run.added,
        "skipped": run.duplicates,
        "ids": run.ids,
        "invalid": run.invalid,
        "files": tally.files,
        "found": tally.found,
        "entries_skipped": dict(sorted(tally.skipped.items())),
        "bad_lastmod": tally.bad_lastmod,
        "errors": [p.line() for p in tally.errors],
        "warnings": [p.line() for p in tally.problems if p.level == "warning"],
    }


def exit_code(tally: Tally) -> int:
    """0 when every sitemap was read (limits met are warnings); 1 when one could not be
    fetched (network, server); else 2 when one was refused for its content."""
    errors = tally.errors
    if not errors:
        return 0
    return 1 if any(p.fetch for p in errors) else 2
