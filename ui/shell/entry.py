"""Console entry points: `specchat` (every command, `gui` by default) and `specchat-gui`.

app/ must not import Qt, so the `gui` command is registered from here; Qt is imported only inside
its handler, and `specchat generate` never loads it. Nothing that needs NumPy or Qt is imported before the
processor is checked (app/cpu_floor.py): on a CPU older than x86-64-v2 they die with "Illegal instruction".
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from app.cpu_floor import refuse_if_too_old
from ui.shell.platform_check import refuse_if_broken, show_outside_terminal


def _register_gui(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    from app.cli.options import add_generation_args, add_model_args

    gui = subparsers.add_parser("gui", help="open the chat window (the default with no command)")
    gui.add_argument("--prompt", help="submit this prompt as soon as the models are loaded")
    gui.add_argument("--compare", action="store_true", help="side-by-side comparison on (plain vs speculative)")
    gui.add_argument("--screenshot", type=Path, metavar="PATH",
                     help="save a PNG of the window once generation has finished (of the picker with --open-picker)")
    gui.add_argument("--quit-when-done", action="store_true", help="quit after the prompt (and screenshot)")
    gui.add_argument("--open-picker", action="store_true", help="open the model picker at start")
    gui.add_argument("--theme", choices=("system", "light", "dark"), help="override the theme setting")
    gui.add_argument("--system", metavar="TEXT", help="system prompt for this session's chats without their own")
    gui.add_argument("--stall-report", type=Path, metavar="FILE",
                     help="record the GUI thread's longest stalls while replies stream; write them to FILE as JSON")
    add_model_args(gui)
    add_generation_args(gui)
    gui.set_defaults(func=_cmd_gui)


def _cmd_gui(args: argparse.Namespace) -> int:
    if code := refuse_if_broken():  # before QApplication, which aborts on a missing xcb library
        return code
    from ui.shell.app import run_gui

    return run_gui(args)


def main(argv: Sequence[str] | None = None) -> int:
    if code := refuse_if_too_old(show_outside_terminal):
        return code
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--self-test"]:
        from ui.shell.selftest_gui import main as selftest_main

        return selftest_main(args[1:])
    from app.cli import main as cli

    return cli.main(args, extra_commands=[_register_gui], default_command="gui")


def gui_main() -> None:
    sys.exit(main())


if __name__ == "__main__":
    sys.exit(main())
