"""llama.cpp's RPC backend (ggml-rpc): serve this machine's devices, and use remote servers' devices.

Both sides are ggml's own code (`ggml_backend_rpc_start_server`, `ggml_backend_rpc_add_server`);
nothing here speaks the protocol. What is ours is the safety around it: ggml's client aborts the
whole process (GGML_ABORT) when a server cannot be reached, speaks another protocol version, or
drops mid-reply. So `connect` first checks each endpoint in a child process, where such an abort
costs nothing and its message can be read, and `on_drop` handlers hear of a drop (through ggml's
abort callback) before the process would end, with the endpoint named.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import llama_cpp
import llama_cpp._ggml as _ggml

from app.llama_backend.backend_modules import already_loaded
from app.llama_backend.core import LlamaError, ensure_backend, ggml_devices, is_rpc_device, lib_dir

DEFAULT_PORT = 50052
PROBE_TIMEOUT_S = 20.0
PROTOCOL = "7.0.0"  # ggml-rpc.h's RPC_PROTO_*_VERSION in the llama.cpp that llama-cpp-python pins


class RpcError(LlamaError):
    """An RPC endpoint that cannot be used; the message names it and says what to do."""


@dataclass(frozen=True)
class RemoteDevice:
    endpoint: str
    name: str  # llama.cpp's device name in this process ("RPC0", "RPC1" ...)
    free_bytes: int
    total_bytes: int


def supported() -> bool:
    """Whether this llama.cpp build has the RPC backend (built with -DGGML_RPC=ON).

    After ensure_backend: in a portable build RPC is a module, and llama.cpp's own fallback search (the
    executable's and the current folder) would not find it beside libggml.
    """
    ensure_backend()
    return bool(llama_cpp.llama_supports_rpc())


def parse_endpoints(text: str | Sequence[str] | None) -> tuple[str, ...]:
    """"HOST:PORT[,HOST:PORT...]" (or a list of them) as a tuple; RpcError for anything else."""
    if not text:
        return ()
    parts = text.split(",") if isinstance(text, str) else list(text)
    out: list[str] = []
    for raw in parts:
        item = raw.strip()
        host, sep, port = item.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise RpcError(f"--rpc: {item!r} is not HOST:PORT (for example 192.168.1.20:{DEFAULT_PORT})")
        if item not in out:
            out.append(item)
    return tuple(out)


def _split(endpoint: str) -> tuple[str, int]:
    host, _, port = endpoint.rpartition(":")
    return host.strip("[]"), int(port)


def reachable(endpoint: str, timeout: float = 2.0) -> str | None:
    """None when something accepts TCP connections at the endpoint, else why not."""
    try:
        with socket.create_connection(_split(endpoint), timeout=timeout):
            return None
    except OSError as exc:
        return exc.strerror or str(exc) or type(exc).__name__


def _loaded(stem: str) -> ctypes.CDLL:
    """The copy of lib<stem> that llama.cpp itself loaded (a second copy's abort callback is never called);
    where none is loaded yet, the library by its first name."""
    found = already_loaded(lib_dir(), stem)
    if found is not None:
        return found
    names = sorted(lib_dir().glob(f"lib{stem}.*")) + sorted(lib_dir().glob(f"{stem}.*"))
    if not names:
        raise RpcError(f"no {stem} library in {lib_dir()}")
    return ctypes.CDLL(str(names[0]))


_rpc_lib: ctypes.CDLL | None = None


def _rpc() -> ctypes.CDLL:
    """libggml-rpc, with the prototypes used here (llama-cpp-python binds none of them)."""
    global _rpc_lib
    if _rpc_lib is None:
        if not supported():
            raise RpcError(
                "this llama.cpp build has no RPC backend; reinstall with `python3 bootstrap.py run` "
                "(it builds llama-cpp-python with -DGGML_RPC=ON) or add -DGGML_RPC=ON to your CMAKE_ARGS"
            )
        lib = _loaded("ggml-rpc")
        vp, sz = ctypes.c_void_p, ctypes.c_size_t
        lib.ggml_backend_rpc_add_server.argtypes, lib.ggml_backend_rpc_add_server.restype = [ctypes.c_char_p], vp
        lib.ggml_backend_rpc_start_server.argtypes = [ctypes.c_char_p, ctypes.c_char_p, sz, sz, ctypes.POINTER(vp)]
        lib.ggml_backend_rpc_start_server.restype = None
        lib.ggml_backend_rpc_get_device_memory.argtypes = [ctypes.c_char_p, ctypes.c_uint32,
                                                           ctypes.POINTER(sz), ctypes.POINTER(sz)]
        lib.ggml_backend_rpc_get_device_memory.restype = None
        g = ggml_devices()  # the device prototypes; the registry ones below
        for name, args, res in (
            ("ggml_backend_register", [vp], None),
            ("ggml_backend_reg_dev_count", [vp], sz),
            ("ggml_backend_reg_dev_get", [vp, sz], vp),
        ):
            fn = getattr(g, name)
            fn.argtypes, fn.restype = args, res
        _rpc_lib = lib
    return _rpc_lib


# --- the client side --------------------------------------------------------------------------------

_lock = threading.Lock()
_connected: dict[str, tuple[RemoteDevice, ...]] = {}  # endpoint -> its devices, registered once
_drop_handlers: list[Callable[[RpcError], None]] = []


def connect(endpoints: Sequence[str]) -> list[RemoteDevice]:
    """Add each server's devices to llama.cpp's (once per process), checking each endpoint first.

    Afterwards the devices are GPU-type devices of this process: `devices.list_devices()` lists them
    with the free/total memory their server reports, and llama.cpp splits layers onto them.
    """
    out: list[RemoteDevice] = []
    for endpoint in parse_endpoints(list(endpoints)):
        with _lock:
            if endpoint not in _connected:
                found = probe(endpoint)  # in a child: ggml aborts on any failure to connect
                ensure_backend()
                lib, g = _rpc(), _ggml.libggml
                _install_abort_callback()
                reg = lib.ggml_backend_rpc_add_server(endpoint.encode())
                if not reg:
                    raise RpcError(f"RPC server {endpoint} offers no devices; start it with a device (--device)")
                # On llama_cpp._ggml's copy of libggml (the wheel holds two, see _loaded), which is the one
                # list_devices and device_array ask; llama.cpp gets the devices explicitly
                # (ModelConfig.devices), so a model loaded without them never touches a server.
                g.ggml_backend_register(reg)
                names = [g.ggml_backend_dev_name(g.ggml_backend_reg_dev_get(reg, i)).decode()
                         for i in range(g.ggml_backend_reg_dev_count(reg))]
                _connected[endpoint] = tuple(
                    RemoteDevice(endpoint, name, free, total) for name, (free, total) in zip(names, found, strict=False)
                )
            out.extend(_connected[endpoint])
    return out


def connected() -> dict[str, tuple[RemoteDevice, ...]]:
    with _lock:
        return dict(_connected)


def endpoint_of(device_name: str) -> str | None:
    """The server behind an RPC device name of this process ("RPC0" -> "10.0.0.2:50052")."""
    for endpoint, devs in connected().items():
        if any(d.name == device_name for d in devs):
            return endpoint
    return None


def probe(endpoint: str, timeout: float = PROBE_TIMEOUT_S) -> list[tuple[int, int]]:
    """Each device's (free, total) bytes at the endpoint, asked by a child process; RpcError if unusable."""
    why = reachable(endpoint)
    if why is not None:
        raise RpcError(
            f"RPC server {endpoint}: cannot connect ({why}). Start `specchat rpc-server` on that machine "
            f"(with --host to listen beyond 127.0.0.1), or check the address, the port and your SSH tunnel"
        )
    if getattr(sys, "frozen", False):
        return []  # a bundle has no interpreter to run the child; the TCP check above is what it gets
    cmd = [sys.executable, "-m", "app.llama_backend.rpc", "--probe", endpoint]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).parents[2]),
                                                                    os.environ.get("PYTHONPATH")]))}
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        raise RpcError(
            f"RPC server {endpoint} accepted the connection but did not answer within {timeout:.0f} s: "
            "it serves one client at a time; is another SpecChat or llama.cpp using it?"
        ) from None
    if done.returncode == 0:
        try:
            return [tuple(pair) for pair in json.loads(done.stdout.strip().splitlines()[-1])]  # type: ignore[misc]
        except (ValueError, IndexError):
            pass
    text = done.stderr + done.stdout
    if "version mismatch" in text:
        seen = text.split("version mismatch:", 1)[1].split()[0] if "version mismatch:" in text else "another"
        raise RpcError(
            f"RPC server {endpoint} speaks RPC protocol {seen}; this SpecChat speaks {PROTOCOL}. Run the same "
            f"SpecChat version (the same llama-cpp-python) on both machines"
        )
    if "handshake failed" in text or "malformed response" in text:
        raise RpcError(
            f"RPC server {endpoint}: the handshake failed (not a ggml RPC server, or an incompatible version "
            f"of it); run `specchat rpc-server` of the same SpecChat version there"
        )
    last = next((ln.strip() for ln in reversed(text.splitlines()) if ln.strip()), f"exit {done.returncode}")
    raise RpcError(f"RPC server {endpoint} could not be used: {last}")


