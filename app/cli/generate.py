"""`specchat generate`: one reply, streamed as coloured text or returned as one JSON object."""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
from dataclasses import asdict
from pathlib import Path

from app import settings as settings_mod
from app.cli.options import UserError, gen_params, pair_config, resolve_models
from app.cli.render import TerminalRenderer, format_stats
from app.engine.drafters import NEEDS_DRAFT
from app.engine.events import FinishEvent, StepEvent
from app.engine.sampling import SamplingParams
from app.engine.session import SpecSession, check_pair_or_raise
from app.models.recommended_sampling import recommended_for


def stats_json(finish: FinishEvent) -> dict[str, object]:
    stats = asdict(finish.stats)
    return {
        "text": finish.text,
        "prompt_tokens": list(finish.prompt_tokens),
        "tokens": list(finish.tokens),
        "mode": finish.stats.mode,
        "stats": stats,
    }


def describe_sampling(sampling: SamplingParams) -> str:
    if sampling.greedy and not sampling.penalized:
        return "greedy"
    parts = ["greedy" if sampling.greedy else
             f"temperature {sampling.temperature:g}, top-k {sampling.top_k}, top-p {sampling.top_p:g}, "
             f"min-p {sampling.min_p:g}"]
    if sampling.penalized:
        parts.append(f"penalties over the last {sampling.repeat_last_n} tokens: repeat {sampling.repeat_penalty:g}, "
                     f"frequency {sampling.frequency_penalty:g}, presence {sampling.presence_penalty:g}")
    if sampling.seed is not None and not sampling.greedy:
        parts.append(f"seed {sampling.seed}")
    return "; ".join(parts)


def _exit_on_rpc_drop() -> None:
    """A server that stops answering mid-reply: what was printed stays, the error names the server.

    ggml's RPC client cannot recover from a lost connection (the call that was waiting never
    returns), so the command ends here, with the bad-input exit status, instead of aborting.
    """
    from app.llama_backend import rpc

    def _drop(error: Exception) -> None:
        sys.stdout.flush()
        print(f"\nspecchat: error: {error}", file=sys.stderr, flush=True)
        os._exit(3)

    rpc.on_drop(_drop)


def _read_prediction(path: Path | None) -> str | None:
    """--prediction FILE's text (None without the flag); a file that cannot be read is the user's error."""
    if path is None:
        return None
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"Cannot read the prediction file {path}: {exc}") from exc


def cmd_generate(args: argparse.Namespace) -> int:
    settings, warning = settings_mod.load()
    if warning:
        print(f"specchat: warning: {warning}", file=sys.stderr)
    target, draft = resolve_models(args, settings)
    recommendation = recommended_for(target)
    preset = args.sampling or settings.sampling
    params = gen_params(args, settings, draft is not None, recommendation.values)
    sampling_info = {**asdict(params.sampling), "preset": preset,
                     "recommended_by": recommendation.source if preset == "recommended" else None}
    if params.mode in NEEDS_DRAFT and draft is None:
        raise UserError(f"--mode {params.mode} needs a draft model (-md DRAFT.GGUF); --mode lookup speculates "
                        "without one.")
    if params.mode not in NEEDS_DRAFT and draft is not None:
        if args.mode in (None, "auto"):
            # "auto" chose prompt lookup: say so, and still refuse a draft that could never speculate.
            check_pair_or_raise(target, draft)
            print(f"specchat: note: mode auto runs {params.mode} on this build (the draft model loses to plain "
                  "decoding on the CPU); --mode hybrid or draft uses it", file=sys.stderr)
        draft = None  # do not load a model that will not be used
    prediction_text = _read_prediction(args.prediction)
    cfg = pair_config(args, settings, target, draft)
    renderer = TerminalRenderer(colour=not args.no_color and sys.stdout.isatty() or args.color,
                                show_rejected=args.show_rejected)
    cancel = threading.Event()
    steps: list[dict[str, object]] = []
    finish: FinishEvent | None = None
    if cfg.rpc:
        _exit_on_rpc_drop()
    with SpecSession(cfg) as session:
        devices = session.device_layers() if args.json else []
        prompt = (session.target_model.tokenize(args.prompt) if args.raw
                  else session.chat_prompt([{"role": "user", "content": args.prompt}]))
        prediction = session.prediction_tokens(prediction_text) if prediction_text else None
        try:
            for event in session.generate(prompt, params, cancel, prediction):
                if isinstance(event, FinishEvent):
                    finish = event
                elif isinstance(event, StepEvent) and args.json:
                    steps.append(asdict(event))
                if not args.json:
                    renderer(event)
        except KeyboardInterrupt:
            cancel.set()
    if finish is None:
        return 130
    if args.json:
        data = stats_json(finish)
        data["sampling"] = sampling_info
        data["steps"] = steps
        data["devices"] = devices
        print(json.dumps(data))
    else:
        legend = renderer.legend()
        print(("\n" + legend) if legend else "", file=sys.stderr)
        print(format_stats(finish.stats), file=sys.stderr)
        source = f" ({recommendation.source})" if preset == "recommended" else ""
        print(f"sampling: {preset}{source}: {describe_sampling(params.sampling)}", file=sys.stderr)
    return 0
