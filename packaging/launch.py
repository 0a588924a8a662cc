"""Entry script of the packaged app (PyInstaller runs this file as `__main__`).

    SpecChat                         the chat window (same as `specchat gui`)
    SpecChat generate -p ... | bench | models ...   every `specchat` command
    SpecChat --self-test [--model GGUF] [--no-gui]  load a small model, generate, open the window
    SpecChat --startup-probe [...]   print seconds from process start to the window on screen

`--self-test` and `--startup-probe` are handled here, before the command line reaches the app, so
the bundle can check itself whatever the app's parser looks like.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def _app_main(argv: list[str]) -> int:
    try:
        from ui.shell.entry import main
    except ImportError:  # a build of the engine only, without the GUI package
        from app.cli.main import main
    return int(main(argv) or 0)


def run(argv: list[str]) -> int:
    if argv[:1] == ["--self-test"]:
        from ui.shell.selftest_gui import main as selftest_main

        return selftest_main(argv[1:])
    probe = os.environ.get("SPECCHAT_STARTUP_PROBE")
    if "--startup-probe" in argv:
        argv = [a for a in argv if a != "--startup-probe"]
        probe = probe or "-"
    if probe:
        from ui.shell.platform_check import refuse_if_broken
        from ui.shell.selftest_gui import install_startup_probe

        if code := refuse_if_broken():  # the probe creates the QApplication: check before it
            return code

        install_startup_probe(None if probe == "-" else Path(probe), os.environ.get("SPECCHAT_STARTUP_PROBE_QUIT", ""))
    return _app_main(argv)


def _log_without_console() -> None:
    """A windowed build (macOS, Windows) has no console: sys.stdout/stderr are None there. Send
    them to a log file in the cache folder, where tracebacks can still be found."""
    if sys.stdout is not None and sys.stderr is not None:
        return
    try:
        from app import paths

        folder = paths.cache_dir()
        folder.mkdir(parents=True, exist_ok=True)
        stream = open(folder / "specchat.log", "w", encoding="utf-8", buffering=1)  # noqa: SIM115
    except OSError:
        stream = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115
    sys.stdout = sys.stdout or stream
    sys.stderr = sys.stderr or stream


if __name__ == "__main__":
    _log_without_console()  # (the processor was checked before this, by rthooks/pyi_rth_cpu_floor.py)
    sys.exit(run(sys.argv[1:]))
