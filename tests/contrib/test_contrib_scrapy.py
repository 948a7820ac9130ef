"""Scrapy on scrapeq (scrapeq.contrib.scrapy): real ``scrapy crawl`` runs of the example project
against loopback sites, and the request store's refusals."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

scrapy = pytest.importorskip("scrapy")

from aiohttp import web  # noqa: E402

from scrapeq.contrib.scrapy import Scheduler, UnstorableRequest  # noqa: E402
from scrapeq.contrib.scrapy._classify import classify_failure  # noqa: E402
from scrapeq.contrib.scrapy._store import _as_dict, decode_request, encode_request  # noqa: E402
from scrapeq.engine.config.settings import Settings  # noqa: E402
from scrapeq.engine.queue import AsyncQueue, Queue  # noqa: E402
from scrapeq.runtime.classify import Outcome  # noqa: E402
from support.browser import need_browser  # noqa: E402
from support.js_shop import list_shop  # noqa: E402
from support.proc_helpers import communicate  # noqa: E402
from support.sites import Site, sites  # noqa: E402
from support.sites import hang as _hang  # noqa: E402
from support.waiting import until  # noqa: E402

PROJECT = Path(__file__).resolve().parents[2] / "examples" / "scrapy_project"
PAGES = 30


class _Spider(scrapy.Spider):
    name = "t"

    def parse_page(self, response: Any) -> None:
        pass

    def on_error(self, failure: Any) -> None:
        pass


def test_a_request_round_trips_as_json_with_its_callbacks_by_name() -> None:
    spider = _Spider()
    request = scrapy.Request(
        "http://127.0.0.1:1/p?q=1",
        method="POST",
        body=b"\x00\xffbody",
        headers={"X-A": ["1", "2"]},
        callback=spider.parse_page,
        errback=spider.on_error,
        meta={"k": [1, "v"], "_scrapeq_job": object()},
        cb_kwargs={"n": 3},
        priority=5,
        dont_filter=True,
    )
    stored = encode_request(request, spider)
    back = decode_request(json.loads(json.dumps(stored)), spider)
    assert (back.url, back.method, back.body) == (request.url, "POST", b"\x00\xffbody")
    assert back.headers.getlist("X-A") == [b"1", b"2"]
    assert back.callback == spider.parse_page and back.errback == spider.on_error
    assert back.meta == {"k": [1, "v"]} and back.cb_kwargs == {"n": 3}
    assert (back.priority, back.dont_filter) == (5, True)


@pytest.mark.parametrize(
    ("build", "why"),
    [
        (lambda s: scrapy.Request("http://a.example/", callback=lambda r: None), "lambda"),
        (lambda s: scrapy.Request("http://a.example/", meta={"when": object()}), "meta"),
        (lambda s: scrapy.Request("http://a.example/", cb_kwargs={"s": {1, 2}}), "cb_kwargs"),
    ],
)
def test_a_request_that_cannot_be_stored_is_refused_by_name(
    build: Callable[[Any], Any], why: str
) -> None:
    spider = _Spider()
    with pytest.raises(UnstorableRequest, match=why):
        encode_request(build(spider), spider)


class _Tagged(scrapy.Request):
    attributes = (*scrapy.Request.attributes, "tag")

    def __init__(self, *args: Any, tag: Any = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.tag = tag


@pytest.mark.parametrize(
    "build",
    [
        lambda s: scrapy.Request(
            "http://a.example/p", callback=s.parse_page, errback=s.on_error, meta={"k": 1},
            cb_kwargs={"n": 2}, cookies={"c": "1"}, flags=["f"], priority=3, dont_filter=True,
        ),
        lambda s: scrapy.Request("http://a.example/p"),  # no callback: the spider's parse
        lambda s: scrapy.FormRequest("http://a.example/f", formdata={"q": "x"}),
        lambda s: scrapy.http.JsonRequest("http://a.example/j", data={"q": 1}),
        lambda s: _Tagged("http://a.example/t", callback=s.parse_page, tag="x"),
    ],
)  # fmt: skip
def test_a_request_is_stored_as_scrapys_own_to_dict_has_it(build: Callable[[Any], Any]) -> None:
    """The store's shortcut past Scrapy's search of the spider's members gives what
    ``Request.to_dict`` gives (fails if Scrapy's dict gains a field the shortcut lacks)."""
    spider = _Spider()
    request = build(spider)
    assert _as_dict(request, spider) == request.to_dict(spider=spider)
    back = decode_request(json.loads(json.dumps(encode_request(request, spider))), spider)
    assert (type(back), back.url, back.callback) == (type(request), request.url, request.callback)


def test_a_callback_under_two_names_is_stored_under_one_of_them() -> None:
    class Aliased(_Spider):
        alias = _Spider.parse_page  # Scrapy's search finds this name first

    spider = Aliased()
    request = scrapy.Request("http://a.example/p", callback=spider.parse_page)
    ours, scrapys = _as_dict(request, spider), request.to_dict(spider=spider)
    assert (ours["callback"], scrapys["callback"]) == ("parse_page", "alias")
    assert getattr(spider, ours["callback"]) == getattr(spider, scrapys["callback"])


def test_a_field_outside_the_named_ones_that_is_not_json_is_refused() -> None:
    spider = _Spider()
    with pytest.raises(UnstorableRequest, match="as JSON"):
        encode_request(_Tagged("http://a.example/", tag=object()), spider)
    deep: Any = []
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(UnstorableRequest, match="its meta is not JSON"):
        encode_request(scrapy.Request("http://a.example/", meta={"deep": deep}), spider)


def test_a_request_class_with_its_own_to_dict_is_stored_by_it() -> None:
    class Own(scrapy.Request):
        def to_dict(self, *, spider: Any = None) -> dict[str, Any]:
            return {**super().to_dict(spider=spider), "flags": ["own"]}

    spider = _Spider()
    request = Own("http://a.example/", callback=spider.parse_page)
    assert _as_dict(request, spider)["flags"] == ["own"]


def test_scrapy_download_errors_are_classified_like_the_workers() -> None:
    from scrapy.exceptions import DownloadTimeoutError, IgnoreRequest
    from twisted.internet.error import ConnectionRefusedError

    timeout = classify_failure(DownloadTimeoutError("took too long"))
    assert (timeout.outcome, timeout.reason, timeout.counts_against_domain) == (
        Outcome.RETRY, "timeout", True
    )  # fmt: skip
    refused = classify_failure(ConnectionRefusedError())
    assert (refused.reason, refused.counts_against_domain) == ("connection_error", True)
    assert classify_failure(IgnoreRequest()).outcome is Outcome.FAIL


def test_scheduler_is_a_scrapy_scheduler() -> None:
    from scrapy.core.scheduler import BaseScheduler

    assert issubclass(Scheduler, BaseScheduler)


# --- real crawls ---------------------------------------------------------------------------


def _shop(delay: float = 0.0) -> Callable[[web.Request], Any]:
    """Pages /p/0 .. /p/{PAGES-1}, each linking to the next three (every page reachable)."""

    async def page(request: web.Request) -> web.StreamResponse:
        if delay:
            await asyncio.sleep(delay)
        n = int(request.path.rsplit("/", 1)[1])
        links = "".join(f'<a href="/p/{(n + i) % PAGES}">x</a>' for i in (1, 2, 3))
        return web.Response(text=f"<title>p{n}</title>{links}", content_type="text/html")

    return page


def _env(redis_url: str, queue: str) -> dict[str, str]:
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2] / "src")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    env.update(SCRAPEQ_REDIS_URL=redis_url, SCRAPEQ_QUEUE=queue, SCRAPEQ_ALLOW_PRIVATE="1")
    return env


async def _crawl(
    redis_url: str, queue: str, start: list[str], out: Path, *settings: str
) -> asyncio.subprocess.Process:
    args = [sys.executable, "-m", "scrapy", "crawl", "shop", "-a", "start=" + ",".join(start)]
    args += ["-O", str(out), "-s", "LOG_LEVEL=INFO"]
    for s in settings:
        args += ["-s", s]
    return await asyncio.create_subprocess_exec(
        *args,
        cwd=PROJECT,
        env=_env(redis_url, queue),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )


def _scrapeq(**settings: Any) -> str:
    return "SCRAPEQ_SETTINGS=" + json.dumps({"allow_private": True, **settings})


def _items(path: Path) -> list[dict[str, Any]]:
    return json.loads(path.read_text()) if path.exists() and path.stat().st_size else []


