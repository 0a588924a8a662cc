"""`python -m tools.bench`'s commands: `bench` (specchat bench plus the copy bound and a replay corpus),
`bench-replay` and `bench-pool`. Errors read as the product's: one line and exit 2 (app.cli.main.run)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from app.cli.main import add_bench_args, run
from tools.bench import bench_pool, bench_replay

PROG = "python -m tools.bench"


def _cmd_bench(args: argparse.Namespace) -> int:
    from app.cli.bench import run_bench_cli
    from tools.bench.copy_bound_report import CopyBoundReport

    wanted = args.copy_bound or args.replay_out is not None
    return run_bench_cli(args, [CopyBoundReport(args.replay_out, args.replay_name)] if wanted else [])


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description="SpecChat's research bench (a source checkout only).")
    parser.add_argument("-v", "--verbose", action="store_true", help="show llama.cpp's log")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    bench = sub.add_parser("bench", help="`specchat bench`, plus the copy bound and a replay corpus",
                           description="`specchat bench` with every one of its flags, plus the research sections.")
    add_bench_args(bench)
    research = bench.add_argument_group("research")
    research.add_argument("--copy-bound", action="store_true",
                          help="also time the target's passes by row count and print, per prompt, the most any copy "
                          "drafter could gain on its plain reply with those costs, and SpecChat's lookup replayed on "
                          "the same reply and costs")
    research.add_argument("--replay-out", metavar="FILE", type=Path, default=None,
                          help="also write each prompt's tokens, its plain reply and the row costs (as --copy-bound "
                          f"times them) to FILE, a corpus for `{PROG} bench-replay`")
    research.add_argument("--replay-name", metavar="NAME", default=None,
                          help="the corpus's name in bench-replay's tables (default: FILE's name without .json)")
    bench.set_defaults(func=_cmd_bench)
    bench_replay.register(sub)
    bench_pool.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    return run(build_parser(), argv)
