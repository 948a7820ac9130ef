"""bench/render.py's failure checks of scrapeq's ``browser`` fetcher (issue 42), each a
``scrapeq worker --burst`` child process on the JS shop, its results lines read after:

* ``hang``: ``/spin`` (a script that never lets the page load) among ``/static/<n>`` pages,
  ``request_timeout`` = ``DEADLINE``, ``max_attempts`` 1: the spinning page ends dead at its
  deadline (its ``elapsed_ms``), every other page done, none of them held as long
  (``neighbours_max_ms`` < the deadline);
* ``kill``: product pages (their price written 700 ms after load, waited for) while this
  process SIGKILLs every chromium process group of the worker's tree, ``kills`` times, a
  third of the way apart: jobs lost (no line), lines repeated (a URL twice), pages dead.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from scrapeq import Queue
from scrapeq.engine.config.settings import Settings
from scrapeq.runtime.browser_pool import tree
from support.sites import Site

#: The hanging page's deadline, seconds.
DEADLINE = 10.0


def _worker(redis_url: str, queue: str, out: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    argv = [
        sys.executable,
        "-m",
        "scrapeq",
        "--redis",
        redis_url,
        "worker",
        "--burst",
        "--concurrency",
        "8",
        "--results",
        str(out),
        "--extract",
        "price=.price::text",
    ]
    environ = {**os.environ, "SCRAPEQ_ALLOW_PRIVATE": "true", "SCRAPEQ_QUEUE": queue,
               "SCRAPEQ_DOMAIN_CONCURRENCY": "8", **env}  # fmt: skip
    return subprocess.Popen(argv, env=environ, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip


def _lines(out: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in out.read_text().splitlines()] if out.exists() else []


def check_hang(site: Site, redis_url: str, tmp: Path, pages: int = 24) -> dict[str, Any]:
    q = Queue.from_url(redis_url, settings=Settings(allow_private=True, queue="render-hang"))
    q.domain_set(site.domain, fetcher="browser")
    q.enqueue(site.url("/spin"))
    q.enqueue_many([site.url(f"/static/{n}") for n in range(1, pages + 1)])
    q.close()
    out = tmp / "hang.jsonl"
    env = {"SCRAPEQ_REQUEST_TIMEOUT": str(DEADLINE), "SCRAPEQ_MAX_ATTEMPTS": "1"}
    proc = _worker(redis_url, "render-hang", out, env)
    proc.wait(timeout=600)
    lines = _lines(out)
    spin = [r for r in lines if r["url"].endswith("/spin")]
    others = [r for r in lines if not r["url"].endswith("/spin")]
    return {
        "deadline_ms": DEADLINE * 1000,
        "hanging_page": {"outcome": spin[0]["outcome"], "elapsed_ms": spin[0]["elapsed_ms"]}
        if spin
        else None,
        "neighbours_done": sum(r["outcome"] == "done" for r in others),
        "neighbours": pages,
        "neighbours_max_ms": max((r["elapsed_ms"] for r in others), default=None),
        "neighbours_median_ms": sorted(r["elapsed_ms"] for r in others)[len(others) // 2]
        if others
        else None,
        # written before the hanging page's line: not held by it
        "neighbours_before_hanging": lines.index(spin[0]) if spin else None,
    }


def _chromium_groups(pid: int) -> list[int]:
    """The chromium processes of ``pid``'s tree that lead a process group (the pool's)."""
    found = []
    for each in tree(pid):
        try:
            cmd = Path(f"/proc/{each}/cmdline").read_bytes().split(b"\0")[0]
            if b"chromium" in cmd and os.getpgid(each) == each:
                found.append(each)
        except OSError:
            continue
    return found


def check_kill(
    site: Site, redis_url: str, tmp: Path, rendered: Any, pages: int = 60, kills: int = 2
) -> dict[str, Any]:
    q = Queue.from_url(redis_url, settings=Settings(allow_private=True, queue="render-kill"))
    q.domain_set(site.domain, fetcher="browser", browser_wait_for=".price:not(:empty)")
    urls = [site.url(f"/p/{n}?delay=700") for n in range(1, pages + 1)]
    q.enqueue_many(urls)
    q.close()
    out = tmp / "kill.jsonl"
    first = rendered()
    proc = _worker(redis_url, "render-kill", out, {"SCRAPEQ_REQUEST_TIMEOUT": "30"})
    killed: list[int] = []
    while proc.poll() is None and len(killed) < kills:
        time.sleep(0.2)
        if rendered() - first >= (len(killed) + 1) * pages // (kills + 1):
            groups = _chromium_groups(proc.pid)
            for leader in groups:
                os.killpg(leader, signal.SIGKILL)
            killed.append(len(groups))
    proc.wait(timeout=900)
    lines = _lines(out)
    seen = [r["url"] for r in lines]
    return {
        "jobs": pages,
        "kills": len(killed),
        "browsers_killed": sum(killed),
        "lines": len(lines),
        "jobs_lost": len(set(urls) - set(seen)),
        "lines_repeated": len(seen) - len(set(seen)),
        "done": sum(r["outcome"] == "done" for r in lines),
        "prices": sum(1 for r in lines if (r.get("result") or {}).get("price")),
    }
