"""`specchat rpc-proxy`: forward TCP to an RPC server with added one-way latency, to see what a network
costs before buying one (and for docs/BENCHMARKS.md's RPC section).

Each chunk is delivered `--delay-ms` after it arrived, in order, in both directions, without
throttling bandwidth: a link of that latency. Userspace, so it needs no root and no `tc netem`
(which this project's machines lack); it adds ~0.1 ms of its own per hop on loopback.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from app.cli.options import UserError


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("rpc-proxy", help="forward to an RPC server with added latency (network what-if)")
    p.add_argument("listen", type=int, metavar="PORT", help="port to listen on (127.0.0.1 only)")
    p.add_argument("server", metavar="HOST:PORT", help="the `specchat rpc-server` to forward to")
    p.add_argument("--delay-ms", type=float, default=1.0, help="added latency each way (default 1 ms)")
    p.set_defaults(func=_cmd_rpc_proxy)


def _cmd_rpc_proxy(args: argparse.Namespace) -> int:
    host, _, port = args.server.rpartition(":")
    if not host or not port.isdigit():
        raise UserError(f"rpc-proxy: {args.server!r} is not HOST:PORT")
    if args.delay_ms < 0:
        raise UserError("rpc-proxy: --delay-ms must be 0 or more")
    print(f"rpc-proxy: 127.0.0.1:{args.listen} -> {args.server}, +{args.delay_ms:g} ms each way", flush=True)
    try:
        asyncio.run(serve(args.listen, host, int(port), args.delay_ms / 1000.0))
    except KeyboardInterrupt:
        pass
    return 0


async def serve(listen: int, host: str, port: int, delay_s: float) -> None:
    async def on_client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(host, port)
        except OSError as exc:
            print(f"rpc-proxy: cannot reach {host}:{port}: {exc}", file=sys.stderr, flush=True)
            writer.close()
            return
        await asyncio.gather(_pump(reader, up_writer, delay_s), _pump(up_reader, writer, delay_s))

    server = await asyncio.start_server(on_client, "127.0.0.1", listen)
    async with server:
        await server.serve_forever()


async def _pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter, delay_s: float) -> None:
    """Copy src to dst, each chunk delivered delay_s after it arrived (order kept, bandwidth not limited)."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def deliver() -> None:
        while True:
            due, chunk = await queue.get()
            if not chunk:
                break
            wait = due - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            dst.write(chunk)
            await dst.drain()
        dst.close()

    sender = asyncio.create_task(deliver())
    try:
        while True:
            chunk = await src.read(1 << 20)
            queue.put_nowait((loop.time() + delay_s, chunk))
            if not chunk:
                break
    except (ConnectionError, OSError):
        queue.put_nowait((loop.time(), b""))
    await sender
