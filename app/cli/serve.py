"""`specchat serve`: the OpenAI-compatible local server (app/server) on a loaded pair, in the foreground."""

from __future__ import annotations

import argparse
import os
import sys

from app import settings as settings_mod
from app.cli.options import UserError, add_generation_args, add_model_args, gen_params, pair_config, resolve_models
from app.engine.drafters import NEEDS_DRAFT
from app.engine.sampling import SamplingParams
from app.models.recommended_sampling import SamplingValues, recommended_for

DEFAULT_PORT = 8080


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "serve", help="serve an OpenAI-compatible API (chat completions with Predicted Outputs) on this pair",
        description="Editors, agents and scripts talk to the loaded pair as to OpenAI: POST /v1/chat/completions "
        "(streaming or not; `prediction` drafts from the text you expect back, verified exactly), /v1/completions, "
        "GET /v1/models, /health. Requests run one at a time on the engine thread; waiting ones queue.")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: only this "
                   "machine); any other needs --api-key")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"TCP port (default {DEFAULT_PORT}; 0: any free)")
    p.add_argument("--api-key", default=os.environ.get("SPECCHAT_API_KEY"),
                   help="require 'Authorization: Bearer KEY' on /v1 (default: $SPECCHAT_API_KEY, else none)")
    p.add_argument("--max-queue", type=int, default=16, help="requests running or waiting before more are "
                   "refused with 429 and Retry-After (default 16)")
    p.add_argument("--max-body-mb", type=int, default=8, help="largest request body in MiB (default 8)")
    p.add_argument("--cors-origin", action="append", default=[], metavar="ORIGIN",
                   help="allow browser pages from ORIGIN (repeatable; default: none)")
    add_model_args(p)
    add_generation_args(p)
    p.set_defaults(func=_cmd_serve)


def sampling_values(s: SamplingParams) -> SamplingValues:
    """The server's sampling for fields a request leaves out: the command's own (flags over the preset)."""
    return SamplingValues(s.temperature, s.top_k, s.top_p, s.min_p, s.repeat_penalty, s.repeat_last_n,
                          s.frequency_penalty, s.presence_penalty)


def _cmd_serve(args: argparse.Namespace) -> int:
    from app.engine.session import SpecSession
    from app.server.api import ApiConfig, asgi_app
    from app.server.engine_thread import EngineThread
    from app.server.runner import Address, BindRefused, bound_socket, check_bind, uvicorn_config

    if not 0 <= args.port < 65536:
        raise UserError(f"serve: --port {args.port} is not a TCP port (0-65535)")
    if args.max_queue < 1 or args.max_body_mb < 1:
        raise UserError("serve: --max-queue and --max-body-mb must be at least 1")
    try:
        check_bind(args.host, args.api_key)
    except BindRefused as error:
        raise UserError(f"serve: {error}") from error
    settings, warning = settings_mod.load()
    if warning:
        print(f"specchat: warning: {warning}", file=sys.stderr)
    target, draft = resolve_models(args, settings)
    params = gen_params(args, settings, draft is not None, recommended_for(target).values)
    if params.mode in NEEDS_DRAFT and draft is None:
        raise UserError(f"--mode {params.mode} needs a draft model (-md DRAFT.GGUF); --mode lookup speculates "
                        "without one.")
    if params.mode not in NEEDS_DRAFT:
        draft = None  # "auto" chose lookup on this build: do not load a model that will not be used
    cfg = pair_config(args, settings, target, draft)
    try:
        sock = bound_socket(args.host, args.port)  # a taken port fails before the models load
    except OSError as error:
        raise UserError(f"serve: {error.strerror}") from error
    sampling = sampling_values(params.sampling)
    engine = EngineThread(lambda: SpecSession(cfg), params.mode, args.max_queue)
    print(f"specchat: loading {target.name}" + (f" with draft {draft.name}" if draft else "") + " ...",
          file=sys.stderr, flush=True)
    if not engine.wait_ready():
        sock.close()
        print(f"specchat: error: {engine.load_error}", file=sys.stderr)
        return 1
    config = ApiConfig(params, sampling, args.api_key, args.max_body_mb << 20, tuple(args.cors_origin))
    address = Address(args.host, sock.getsockname()[1])
    print(f"specchat: serving {target.stem} (mode {params.mode}) at {address.base_url} "
          f"({'API key required' if args.api_key else 'no API key'}); Ctrl+C stops", file=sys.stderr, flush=True)
    import uvicorn

    try:
        uvicorn.Server(uvicorn_config(asgi_app(engine, config), args.host, address.port)).run(sockets=[sock])
    finally:
        sock.close()
        engine.close()
    return 0
