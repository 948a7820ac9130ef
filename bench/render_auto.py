"""Fetcher ``auto`` on a half-JavaScript shop (issue 42): pages with their content extracted,
pages rendered and pages a second, ``auto`` beside ``browser`` for every page and ``http``.

The shop is ``tests/support/js_shop.py`` on loopback (in a thread of this process): half the
pages are product pages ``/p/<n>`` that arrive empty and a script fills their name and price
from ``/api/p/<n>`` 150 ms after load; the other half are ``/static/<n>``, the same product
written in the HTML. Each system is one worker of this process (``--concurrency``, default 8)
with ``--extract name=.name::text --extract price=.price::text`` run over all the pages of a
fresh queue until none is left; the three run in alternation (``--rounds``), each round in
the order given, on the same Redis and the same shop, and each round's figures are printed.

Figures per run:

* ``extracted``: pages whose name and price were both found (the target: every page);
* ``rendered``: pages chromium loaded: the worker's browser requests (each page's document
  and each of its own requests are counted) less the shop's ``/api/p/<n>`` calls made by
  them (a rendered product page makes one; images are blocked, the default);
* ``needs``: the pages that need rendering (the ``/p/`` half), and ``rendered_over_needs``;
* ``pages_per_s``: pages settled over the run's wall time (chromium's start included).

Run: ``python bench/render_auto.py [--pages 200] [--rounds 2] [--concurrency 8]
[--systems auto,browser,http] [--json FILE]``. Needs Debian's chromium (``/usr/bin/chromium``)
and Playwright (the ``browser`` extra).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from scrapeq import AsyncQueue
from scrapeq.engine.config.settings import Settings
from scrapeq.runtime.extract import extractor
from scrapeq.runtime.sinks import CallableSink
from scrapeq.runtime.worker import Worker
from support.js_shop import shop
from support.redis_proc import RedisProcess
from support.sites import Site, threaded_site

CHROMIUM = "/usr/bin/chromium"
FIELDS = ["name=.name::text", "price=.price::text"]


def _api_calls(site: Site) -> int:
    return sum(v for k, v in site.hits.copy().items() if k.startswith("/api/p/"))


async def run_one(
    site: Site, redis_url: str, fetcher: str, pages: int, concurrency: int, name: str
) -> dict[str, Any]:
    """One worker over ``pages`` pages (half /p/, half /static/) of a fresh queue."""
    settings = Settings(allow_private=True, fetcher=fetcher, request_timeout=20.0,
                        domain_concurrency=concurrency)  # fmt: skip
    q = AsyncQueue.from_url(redis_url, name, settings=settings)
    half = pages // 2
    urls = [site.url(f"/p/{n}") for n in range(1, half + 1)]
    urls += [site.url(f"/static/{n}") for n in range(1, pages - half + 1)]
    await q.enqueue_many(urls)
    records: list[dict[str, Any]] = []
    worker = Worker(q, burst=True, concurrency=concurrency, handler=extractor(FIELDS),
                    sink=CallableSink(records.append))  # fmt: skip
    api_before, started = _api_calls(site), time.monotonic()
    try:
        await worker.run_async()
    finally:
        await q.close()
    seconds = time.monotonic() - started
    browser_requests = worker.stats.fetched.get("browser", [0, 0])[0]
    rendered = browser_requests - (_api_calls(site) - api_before)
    found = sum(1 for r in records
                if all((r.get("result") or {}).get(k) for k in ("name", "price")))  # fmt: skip
    return {
        "pages": pages,
        "settled": len(records),
        "extracted": found,
        "rendered": rendered,
        "needs": half,
        "rendered_over_needs": round(rendered / half, 3) if half else None,
        "seconds": round(seconds, 2),
        "pages_per_s": round(len(records) / seconds, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--pages", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--systems", default="auto,browser,http")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if not os.access(CHROMIUM, os.X_OK):
        sys.exit(f"no {CHROMIUM} (apt-get install chromium)")
    systems = args.systems.split(",")
    results: dict[str, Any] = {"pages": args.pages, "concurrency": args.concurrency,
                               "load_average": os.getloadavg()[0], "runs": []}  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="scrapeq-render-auto-") as folder:
        redis = RedisProcess(Path(folder)).start()
        try:
            with threaded_site(shop) as site:
                for r in range(args.rounds):
                    for system in systems:
                        got = asyncio.run(run_one(site, redis.url, system, args.pages,
                                                  args.concurrency, f"{system}{r}"))  # fmt: skip
                        results["runs"].append({"system": system, "round": r, **got})
                        print(json.dumps(results["runs"][-1]), file=sys.stderr, flush=True)
        finally:
            redis.stop()
    results["load_average_after"] = os.getloadavg()[0]
    text = json.dumps(results, indent=2)
    print(text)
    if args.json is not None:
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
