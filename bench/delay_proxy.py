#!/usr/bin/python3
"""A TCP proxy that adds a fixed one-way delay, to measure the cluster across
"hosts" with network latency on a kernel without netem (bench/latency.sh).

  delay_proxy.py --delay_ms D LISTEN_HOST:PORT=TARGET_HOST:PORT [...]

Every byte read from either side is written to the other side D milliseconds
later, in order: a link with latency D each way (round trip 2D) and no
bandwidth limit. Runs until killed; prints "ready" once every listener is up.
"""
import argparse
import asyncio
import sys
import time

CHUNK = 1 << 18


async def pump(reader, writer, delay_s):
    """Copies reader to writer, each chunk delay_s after it was read."""
    queue = asyncio.Queue()

    async def read():
        while True:
            data = await reader.read(CHUNK)
            queue.put_nowait((time.monotonic() + delay_s, data))
            if not data:
                return

    async def write():
        while True:
            due, data = await queue.get()
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            if not data:
                writer.close()
                return
            writer.write(data)
            await writer.drain()

    try:
        await asyncio.gather(read(), write())
    except (ConnectionError, asyncio.IncompleteReadError):
        writer.close()


async def serve(listen, target, delay_s):
    host, port = listen.rsplit(":", 1)
    target_host, target_port = target.rsplit(":", 1)

    async def handle(client_reader, client_writer):
        try:
            server_reader, server_writer = await asyncio.open_connection(
                target_host, int(target_port))
        except OSError:
            client_writer.close()
            return
        await asyncio.gather(
            pump(client_reader, server_writer, delay_s),
            pump(server_reader, client_writer, delay_s))

    return await asyncio.start_server(handle, host, int(port))


async def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--delay_ms", type=float, required=True)
    parser.add_argument("routes", nargs="+", help="LISTEN_HOST:PORT=TARGET_HOST:PORT")
    args = parser.parse_args()
    servers = []
    for route in args.routes:
        listen, target = route.split("=")
        servers.append(await serve(listen, target, args.delay_ms / 1000.0))
    print("ready", flush=True)
    await asyncio.gather(*(s.serve_forever() for s in servers))


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        sys.exit(0)
