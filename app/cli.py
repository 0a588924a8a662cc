"""`specchat` command line. Flags follow llama.cpp's names where one exists.

Every handler returns an exit status; bad input ends in one clear line on stderr and exit 2, never a
traceback. The GUI adds its own `gui` command through `extra_commands` (app/ never imports Qt).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path

from app import settings as settings_mod
from app.engine import SpecParams
from app.events import FinishEvent, StepEvent
from app.sampling import SamplingParams
from app.session import GenParams, PairConfig

EXIT_BAD_INPUT = 2
Register = Callable[["argparse._SubParsersAction[argparse.ArgumentParser]"], object]


class UserError(Exception):
    """Bad input: printed as one line, exit 2."""


def add_model_args(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("models")
    g.add_argument("-m", "--model", type=Path, help="target GGUF (default: the demo pair's target)")
    g.add_argument("-md", "--model-draft", type=Path, help="draft GGUF (default: the demo pair's draft)")
    g.add_argument("-ngl", "--n-gpu-layers", type=int, default=None, help="target layers on the GPU (-1: all)")
    g.add_argument("-ngld", "--n-gpu-layers-draft", type=int, default=None, help="draft layers on the GPU")
    g.add_argument("-c", "--ctx-size", type=int, default=None, help="context size in tokens")
    g.add_argument("-t", "--threads", type=int, default=None, help="CPU threads (default: physical cores)")
    g.add_argument("--no-flash-attn", action="store_true", help="turn flash attention off")
    g.add_argument("--force", action="store_true", help="load even if the pair is predicted not to fit in memory")
    g.add_argument("--repack", action="store_true", help="repack CPU weights: faster prompts, but verify "
                   "batches then round differently from one-token steps (near-ties may flip)")


def add_generation_args(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("generation")
    g.add_argument("--mode", choices=("draft", "lookup", "none"), help="drafting mode (default: draft with a draft "
                   "model, else lookup)")
    g.add_argument("-n", "--n-predict", type=int, default=None, help="tokens to generate")
    g.add_argument("--draft-max", type=int, default=None, help="most tokens drafted per step (K)")
    g.add_argument("--draft-min", type=int, default=None, help="fewest tokens drafted before --draft-p-min may cut")
    g.add_argument("--draft-p-min", type=float, default=None, help="stop drafting below this draft confidence")
    g.add_argument("--no-adapt", action="store_true", help="fixed K: the governor neither shrinks K nor stops drafting")
    g.add_argument("--temp", type=float, default=None, help="temperature (0: greedy, exact token-for-token)")
    g.add_argument("--top-k", type=int, default=None)
    g.add_argument("--top-p", type=float, default=None)
    g.add_argument("--min-p", type=float, default=None)
    g.add_argument("--seed", type=int, default=None)


def _pick(value: object, default: object) -> object:
    return default if value is None else value


def resolve_models(args: argparse.Namespace, settings: settings_mod.Settings) -> tuple[Path, Path | None]:
    """-m/-md, else the configured models, else the demo pair; never a silent substitute."""
    target = args.model or (Path(settings.target_path) if settings.target_path else None)
    draft = args.model_draft
    if target is None:
        from app.demo_pair import demo_pair_paths

        demo = demo_pair_paths()
        if demo is None:
            raise UserError("No model given and the demo pair is not downloaded: run `specchat models fetch-demo`, "
                            "or pass -m TARGET.GGUF [-md DRAFT.GGUF].")
        return demo.target, draft or demo.draft
    if draft is None and args.model is None and settings.draft_path:
        draft = Path(settings.draft_path)
    for role, path in (("target", target), ("draft", draft)):
        if path is not None and not Path(path).is_file():
            raise UserError(f"The {role} model {path} does not exist. Check the path or run `specchat models list`.")
    return Path(target), Path(draft) if draft else None


def pair_config(args: argparse.Namespace, settings: settings_mod.Settings, target: Path,
                draft: Path | None) -> PairConfig:
    cfg = settings.pair_config(target, draft)
    return PairConfig(
        target, draft,
        n_gpu_layers=int(_pick(args.n_gpu_layers, cfg.n_gpu_layers)),  # type: ignore[call-overload]
        n_gpu_layers_draft=int(_pick(args.n_gpu_layers_draft, cfg.n_gpu_layers_draft)),  # type: ignore[call-overload]
        n_ctx=int(_pick(args.ctx_size, cfg.n_ctx)),  # type: ignore[call-overload]
        n_threads=int(_pick(args.threads, cfg.n_threads)),  # type: ignore[call-overload]
        flash_attn=cfg.flash_attn and not args.no_flash_attn,
        repack=cfg.repack or args.repack,
        force=args.force,
    )


def gen_params(args: argparse.Namespace, settings: settings_mod.Settings, has_draft: bool) -> GenParams:
    mode = args.mode or ("draft" if has_draft else "lookup")
    s = settings
    return GenParams(
        mode=mode,
        n_predict=int(_pick(args.n_predict, s.n_predict)),  # type: ignore[call-overload]
        sampling=SamplingParams(
            float(_pick(args.temp, s.temperature)),  # type: ignore[arg-type]
            int(_pick(args.top_k, s.top_k)),  # type: ignore[call-overload]
            float(_pick(args.top_p, s.top_p)),  # type: ignore[arg-type]
            float(_pick(args.min_p, s.min_p)),  # type: ignore[arg-type]
            args.seed if args.seed is not None else s.seed,
        ),
        spec=SpecParams(
            draft_max=int(_pick(args.draft_max, s.draft_max)),  # type: ignore[call-overload]
            draft_min=int(_pick(args.draft_min, s.draft_min)),  # type: ignore[call-overload]
            p_min=float(_pick(args.draft_p_min, s.draft_p_min)),  # type: ignore[arg-type]
            adaptive=s.adaptive and not args.no_adapt,
        ),
    )


def stats_json(finish: FinishEvent) -> dict[str, object]:
    stats = asdict(finish.stats)
    return {
        "text": finish.text,
        "prompt_tokens": list(finish.prompt_tokens),
        "tokens": list(finish.tokens),
        "mode": finish.stats.mode,
        "stats": stats,
    }


def _cmd_generate(args: argparse.Namespace) -> int:
    from app.cli_render import TerminalRenderer, format_stats
    from app.session import SpecSession

    settings, warning = settings_mod.load()
    if warning:
        print(f"specchat: warning: {warning}", file=sys.stderr)
    target, draft = resolve_models(args, settings)
    params = gen_params(args, settings, draft is not None)
    if params.mode == "draft" and draft is None:
        raise UserError("--mode draft needs a draft model (-md DRAFT.GGUF); --mode lookup speculates without one.")
    if params.mode != "draft":
        draft = None  # do not load a model that will not be used
    cfg = pair_config(args, settings, target, draft)
    renderer = TerminalRenderer(colour=not args.no_color and sys.stdout.isatty() or args.color,
                                show_rejected=args.show_rejected)
    cancel = threading.Event()
    steps: list[dict[str, object]] = []
    finish: FinishEvent | None = None
    with SpecSession(cfg) as session:
        prompt = (session.target_model.tokenize(args.prompt) if args.raw
                  else session.chat_prompt([{"role": "user", "content": args.prompt}]))
        try:
            for event in session.generate(prompt, params, cancel):
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
        data["steps"] = steps
        print(json.dumps(data))
    else:
        legend = renderer.legend()
        print(("\n" + legend) if legend else "", file=sys.stderr)
        print(format_stats(finish.stats), file=sys.stderr)
    return 0


def _cmd_bench(args: argparse.Namespace) -> int:
    from app.bench import run_bench_cli

    return run_bench_cli(args)


def build_parser(extra_commands: Sequence[Register] = ()) -> argparse.ArgumentParser:
    from app import cli_hub, cli_models

    parser = argparse.ArgumentParser(prog="specchat", description="Speculative decoding made visible.")
    parser.add_argument("-v", "--verbose", action="store_true", help="show llama.cpp's log")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    gen = sub.add_parser("generate", help="generate a reply, coloured by each token's fate")
    gen.add_argument("-p", "--prompt", required=True)
    gen.add_argument("--raw", action="store_true", help="no chat template: continue the prompt text as is")
    gen.add_argument("--json", action="store_true", help="print one JSON object instead of coloured text")
    gen.add_argument("--show-rejected", action="store_true", help="show rejected drafts struck through")
    gen.add_argument("--no-color", action="store_true")
    gen.add_argument("--color", action="store_true", help="colour even when stdout is not a terminal")
    add_model_args(gen)
    add_generation_args(gen)
    gen.set_defaults(func=_cmd_generate)

    bench = sub.add_parser("bench", help="plain vs lookup vs draft on a prompt suite, side by side")
    bench.add_argument("--prompts", type=Path, help="JSONL file of {\"id\", \"prompt\"} objects")
    bench.add_argument("--json", action="store_true")
    bench.add_argument("--modes", default="none,lookup,draft", help="comma-separated modes (none is always run)")
    bench.add_argument("--repeat", type=int, default=1, help="rounds per prompt; medians are reported")
    bench.add_argument("--compare-llama-cpp-python", action="store_true",
                       help="also time llama-cpp-python's own LlamaPromptLookupDecoding on each prompt")
    add_model_args(bench)
    add_generation_args(bench)
    bench.set_defaults(func=_cmd_bench)

    cli_models.register(sub, models_hooks=(cli_hub.register_models_hooks,))
    try:
        from app import cli_memory
    except ImportError:  # pragma: no cover - lands with the memory meter
        cli_memory = None  # type: ignore[assignment]
    if cli_memory is not None:
        cli_memory.register(sub)
    for register in extra_commands:
        register(sub)
    return parser


def main(argv: Sequence[str] | None = None, extra_commands: Sequence[Register] = (),
         default_command: str | None = None) -> int:
    parser = build_parser(extra_commands)
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv and default_command:
        argv = [default_command]
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.ERROR, format="%(message)s")
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_BAD_INPUT
    from app.chat_template import ChatTemplateError
    from app.gguf_meta import GGUFError
    from app.llama_backend import LlamaError
    from app.memory import PredictionError, WontFitError

    try:
        return int(args.func(args))
    except (UserError, LlamaError, GGUFError, ChatTemplateError, WontFitError, PredictionError, ValueError,
            OSError) as exc:
        print(f"specchat: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
