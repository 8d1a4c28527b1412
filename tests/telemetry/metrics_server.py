"""A tiny /metrics server for tests: serves recorded Prometheus pages, the next one at each request.

Run as ``python metrics_server.py <data dir> <prefix>``; it binds 127.0.0.1 on a free port, prints
``PORT <n>`` on stdout, and serves ``<prefix>_000.prom``, ``<prefix>_001.prom``, ... in order at
``GET /metrics`` (staying on the last page), so a scraper sees the server's counters move over time.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from aiohttp import web


async def main(data_dir: Path, prefix: str) -> None:
    pages = [p.read_text() for p in sorted(data_dir.glob(f"{prefix}_*.prom"))]
    if not pages:
        raise SystemExit(f"no {prefix}_*.prom pages in {data_dir}")
    served = 0

    async def metrics(request: web.Request) -> web.Response:
        nonlocal served
        page = pages[min(served, len(pages) - 1)]
        served += 1
        return web.Response(text=page, content_type="text/plain", charset="utf-8")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    print(f"PORT {port}", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), sys.argv[2]))
