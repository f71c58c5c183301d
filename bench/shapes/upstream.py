"""Shape (d)'s slow upstream: an HTTP server that serves CONCURRENCY requests at a time, each
taking SERVICE_MS, the others waiting their turn in order (a pool of workers behind a
queue): its capacity is CONCURRENCY / SERVICE_MS, and past it, its queue and its latency
grow. nginx, with the Lua package, stands in front of it.

    python bench/shapes/upstream.py PORT CONCURRENCY SERVICE_MS
"""

from __future__ import annotations

import asyncio
import sys

port, concurrency, service_ms = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])


async def main() -> None:
    turns = asyncio.Semaphore(concurrency)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while (await reader.readline()).strip():
                pass
            async with turns:
                await asyncio.sleep(service_ms / 1000)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\nok\n")
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", port, backlog=4096)
    async with server:
        await server.serve_forever()


asyncio.run(main())