async def test_a_hanging_site_parks_while_the_healthy_pages_finish(
    redis_url: str, tmp_path: Path
) -> None:
    async with sites(_shop(), _hang) as (shop, hang):
        start = [shop.url("/p/0")] + [hang.url(f"/h/{i}") for i in range(20)]
        settings = _scrapeq(
            request_timeout=1.5, breaker_failures=3, breaker_cooldown=60, domain_concurrency=4
        )
        proc = await _crawl(
            redis_url, "hang", start, tmp_path / "items.json", settings, "CLOSESPIDER_TIMEOUT=7"
        )
        output, _ = await communicate(proc, 40)
    log = output.decode(errors="replace")
    assert proc.returncode == 0, log[-3000:]
    urls = {item["url"] for item in _items(tmp_path / "items.json")}
    assert urls == {shop.url(f"/p/{n}") for n in range(PAGES)}, log[-3000:]
    # 4 at once time out; the slots the first two failures free may be refilled before the
    # 3rd failure opens the breaker: then nothing more goes there (20 were waiting).
    assert hang.total <= 6, hang.hits
    q = Queue.from_url(redis_url, "hang")
    try:
        (info,) = q.domains_info([hang.domain])
        assert info["state"] == "open", info
        counts = q.counts()
    finally:
        q.close()
    assert counts["done"] == PAGES and counts["dead"] == 0
    assert counts["ready"] + counts["delayed"] == 20  # parked, none lost
    assert "'scrapeq/start_requests_skipped'" not in log  # this process was the starter


async def _wait_for_hits(site: Site, n: int, timeout: float) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while site.total < n:
        assert asyncio.get_running_loop().time() < deadline, "the crawl never fetched"
        await asyncio.sleep(0.05)


async def _wait_for_queue(
    redis_url: str,
    queue: str,
    ready: Callable[[AsyncQueue], Awaitable[object]],
    timeout: float,
    never: str,
) -> None:
    """Until ``ready(queue)`` is true, polled every 50 ms; after ``timeout`` s, fail ``never``."""
    deadline = asyncio.get_running_loop().time() + timeout
    q = AsyncQueue.from_url(redis_url, queue)
    try:
        while not await ready(q):
            assert asyncio.get_running_loop().time() < deadline, never
            await asyncio.sleep(0.05)
    finally:
        await q.close()


async def _wait_for_enqueued(redis_url: str, queue: str, n: int, timeout: float) -> None:
    """Until the crawl has scheduled n requests (Scrapy schedules start requests lazily, so
    on a loaded machine some may still be unscheduled when the first fetches arrive)."""

    async def ready(q: AsyncQueue) -> bool:
        return (await q.counts())["enqueued"] >= n

    await _wait_for_queue(redis_url, queue, ready, timeout, "the crawl never scheduled")


async def test_a_killed_crawls_requests_come_back_to_another_process(
    redis_url: str, tmp_path: Path
) -> None:
    async with sites(_shop(delay=0.4)) as (shop,):
        settings = (_scrapeq(lease=2, domain_concurrency=4), "CLOSESPIDER_TIMEOUT=40")
        first = await _crawl(redis_url, "kill", [shop.url("/p/0")], tmp_path / "a.json", *settings)
        await _wait_for_hits(shop, 5, 20)  # it holds leases on requests in flight
        first.send_signal(signal.SIGKILL)
        await first.communicate()
        held = shop.total
        # A second process of the same crawl: the start requests were the first one's.
        second = await _crawl(redis_url, "kill", [shop.url("/p/0")], tmp_path / "b.json", *settings)
        output, _ = await asyncio.wait_for(second.communicate(), 40)
    log = output.decode(errors="replace")
    assert second.returncode == 0, log[-3000:]
    assert "'finish_reason': 'finished'" in log, log[-3000:]
    assert "'scrapeq/start_requests_skipped': 1" in log, log[-3000:]
    q = Queue.from_url(redis_url, "kill")
    try:
        counts = q.counts()
    finally:
        q.close()
    assert (counts["done"], counts["dead"], counts["ready"] + counts["delayed"]) == (PAGES, 0, 0)
    # Every page was fetched; the ones the killed process held, twice.
    assert set(shop.hits) == {f"/p/{n}" for n in range(PAGES)}
    assert held >= 5 and sum(shop.hits.values()) >= PAGES + 1


async def test_a_killed_process_whose_jobs_gave_their_slots_back_leaves_the_counts_right(
    redis_url: str, tmp_path: Path
) -> None:
    """kill -9 while two jobs sit in long callbacks, their domain's slots given back at their
    downloads' end: once their leases expire, the reap puts them back without freeing a slot
    a second time (the domain's counter is 0, the audit finds nothing), and the next process
    crawls them."""
    root = _project(tmp_path)
    async with sites(_page(lambda n: [])) as (site,):
        start = f"start={site.url('/slow/0')},{site.url('/slow/1')}"
        settings = _scrapeq(domain_concurrency=2, lease=2)
        first = await _spawn(
            root, "sleepy", redis_url, "killgb", "-a", start, "-a", "nap=60", "-s", settings,
            env=None,
        )  # fmt: skip
        q = Queue.from_url(
            redis_url, settings=Settings(queue="killgb", domain_concurrency=2, allow_private=True)
        )
        try:
            leases = slots = -1
            for _ in range(200):  # both downloads over, both callbacks napping
                if q.domain_known(site.domain):
                    leases = q.counts()["inflight"]
                    slots = q.domains_info([site.domain])[0]["inflight"]
                    if (leases, slots) == (2, 0):
                        break
                await asyncio.sleep(0.1)
            assert (leases, slots) == (2, 0)
            first.send_signal(signal.SIGKILL)
            await first.communicate()
            # another client's job of the site holds a slot while the dead leases run out
            q.enqueue(site.url("/p/9"))
            (other,) = q.claim(5).jobs
            # their 2 s leases run out: the queue's clock moves on 2.5 s (no sleep)
            q.testing_clock_offset_ms += 2_500
            assert q.reap()[0] == 2
            counts = q.counts()
            assert counts["inflight"] == 1 and counts["ready"] + counts["delayed"] == 2, counts
            assert q.domains_info([site.domain])[0]["inflight"] == 1, "no slot freed twice"
            assert q.audit().problems == []
            assert q.ack(other) == "done"
            assert q.domains_info([site.domain])[0]["inflight"] == 0
        finally:
            q.close()
        code, log, items = await _run(
            root, "sleepy", redis_url, "killgb", "-a", start, "-a", "nap=0", "-s", settings
        )
    assert code == 0 and sorted(i["url"] for i in items) == sorted(
        [site.url("/slow/0"), site.url("/slow/1")]
    ), log[-3000:]


async def test_a_graceful_stop_gives_the_requests_back_without_spending_attempts(
    redis_url: str, tmp_path: Path
) -> None:
    async with sites(_hang) as (hang,):
        start = [hang.url(f"/h/{i}") for i in range(10)]
        settings = _scrapeq(request_timeout=3, domain_concurrency=4)
        proc = await _crawl(redis_url, "stop", start, tmp_path / "items.json", settings)
        await _wait_for_hits(hang, 4, 20)
        await _wait_for_enqueued(redis_url, "stop", 10, 20)
        proc.send_signal(signal.SIGINT)  # once: Scrapy's graceful stop
        output, _ = await communicate(proc, 30)
    log = output.decode(errors="replace")
    assert proc.returncode == 0, log[-3000:]
    assert "'finish_reason': 'shutdown'" in log, log[-3000:]
    q = Queue.from_url(redis_url, settings=Settings(queue="stop", domain_concurrency=20))
    try:
        counts = q.counts()
        jobs = q.claim(20).jobs
    finally:
        q.close()
    # All 10 are ready again at once (a retry would wait its backoff), none charged.
    assert (counts["ready"], counts["delayed"], counts["inflight"]) == (10, 0, 0), counts
    assert [(j.attempts, j.errors) for j in jobs] == [(1, ())] * 10  # 1: this claim


async def test_two_crawl_processes_share_one_frontier(redis_url: str, tmp_path: Path) -> None:
    async with sites(_shop(delay=0.3)) as (shop,):
        settings = (_scrapeq(domain_concurrency=4), "CONCURRENT_REQUESTS=2")
        start = [shop.url("/p/0")]
        procs = [
            await _crawl(redis_url, "shared", start, tmp_path / f"{name}.json", *settings)
            for name in ("a", "b")
        ]
        outputs = await asyncio.wait_for(asyncio.gather(*(p.communicate() for p in procs)), 50)
    logs = [out.decode(errors="replace") for out, _ in outputs]
    assert [p.returncode for p in procs] == [0, 0], logs[0][-2000:] + logs[1][-2000:]
    items = [{i["url"] for i in _items(tmp_path / f"{name}.json")} for name in ("a", "b")]
    assert items[0] | items[1] == {shop.url(f"/p/{n}") for n in range(PAGES)}
    assert items[0] and items[1] and not items[0] & items[1]  # both worked, no page twice
    assert sorted(shop.hits.values()) == [1] * PAGES
    assert sum("'scrapeq/start_requests_skipped': 1" in log for log in logs) == 1


# --- issue 21: refused requests, callback errors, late joiners, settings ---------------------

