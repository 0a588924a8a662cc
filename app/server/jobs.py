"""A request as the engine thread runs it: `Job` goes in, items come out through `Job.deliver`.

`run_job` runs on the thread that owns the llama contexts (`EngineThread` for `specchat serve`, the window's worker
in the GUI): it renders and tokenizes the prompt there (the tokenizer is the target model's), refuses a prompt the
context cannot hold, then passes the engine's events on. Items delivered, in order: `Started` (or `Failed`), the
engine's events (app/engine/events.py), a `Failed` if the engine raised, and always `DONE` last."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from app.engine.events import FinishEvent
from app.engine.session import GenParams, SpecSession
from app.server.errors import ApiError

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class JobSpec:
    kind: Literal["chat", "completion"]
    params: GenParams  # n_predict is replaced by `max_tokens`, or by the room the context leaves
    messages: tuple[dict[str, str], ...] = ()  # chat
    prompt_text: str = ""  # completion
    max_tokens: int | None = None
    prediction: str | None = None
    cache_prompt: bool = True  # False: forget every cached prompt first, so this one is processed whole


@dataclass(frozen=True, slots=True)
class Started:
    prompt_tokens: int
    n_predict: int
    queued_ms: float  # waiting for the engine behind other requests


@dataclass(frozen=True, slots=True)
class Failed:
    error: ApiError


class _Done:
    def __repr__(self) -> str:
        return "DONE"


DONE = _Done()


@dataclass(slots=True, eq=False)  # compared and hashed by identity: a queue holds each one once
class Job:
    spec: JobSpec
    deliver: Callable[[object], None]  # called on the engine thread; must be thread-safe and never block
    cancel: threading.Event = field(default_factory=threading.Event)  # the client left, or a stop string matched
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:24])
    submitted: float = field(default_factory=time.monotonic)


def run_job(session: SpecSession, job: Job) -> FinishEvent | None:
    """Run one request to its end on the engine thread; its FinishEvent (None: refused, failed, or left before it
    started). Never raises: failures are delivered as `Failed`."""
    finish: FinishEvent | None = None
    try:
        if job.cancel.is_set():
            return None  # the client left while the request waited
        spec = job.spec
        prompt = _prompt(session, spec)
        n_ctx = session.target_ctx.n_ctx
        room = n_ctx - len(prompt)
        param = "messages" if spec.kind == "chat" else "prompt"
        if room < 2:
            raise ApiError(400, f"This model's maximum context length is {n_ctx} tokens, and the {param} alone is "
                                f"{len(prompt)} tokens. Shorten the {param}, or restart the server with a larger "
                                "--ctx-size.", param, "context_length_exceeded")
        if spec.max_tokens is not None and spec.max_tokens > room:
            raise ApiError(400, f"This model's maximum context length is {n_ctx} tokens. However, you requested "
                                f"{len(prompt) + spec.max_tokens} tokens ({len(prompt)} in the {param}, "
                                f"{spec.max_tokens} in the completion). Reduce the length of the {param} or "
                                "max_tokens.", "max_tokens", "context_length_exceeded")
        n_predict = spec.max_tokens if spec.max_tokens is not None else room
        prediction = session.prediction_tokens(spec.prediction) if spec.prediction else None
        job.deliver(Started(len(prompt), n_predict, (time.monotonic() - job.submitted) * 1000.0))
        params = GenParams(spec.params.mode, n_predict, spec.params.sampling, spec.params.spec)
        if not spec.cache_prompt:
            session.clear_caches()
        for event in session.generate(prompt, params, job.cancel, prediction=prediction):
            job.deliver(event)
            if isinstance(event, FinishEvent):
                finish = event
    except ApiError as error:
        job.deliver(Failed(error))
    except Exception as error:  # the engine's own failure: named to the client, logged with its traceback
        log.exception("request %s failed", job.id)
        job.deliver(Failed(ApiError(500, f"The engine failed: {error}", None, "engine_error", "server_error")))
    finally:
        job.deliver(DONE)
    return finish


def _prompt(session: SpecSession, spec: JobSpec) -> list[int]:
    if spec.kind == "chat":
        try:
            return session.chat_prompt(list(spec.messages))
        except ValueError as error:  # the model's template refused the roles' order (e.g. two user turns)
            raise ApiError(400, f"The model's chat template refused the messages: {error}", "messages",
                           "invalid_messages") from error
    tokens = session.target_model.tokenize(spec.prompt_text, add_special=True, parse_special=False)
    if not tokens:
        raise ApiError(400, "The prompt is empty.", "prompt", "invalid_value")
    return tokens

