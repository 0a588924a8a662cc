"""Errors in OpenAI's shape: {"error": {"message", "type", "param", "code"}} with the HTTP status it goes with."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(eq=False)  # not frozen: Starlette sets __traceback__ on what it catches
class ApiError(Exception):
    status: int
    message: str
    param: str | None = None
    code: str | None = None
    type: str = "invalid_request_error"
    headers: dict[str, str] = field(default_factory=dict)

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def bad_value(param: str, message: str, code: str = "invalid_value") -> ApiError:
    return ApiError(400, message, param, code)


def unsupported(param: str, what: str) -> ApiError:
    """A field SpecChat understands but cannot honour: refused by name rather than silently ignored."""
    return ApiError(400, f"'{param}': {what} is not supported by SpecChat's server.", param, "unsupported_parameter")


def queue_full(waiting: int, retry_after: int) -> ApiError:
    return ApiError(429, f"The server is busy: {waiting} requests are running or waiting for the one engine. "
                         f"Retry after {retry_after} s.", None, "rate_limit_exceeded", "requests",
                    {"Retry-After": str(retry_after)})


def not_ready(reason: str) -> ApiError:
    return ApiError(503, f"No model is ready: {reason}", None, "model_not_ready", "server_error", {"Retry-After": "5"})