SPIDERS = '''
import asyncio
import os

import scrapy


class Pages(scrapy.Spider):
    """-a start=URL,...: each page yields an item and follows its links."""

    name = "pages"

    def __init__(self, start="", fail_at="", slow_start="0", start_gate="", **kwargs):
        super().__init__(**kwargs)
        self.pages = [u for u in start.split(",") if u]
        self.fail_at = int(fail_at) if fail_at else None
        self.slow_start = float(slow_start)
        self.start_gate = start_gate  # a file: start() yields nothing before it exists

    async def start(self):
        await asyncio.sleep(self.slow_start)
        for _ in range(1200 if self.start_gate else 0):
            if os.path.exists(self.start_gate):
                break
            await asyncio.sleep(0.05)
        for i, url in enumerate(self.pages):
            if i == self.fail_at:
                raise RuntimeError("the spider's start() broke")
            yield self.request(i, url)

    def request(self, i, url):
        return scrapy.Request(url, callback=self.parse)

    def parse(self, response):
        yield {"url": response.url}
        for href in response.css("a::attr(href)").getall():
            yield response.follow(href, callback=self.parse)


class Sleepy(Pages):
    """Pages whose path has "slow" keep their callback for -a nap=SECONDS, or with -a
    until=N until N other callbacks have ended (nap bounding the wait); each item says when
    its callback ended."""

    name = "sleepy"

    def __init__(self, nap="0", until="0", **kwargs):
        super().__init__(**kwargs)
        self.nap = float(nap)
        self.until = int(until)
        self.others = 0

    async def parse(self, response):
        import time

        if "slow" in response.url:
            end = time.monotonic() + self.nap
            while time.monotonic() < end and not (self.until and self.others >= self.until):
                await asyncio.sleep(0.02)
        else:
            self.others += 1
        yield {"url": response.url, "t": time.time()}


class Unstorable(Pages):
    """The second start request has a lambda callback, the third a meta value not JSON."""

    name = "unstorable"

    def request(self, i, url):
        if i == 1:
            return scrapy.Request(url, callback=lambda response: None)
        if i == 2:
            return scrapy.Request(url, meta={"when": object()}, callback=self.parse)
        return super().request(i, url)
'''


def _project(tmp_path: Path, toml: str | None = None) -> Path:
    """A Scrapy project (the example's settings, the spiders above) in ``tmp_path``."""
    package = tmp_path / "proj"
    (package / "spiders").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "spiders" / "__init__.py").write_text(SPIDERS)
    (package / "settings.py").write_text(
        'from shops.settings import *  # noqa: F403\nSPIDER_MODULES = ["proj.spiders"]\n'
    )
    (tmp_path / "scrapy.cfg").write_text("[settings]\ndefault = proj.settings\n")
    if toml is not None:
        (tmp_path / "scrapeq.toml").write_text(toml)
    return tmp_path


async def _spawn(
    root: Path, spider: str, redis_url: str, queue: str, *args: str, env: dict[str, str] | None
) -> asyncio.subprocess.Process:
    """Start ``scrapy crawl spider args`` in ``root`` (``env`` values "" unset a variable)."""
    environ = _env(redis_url, queue)
    environ["PYTHONPATH"] = os.pathsep.join([environ["PYTHONPATH"], str(PROJECT), str(root)])
    environ.update(env or {})
    for name, value in list(environ.items()):
        if value == "":
            del environ[name]
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "scrapy", "crawl", spider, *args, "-s", "LOG_LEVEL=INFO",
        cwd=root, env=environ, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip


async def _run(
    root: Path,
    spider: str,
    redis_url: str,
    queue: str,
    *args: str,
    env: dict[str, str] | None = None,
    out: str = "items.json",
) -> tuple[int, str, list[dict[str, Any]]]:
    """``scrapy crawl spider args`` in ``root``: (exit status, log, items)."""
    feed = ("-O", str(root / out))
    proc = await _spawn(root, spider, redis_url, queue, *args, *feed, env=env)
    output, _ = await communicate(proc, 60)
    assert proc.returncode is not None
    return proc.returncode, output.decode(errors="replace"), _items(root / out)


def _counts(redis_url: str, queue: str) -> dict[str, int]:
    q = Queue.from_url(redis_url, queue)
    try:
        return q.counts()
    finally:
        q.close()


def _page(links: Callable[[int], list[str]], delay: float = 0.0) -> Callable[[web.Request], Any]:
    async def page(request: web.Request) -> web.StreamResponse:
        if delay:
            await asyncio.sleep(delay)
        n = int(request.path.rsplit("/", 1)[1])
        body = "".join(f'<a href="{href}">x</a>' for href in links(n))
        return web.Response(text=f"<title>p{n}</title>{body}", content_type="text/html")

    return page


async def test_an_unstorable_start_request_is_refused_and_the_others_are_crawled(
    redis_url: str, tmp_path: Path
) -> None:
    root = _project(tmp_path)
    async with sites(_page(lambda n: [])) as (site,):
        start = ",".join(site.url(f"/p/{n}") for n in range(8))
        code, log, items = await _run(root, "unstorable", redis_url, "unst", "-a", f"start={start}")
        assert code == 0, log[-3000:]
        good = {site.url(f"/p/{n}") for n in range(8) if n not in (1, 2)}
        assert {i["url"] for i in items} == good, log[-3000:]
        assert "Traceback" not in log, log[-3000:]
        refused = [line for line in log.splitlines() if "refused" in line and "ERROR" in line]
        assert len(refused) == 2 and "lambda" in refused[0] and "meta" in refused[1], refused
        assert "'scrapeq/refused': 2" in log, log[-3000:]
        # A re-run of the finished crawl fetches nothing again and says why.
        code, log, items = await _run(
            root, "unstorable", redis_url, "unst", "-a", f"start={start}", out="again.json"
        )
    assert code == 0 and items == [], log[-3000:]
    assert "nothing is left to crawl (-s SCRAPEQ_NEW_CRAWL=1 starts a new crawl)" in log, log[-999:]
    assert site.total == 6 and max(site.hits.values()) == 1


async def test_scrapeq_new_crawl_runs_a_finished_crawl_again(
    redis_url: str, tmp_path: Path
) -> None:
    """Issue 24: ``-s SCRAPEQ_NEW_CRAWL=1`` forgets the queue's seen-set and start flag, so a
    finished crawl runs again; another queue's seen-set is untouched."""
    root = _project(tmp_path)
    async with sites(_page(lambda n: [f"/p/{n + 1}"] if n < 3 else [])) as (site,):
        start = "start=" + site.url("/p/0")
        for queue in ("again", "bystander"):
            code, log, items = await _run(root, "pages", redis_url, queue, "-a", start)
            assert code == 0 and len(items) == 4, log[-3000:]
        code, log, items = await _run(root, "pages", redis_url, "again", "-a", start,
                                      "-s", "SCRAPEQ_NEW_CRAWL=1", out="new.json")  # fmt: skip
        assert code == 0, log[-3000:]
        assert "new crawl (SCRAPEQ_NEW_CRAWL)" in log, log[-3000:]
        assert len(items) == 4, log[-3000:]
        code, log, items = await _run(root, "pages", redis_url, "bystander", "-a", start,
                                      out="by.json")  # fmt: skip
    assert code == 0 and items == [] and "nothing is left to crawl" in log, log[-3000:]
    assert sorted(site.hits.values()) == [3] * 4  # again: twice; bystander: once


async def test_a_start_cut_short_is_taken_again_by_the_next_run(
    redis_url: str, tmp_path: Path
) -> None:
    root = _project(tmp_path)
    async with sites(_page(lambda n: [])) as (site,):
        start = "start=" + ",".join(site.url(f"/p/{n}") for n in range(8))
        code, log, items = await _run(
            root, "pages", redis_url, "cut", "-a", start, "-a", "fail_at=3"
        )
        assert code == 0 and len(items) == 3, log[-3000:]
        code, log, items = await _run(root, "pages", redis_url, "cut", "-a", start, out="b.json")
    assert code == 0, log[-3000:]
    assert {i["url"] for i in items} == {site.url(f"/p/{n}") for n in range(3, 8)}, log[-3000:]
    assert sorted(site.hits.values()) == [1] * 8  # the seen-set dropped the first three


async def test_a_callback_error_is_logged_once_and_the_page_is_done(
    redis_url: str, tmp_path: Path
) -> None:
    root = _project(tmp_path)
    # response.follow("mailto:...") raises in the callback, after the item and the next link.
    links = lambda n: [f"/p/{n + 1}"] * (n < 5) + ["mailto:shop@example.com"]  # noqa: E731
    settings = _scrapeq(backoff_base=0.1, backoff_cap=0.2)
    async with sites(_page(links)) as (site,):
        code, log, items = await _run(
            root, "pages", redis_url, "cb", "-a", f"start={site.url('/p/0')}", "-s", settings
        )
    assert code == 0, log[-3000:]
    assert sorted(i["url"] for i in items) == sorted(site.url(f"/p/{n}") for n in range(6)), log
    assert sorted(site.hits.values()) == [1] * 6, site.hits
    assert log.count("Spider error processing") == 6, log[-3000:]  # Scrapy's line, once a page
    assert "'scrapeq/callback_errors': 6" in log, log[-3000:]
    counts = _counts(redis_url, "cb")
    assert (counts["done"], counts["dead"], counts["ready"] + counts["delayed"]) == (6, 0, 0)


