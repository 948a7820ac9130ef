"""The browser fetcher's pool: chromium processes as a failure domain (issue 42).

A worker process keeps at most ``browsers`` chromium processes, each rendering at most
``browser_pages`` pages at once (one fresh browser context per page: no cookie, cache or
storage crosses jobs). The pool launches Debian's chromium itself (``browser_path``, never a
browser Playwright downloads) in a session of its own, so that it knows the browser's
process group, and drives it through Playwright over the DevTools protocol.

* **Recycling**: a browser is retired after ``browser_recycle_pages`` pages, or as soon as
  the RSS of its whole process tree (browser, zygotes, renderers, GPU process) is above
  ``browser_max_rss`` bytes: it takes no new page, finishes the ones it has, then is closed
  and its process group killed. A leaking page costs a restart, not the worker's memory.
* **Deadlines**: launching, connecting, opening a context and closing one each have a
  deadline (:data:`OP_TIMEOUT`); a page's own work has the fetch's (``request_timeout``).
* **Watchdog**: once a second the pool reads each browser's process tree (its RSS, whether
  the browser still runs) and every few seconds asks it for its version over its own
  DevTools session; a browser that does not answer within :data:`OP_TIMEOUT`, or whose
  context will not close, is hung: its whole process group is killed (``SIGKILL``).
* **Loss**: a browser that crashed, was killed or hung is *lost*: every page it was
  rendering raises :class:`~scrapeq.runtime.classify.BrowserLost` (``ours``: the worker
  gives the job back at once, no attempt spent, no domain charged) and the next page gets a
  new browser.
* **Bench**: ``browser_bench_after`` losses or failed launches in a row (no page rendered
  in between) bench the pool, as an exit is benched: for ``browser_bench`` seconds, doubling
  with each bench in a row up to ``browser_bench_max`` (:func:`.backoff.backoff`). Meanwhile
  no browser is launched and every page raises :class:`BrowserDown` (the worker gives its job
  back for the rest of the bench, spending nothing: no attempt, no release, no domain
  charged); :attr:`BrowserPool.on_bench` is told, so that ``status`` raises
  ``browsers_down``. After it one launch probes: its first page rendered ends the bench
  (``on_bench`` told again), its failure benches the pool again, longer.

:func:`require_fetcher` refuses at start, in one line naming the extra, a ``fetcher`` setting
this process cannot run.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import shlex
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from scrapeq.engine.config.settings import Settings
from scrapeq.errors import ConfigError
from scrapeq.runtime.backoff import backoff
from scrapeq.runtime.classify import BrowserLost
from scrapeq.runtime.impersonate import FetcherUnavailable
from scrapeq.runtime.proc_tree import TreeCpu, read_tree, tree, tree_rss

if TYPE_CHECKING:
    from playwright.async_api import Browser, BrowserContext, CDPSession, Playwright

__all__ = [
    "EXTRA_HINT",
    "LAUNCH_RETRY",
    "OP_TIMEOUT",
    "BrowserDown",
    "BrowserPool",
    "BrowserUnavailable",
    "require_browser",
    "require_fetcher",
    "tree",
    "tree_rss",
]

log = logging.getLogger("scrapeq.browser")

#: How to install what the browser fetcher needs.
EXTRA_HINT: Final = "pip install 'scrapeq[browser]'"
#: The deadline of each browser operation that is not a page's own work: seconds.
OP_TIMEOUT: Final = 15.0
#: How often the watchdog reads the process trees, and asks each browser for a sign of life.
WATCH_EVERY: Final = 1.0
HEARTBEAT_EVERY: Final = 5.0
_DEVTOOLS: Final = re.compile(rb"DevTools listening on (ws://\S+)")
_FLAGS: Final = (
    "--headless=new",
    "--remote-debugging-port=0",
    "--remote-debugging-address=127.0.0.1",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--mute-audio",
    "--password-store=basic",
)
#: Seconds a page's job waits after a failed launch that does not bench the pool.
LAUNCH_RETRY: Final = 2.0
_PR_SET_PDEATHSIG: Final = 1


class BrowserUnavailable(FetcherUnavailable):
    """No browser could be started (chromium failed to launch or to connect): ours, as a
    missing extra is: the job is released with a backoff and claims pause, no attempt
    spent, no domain or exit charged."""


class BrowserDown(BrowserUnavailable):
    """No browser for this page now: the pool is benched (``benched``), or a launch just
    failed. The job is given back for ``wait`` seconds, spending nothing."""

    def __init__(self, message: str, wait: float, *, benched: bool) -> None:
        super().__init__(message)
        self.wait = wait
        self.benched = benched


def require_browser(settings: Settings) -> None:
    """Refuse, in one line, a browser fetcher this process cannot run: Playwright missing
    (naming the extra) or no browser at ``browser_path``.

    Raises:
        ConfigError: what is missing.
    """
    try:
        import playwright.async_api  # noqa: F401
    except ImportError:
        raise ConfigError("fetcher", f"browser needs Playwright: {EXTRA_HINT}") from None
    path = settings.browser_path
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        raise ConfigError(
            "browser_path", f"{path} is not an executable chromium (apt-get install chromium)"
        )


def require_fetcher(settings: Settings) -> None:
    """Refuse a ``fetcher`` setting whose extra (or browser) is missing, in one line."""
    if settings.fetcher == "impersonate":
        from scrapeq.runtime.impersonate import require_curl_cffi

        require_curl_cffi()
    elif settings.fetcher == "browser":
        require_browser(settings)


@dataclass(eq=False)
class _Browser:
    """One chromium process of the pool and what the pool knows of it."""

    number: int
    proc: asyncio.subprocess.Process
    profile: str
    handle: Browser | None = None
    cdp: CDPSession | None = None
    shared: BrowserContext | None = None  # browser_context = browser: its one context
    drain: asyncio.Task[None] | None = None
    open: int = 0  # pages being rendered
    served: int = 0  # pages given to it, over its life
    rss: int = 0  # bytes, its whole process tree, as last read
    retiring: bool = False  # takes no new page; closed when its last one is over
    lost: str | None = None  # why it was lost (crash, kill, hang); None: alive
    closing: bool = False
    beat: float = field(default_factory=time.monotonic)
    cpu: TreeCpu = field(default_factory=TreeCpu)  # its process tree's CPU-seconds

    @property
    def usable(self) -> bool:
        return self.lost is None and not self.retiring and not self.closing


class BrowserPool:
    """Chromium processes for one worker process (see the module's text).

    Args:
        settings: ``browser_path``, ``browsers``, ``browser_pages``,
            ``browser_recycle_pages``, ``browser_max_rss``, ``browser_args`` and
            ``user_agent`` are read.
    """

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._browsers: list[_Browser] = []
        self._launching = 0
        self._numbers = 0
        self._cond = asyncio.Condition()
        self._playwright: Playwright | None = None
        self._watchdog: asyncio.Task[None] | None = None
        self._closed = False
        #: Counters: browsers launched, retired (recycled), lost (crash, kill, hang), of
        #: which killed by the watchdog as hung; pages rendered; failed launches; benches.
        self.counts = {"launched": 0, "recycled": 0, "lost": 0, "hung": 0, "pages": 0,
                       "failed_launches": 0, "benched": 0}  # fmt: skip
        self._failures = 0  # losses and failed launches since the last page rendered
        self._benches = 0  # benches in a row (its backoff's n)
        self._bench_until = 0.0  # monotonic; past it (and failures over the bar): probing
        self._why = ""  # the last failure's text
        #: CPU-seconds of the browsers' process trees: those ended, and each one running.
        self._cpu_lock = threading.Lock()
        self._cpu_done = 0.0
        self._cpu_trees: set[TreeCpu] = set()
        #: Called with (seconds benched, or None: usable again) when the bench starts or
        #: ends (the worker tells Redis: the ``browsers_down`` alarm).
        self.on_bench: Callable[[float | None], None] | None = None

    # --- pages --------------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def context(self) -> AsyncIterator[tuple[_Browser, BrowserContext]]:
        """A fresh browser context in a browser of the pool (one page's), closed after.

        Raises:
            BrowserUnavailable: no browser could be launched.
            BrowserLost: the browser was lost.
        """
        browser = await self._take()
        context: BrowserContext | None = None
        try:
            assert browser.handle is not None
            try:
                if browser.shared is not None:
                    yield browser, browser.shared
                    return
                context = await asyncio.wait_for(self._new_context(browser), OP_TIMEOUT)
            except Exception as exc:
                raise self.lost_error(browser, exc) from None
            yield browser, context
        finally:
            await self._give_back(browser, context)

    async def _new_context(self, browser: _Browser) -> BrowserContext:
        assert browser.handle is not None
        return await browser.handle.new_context(
            user_agent=self.settings.user_agent, service_workers="block", accept_downloads=False
        )

    def lost_error(self, browser: _Browser, exc: BaseException) -> BaseException:
        """``exc`` as the pool sees it: :class:`BrowserLost` when ``browser`` is lost (or
        just went), :class:`BrowserDown` when that loss benched the browsers or was a
        probe's (as a resting exit's failed probe, it spends nothing of its jobs), else
        ``exc`` itself."""
        if browser.lost is None and (
            browser.proc.returncode is not None
            or (browser.handle is not None and not browser.handle.is_connected())
        ):
            self._mark_lost(browser, "its process ended")
        if browser.lost is None:
            return exc
        lost = f"browser {browser.number} lost ({browser.lost}): {exc}"
        bench = self.bench()
        if bench is not None:  # the loss that benched the browsers, or a probe's: ours alone
            return BrowserDown(f"{lost}; the browsers are benched", bench[0], benched=True)
        return BrowserLost(lost)

    async def _take(self) -> _Browser:
        """A browser with room for one more page: one of the pool's, a new one while under
        ``browsers``, else wait for room."""
        while True:
            async with self._cond:
                if self._closed:
                    raise BrowserLost("the browser pool is closed")
                self._refuse_if_benched()
                for b in self._browsers:
                    if b.usable and b.open < self.settings.browser_pages:
                        self._count_page(b)
                        return b
                if len(self._browsers) + self._launching >= self._room():
                    await self._cond.wait()
                    continue
                self._launching += 1
            try:
                browser = await self._launch()
            except BaseException as exc:
                async with self._cond:
                    self._launching -= 1
                    self._cond.notify_all()
                    if isinstance(exc, BrowserUnavailable):
                        self.counts["failed_launches"] += 1
                        self._failed(str(exc))
                        self._refuse_if_benched()
                        raise BrowserDown(str(exc), LAUNCH_RETRY, benched=False) from None
                raise
            async with self._cond:
                self._launching -= 1
                self._count_page(browser)
                self._browsers.append(browser)
                self._cond.notify_all()
            return browser

    def _room(self) -> int:
        """Browsers the pool may have: ``browsers``; one while probing after a bench."""
        return 1 if self._failures >= self.settings.browser_bench_after else self.settings.browsers

    def _refuse_if_benched(self) -> None:
        wait = self._bench_until - time.monotonic()
        if wait > 0:
            raise BrowserDown(
                f"the worker's browsers are benched for {wait:.0f} s more after "
                f"{self._failures} crashes or failed launches in a row: {self._why}",
                wait,
                benched=True,
            )

    def _failed(self, why: str) -> None:
        """A browser lost or a launch failed; the ``browser_bench_after``-th in a row (or a
        probe's) benches the pool."""
        self._failures += 1
        self._why = why
        if self._failures < self.settings.browser_bench_after:
            return
        self._benches += 1
        s = self.settings
        wait = backoff(s.browser_bench, self._benches, s.browser_bench_max)
        self._bench_until = time.monotonic() + wait
        self.counts["benched"] += 1
        log.warning("browsers benched for %.0f s (%d crashes or failed launches in a row): %s",
                    wait, self._failures, why)  # fmt: skip
        if self.on_bench is not None:
            self.on_bench(wait)

    def _rendered(self) -> None:
        """A page was rendered by a browser that lives on: the failures in a row end, and a
        bench with them (its probe worked)."""
        benched, self._failures, self._benches = self._benches > 0, 0, 0
        if benched:
            self._bench_until = 0.0
            log.warning("browsers usable again: a probe's page was rendered")
            if self.on_bench is not None:
                self.on_bench(None)

    def bench(self) -> tuple[float, int, str] | None:
        """While benched (or probing after a bench): (seconds until the probe, failures in
        a row, the last one's text); None when the browsers are usable."""
        if self._benches == 0:
            return None
        return max(self._bench_until - time.monotonic(), 0.0), self._failures, self._why

    def _count_page(self, browser: _Browser) -> None:
        """One more page for ``browser``; its last one when it reaches
        ``browser_recycle_pages`` (it is retired once that page is over)."""
        browser.open += 1
        browser.served += 1
        if browser.served >= self.settings.browser_recycle_pages:
            browser.retiring = True

    async def _give_back(self, browser: _Browser, context: BrowserContext | None) -> None:
        if context is not None and browser.lost is None:
            try:
                await asyncio.wait_for(context.close(), OP_TIMEOUT)
            except Exception as exc:  # a context that will not close: the browser is hung
                alive = browser.handle is not None and browser.handle.is_connected()
                if browser.lost is None and alive and browser.proc.returncode is None:
                    self.counts["hung"] += 1
                    self._mark_lost(browser, f"a context would not close: {exc!r}")
        async with self._cond:
            browser.open -= 1
            self.counts["pages"] += 1
            if browser.lost is None and not self._closed:
                self._rendered()
            retire = browser.retiring and browser.open == 0 and browser.lost is None
            self._cond.notify_all()
        if retire:
            await self._retire(browser, "recycled")

    # --- browsers -----------------------------------------------------------------------------

    async def _launch(self) -> _Browser:
        """Start a chromium in a session of its own and connect to it (deadline OP_TIMEOUT)."""
        from playwright.async_api import async_playwright

        if self._playwright is None:
            self._playwright = await asyncio.wait_for(async_playwright().start(), OP_TIMEOUT)
        if self._watchdog is None:
            self._watchdog = asyncio.get_running_loop().create_task(self._watch())
        self._numbers += 1
        profile = tempfile.mkdtemp(prefix="scrapeq-browser-")
        args = [self.settings.browser_path, *_FLAGS, f"--user-data-dir={profile}"]
        if os.geteuid() == 0:  # chromium refuses root without it (containers run as root)
            args.append("--no-sandbox")
        if "image" in self.settings.browser_block.split(","):
            # images never requested at all: each blocked one cost a round trip through the
            # route (chromium, Playwright's driver, this process) before the load event
            args.append("--blink-settings=imagesEnabled=false")
        args += [*shlex.split(self.settings.browser_args), "about:blank"]
        proc = await asyncio.create_subprocess_exec(
            *args,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        browser = _Browser(self._numbers, proc, profile)
        with self._cpu_lock:
            self._cpu_trees.add(browser.cpu)
        try:
            assert proc.stderr is not None
            url = await asyncio.wait_for(_devtools_url(proc.stderr), OP_TIMEOUT)
            browser.drain = asyncio.get_running_loop().create_task(_drain(proc.stderr))
            handle = await asyncio.wait_for(
                self._playwright.chromium.connect_over_cdp(url), OP_TIMEOUT
            )
            browser.handle = handle
            handle.on("disconnected", lambda _: self._mark_lost(browser, "disconnected"))
            browser.cdp = await asyncio.wait_for(handle.new_browser_cdp_session(), OP_TIMEOUT)
            if self.settings.browser_context == "browser":
                browser.shared = await asyncio.wait_for(self._new_context(browser), OP_TIMEOUT)
        except BaseException as exc:
            await self._end(browser)
            if isinstance(exc, Exception):
                raise BrowserUnavailable(f"chromium did not start: {exc!r}") from None
            raise
        self.counts["launched"] += 1
        log.info("browser %d started (pid %d)", browser.number, proc.pid)
        return browser

    def _mark_lost(self, browser: _Browser, why: str) -> None:
        """``browser`` crashed, was killed or hung: its pages fail with BrowserLost, its
        process group is killed, and it leaves the pool (the next page gets a new one)."""
        if browser.lost is not None or browser.closing:
            return
        browser.lost = why
        self.counts["lost"] += 1
        log.warning("browser %d lost: %s", browser.number, why)
        if not self._closed:
            self._failed(f"browser lost: {why}")
        self._account(browser)
        _kill_tree(browser.proc)
        asyncio.get_running_loop().create_task(self._forget(browser))

    async def _forget(self, browser: _Browser) -> None:
        await self._end(browser)
        async with self._cond:
            if browser in self._browsers:
                self._browsers.remove(browser)
            self._cond.notify_all()

    async def _retire(self, browser: _Browser, why: str) -> None:
        """Close a browser with no page left (recycling), then kill what is left of it."""
        browser.closing = True
        async with self._cond:
            if browser in self._browsers:
                self._browsers.remove(browser)
            self._cond.notify_all()
        if browser.handle is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(browser.handle.close(), OP_TIMEOUT)
        await self._end(browser)
        self.counts["recycled"] += 1
        log.info("browser %d %s after %d pages (rss %d MB)", browser.number, why,
                 browser.served, browser.rss // 1_000_000)  # fmt: skip

    async def _end(self, browser: _Browser) -> None:
        """Kill the browser's process tree, reap it, remove its profile."""
        browser.closing = browser.closing or browser.lost is None
        self._account(browser)
        _kill_tree(browser.proc)
        with contextlib.suppress(Exception):
            await asyncio.wait_for(browser.proc.wait(), OP_TIMEOUT)
        if browser.drain is not None:
            browser.drain.cancel()
        await asyncio.to_thread(shutil.rmtree, browser.profile, True)

    # --- watchdog -----------------------------------------------------------------------------

    async def _watch(self) -> None:
        """Once a second: each browser's tree RSS (retire above the cap), whether it runs;
        every HEARTBEAT_EVERY s a DevTools round trip, within OP_TIMEOUT (else: hung)."""
        while not self._closed:
            await asyncio.sleep(WATCH_EVERY)
            for browser in list(self._browsers):
                if browser.lost is not None or browser.closing:
                    continue
                if browser.proc.returncode is not None:
                    self._mark_lost(browser, f"exited with {browser.proc.returncode}")
                    continue
                procs = await asyncio.to_thread(read_tree, browser.proc.pid)
                browser.cpu.update(procs)
                browser.rss = sum(p.rss for p in procs.values())
                if browser.rss > self.settings.browser_max_rss and not browser.retiring:
                    log.info("browser %d: rss %d MB over browser_max_rss: recycling",
                             browser.number, browser.rss // 1_000_000)  # fmt: skip
                    browser.retiring = True
                    if browser.open == 0:
                        await self._retire(browser, "recycled (rss)")
                        continue
                if time.monotonic() - browser.beat >= HEARTBEAT_EVERY:
                    await self._heartbeat(browser)

    async def _heartbeat(self, browser: _Browser) -> None:
        browser.beat = time.monotonic()
        if browser.cdp is None:
            return
        try:
            await asyncio.wait_for(browser.cdp.send("Browser.getVersion"), OP_TIMEOUT)
        except TimeoutError:
            self.counts["hung"] += 1
            self._mark_lost(browser, f"no answer within {OP_TIMEOUT:g} s: killed as hung")
        except Exception as exc:
            self._mark_lost(browser, f"its DevTools session failed: {exc!r}")

    def _account(self, browser: _Browser) -> None:
        """Its tree's last sample, taken before it is killed, counted for good."""
        if browser.cpu not in self._cpu_trees:
            return  # accounted already (lost, then ended)
        if browser.proc.returncode is None:
            browser.cpu.update(read_tree(browser.proc.pid))
        with self._cpu_lock:
            self._cpu_trees.discard(browser.cpu)
            self._cpu_done += browser.cpu.finish()

    def cpu_seconds(self) -> float:
        """CPU-seconds the browsers' process trees spent (children included), over every
        browser this pool ran: exact for those ended, as last sampled for those running (the
        watchdog's tick). Safe from another thread (``/metrics``)."""
        with self._cpu_lock:
            return self._cpu_done + sum(t.total for t in self._cpu_trees)

    def pids(self) -> list[int]:
        """The browsers' process ids (each its process group's leader)."""
        return [b.proc.pid for b in self._browsers if b.lost is None]

    def stats(self) -> dict[str, Any]:
        """The counters, and the browsers running now with their pages and RSS."""
        running = [
            {"pid": b.proc.pid, "open": b.open, "served": b.served, "rss": b.rss}
            for b in self._browsers
        ]
        return {**self.counts, "cpu_seconds": self.cpu_seconds(), "browsers": running}

    async def close(self) -> None:
        """Close every browser and Playwright's driver; idempotent."""
        self._closed = True
        async with self._cond:
            browsers, self._browsers = list(self._browsers), []
            self._cond.notify_all()
        for browser in browsers:
            browser.closing = True
            if browser.handle is not None and browser.lost is None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(browser.handle.close(), OP_TIMEOUT)
            await self._end(browser)
        if self._watchdog is not None:
            self._watchdog.cancel()
            with contextlib.suppress(BaseException):
                await self._watchdog
        if self._playwright is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._playwright.stop(), OP_TIMEOUT)
            self._playwright = None


def _die_with_parent() -> None:
    """In the browser's process before it runs chromium: SIGKILL when the worker dies (a
    worker killed with -9 leaves no browser behind; its renderers end with it)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except Exception:  # not Linux: the watchdog and close() are all there is
        pass


async def _devtools_url(stderr: asyncio.StreamReader) -> str:
    while True:
        line = await stderr.readline()
        if not line:
            raise RuntimeError("chromium exited before it listened for DevTools")
        found = _DEVTOOLS.search(line)
        if found is not None:
            return found.group(1).decode()


async def _drain(stderr: asyncio.StreamReader) -> None:
    """Read chromium's stderr to its end (a full pipe would block it)."""
    with contextlib.suppress(Exception):
        while await stderr.read(65536):
            pass


def _kill_tree(proc: asyncio.subprocess.Process) -> None:
    """SIGKILL a browser's process group (its session) and, while it is not reaped (its pid
    still its own), any descendant that left the group."""
    members = tree(proc.pid) if proc.returncode is None else []
    with contextlib.suppress(OSError):
        os.killpg(proc.pid, signal.SIGKILL)
    for each in members:
        with contextlib.suppress(OSError):
            os.kill(each, signal.SIGKILL)
