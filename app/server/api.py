"""The HTTP API: OpenAI's chat completions, completions and models, plus /health, on FastAPI.

Handlers run on the server's event loop (its own thread); a request becomes a `Job` for the engine thread, whose
items come back through an asyncio queue. A client that disconnects cancels its job at the engine's next step
(streaming: Starlette cancels the body's generator; otherwise the wait polls for the disconnect)."""

from __future__ import annotations

import asyncio
import hmac
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any, Protocol

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.engine.sampling import SamplingParams
from app.engine.session import GenParams
from app.models.recommended_sampling import SamplingValues
from app.server.engine_thread import Served
from app.server.errors import ApiError, not_ready
from app.server.jobs import DONE, Failed, Job, JobSpec
from app.server.reply import ReplyState
from app.server.schemas import ChatRequest, CompletionRequest

DEFAULT_MAX_BODY = 8 << 20  # 8 MiB: a long file and its prediction fit many times over


class Backend(Protocol):
    """Who runs the jobs: `EngineThread` for `specchat serve`, the window's worker in the GUI."""

    @property
    def served(self) -> Served | None: ...

    @property
    def load_error(self) -> str | None: ...

    def submit(self, job: Job) -> None:
        """Queue the job or raise ApiError (429 when full, 503 when no model is ready)."""


@dataclass(frozen=True, slots=True)
class ApiConfig:
    defaults: GenParams  # mode and speculation settings; sampling comes from `sampling` and the request
    sampling: SamplingValues  # the target's recommended sampling, for fields a request leaves out
    api_key: str | None = None
    max_body_bytes: int = DEFAULT_MAX_BODY
    cors_origins: tuple[str, ...] = ()
    # The window's live choices (mode, speculation, sampling defaults), read per request instead of the two above.
    live: Callable[[], tuple[GenParams, SamplingValues]] | None = None


def create_app(backend: Backend, config: ApiConfig) -> FastAPI:
    app = FastAPI(title="SpecChat", docs_url=None, redoc_url=None, openapi_url=None)

    @app.exception_handler(ApiError)
    async def _api_error(_request: Request, error: ApiError) -> JSONResponse:
        return JSONResponse(error.body(), error.status, headers=error.headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_request: Request, error: RequestValidationError) -> JSONResponse:
        problem = validation_error(error.errors())
        return JSONResponse(problem.body(), problem.status)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_request: Request, error: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(error.status_code)
        problem = ApiError(error.status_code, str(error.detail), None, code)
        return JSONResponse(problem.body(), error.status_code)

    @app.get("/health")
    async def health() -> JSONResponse:
        if backend.served is not None:
            return JSONResponse({"status": "ok", "model": backend.served.model_id})
        status = {"status": "error", "error": backend.load_error} if backend.load_error else {"status": "loading model"}
        return JSONResponse(status, 503)

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        served = _served(backend)
        return {"object": "list", "data": [_model_card(served)]}

    @app.get("/v1/models/{model_id}")
    async def model(model_id: str) -> dict[str, Any]:
        served = _served(backend)
        if not served.accepts(model_id):
            raise _unknown_model(model_id, served)
        return _model_card(served)

    @app.post("/v1/chat/completions")
    async def chat_completions(body: ChatRequest, request: Request) -> Response:
        served = _check(body, backend)
        spec = JobSpec("chat", _params(config, body), messages=tuple(body.chat_messages()), max_tokens=body.limit(),
                       prediction=body.prediction_text(), cache_prompt=body.cache_prompt)
        return await _respond(request, backend, config, spec, body.stops(), body.stream, body.include_usage(),
                              ChatShape(served.model_id))

    @app.post("/v1/completions")
    async def completions(body: CompletionRequest, request: Request) -> Response:
        served = _check(body, backend)
        spec = JobSpec("completion", _params(config, body), prompt_text=body.prompt_text(), max_tokens=body.max_tokens,
                       cache_prompt=body.cache_prompt)
        return await _respond(request, backend, config, spec, body.stops(), body.stream, body.include_usage(),
                              CompletionShape(served.model_id))

    return app


def asgi_app(backend: Backend, config: ApiConfig) -> ASGIApp:
    """The app with its guard (auth, body limit) and, when asked for, CORS: what uvicorn serves."""
    guarded: ASGIApp = Guard(create_app(backend, config), config.api_key, config.max_body_bytes)
    if config.cors_origins:
        from starlette.middleware.cors import CORSMiddleware

        guarded = CORSMiddleware(guarded, allow_origins=list(config.cors_origins), allow_methods=["GET", "POST"],
                                 allow_headers=["Authorization", "Content-Type"])
    return guarded


# --- requests -----------------------------------------------------------------------------------------------------