async def test_callback_errors_are_retried_when_the_project_asks(
    redis_url: str, tmp_path: Path
) -> None:
    root = _project(tmp_path)
    links = lambda n: [f"/p/{n + 1}"] * (n < 5) + ["mailto:x@example.com"] * (n == 3)  # noqa: E731
    settings = _scrapeq(backoff_base=0.1, backoff_cap=0.2, max_attempts=2)
    async with sites(_page(links)) as (site,):
        code, log, _ = await _run(
            root, "pages", redis_url, "cbr", "-a", f"start={site.url('/p/0')}", "-s", settings,
            "-s", "SCRAPEQ_RETRY_CALLBACK_ERRORS=True",
        )  # fmt: skip
    assert code == 0, log[-3000:]
    assert site.hits["/p/3"] == 2 and site.total == 7, site.hits
    counts = _counts(redis_url, "cbr")
    assert (counts["done"], counts["dead"]) == (5, 1)


async def _wait_for_flag(redis_url: str, queue: str, name: str, timeout: float) -> None:
    """Until a process of the crawl holds the queue's flag ``name`` (it has opened)."""

    async def ready(q: AsyncQueue) -> object:
        return await q.client.exists(f"{q.keys.prefix}once:{name}")

    await _wait_for_queue(redis_url, queue, ready, timeout, "the crawl never opened")


async def test_a_crawl_started_at_the_same_moment_takes_its_share(
    redis_url: str, tmp_path: Path
) -> None:
    root = _project(tmp_path)
    async with sites(_page(lambda n: [], delay=0.3)) as (site,):
        start = "start=" + ",".join(site.url(f"/p/{n}") for n in range(16))
        args = ("-a", start, "-s", "CONCURRENT_REQUESTS=2")
        # its start() reads a sitemap first, say: until the second process waits for it
        gate = tmp_path / "gate"
        slow = ("-a", f"start_gate={gate}")
        first = asyncio.create_task(
            _run(root, "pages", redis_url, "join", *args, *slow, out="a.json")
        )
        await _wait_for_flag(redis_url, "join", "scrapy-start", 30)
        feed = ("-O", str(root / "b.json"))
        second = await _spawn(root, "pages", redis_url, "join", *args, *feed, env=None)
        head = await _read_until(second, "start requests are being taken by", 60)
        gate.touch()
        rest, _ = await communicate(second, 60)
        code_b, log_b = second.returncode, head + rest.decode(errors="replace")
        items_b = _items(root / "b.json")
        code_a, log_a, items_a = await first
    assert (code_a, code_b) == (0, 0), log_a[-2000:] + log_b[-2000:]
    assert "start requests are being taken by" in log_b, log_b[-3000:]
    assert items_a and items_b, log_b[-3000:]  # the late joiner waited and took its share
    assert len(items_a) + len(items_b) == 16 and sorted(site.hits.values()) == [1] * 16


async def _read_until(proc: asyncio.subprocess.Process, text: str, timeout: float) -> str:
    """The process's output up to the first line that holds ``text``."""
    assert proc.stdout is not None
    seen: list[str] = []
    while not seen or text not in seen[-1]:
        line = await asyncio.wait_for(proc.stdout.readline(), timeout)
        assert line, "".join(seen)[-3000:]
        seen.append(line.decode(errors="replace"))
    return "".join(seen)


async def test_start_requests_left_by_a_killed_process_are_taken_by_the_next(
    redis_url: str, tmp_path: Path
) -> None:
    root = _project(tmp_path)
    async with sites(_page(lambda n: [])) as (site,):
        args = ("-a", "start=" + ",".join(site.url(f"/p/{n}") for n in range(8)))
        args += ("-s", _scrapeq(lease=3))
        slow = ("-a", "slow_start=60", "-O", str(tmp_path / "a.json"))
        first = await _spawn(root, "pages", redis_url, "left", *args, *slow, env=None)
        second: asyncio.subprocess.Process | None = None
        try:
            await _wait_for_flag(redis_url, "left", "scrapy-start", 30)
            feed = ("-O", str(tmp_path / "b.json"))
            second = await _spawn(root, "pages", redis_url, "left", *args, *feed, env=None)
            head = await _read_until(second, "start requests are being taken by", 30)
            first.kill()  # while its start() is still being read, and the second waits
            await first.communicate()
            tail, _ = await asyncio.wait_for(second.communicate(), 30)
        finally:
            for proc in (first, second):
                if proc is not None and proc.returncode is None:
                    proc.kill()
                    await proc.wait()
    log = head + tail.decode(errors="replace")
    assert second is not None and second.returncode == 0, log[-3000:]
    assert "the start requests were left unfinished; this process takes them" in log, log[-3000:]
    assert len(_items(tmp_path / "b.json")) == 8 and sorted(site.hits.values()) == [1] * 8


async def test_scrapeq_settings_come_from_the_environment_and_scrapeq_toml(
    redis_url: str, tmp_path: Path
) -> None:
    root = _project(tmp_path, toml='queue = "from-toml"\nmax_attempts = 3\n')
    env = {"SCRAPEQ_ALLOW_PRIVATE": "true", "SCRAPEQ_QUEUE": ""}  # "": unset
    async with sites(_page(lambda n: [f"/p/{n + 1}"] * (n < 3))) as (site,):
        start = f"start={site.url('/p/0')}"
        code, log, items = await _run(root, "pages", redis_url, "-", "-a", start, env=env)
    assert code == 0 and len(items) == 4, log[-3000:]
    assert _counts(redis_url, "from-toml")["done"] == 4  # the file's queue, not the spider's


async def test_a_crawl_whose_every_request_is_refused_says_so(
    redis_url: str, tmp_path: Path
) -> None:
    root = _project(tmp_path)
    async with sites(_page(lambda n: [])) as (site,):
        start = ",".join(site.url(f"/p/{n}") for n in range(3))
        _, log, items = await _run(
            root, "pages", redis_url, "refq", "-a", f"start={start}",
            env={"SCRAPEQ_ALLOW_PRIVATE": ""},
        )  # fmt: skip
        assert items == [] and site.total == 0
        assert "every request of this crawl was refused" in log, log[-3000:]
        assert "'finish_reason': 'scrapeq_all_refused'" in log, log[-3000:]
        # The exit status stays Scrapy's (0): `scrapy crawl` lets no component set it.
        # The mistake mended, the next run takes the start requests (it used to find them
        # taken, "nothing is left to crawl", until SCRAPEQ_NEW_CRAWL=1).
        code, log, items = await _run(root, "pages", redis_url, "refq", "-a", f"start={start}")
    assert code == 0 and len(items) == 3 and site.total == 3, log[-3000:]


def test_a_burst_enqueued_in_one_turn_costs_one_enqueue_call(redis_url: str) -> None:
    """40 requests scheduled in one reactor turn (a spider's burst of critical re-crawls) are
    written in one enqueue call, not 40 round trips before the first can be claimed."""

    settings = {"SCRAPEQ_REDIS_URL": redis_url, "SCRAPEQ_QUEUE": "burst",
                "SCRAPEQ_SETTINGS": {"allow_private": True},
                "DUPEFILTER_CLASS": "scrapeq.contrib.scrapy.DupeFilter"}  # fmt: skip
    crawler, _spider, scheduler = _opened(settings)
    frontier = scheduler.frontier
    assert frontier is not None
    calls: list[int] = []
    enqueue_many = frontier.queue.enqueue_many

    def counted(specs: list[Any], **options: Any) -> Any:
        calls.append(len(specs))
        return enqueue_many(specs, **options)

    frontier.queue.enqueue_many = counted  # type: ignore[method-assign]
    dropped: list[str] = []
    crawler.signals.connect(lambda request, spider: dropped.append(request.url),
                            signal=scrapy.signals.request_dropped, weak=False)  # fmt: skip
    try:
        urls = [f"http://127.0.0.1:9/c/{n}" for n in range(40)]
        meta = {"scrapeq_lane": "critical"}
        requests = [scrapy.Request(u, meta=meta, priority=100) for u in urls + urls[:2]]
        scheduled = [scheduler.enqueue_request(r) for r in requests]
        assert scheduler.has_pending_requests()
        first = scheduler.next_request()
        assert calls == [42]  # one call for the burst, written before the first claim
        assert first is not None and first.url in urls
        assert all(scheduled)  # Scrapy's answer before the seen-set's:
        assert dropped == urls[:2]  # the repeats, dropped once the seen-set answered
        assert crawler.stats.get_value("dupefilter/filtered") == 2
    finally:
        scheduler.close("finished")


