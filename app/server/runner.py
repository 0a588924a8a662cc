"""Serving the API with uvicorn: the bind's safety rule, and a server on a thread of its own (the window's switch),
or in the foreground (`specchat serve`)."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import threading
from dataclasses import dataclass

import uvicorn
from starlette.types import ASGIApp


class BindRefused(ValueError):
    """A bind that would expose the models without a key."""


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_bind(host: str, api_key: str | None) -> None:
    """Loopback needs nothing; any other address (0.0.0.0 included) only with an API key, since whoever reaches it
    would otherwise use this machine's models and GPU."""
    if not is_loopback(host) and not api_key:
        raise BindRefused(f"Refusing to serve on {host} without an API key: every machine that can reach it could "
                          "use this one's models. Add --api-key KEY (clients then send 'Authorization: Bearer KEY'), "
                          "or serve on 127.0.0.1.")


@dataclass(frozen=True, slots=True)
class Address:
    host: str
    port: int

    @property
    def base_url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/v1"


def uvicorn_config(app: ASGIApp, host: str, port: int) -> uvicorn.Config:
    # Implementations named, not "auto": a frozen bundle cannot import what uvicorn would pick by name at run time.
    return uvicorn.Config(app, host=host, port=port, loop="asyncio", http="h11", ws="none", lifespan="off",
                          log_level="warning", access_log=False, timeout_graceful_shutdown=5)


def bound_socket(host: str, port: int) -> socket.socket:
    """The listening socket, bound here so a taken port fails with a named error before anything else starts, and
    port 0 (any free port, for tests) is known at once."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as error:
        sock.close()
        raise OSError(error.errno, f"Cannot listen on {host}:{port}: {error.strerror}. Is another server "
                                   "(llama-server, LM Studio, Ollama, another SpecChat) using that port? "
                                   "Pick another with --port.") from error
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


class ServerThread:
    """uvicorn on its own thread and event loop: the GUI thread never handles network traffic."""

    def __init__(self, app: ASGIApp, host: str, port: int) -> None:
        self._sock = bound_socket(host, port)
        self.address = Address(host, self._sock.getsockname()[1])
        self._server = uvicorn.Server(uvicorn_config(app, host, self.address.port))
        self._thread = threading.Thread(target=self._run, name="specchat-http", daemon=True)
        self.error: BaseException | None = None

    def start(self) -> ServerThread:
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            asyncio.run(self._server.serve(sockets=[self._sock]))
        except BaseException as error:  # reported by the owner; the thread must not die silently
            self.error = error

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def stop(self, timeout: float = 10.0) -> None:
        self._server.should_exit = True
        self._thread.join(timeout)
        self._sock.close()


def serve_forever(app: ASGIApp, host: str, port: int) -> None:
    """The foreground server of `specchat serve`: until Ctrl+C or SIGTERM (uvicorn's handlers)."""
    sock = bound_socket(host, port)
    try:
        uvicorn.Server(uvicorn_config(app, host, sock.getsockname()[1])).run(sockets=[sock])
    finally:
        sock.close()