def _probe_main(endpoint: str) -> None:
    """Child process of `probe`: connect with ggml's client and print the devices' memory as JSON."""
    ensure_backend()
    lib = _rpc()
    reg = lib.ggml_backend_rpc_add_server(endpoint.encode())
    g = _ggml.libggml
    n = g.ggml_backend_reg_dev_count(reg) if reg else 0
    out = []
    for i in range(n):
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        lib.ggml_backend_rpc_get_device_memory(endpoint.encode(), i, ctypes.byref(free), ctypes.byref(total))
        out.append([free.value, total.value])
    print(json.dumps(out), flush=True)
    os._exit(0)  # skip ggml's atexit teardown of the connection


# --- a server dropping mid-reply ---------------------------------------------------------------------

_ABORT_CB = ctypes.CFUNCTYPE(None, ctypes.c_char_p)
_abort_cb_ref: object | None = None


def on_drop(handler: Callable[[RpcError], None]) -> Callable[[], None]:
    """Call `handler` (on ggml's thread) when a connected server fails; returns the unsubscribe.

    ggml aborts the process when the handler returns; a handler that must keep the process alive
    (the GUI keeps the window and the reply) does not return (it parks that thread).
    """
    _drop_handlers.append(handler)
    return lambda: _drop_handlers.remove(handler) if handler in _drop_handlers else None