def test_scrapy_settles_with_the_workers_own_mapping() -> None:
    """Classification to settlement has one home, shared by the worker and contrib/scrapy."""
    from scrapeq.contrib import scrapy as contrib_scrapy
    from scrapeq.runtime import outcomes

    assert contrib_scrapy.settlement_for is outcomes.settlement_for


# --- issue 26: Scrapy on scrapeq as fast as plain Scrapy --------------------------------------


async def test_start_requests_are_written_in_batches_not_one_call_each(
    redis_url: str, tmp_path: Path
) -> None:
    """Scrapy reads one start request a reactor turn while its downloader has room: each
    used to cost an enqueue call (and a claim). The middleware now schedules them itself and
    they are written in batches of up to 500 (the stat scrapeq/enqueue_calls)."""
    root = _project(tmp_path)
    n = 1200
    async with sites(_page(lambda n: [])) as (site,):
        start = ",".join(site.url(f"/p/{i}") for i in range(n))
        code, log, items = await _run(
            root, "pages", redis_url, "batched", "-a", f"start={start}",
            "-s", _scrapeq(domain_concurrency=8),
        )  # fmt: skip
    assert code == 0, log[-3000:]
    assert len(items) == n and sorted(site.hits.values()) == [1] * n, log[-3000:]
    calls = _stat(log, "scrapeq/enqueue_calls")
    assert 3 <= calls <= n // 4, log[-3000:]  # 500 at most a call; one by one: ~n


def _stat(log: str, name: str) -> int:
    marker = f"'{name}': "
    assert marker in log, log[-3000:]
    return int(log.split(marker, 1)[1].split(",", 1)[0].split("}", 1)[0])


async def test_settlements_carry_the_downloads_latency_to_the_adaptive_limit(
    redis_url: str, tmp_path: Path
) -> None:
    """domain_concurrency = auto learns from each settlement's latency, as under the worker:
    without it the domain's limit never left its start (2)."""
    root = _project(tmp_path)
    async with sites(_page(lambda n: [], delay=0.05)) as (site,):
        start = ",".join(site.url(f"/p/{i}") for i in range(60))
        code, log, items = await _run(
            root, "pages", redis_url, "latency", "-a", f"start={start}",
            "-s", _scrapeq(domain_concurrency="auto"),
        )  # fmt: skip
    assert code == 0 and len(items) == 60, log[-3000:]
    q = Queue.from_url(redis_url, "latency")
    try:
        (info,) = q.domains_info([site.domain])
    finally:
        q.close()
    assert info["adaptive"] is True, info
    assert 40 <= info["latency_ms"] <= 1000 and info["baseline_ms"] >= 40, info
    assert info["limit"] > 2, info  # ramped from its start


async def test_a_job_in_its_callback_holds_no_claim_slot(redis_url: str, tmp_path: Path) -> None:
    """With CONCURRENT_REQUESTS = 2 and two pages whose callbacks wait for the ten others (up
    to 30 s: a held slot would keep them waiting that long), the other pages are downloaded
    (and their callbacks done) meanwhile: a downloaded job frees its slot; it
    is settled once its callback is done (nothing pending at the end)."""
    root = _project(tmp_path)
    async with sites(_page(lambda n: [])) as (site,):
        urls = [site.url("/slow/0"), site.url("/slow/1")] + [site.url(f"/p/{i}") for i in range(10)]
        code, log, items = await _run(
            root, "sleepy", redis_url, "slots", "-a", f"start={','.join(urls)}", "-a", "nap=30",
            "-a", "until=10",
            "-s", "CONCURRENT_REQUESTS=2", "-s", _scrapeq(domain_concurrency=8),
        )  # fmt: skip
    assert code == 0 and len(items) == 12, log[-3000:]
    ended = {item["url"]: item["t"] for item in items}
    slow_done = min(ended[u] for u in urls[:2])
    assert all(ended[u] < slow_done for u in urls[2:]), (ended, log[-3000:])
    counts = _counts(redis_url, "slots")
    assert (counts["done"], counts["inflight"], counts["ready"]) == (12, 0, 0), counts


async def test_a_job_in_its_callback_holds_no_domain_slot(redis_url: str, tmp_path: Path) -> None:
    """With domain_concurrency = 2 and two pages whose callbacks wait for the ten others (up
    to 30 s: a held slot would keep them waiting that long), the site's other pages are
    downloaded (and their callbacks done) meanwhile: a downloaded job gives its
    domain's slot back in the queue, while the site never sees more than 2 requests at once;
    each job is settled once its callback is done (nothing pending, no slot taken at the
    end)."""
    root = _project(tmp_path)
    at_once = {"now": 0, "most": 0}

    async def page(request: web.Request) -> web.StreamResponse:
        at_once["now"] += 1
        at_once["most"] = max(at_once["most"], at_once["now"])
        try:
            await asyncio.sleep(0.05)
        finally:
            at_once["now"] -= 1
        return web.Response(text="<title>p</title>", content_type="text/html")

    async with sites(page) as (site,):
        urls = [site.url("/slow/0"), site.url("/slow/1")] + [site.url(f"/p/{i}") for i in range(10)]
        code, log, items = await _run(
            root, "sleepy", redis_url, "dslots", "-a", f"start={','.join(urls)}", "-a", "nap=30",
            "-a", "until=10",
            "-s", _scrapeq(domain_concurrency=2),
        )  # fmt: skip
    assert code == 0 and len(items) == 12, log[-3000:]
    ended = {item["url"]: item["t"] for item in items}
    slow_done = min(ended[u] for u in urls[:2])
    assert all(ended[u] < slow_done for u in urls[2:]), (ended, log[-3000:])
    assert at_once["most"] <= 2, at_once
    assert _stat(log, "scrapeq/slots_given_back") >= 2, log[-3000:]
    counts = _counts(redis_url, "dslots")
    assert (counts["done"], counts["inflight"], counts["ready"]) == (12, 0, 0), counts
    q = Queue.from_url(redis_url, "dslots")
    try:
        (info,) = q.domains_info([site.domain])
        assert info["inflight"] == 0, info
        assert q.audit().problems == []
    finally:
        q.close()


def test_work_of_other_lanes_leaves_the_urgent_slots_to_critical_work(redis_url: str) -> None:
    """With CONCURRENT_REQUESTS = 8 and SCRAPEQ_URGENT_SLOTS = 3, a busy crawl holds 5 normal
    jobs at most; critical work scheduled meanwhile is claimed into the 3 kept slots at once
    (an urgent-only claim: no normal job is taken into them), not after normal pages end."""

    settings = {"SCRAPEQ_REDIS_URL": redis_url, "SCRAPEQ_QUEUE": "reserve",
                "SCRAPEQ_SETTINGS": {"allow_private": True, "domain_concurrency": 10},
                "CONCURRENT_REQUESTS": 8, "SCRAPEQ_URGENT_SLOTS": 3}  # fmt: skip
    crawler, _spider, scheduler = _opened(settings)
    try:
        for n in range(20):
            scheduler.enqueue_request(scrapy.Request(f"http://127.0.0.{1 + n % 4}:9/n/{n}"))
        normal = _drain(scheduler)
        assert len(normal) == 5 and all("/n/" in r.url for r in normal), normal
        critical = [f"http://127.0.0.9:9/c/{n}" for n in range(4)]
        for url in critical:
            scheduler.enqueue_request(scrapy.Request(url, meta={"scrapeq_lane": "critical"}))
        urgent = _drain(scheduler)
        assert [r.url for r in urgent] == critical[:3]  # the kept slots, and no more
        assert crawler.stats.get_value("scrapeq/claimed_urgent_only") == 3
    finally:
        scheduler.close("finished")


