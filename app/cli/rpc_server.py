"""`specchat rpc-server`: serve this machine's devices to another SpecChat over llama.cpp's RPC backend.

ggml's own server runs in this process (`app.llama_backend.rpc.serve`), so a remote machine needs
only SpecChat installed, not a llama.cpp build. The protocol has no authentication: the server binds
to 127.0.0.1 unless --host says otherwise, and then warns before serving.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from app.cli.options import UserError

DEFAULT_PORT = 50052  # llama.cpp's rpc-server default (app.llama_backend.rpc.DEFAULT_PORT)

WARNING = """\
specchat rpc-server: WARNING: listening on {host}:{port}. llama.cpp's RPC protocol has NO
authentication and NO encryption: anyone who can reach this port can run computations on this
machine and read what it is sent. Reach it only through a trusted network or an SSH tunnel:
    ssh -N -L {port}:127.0.0.1:{port} USER@THIS-MACHINE     (on the client; then --rpc 127.0.0.1:{port})
"""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "rpc-server", help="serve this machine's devices to another SpecChat (llama.cpp's RPC backend)",
        description="Start llama.cpp's RPC server in this process. On the client: `--rpc HOST:PORT` on "
        "generate, bench, memory and gui (or in Settings) adds this machine's devices to its own.",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: only this "
                   "machine, for an SSH tunnel); anything else is reachable by others: see the warning")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"TCP port (default {DEFAULT_PORT})")
    p.add_argument("--device", action="append", default=[], metavar="NAME",
                   help="a device to serve (CUDA0, Vulkan0, CPU ...; repeat or comma-separate); default: "
                   "every GPU, else the CPU. `specchat rpc-server --list-devices` names them")
    p.add_argument("--cache", type=Path, metavar="DIR", help="keep tensors the client sends in DIR, so a "
                   "model's weights cross the network once (llama.cpp's -c)")
    p.add_argument("-t", "--threads", type=int, default=0, help="CPU device threads (default: half the cores)")
    p.add_argument("--list-devices", action="store_true", help="print this machine's devices and exit")
    p.set_defaults(func=_cmd_rpc_server)


def _cmd_rpc_server(args: argparse.Namespace) -> int:
    from app.llama_backend import rpc

    if not 0 < args.port < 65536:
        raise UserError(f"rpc-server: --port {args.port} is not a TCP port (1-65535)")
    if not rpc.supported():
        raise UserError("rpc-server: this llama.cpp build has no RPC backend; run `python3 bootstrap.py run` "
                        "to rebuild llama-cpp-python with -DGGML_RPC=ON (or add it to your CMAKE_ARGS)")
    if args.list_devices:
        for name in rpc.local_device_names():
            print(name)
        return 0
    devices = [d.strip() for item in args.device for d in item.split(",") if d.strip()]
    if args.host not in ("127.0.0.1", "localhost", "::1"):
        print(WARNING.format(host=args.host, port=args.port), file=sys.stderr, flush=True)
    sys.stdout.flush()
    rpc.serve(args.host, args.port, devices, str(args.cache) if args.cache else None, args.threads)
    return 1  # serve returns only when it could not start; it raised with the reason