def drop_error(message: str) -> RpcError:
    """The error to report for ggml's abort `message`, naming the endpoints that no longer answer."""
    endpoints = list(connected())
    down = [e for e in endpoints if reachable(e, timeout=1.0) is not None]
    who = ", ".join(down or endpoints) or "?"
    said = re.sub(r"^\S+:\d+: ", "", message.strip())  # ggml's source file and line say nothing to a user
    return RpcError(
        f"RPC server {who} stopped answering mid-reply ({said or 'connection lost'}); "
        "the reply so far is kept. Restart `specchat rpc-server` there and load the pair again"
    )


def _install_abort_callback() -> None:
    global _abort_cb_ref
    if _abort_cb_ref is not None:
        return
    base = _loaded("ggml-base")
    base.ggml_set_abort_callback.argtypes = [_ABORT_CB]
    base.ggml_set_abort_callback.restype = ctypes.c_void_p

    def _abort(message: bytes | None) -> None:
        text = (message or b"").decode("utf-8", errors="replace")
        if not connected() or "RPC" not in text and "connect" not in text:
            return  # not an RPC failure: ggml aborts as it always did
        error = drop_error(text)
        if not _drop_handlers:
            print(f"specchat: error: {error}", file=sys.stderr, flush=True)
        for handler in list(_drop_handlers):
            handler(error)

    _abort_cb_ref = _ABORT_CB(_abort)
    base.ggml_set_abort_callback(_abort_cb_ref)


# --- the server side ---------------------------------------------------------------------------------

def local_device_names() -> list[str]:
    """This process's own llama.cpp devices (RPC devices excluded)."""
    ensure_backend()
    _rpc()
    g = _ggml.libggml
    names = [g.ggml_backend_dev_name(g.ggml_backend_dev_get(i)).decode() for i in range(g.ggml_backend_dev_count())]
    return [n for n in names if not is_rpc_device(n)]


def serve(host: str, port: int, devices: Sequence[str] = (), cache_dir: str | None = None,
          n_threads: int = 0) -> None:
    """Serve this machine's devices until the process is stopped (ggml's server loop; never returns
    unless the server cannot start). Default devices as llama.cpp's rpc-server: the GPUs, else the CPU."""
    ensure_backend()
    lib, g = _rpc(), _ggml.libggml
    names = list(devices)
    if not names:
        local = [g.ggml_backend_dev_get(i) for i in range(g.ggml_backend_dev_count())]
        gpus = [d for d in local if g.ggml_backend_dev_type(d) in (1, 2)]  # GPU, integrated GPU
        names = [g.ggml_backend_dev_name(d).decode() for d in gpus] or ["CPU"]
    handles = []
    for name in names:
        dev = g.ggml_backend_dev_by_name(name.encode())
        if not dev or is_rpc_device(name):
            raise RpcError(f"rpc-server: no device {name!r} here; devices: {', '.join(local_device_names())}")
        handles.append(dev)
    if cache_dir:
        Path(cache_dir).mkdir(parents=True, exist_ok=True)
    array = (ctypes.c_void_p * len(handles))(*handles)
    threads = n_threads or max(1, (os.cpu_count() or 2) // 2)
    lib.ggml_backend_rpc_start_server(f"{host}:{port}".encode(), cache_dir.encode() if cache_dir else None,
                                      threads, len(handles), array)
    raise RpcError(f"rpc-server: could not listen on {host}:{port} (see the message above; is the port in use?)")


if __name__ == "__main__":  # the child process of `probe`
    if len(sys.argv) == 3 and sys.argv[1] == "--probe":
        _probe_main(sys.argv[2])
    sys.exit("usage: python -m app.llama_backend.rpc --probe HOST:PORT")