def test_a_download_that_charges_its_site_keeps_the_domain_slot(redis_url: str) -> None:
    """With domain_concurrency = 1: a page answered OK gives its domain's slot back when its
    download ends (the domain's next request is handed out during its callback); a page
    answered slowly (slower than slow_call: charged to the domain) or with a 503 the spider
    handles keeps it until its settle, so the breaker and the adaptive limit hear of it before
    the site gets another request."""
    from scrapy.http import HtmlResponse

    from scrapeq.contrib.scrapy import ReportMiddleware
    from scrapeq.contrib.scrapy._frontier import JOB, STARTED, Frontier

    settings = {"SCRAPEQ_REDIS_URL": redis_url, "SCRAPEQ_QUEUE": "giveback",
                "SCHEDULER": "scrapeq.contrib.scrapy.Scheduler",
                "SCRAPEQ_SETTINGS": {"allow_private": True, "domain_concurrency": 1,
                                     "slow_call": 5}}  # fmt: skip
    crawler, _spider, scheduler = _opened(settings)
    middleware = ReportMiddleware(crawler)
    frontier = Frontier.of(crawler)
    assert frontier is not None
    site = "127.0.0.7:9"

    def taken() -> int:  # the domain's slots taken, as the queue counts them
        return int(frontier.queue.domains_info([site])[0]["inflight"])

    def answer(request: Any, status: int, seconds: float) -> None:
        request.meta[STARTED] = time.monotonic() - seconds
        response = HtmlResponse(request.url, status=status, body=b"<p>", request=request)
        middleware.process_response(request, response)
        frontier.flush_given_back()

    def settle(request: Any) -> None:  # its callback is over
        frontier.settle(request.meta[JOB], frontier.queue.done(request.meta[JOB]))
        frontier.flush_settles()

    try:
        for n in range(4):
            meta = {"handle_httpstatus_all": True}
            scheduler.enqueue_request(scrapy.Request(f"http://{site}/p/{n}", meta=meta))
        (slow,) = _drain(scheduler)
        answer(slow, 200, 6.0)
        assert taken() == 1, "a slow answer keeps its slot until its settle"
        settle(slow)
        (refused,) = _drain(scheduler)
        answer(refused, 503, 0.01)
        assert taken() == 1, "a 503 the spider handles keeps its slot until its settle"
        settle(refused)
        (fine,) = _drain(scheduler)
        answer(fine, 200, 0.01)
        assert taken() == 0, "an OK answer gives its slot back at once"
        (last,) = _drain(scheduler)  # during the OK page's callback
        assert last.url.endswith("/p/3") and taken() == 1
        assert crawler.stats.get_value("scrapeq/slots_given_back") == 1
        settle(fine)
        settle(last)
        assert taken() == 0
    finally:
        scheduler.close("finished")


def test_a_slow_answer_under_an_adaptive_domain_keeps_its_slot_until_its_settle(
    redis_url: str,
) -> None:
    """Issue 39: with domain_concurrency = auto, a page answered far slower than the domain's
    baseline (yet under slow_call: no breaker failure) would cut its adaptive limit: it keeps
    its domain's slot until its settle, which cuts the limit before the site gets another
    request. Whether a download charges its domain is the script's to say (Queue.downloaded
    with the download's sample: lua/downloaded-1.lua), not a Python guess that knew only
    slow_call."""
    from scrapy.http import HtmlResponse

    from scrapeq.contrib.scrapy import ReportMiddleware
    from scrapeq.contrib.scrapy._frontier import JOB, STARTED, Frontier

    settings = {"SCRAPEQ_REDIS_URL": redis_url, "SCRAPEQ_QUEUE": "giveback_auto",
                "SCHEDULER": "scrapeq.contrib.scrapy.Scheduler",
                "SCRAPEQ_SETTINGS": {"allow_private": True, "domain_concurrency": "auto",
                                     "slow_call": 30}}  # fmt: skip
    crawler, _spider, scheduler = _opened(settings)
    middleware = ReportMiddleware(crawler)
    frontier = Frontier.of(crawler)
    assert frontier is not None
    site = "127.0.0.7:9"

    def info() -> dict[str, Any]:
        (row,) = frontier.queue.domains_info([site])
        return row

    def answer(request: Any, seconds: float) -> None:
        request.meta[STARTED] = time.monotonic() - seconds
        response = HtmlResponse(request.url, status=200, body=b"<p>", request=request)
        middleware.process_response(request, response)
        frontier.flush_given_back()

    def settle(request: Any) -> None:  # its callback is over
        settlement = frontier.timed(frontier.queue.done(request.meta[JOB]), request.meta)
        frontier.settle(request.meta[JOB], settlement)
        frontier.flush_settles()

    try:
        for n in range(4):
            scheduler.enqueue_request(scrapy.Request(f"http://{site}/p/{n}"))
        fast, slow = _drain(scheduler)  # an adaptive domain starts at 2 in flight
        answer(fast, 0.01)
        assert info()["inflight"] == 1, "a fast answer gives its slot back at once"
        settle(fast)
        assert info()["adaptive"] is True and info()["baseline_ms"] <= 100, info()
        limit = info()["limit"]
        answer(slow, 1.0)
        assert info()["inflight"] == 1, "a slow answer keeps its slot until its settle"
        assert info()["limit"] == limit, "asked, not recorded: the settle records it"
        settle(slow)
        assert info()["inflight"] == 0
        assert info()["limit"] < limit, "its settle cut the limit"
        assert crawler.stats.get_value("scrapeq/slots_given_back") == 1
    finally:
        scheduler.close("finished")


def test_a_304_goes_on_only_when_its_request_was_conditional(redis_url: str) -> None:
    """Issue 38, item 13: a 304 to a request without If-None-Match / If-Modified-Since is no
    page: settled dead (``http_304``), the spider never sees it. One to a conditional request
    (Scrapy's HTTP cache revalidating sets the headers) goes on, as before."""
    from scrapy.exceptions import IgnoreRequest
    from scrapy.http import Response as ScrapyResponse
    from scrapy.utils.test import get_crawler

    from scrapeq.contrib.scrapy import ReportMiddleware
    from scrapeq.contrib.scrapy._frontier import Frontier

    settings = {"SCRAPEQ_REDIS_URL": redis_url, "SCRAPEQ_QUEUE": "unasked304",
                "SCHEDULER": "scrapeq.contrib.scrapy.Scheduler",
                # what the add-on installs: a scheduler without it refuses at open
                "DOWNLOADER_MIDDLEWARES": {"scrapeq.contrib.scrapy.ReportMiddleware": 950,
                    "scrapy.downloadermiddlewares.retry.RetryMiddleware": None},
                "SPIDER_MIDDLEWARES": {"scrapeq.contrib.scrapy.ReportMiddleware": 10},
                "SCRAPEQ_SETTINGS": {"allow_private": True}}  # fmt: skip
    crawler = get_crawler(_Spider, settings)
    spider = _Spider.from_crawler(crawler)
    crawler.spider = spider
    crawler.engine = crawler._create_engine()  # a real one, not running: the crawl goes on
    scheduler = Scheduler.from_crawler(crawler)
    scheduler.open(spider)
    middleware = ReportMiddleware(crawler)
    frontier = Frontier.of(crawler)
    assert frontier is not None
    site = "127.0.0.8:9"
    try:
        scheduler.enqueue_request(scrapy.Request(f"http://{site}/plain"))
        scheduler.enqueue_request(scrapy.Request(f"http://{site}/asked"))
        by = {r.url.rsplit("/", 1)[1]: r for r in _drain(scheduler)}
        by["asked"].headers["If-None-Match"] = '"v1"'  # as HttpCacheMiddleware does
        for name, request in by.items():
            response = ScrapyResponse(request.url, status=304, request=request)
            if name == "asked":
                assert middleware.process_response(request, response) is response
            else:
                with pytest.raises(IgnoreRequest, match="http_304"):
                    middleware.process_response(request, response)
        frontier.flush_settles()
        (dead,) = frontier.queue.dead_letters()
        assert dead.url == f"http://{site}/plain" and dead.dead_reason == "http_304"
    finally:
        scheduler.close("finished")


def test_with_one_lane_no_urgent_only_claim_is_made(redis_url: str) -> None:
    """Urgency is what the enqueue script says (issue 39), not ``lane == names[0]``: with one
    lane nothing is urgent, so scheduling work makes no urgent-only claim (before, every
    enqueue was taken for urgent work and made an empty one)."""

    settings = {"SCRAPEQ_REDIS_URL": redis_url, "SCRAPEQ_QUEUE": "onelane",
                "SCRAPEQ_SETTINGS": {"allow_private": True, "lanes": {"normal": 0}},
                "CONCURRENT_REQUESTS": 8, "SCRAPEQ_URGENT_SLOTS": 3}  # fmt: skip
    crawler, _spider, scheduler = _opened(settings)
    queue = scheduler.frontier.queue
    claim, urgent_claims = queue.claim, []

    def recorded(n: int, **kw: Any) -> Any:  # the real claim, its urgent-only calls counted
        if kw.get("urgent_only"):
            urgent_claims.append(n)
        return claim(n, **kw)

    queue.claim = recorded
    try:
        for n in range(3):
            scheduler.enqueue_request(scrapy.Request(f"http://127.0.0.{1 + n}:9/o/{n}"))
        assert len(_drain(scheduler)) == 3
        assert urgent_claims == []
        assert crawler.stats.get_value("scrapeq/claimed_urgent_only") is None
    finally:
        scheduler.close("finished")


def _opened(settings: dict[str, Any]) -> tuple[Any, _Spider, Scheduler]:
    """A crawler of ``_Spider`` with ``settings``, and its scheduler opened (not running)."""
    from scrapy.utils.test import get_crawler

    crawler = get_crawler(_Spider, settings)
    spider = _Spider.from_crawler(crawler)
    crawler.spider = spider
    scheduler = Scheduler.from_crawler(crawler)
    scheduler.open(spider)
    return crawler, spider, scheduler


def _drain(scheduler: Any) -> list[Any]:
    """The requests the scheduler hands out now (as Scrapy's engine asks while it has room)."""
    out = []
    while (request := scheduler.next_request()) is not None:
        out.append(request)
    return out