def _served(backend: Backend) -> Served:
    served = backend.served
    if served is None:
        raise not_ready(backend.load_error or "the models are still loading.")
    return served


def _check(body: ChatRequest | CompletionRequest, backend: Backend) -> Served:
    served = _served(backend)
    if not served.accepts(body.model):
        raise _unknown_model(body.model, served)
    body.refuse_unsupported()
    return served


def _unknown_model(name: str, served: Served) -> ApiError:
    return ApiError(404, f"The model '{name}' does not exist: this server has loaded '{served.model_id}' (also "
                         "reachable as 'specchat').", "model", "model_not_found")


def _model_card(served: Served) -> dict[str, Any]:
    return {"id": served.model_id, "object": "model", "created": served.loaded_at, "owned_by": "specchat",
            "specchat": {"target": str(served.target), "draft": str(served.draft) if served.draft else None,
                         "mode": served.mode, "n_ctx": served.n_ctx}}


def _params(config: ApiConfig, body: ChatRequest | CompletionRequest) -> GenParams:
    defaults, values = config.live() if config.live is not None else (config.defaults, config.sampling)
    sampling = SamplingParams(
        temperature=_pick(body.temperature, values.temperature), top_k=_pick(body.top_k, values.top_k),
        top_p=_pick(body.top_p, values.top_p), min_p=_pick(body.min_p, values.min_p), seed=body.seed,
        repeat_penalty=_pick(body.repeat_penalty, values.repeat_penalty), repeat_last_n=values.repeat_last_n,
        frequency_penalty=_pick(body.frequency_penalty, values.frequency_penalty),
        presence_penalty=_pick(body.presence_penalty, values.presence_penalty))
    try:
        sampling.validate()
    except ValueError as error:
        raise ApiError(400, str(error), None, "invalid_value") from error
    return replace(defaults, sampling=sampling)


def _pick(value: Any, default: Any) -> Any:
    return default if value is None else value


def validation_error(errors: Any) -> ApiError:
    """pydantic's first complaint as OpenAI words it, naming the field as OpenAI does (messages[0].content)."""
    first: dict[str, Any] = dict(errors[0]) if errors else {"loc": (), "msg": "invalid request", "type": ""}
    loc = [part for part in first.get("loc", ()) if part != "body"]
    kind = first.get("type", "")
    if kind == "json_invalid":
        return ApiError(400, "The request body is not valid JSON: " + str(first.get("ctx", {}).get("error", "")),
                        None, "invalid_json")
    # pydantic names the union member it tried ("str", "list[TextPart]", "function-after"...): not a field
    loc = [part for part in loc if not (isinstance(part, str) and ("[" in part or part in ("str", "int", "float",
                                                                                             "bool", "list")))]
    param = _param_name(loc)
    if not param:
        return ApiError(400, "The request body must be a JSON object.", None, "invalid_request")
    if kind == "missing":
        return ApiError(400, f"Missing required parameter: '{param}'.", param, "missing_required_parameter")
    value = first.get("input")
    shown = json.dumps(value)[:80] if _jsonable(value) else type(value).__name__
    return ApiError(400, f"Invalid value for '{param}': {first.get('msg', 'invalid')} (got {shown}).", param,
                    "invalid_type" if kind.endswith("_type") or kind.endswith("_parsing") else "invalid_value")


