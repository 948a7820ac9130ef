"""A complete scrapeq program: a parser, a queue, a worker, results in a JSONL file.

Runs anywhere with no set-up: it starts a private embedded Redis (in a temporary folder) and a
tiny shop on 127.0.0.1 to crawl, so it needs no network. Point ``REDIS_URL`` at your own Redis
and enqueue real URLs to use it for real.

    python examples/crawl.py
"""

from __future__ import annotations

import asyncio
import re
import tempfile
from pathlib import Path
from typing import Any

from aiohttp import web

from scrapeq import AsyncQueue, Job, Permanent, Settings
from scrapeq.engine.connection import resolve_url
from scrapeq.runtime.fetch import Response
from scrapeq.runtime.sinks import JsonlSink
from scrapeq.runtime.worker import Worker

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

    data_dir = Path(tempfile.mkdtemp(prefix="sq"))
    settings = Settings(allow_private=True, data_dir=data_dir, domain_concurrency=4)
    queue = AsyncQueue.from_url(resolve_url(None, data_dir), settings=settings)
    for sku in range(20):
        lane = "critical" if sku < 3 else "normal"
        await queue.enqueue(f"http://127.0.0.1:{port}/p/{sku}", lane=lane, payload={"sku": sku})

    results = data_dir / "results.jsonl"
    await Worker(
        queue, handler=parse, concurrency=50, sink=JsonlSink(results), burst=True
    ).run_async()

    counts = (await queue.status())["counts"]
    print(f"done {counts['done']}, dead {counts['dead']}; results in {results}")
    for letter in await queue.dead_letters():
        print(f"dead letter {letter.url}: {letter.dead_reason}")
    await queue.close()
    await runner.cleanup()

    from scrapeq.engine.embedded import stop_server

    stop_server(data_dir)


if __name__ == "__main__":
    asyncio.run(main())