async def test_urgent_work_enqueued_by_another_client_wakes_the_crawl(redis_url: str) -> None:
    """The listener thread blocks on the queue's wake stream: a critical job enqueued by
    another client (`scrapeq enqueue --lane critical`, an API) calls it back at once; work of
    other lanes does not."""
    import threading

    from scrapeq.contrib.scrapy._urgent import UrgentListener

    settings = Settings(redis_url=redis_url, queue="woken", allow_private=True)
    called = threading.Event()
    listener = UrgentListener(redis_url, settings, called.set)
    listener.start()
    q = AsyncQueue.from_url(redis_url, settings=settings)
    try:

        async def reading() -> bool:  # its first read is outstanding: a client blocked in XREAD
            clients = await q.client.client_list()
            return any(c.get("cmd") == "xread" and "b" in c.get("flags", "") for c in clients)

        await until(reading, 10, "the listener's blocking read")
        await q.enqueue("http://127.0.0.1:9/normal")
        await asyncio.to_thread(called.wait, 1.5)
        assert not called.is_set()
        await q.enqueue("http://127.0.0.1:9/alert", lane="critical")
        assert await asyncio.to_thread(called.wait, 5.0)
    finally:
        await q.close()
        await asyncio.to_thread(listener.stop)


@pytest.mark.parametrize("tune", [True, False])
def test_a_crawl_tunes_the_garbage_collector_while_it_runs(redis_url: str, tune: bool) -> None:
    """As the worker does (SCRAPEQ_TUNE_GC, default on): once the frontier is open, what was
    alive is frozen and the first threshold is the worker's; at close both are put back."""
    import gc

    from scrapy.utils.test import get_crawler

    from scrapeq.runtime.gc_tuning import GC_THRESHOLD

    settings = {"SCRAPEQ_REDIS_URL": redis_url, "SCRAPEQ_QUEUE": "gc", "SCRAPEQ_TUNE_GC": tune,
                "SCHEDULER": "scrapeq.contrib.scrapy.Scheduler",
                "SCRAPEQ_SETTINGS": {"allow_private": True}}  # fmt: skip
    crawler = get_crawler(_Spider, settings)
    spider = _Spider.from_crawler(crawler)
    crawler.spider = spider
    scheduler = Scheduler.from_crawler(crawler)
    before, frozen = gc.get_threshold(), gc.get_freeze_count()
    assert before[0] < GC_THRESHOLD
    scheduler.open(spider)
    try:
        if tune:
            assert gc.get_threshold()[0] == GC_THRESHOLD
            assert gc.get_freeze_count() > frozen
        else:
            assert (gc.get_threshold(), gc.get_freeze_count()) == (before, frozen)
    finally:
        scheduler.close("finished")
    assert (gc.get_threshold(), gc.get_freeze_count()) == (before, frozen)


def _frontier_with_a_claimed_page(
    redis_url: str, queue_url: str, name: str, scrapeq_settings: dict[str, Any]
) -> tuple[Any, Any, Any, Queue]:
    """A scheduler open on ``queue_url`` that has claimed the one page another client
    enqueued on ``redis_url``: (scheduler, frontier, the page's job, the other client)."""
    from scrapy.utils.test import get_crawler

    from scrapeq.contrib.scrapy._frontier import JOB, Frontier

    settings = {"SCRAPEQ_REDIS_URL": queue_url, "SCRAPEQ_QUEUE": name,
                "SCHEDULER": "scrapeq.contrib.scrapy.Scheduler",
                "SCRAPEQ_SETTINGS": {"allow_private": True, **scrapeq_settings}}  # fmt: skip
    crawler = get_crawler(_Spider, settings)
    spider = _Spider.from_crawler(crawler)
    crawler.spider = spider
    other = Queue.from_url(redis_url, name, settings=Settings(allow_private=True))
    page = scrapy.Request("http://127.0.0.7:9/p/0", callback=spider.parse_page)
    other.enqueue("http://127.0.0.7:9/p/0", payload=encode_request(page, spider))
    scheduler = Scheduler.from_crawler(crawler)
    scheduler.open(spider)
    frontier = Frontier.of(crawler)
    assert frontier is not None
    (claimed,) = _drain(scheduler)
    return scheduler, frontier, claimed.meta[JOB], other


def test_a_page_is_not_settled_while_its_callbacks_requests_are_not_stored(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The settlements of a turn are written after the requests scheduled before them, or
    not at all: while Redis cannot be reached for the enqueue, no settle is even tried (fails
    with the settle tried regardless, as before: a settle that went through there would mark
    the page done with its link never stored), nor at close."""
    from support.tcpproxy import TcpProxy

    proxy = TcpProxy.for_redis_url(redis_url).start()
    scheduler, frontier, job, other = _frontier_with_a_claimed_page(
        redis_url, proxy.url(redis_url), "ordered", {}
    )
    try:
        scheduler.enqueue_request(scrapy.Request("http://127.0.0.7:9/p/1"))  # its link
        frontier.settle(job, frontier.queue.done(job))
        proxy.close()  # Redis unreachable
        frontier.flush_settles()
        assert (len(frontier.batch), len(frontier.settling)) == (1, 1), "both kept"
        assert "scheduling 1 requests failed, trying again" in caplog.text
        assert "settling" not in caplog.text, "no settle tried before its requests are stored"
        assert other.counts()["inflight"] == 1 and other.counts()["done"] == 0
    finally:
        scheduler.close("finished")
        other.close()
    assert "1 settlements not written" in caplog.text


def test_an_enqueue_refused_for_good_refuses_its_requests_and_settles_the_page(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """An enqueue error that trying again would not mend (here the queue's seen-set was built
    by a client with another layout) refuses the requests, an error line each, instead of
    holding them, and the turn's settlements, for ever (fails on the code that held them)."""
    name = "refused"
    layout = Queue.from_url(redis_url, name, settings=Settings(allow_private=True))
    layout.enqueue("http://127.0.0.7:9/later", unique="seen", delay=3600)
    layout.close()
    scheduler, frontier, job, other = _frontier_with_a_claimed_page(
        redis_url, redis_url, name, {"recrawl_after": 3600}
    )
    try:
        scheduler.enqueue_request(scrapy.Request("http://127.0.0.7:9/p/1"))
        frontier.settle(job, frontier.queue.done(job))
        frontier.flush_settles()
        assert (frontier.batch, frontier.settling) == ([], [])
        assert "refused, not scheduled" in caplog.text and "seen-set was built as" in caplog.text
        assert frontier.refused == 1
        assert other.counts()["done"] == 1
    finally:
        scheduler.close("finished")
        other.close()


# --- issue 41: Scrapy in one setting, never a silent stall -----------------------------------

ONE_FILE_SPIDER = '''
import scrapy


class Many(scrapy.Spider):
    """-a start=URL,...: each page yields an item."""

    name = "many"

    def __init__(self, start="", **kwargs):
        super().__init__(**kwargs)
        self.start_urls = [u for u in start.split(",") if u]

    def parse(self, response):
        yield {"url": response.url}
'''

ADDON = 'ADDONS={"scrapeq.contrib.scrapy.Addon": 0}'


async def _runspider(
    tmp_path: Path,
    start: list[str],
    *settings: str,
    timeout: float = 60,
    source: str = ONE_FILE_SPIDER,
) -> tuple[int, str, list[dict[str, Any]]]:
    """``scrapy runspider`` of ``source`` with only ``settings`` (``-s``) and no ``SCRAPEQ_*``
    environment variable, as a new user runs it: (exit status, log, items)."""
    spider = tmp_path / "spider.py"
    spider.write_text(source)
    out = tmp_path / "items.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCRAPEQ_")}
    src = str(Path(__file__).resolve().parents[2] / "src")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    args = [sys.executable, "-m", "scrapy", "runspider", str(spider), "-O", str(out)]
    args += ["-a", "start=" + ",".join(start), "-s", "LOG_LEVEL=INFO"]
    for s in settings:
        args += ["-s", s]
    proc = await asyncio.create_subprocess_exec(
        *args, cwd=tmp_path, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    output, _ = await communicate(proc, timeout)
    assert proc.returncode is not None
    return proc.returncode, output.decode(errors="replace"), _items(out)


def _errors(log: str) -> list[str]:
    return [line for line in log.splitlines() if "] ERROR: " in line]


def _tracebacks(log: str) -> int:
    return sum(1 for line in log.splitlines() if line.startswith("Traceback"))


async def test_the_addon_alone_crawls_every_start_url_in_batched_enqueues(
    redis_url: str, tmp_path: Path
) -> None:
    """One setting (the add-on) and the Redis URL: 200 start URLs over 5 sites are all fetched
    (with the scheduler alone, 20 were claimed and none ever settled: a silent stall), and
    written in a few enqueue calls, not one each."""
    n = 200
    async with sites(*[_page(lambda n: [])] * 5) as shops:
        start = [shops[i % 5].url(f"/p/{i}") for i in range(n)]
        code, log, items = await _runspider(
            tmp_path, start, ADDON, f"SCRAPEQ_REDIS_URL={redis_url}",
            'SCRAPEQ_SETTINGS={"allow_private": true}', "CLOSESPIDER_TIMEOUT=40",
        )  # fmt: skip
    assert code == 0, log[-3000:]
    assert sorted(i["url"] for i in items) == sorted(start), log[-3000:]
    assert sum(s.total for s in shops) == n
    assert _tracebacks(log) == 0 and _errors(log) == [], log[-3000:]
    assert "'finish_reason': 'finished'" in log, log[-3000:]
    assert _stat(log, "scrapeq/enqueue_calls") <= 20, log[-3000:]


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        (["SCHEDULER=scrapeq.contrib.scrapy.Scheduler"],
         ["DOWNLOADER_MIDDLEWARES and SPIDER_MIDDLEWARES"]),
        (["SCHEDULER=scrapeq.contrib.scrapy.Scheduler",
          'DOWNLOADER_MIDDLEWARES={"scrapeq.contrib.scrapy.ReportMiddleware": 950}',
          'SPIDER_MIDDLEWARES={"scrapeq.contrib.scrapy.ReportMiddleware": 10}'],
         ["RetryMiddleware"]),
        ([ADDON, 'SPIDER_MIDDLEWARES={"scrapeq.contrib.scrapy.ReportMiddleware": null}'],
         ["SPIDER_MIDDLEWARES"]),
    ],
    ids=["scheduler-alone", "retry-on", "no-spider-middleware"],
)  # fmt: skip
async def test_a_scheduler_without_what_it_needs_refuses_at_open(
    redis_url: str, tmp_path: Path, settings: list[str], named: list[str]
) -> None:
    """No claim that can never be settled: one ERROR line names what is missing and the
    add-on, and the crawl closes at once with its own finish reason (it used to claim 20
    and fetch them, then nothing until CLOSESPIDER_TIMEOUT)."""
    async with sites(_page(lambda n: [])) as (site,):
        start = [site.url(f"/p/{i}") for i in range(40)]
        code, log, items = await _runspider(
            tmp_path, start, *settings, f"SCRAPEQ_REDIS_URL={redis_url}",
            'SCRAPEQ_SETTINGS={"allow_private": true}', "CLOSESPIDER_TIMEOUT=15",
        )  # fmt: skip
    assert site.total == 0 and items == [], log[-3000:]
    assert code == 0  # Scrapy's: `scrapy runspider` lets no component set it
    (error,) = _errors(log)
    for name in named:
        assert name in error, error
    assert "scrapeq.contrib.scrapy.Addon" in error, error
    assert "'finish_reason': 'scrapeq_incomplete_setup'" in log, log[-3000:]
    assert _tracebacks(log) == 0, log[-3000:]
    assert "scrapeq/claimed" not in log, log[-3000:]


