"""A complete scrapeq program: a parser, a queue, a worker, results in a JSONL file.

Runs anywhere with no set-up: with no Redis URL set it uses the Redis the ``scrapeq`` command
uses, the embedded one of its data folder (started if need be; ``scrapeq server stop`` stops
it), and crawls a tiny shop it serves on 127.0.0.1, so it needs no network. It works in the
queue ``example`` (emptied first), which the CLI shows afterwards:

    python examples/crawl.py
    scrapeq --queue example status
    scrapeq --queue example dead list

``SCRAPEQ_REDIS_URL`` (like every ``SCRAPEQ_*`` variable, or ``scrapeq.toml``) points it at
your own Redis.
"""

from __future__ import annotations

import asyncio
import re
import tempfile
from pathlib import Path
from typing import Any

from aiohttp import web

from scrapeq import AsyncQueue, Job, JsonlSink, Permanent, Response, Worker, load_settings

TITLE = re.compile(r"<title>(.*?)</title>", re.S)


def parse(job: Job, response: Response) -> dict[str, Any]:
    """The user's parser: a result for the sink, or Permanent to dead-letter the page."""
    found = TITLE.search(response.text())
    if found is None:
        raise Permanent("no_title")
    return {"title": found.group(1).strip(), "sku": job.payload["sku"]}


async def shop(request: web.Request) -> web.Response:
    sku = request.match_info["sku"]
    if sku == "13":
        return web.Response(status=404, text="delisted")
    return web.Response(text=f"<title>Product {sku}</title>", content_type="text/html")


async def main() -> None:
    app = web.Application()
    app.router.add_get("/p/{sku}", shop)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    overrides = {"queue": "example", "allow_private": True, "domain_concurrency": 4}
    settings = load_settings(overrides=overrides)
    # redis_url None (nothing set): the embedded Redis of the CLI, started if need be
    queue = AsyncQueue.from_url(settings.redis_url, settings=settings)
    await queue.clear()  # a fresh run
    for sku in range(20):
        lane = "critical" if sku < 3 else "normal"
        await queue.enqueue(f"http://127.0.0.1:{port}/p/{sku}", lane=lane, payload={"sku": sku})

    results = Path(tempfile.mkdtemp(prefix="scrapeq-example-")) / "results.jsonl"
    await Worker(
        queue, handler=parse, concurrency=50, sink=JsonlSink(results), burst=True
    ).run_async()

    counts = (await queue.status())["counts"]
    print(f"done {counts['done']}, dead {counts['dead']}; results in {results}")
    for letter in await queue.dead_letters():
        print(f"dead letter {letter.url}: {letter.dead_reason}")
    await queue.close()
    await runner.cleanup()


if __name__ == "__main__":
    asyncio.run(main())