def _param_name(loc: list[Any]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _jsonable(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


# --- responses ----------------------------------------------------------------------------------------------------

class ChatShape:
    obj, chunk_obj, prefix = "chat.completion", "chat.completion.chunk", "chatcmpl-"

    def __init__(self, model: str) -> None:
        self.model = model

    def choice(self, state: ReplyState) -> dict[str, Any]:
        return {"index": 0, "message": {"role": "assistant", "content": state.text, "refusal": None},
                "logprobs": None, "finish_reason": state.finish_reason}

    def delta(self, text: str | None, finish: str | None, first: bool = False) -> dict[str, Any]:
        delta: dict[str, Any] = {}
        if first:
            delta = {"role": "assistant", "content": ""}
        elif text is not None:
            delta = {"content": text}
        return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}


class CompletionShape(ChatShape):
    obj, chunk_obj, prefix = "text_completion", "text_completion", "cmpl-"

    def choice(self, state: ReplyState) -> dict[str, Any]:
        return {"index": 0, "text": state.text, "logprobs": None, "finish_reason": state.finish_reason}

    def delta(self, text: str | None, finish: str | None, first: bool = False) -> dict[str, Any]:
        return {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish}


async def _respond(request: Request, backend: Backend, config: ApiConfig, spec: JobSpec, stops: tuple[str, ...],
                   stream: bool, include_usage: bool, shape: ChatShape) -> Response:
    loop = asyncio.get_running_loop()
    items: asyncio.Queue[object] = asyncio.Queue()

    def deliver(item: object) -> None:  # on the engine thread
        loop.call_soon_threadsafe(items.put_nowait, item)

    job = Job(spec, deliver)
    state = ReplyState(stops, job.cancel)
    backend.submit(job)  # 429 / 503 raise here
    try:
        first = await _next(items, request, job)
    except BaseException:
        job.cancel.set()
        raise
    if isinstance(first, Failed):
        raise first.error
    if first is DONE:  # cancelled before it started: the client is gone, nobody reads this
        return Response(status_code=499)
    state.feed(first)
    created = int(time.time())
    rid = shape.prefix + job.id
    if not stream:
        try:
            while (item := await _next(items, request, job)) is not DONE:
                if isinstance(item, Failed):
                    raise item.error
                state.feed(item)
        finally:
            job.cancel.set()
        return JSONResponse({"id": rid, "object": shape.obj, "created": created, "model": shape.model,
                             "system_fingerprint": "specchat", "choices": [shape.choice(state)],
                             "usage": state.usage(), "timings": state.timings(), "specchat": state.figures()})

    def chunk(choices: list[dict[str, Any]], **extra: Any) -> str:
        body = {"id": rid, "object": shape.chunk_obj, "created": created, "model": shape.model,
                "system_fingerprint": "specchat", "choices": choices, **extra}
        return f"data: {json.dumps(body, ensure_ascii=False)}\n\n"

    async def events() -> AsyncIterator[str]:
        try:
            if isinstance(shape, ChatShape) and not isinstance(shape, CompletionShape):
                yield chunk([shape.delta(None, None, first=True)], **({"usage": None} if include_usage else {}))
            while (item := await items.get()) is not DONE:
                if isinstance(item, Failed):  # mid-stream: OpenAI's streams end with an error event
                    yield f"data: {json.dumps(item.error.body())}\n\n"
                    return
                text = state.feed(item)
                if text:
                    yield chunk([shape.delta(text, None)], **({"usage": None} if include_usage else {}))
            yield chunk([shape.delta(None, state.finish_reason)], timings=state.timings(), specchat=state.figures(),
                        **({"usage": None} if include_usage else {}))
            if include_usage:
                yield chunk([], usage=state.usage())
            yield "data: [DONE]\n\n"
        finally:
            job.cancel.set()  # the client left (Starlette cancels this generator), or the reply ended

    return StreamingResponse(events(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


async def _next(items: asyncio.Queue[object], request: Request, job: Job) -> object:
    """The job's next item; a client that disconnects meanwhile cancels the job (checked twice a second)."""
    while True:
        try:
            return await asyncio.wait_for(items.get(), 0.5)
        except TimeoutError:
            if await request.is_disconnected():
                job.cancel.set()
                while await items.get() is not DONE:  # let the engine thread finish its part
                    pass
                return DONE


# --- the guard ----------------------------------------------------------------------------------------------------

class Guard:
    """Auth on /v1 (when a key is set: `Authorization: Bearer KEY`) and the body size limit, before any handler."""

    def __init__(self, app: ASGIApp, api_key: str | None, max_body: int) -> None:
        self.app, self.api_key, self.max_body = app, api_key, max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        if self.api_key and scope["path"].startswith("/v1"):
            given = headers.get("authorization", "")
            token = given[7:].strip() if given.lower().startswith("bearer ") else ""
            if not hmac.compare_digest(token.encode(), self.api_key.encode()):
                what = "No API key was given" if not given else "The API key is not this server's"
                await _send_error(send, ApiError(401, f"{what}: send 'Authorization: Bearer KEY' with the key the "
                                                      "server was started with (--api-key).", None, "invalid_api_key",
                                                 headers={"WWW-Authenticate": "Bearer"}))
                return
        length = headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > self.max_body:
            await _send_error(send, _too_large(self.max_body))
            return
        await self.app(scope, self._limited(receive, send), send)

    def _limited(self, receive: Receive, send: Send) -> Receive:
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_body:
                    raise ApiError(413, _too_large(self.max_body).message, None, "request_too_large")
            return message
        return limited


def _too_large(limit: int) -> ApiError:
    return ApiError(413, f"The request body is larger than this server's limit of {limit >> 20} MiB "
                         "(--max-body-mb).", None, "request_too_large")


async def _send_error(send: Callable[[Message], Awaitable[None]], error: ApiError) -> None:
    body = json.dumps(error.body()).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    headers += [(k.lower().encode(), v.encode()) for k, v in error.headers.items()]
    await send({"type": "http.response.start", "status": error.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