@pytest.mark.parametrize(
    ("settings", "reason", "said"),
    [
        (['SCRAPEQ_SETTINGS={"domain_concurency": 2}'], "scrapeq_config_error",
         ["'domain_concurency'", "did you mean 'domain_concurrency'?"]),
        (["SCRAPEQ_QEUE=x"], "scrapeq_config_error",
         ["'SCRAPEQ_QEUE'", "did you mean SCRAPEQ_QUEUE?"]),
        (['SCRAPEQ_SETTINGS={"domain_concurrency": 2'], "scrapeq_config_error",
         ["SCRAPEQ_SETTINGS"]),
        (["SCRAPEQ_CLAIM_BATCH=many"], "scrapeq_config_error", ["SCRAPEQ_CLAIM_BATCH"]),
        (["SCRAPEQ_REDIS_URL=redis://:hunter2@127.0.0.1:9/0"], "scrapeq_redis_unavailable",
         ["Redis", "127.0.0.1:9"]),
    ],
    ids=["typo-in-settings", "typo-in-name", "bad-json", "not-a-number", "no-redis"],
)  # fmt: skip
async def test_a_mistake_is_one_error_line_and_its_own_finish_reason(
    redis_url: str, tmp_path: Path, settings: list[str], reason: str, said: list[str]
) -> None:
    """As the CLI gives them: one line, no traceback (a typo used to be 67 lines and 4
    tracebacks, an unreachable Redis 185 and 8, a misspelt SCRAPEQ_* setting nothing)."""
    async with sites(_page(lambda n: [])) as (site,):
        start = [site.url(f"/p/{i}") for i in range(5)]
        code, log, items = await _runspider(
            tmp_path, start, ADDON, f"SCRAPEQ_REDIS_URL={redis_url}",
            'SCRAPEQ_SETTINGS={"allow_private": true}', *settings,
        )  # fmt: skip
    assert site.total == 0 and items == [] and code == 0, log[-3000:]
    assert _tracebacks(log) == 0, log[-5000:]
    (error,) = _errors(log)
    for text in said:
        assert text in error, error
    assert "hunter2" not in log
    assert f"'finish_reason': '{reason}'" in log, log[-3000:]


# --- issue 41: scrapy-playwright on scrapeq ----------------------------------------------------

PLAYWRIGHT_SPIDER = '''
import scrapy
from scrapy_playwright.page import PageMethod


class Shop(scrapy.Spider):
    """A shop whose pages JavaScript fills: the list's links, then each product's title
    (late: the spider waits for it with a PageMethod, stored in the job as JSON)."""

    name = "jsshop"
    custom_settings = {
        "DOWNLOAD_HANDLERS": {
            "http": "scrapy_playwright.handler.ScrapyPlaywrightDownloadHandler",
            "https": "scrapy_playwright.handler.ScrapyPlaywrightDownloadHandler",
        },
        "PLAYWRIGHT_LAUNCH_OPTIONS": {
            "executable_path": "/usr/bin/chromium",
            "args": ["--no-sandbox", "--disable-gpu"],
        },
    }

    def __init__(self, start="", **kwargs):
        super().__init__(**kwargs)
        self.start_urls = [start]

    async def start(self):
        for url in self.start_urls:
            yield scrapy.Request(url, meta={"playwright": True})

    def parse(self, response):
        wait = [PageMethod("wait_for_selector", "#title:not(:empty)", timeout=10000)]
        for href in response.css("#list a::attr(href)").getall():
            yield response.follow(
                href, callback=self.parse_product,
                meta={"playwright": True, "playwright_page_methods": wait},
            )

    def parse_product(self, response):
        yield {"url": response.url, "title": response.css("#title::text").get()}
'''

JS_PRODUCTS = 8


_js_shop = list_shop(JS_PRODUCTS, fill_after_ms=300)


async def test_a_javascript_shop_is_crawled_with_scrapy_playwright_and_the_addon(
    redis_url: str, tmp_path: Path
) -> None:
    """scrapy-playwright's download handler (Debian's chromium) under the add-on: the links
    and titles only JavaScript writes are crawled, each page a scrapeq job, the product
    pages' PageMethod stored in their jobs as JSON (it used to be refused: not JSON)."""
    pytest.importorskip("scrapy_playwright")
    need_browser()  # Debian's chromium: skipped on a workstation without it, failed under CI
    async with sites(_js_shop) as (shop,):
        code, log, items = await _runspider(
            tmp_path, [shop.url("/")], ADDON, f"SCRAPEQ_REDIS_URL={redis_url}",
            'SCRAPEQ_SETTINGS={"allow_private": true}', "CLOSESPIDER_TIMEOUT=60",
            source=PLAYWRIGHT_SPIDER, timeout=90,
        )  # fmt: skip
    assert code == 0 and _tracebacks(log) == 0 and _errors(log) == [], log[-3000:]
    got = {item["url"]: item["title"] for item in items}
    assert got == {shop.url(f"/p/{n}"): f"Product {n}" for n in range(JS_PRODUCTS)}, log[-3000:]
    assert _stat(log, "scrapeq/settled/done") == JS_PRODUCTS + 1, log[-3000:]


def test_a_playwright_page_method_is_stored_by_name_and_made_again() -> None:
    page = pytest.importorskip("scrapy_playwright.page")
    spider = _Spider()
    methods = [page.PageMethod("wait_for_selector", "#t", timeout=5000)]
    for given in (methods, {"wait": methods[0]}):
        request = scrapy.Request("http://a.example/", meta={"playwright_page_methods": given})
        stored = json.loads(json.dumps(encode_request(request, spider)))
        back = decode_request(stored, spider).meta["playwright_page_methods"]
        (method,) = back if isinstance(back, list) else back.values()
        assert isinstance(method, page.PageMethod)
        assert (method.method, method.args, method.kwargs) == (
            "wait_for_selector", ("#t",), {"timeout": 5000}
        )  # fmt: skip
    calls = page.PageMethod(lambda p: None)
    request = scrapy.Request("http://a.example/", meta={"playwright_page_methods": [calls]})
    with pytest.raises(UnstorableRequest, match="only a Page method given by its name"):
        encode_request(request, spider)
