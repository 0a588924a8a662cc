"""`specchat` command line. Flags follow llama.cpp's names where one exists.

Every handler returns an exit status; bad input ends in one clear line on stderr and exit 2, never a
traceback. The GUI adds its own `gui` command through `extra_commands` (app/ never imports Qt).
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from app.cli.options import EXIT_BAD_INPUT, UserError, add_generation_args, add_model_args

Register = Callable[["argparse._SubParsersAction[argparse.ArgumentParser]"], object]


# The handlers that load models import the engine (and with it llama_cpp) only when they run, so
# `specchat --help` and the GUI's start-up do not pay for it.
def _cmd_generate(args: argparse.Namespace) -> int:
    from app.cli.generate import cmd_generate

    return cmd_generate(args)


def _cmd_bench(args: argparse.Namespace) -> int:
    from app.cli.bench import run_bench_cli

    return run_bench_cli(args)


def _cmd_bench_run(args: argparse.Namespace) -> int:
    from app.cli.bench_child import main as bench_run

    return bench_run(args.request, args.result)


def add_bench_args(bench: argparse.ArgumentParser) -> None:
    """`bench`'s flags (tools/bench's research bench takes them too, and adds its own)."""
    bench.add_argument("--prompts", type=Path, help="JSONL file: {\"id\", \"kind\"?, \"n_predict\"?} with "
                       "\"prompt\" (a string) or \"messages\" (a list of {\"role\", \"content\"})")
    bench.add_argument("--json", action="store_true", help="print the whole report as one JSON object")
    bench.add_argument("--json-out", metavar="FILE", type=Path, default=None,
                       help="also write that JSON report to FILE (atomically), while printing the table")
    bench.add_argument("--modes", default="none,lookup,hybrid,draft",
                       help="comma-separated modes (none is always run; auto means lookup on a CPU build, "
                       "hybrid on a GPU build)")
    bench.add_argument("--repeat", type=int, default=3, help="timed rounds per prompt; medians are reported")
    bench.add_argument("--no-warmup", action="store_true", help="skip the untimed warm-up round")
    bench.add_argument("--compare-llama-cpp-python", action="store_true",
                       help="also time llama-cpp-python's own LlamaPromptLookupDecoding on each prompt")
    native = bench.add_argument_group("llama.cpp's own tools")
    native.add_argument("--native", type=Path, metavar="DIR", help="folder holding llama-completion and "
                        "llama-speculative-simple: run them on the same prompt tokens, in the same rounds")
    native.add_argument("--native-modes",
                        default="plain,draft-simple,draft-mtp,ngram-simple,ngram-map-k,ngram-map-k4v,ngram-mod",
                        help="comma-separated llama.cpp modes: plain, plain-again, server-plain, draft-simple, "
                             "draft-mtp (the target's MTP head; skipped for a target without one), "
                             "ngram-simple, ngram-map-k, ngram-map-k4v, ngram-mod (llama.cpp's --spec-default), "
                             "ngram-cache (plain is always run; plain-again runs it twice per round, an A/A control "
                             "that shows the machine's noise floor; server-plain times llama-server, loaded once "
                             "for the whole bench: with --processes shared, long-lived against long-lived)")
    native.add_argument("--native-timeout", type=float, default=600.0, metavar="S",
                        help="seconds one llama.cpp run may take")
    bench.add_argument("--processes", choices=("auto", "fresh", "shared"), default="auto",
                       help="fresh: each timed SpecChat run in a process of its own, started as llama.cpp's runs "
                       "are (some machines decode faster in a child while the parent holds the models); "
                       "shared: all in the bench's process; auto: fresh with --native, else shared")
    native.add_argument("--native-args", default="", metavar="ARGS",
                        help="extra arguments for every llama.cpp run, as one string: "
                        "--native-args='--spec-ngram-simple-size-n 3'")
    add_model_args(bench)
    add_generation_args(bench)


def build_parser(extra_commands: Sequence[Register] = ()) -> argparse.ArgumentParser:
    from app.cli import bench_serve as cli_bench_serve
    from app.cli import chats as cli_chats
    from app.cli import hub as cli_hub
    from app.cli import models as cli_models
    from app.cli import rpc_proxy as cli_rpc_proxy
    from app.cli import rpc_server as cli_rpc_server
    from app.cli import serve as cli_serve

    parser = argparse.ArgumentParser(prog="specchat", description="Speculative decoding made visible.")
    parser.add_argument("-v", "--verbose", action="store_true", help="show llama.cpp's log")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    gen = sub.add_parser("generate", help="generate a reply, coloured by each token's fate")
    gen.add_argument("-p", "--prompt", required=True)
    gen.add_argument("--raw", action="store_true", help="no chat template: continue the prompt text as is")
    gen.add_argument("--prediction", type=Path, metavar="FILE", default=None,
                     help="text the reply is expected to mostly repeat (the file being edited): its tokens are drafted "
                     "wherever the reply follows them, as OpenAI's predicted outputs")
    gen.add_argument("--json", action="store_true", help="print one JSON object instead of coloured text")
    gen.add_argument("--show-rejected", action="store_true", help="show rejected drafts struck through")
    gen.add_argument("--no-color", action="store_true")
    gen.add_argument("--color", action="store_true", help="colour even when stdout is not a terminal")
    add_model_args(gen)
    add_generation_args(gen)
    gen.set_defaults(func=_cmd_generate)

    bench = sub.add_parser("bench", help="plain vs lookup vs draft on a prompt suite, side by side",
                           description="Every mode on every prompt, interleaved in rotated rounds after an untimed "
                           "warm-up; medians and same-round ratios. --native DIR adds llama.cpp's own tools.")
    add_bench_args(bench)
    bench.set_defaults(func=_cmd_bench)
    bench_run = sub.add_parser("bench-run", help="(started by `bench --processes fresh`) one timed run in its "
                               "own process")
    bench_run.add_argument("request", type=Path, help="the pickled request `bench` wrote")
    bench_run.add_argument("result", type=Path, help="where to write the pickled result")
    bench_run.set_defaults(func=_cmd_bench_run)

    cli_models.register(sub, models_hooks=(cli_hub.register_models_hooks,))
    cli_chats.register(sub)
    cli_rpc_server.register(sub)
    cli_rpc_proxy.register(sub)
    cli_serve.register(sub)
    cli_bench_serve.register(sub)
    try:
        from app.cli import memory as cli_memory
    except ImportError:  # pragma: no cover - lands with the memory meter
        cli_memory = None  # type: ignore[assignment]
    if cli_memory is not None:
        cli_memory.register(sub)
    for register in extra_commands:
        register(sub)
    return parser


def main(argv: Sequence[str] | None = None, extra_commands: Sequence[Register] = (),
         default_command: str | None = None) -> int:
    return run(build_parser(extra_commands), argv, default_command)


def run(parser: argparse.ArgumentParser, argv: Sequence[str] | None = None, default_command: str | None = None) -> int:
    """Parse `argv` and run its command's handler: bad input ends in one line, `PROG: error: ...`, and exit 2.
    (tools/bench runs its research commands through this too.)"""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv and default_command:
        argv = [default_command]
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if getattr(args, "verbose", False) else logging.ERROR, format="%(message)s")
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_BAD_INPUT
    from app.llama_backend import LlamaError
    from app.memory import PredictionError, WontFitError
    from app.models.chat_template import ChatTemplateError
    from app.models.gguf_meta import GGUFError

    try:
        return int(args.func(args))
    except (UserError, LlamaError, GGUFError, ChatTemplateError, WontFitError, PredictionError, ValueError,
            OSError) as exc:
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
