"""`specchat gui`: the application object, the qasync loop, and the scripted options.

Order matters: the excepthook goes in first (errors in slots and async slots end up there), then
PySide6 is imported before qasync (qasync picks its Qt binding from what is already imported),
then the window is shown, and only then are models resolved and loaded on the worker thread.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import traceback
from dataclasses import replace
from pathlib import Path
from types import TracebackType
from typing import Any

import PySide6  # noqa: F401 - before qasync, so qasync binds to PySide6
from PySide6.QtCore import QLockFile, QObject, QTimer, Slot
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QApplication, QMessageBox, QWidget

from app import log_file
from app import settings as settings_mod
from app.settings import Settings

log = logging.getLogger(__name__)
_window: Any = None  # the main window, for the excepthook


def install_excepthook() -> None:
    """Log every uncaught exception with its traceback (the log file, the terminal) and show it in the window,
    with the details and where the log is: the app keeps running."""

    def hook(exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
        if issubclass(exc_type, KeyboardInterrupt):
            QApplication.quit()
            return
        log.critical("Uncaught exception", exc_info=(exc_type, exc, tb))
        details = "".join(traceback.format_exception(exc_type, exc, tb))
        where = log_file.current()
        text = f"Unexpected error: {exc_type.__name__}: {exc}. " + (
            f"The details are in the log, {where}." if where else "The details were printed to the terminal.")
        if _window is not None:
            _window.errors.show_message(text, "error", details=details)
            if isinstance(_window, QWidget):
                show_details_dialog(_window, text, details)
        elif QApplication.instance() is not None:
            QMessageBox.critical(None, "SpecChat", text)

    sys.excepthook = hook


def show_details_dialog(parent: QWidget, text: str, details: str) -> QMessageBox:
    """A non-modal box with the error and its traceback under "Show Details" (one at a time: an error in a
    loop must not stack dialogs)."""
    box = parent.findChild(QMessageBox, "uncaught-error")
    if not isinstance(box, QMessageBox):
        box = QMessageBox(QMessageBox.Icon.Critical, "SpecChat", text, QMessageBox.StandardButton.Close, parent)
        box.setObjectName("uncaught-error")
        box.setModal(False)
    box.setText(text)
    box.setDetailedText(details)
    box.show()
    return box


def settings_with_args(settings: Settings, args: argparse.Namespace) -> Settings:
    """Command-line flags override the saved settings for this session only."""
    pairs = {
        "mode": args.mode, "n_predict": args.n_predict, "seed": args.seed, "draft_max": args.draft_max,
        "draft_min": args.draft_min, "draft_p_min": args.draft_p_min, "n_ctx": args.ctx_size,
        "n_threads": args.threads, "n_gpu_layers": args.n_gpu_layers,
        "n_gpu_layers_draft": args.n_gpu_layers_draft, "theme": args.theme,
        "system_prompt": getattr(args, "system", None),
        "rpc": getattr(args, "rpc", None),
    }
    change: dict[str, Any] = {k: v for k, v in pairs.items() if v is not None}
    # Sampling: --sampling picks a preset; value flags alone edit the "custom" values and select
    # them, except a bare --temp 0, which means greedy (no penalties: the exact, comparable choice).
    values = {
        "temperature": args.temp, "top_k": args.top_k, "top_p": args.top_p, "min_p": args.min_p,
        "repeat_penalty": getattr(args, "repeat_penalty", None), "repeat_last_n": getattr(args, "repeat_last_n", None),
        "frequency_penalty": getattr(args, "frequency_penalty", None),
        "presence_penalty": getattr(args, "presence_penalty", None),
    }
    given = {k: v for k, v in values.items() if v is not None}
    change.update(given)
    if getattr(args, "sampling", None):
        change["sampling"] = args.sampling
    elif given == {"temperature": 0.0}:
        change["sampling"] = "greedy"
    elif given:
        change["sampling"] = "custom"
    if args.no_adapt:
        change["adaptive"] = False
    if args.no_flash_attn:
        change["flash_attn"] = False
    if args.strict:
        change["strict"] = True
    elif args.repack:
        change["strict"] = False
    if args.compare:
        change["compare"] = True
    return replace(settings, **change)


def resolve_pair(args: argparse.Namespace, settings: Settings) -> tuple[Path, Path | None] | None:
    """-m/-md, else the configured pair, else the demo pair if it is already verified; else None."""
    if args.model:
        return Path(args.model), Path(args.model_draft) if args.model_draft else None
    if settings.target_path:
        return Path(settings.target_path), Path(settings.draft_path) if settings.draft_path else None
    from app.models.demo_pair import demo_pair_paths

    demo = demo_pair_paths(hash_if_needed=False)  # never hash 1.5 GB before the window is up
    return (demo.target, args.model_draft or demo.draft) if demo else None


class Script(QObject):
    """Carries out --prompt, --open-picker, --screenshot and --quit-when-done."""

    def __init__(self, window: Any, args: argparse.Namespace) -> None:
        super().__init__(window)
        self.window = window
        self.args = args
        self.exit_code = 0
        self._shot_taken = False
        window.generationFinished.connect(self._on_window_generationFinished)
        window.modelsLoaded.connect(self._on_window_modelsLoaded)

    @Slot()
    def start(self) -> None:
        args, window = self.args, self.window
        for role, path in (("target", args.model), ("draft", args.model_draft)):
            if path is not None and not Path(path).is_file():
                window.errors.show_message(f"The {role} model {path} does not exist.", "error")
                self.exit_code = 2
                self._finish(None)
                return
        pair = resolve_pair(args, window.settings)
        if pair is not None:
            window.load_models(*pair)
            if args.prompt:
                window.submit(args.prompt)
        if args.open_picker or pair is None:
            # First launch without models (or asked): the picker. Its lists and checks fill off the GUI
            # thread: a picture of it waits until they are in (`settled`), a minute at most.
            dialog = window.open_picker()
            once = [False]

            def finish() -> None:
                if not once[0]:
                    once[0] = True
                    QTimer.singleShot(200, lambda: self._finish(dialog))  # the paint of the last results

            if dialog is not None and getattr(dialog, "busy", lambda: False)():
                dialog.settled.connect(finish)
                QTimer.singleShot(60_000, finish)
            else:
                finish()

    @Slot(object)
    def _on_window_modelsLoaded(self, _info: Any) -> None:
        if not self.args.prompt and not self.args.open_picker:
            self._finish(None)

    @Slot(bool)
    def _on_window_generationFinished(self, ok: bool) -> None:
        if not ok:
            self.exit_code = self.exit_code or 1
        if not self.args.open_picker:
            QTimer.singleShot(250, lambda: self._finish(None))  # let the Markdown render settle

    def _finish(self, dialog: QWidget | None) -> None:
        if self.args.screenshot and not self._shot_taken:
            self._shot_taken = True
            target = dialog if dialog is not None else self.window
            path = Path(self.args.screenshot)
            path.parent.mkdir(parents=True, exist_ok=True)
            if not target.grab().save(str(path), "PNG"):
                print(f"specchat: could not write the screenshot {path}", file=sys.stderr)
                self.exit_code = self.exit_code or 1
            else:
                print(f"screenshot saved: {path}", file=sys.stderr)
        if self.args.quit_when_done:
            if dialog is not None:
                dialog.close()
            self.window.close()
            QApplication.quit()


def profile_lock() -> QLockFile | None:
    """One window per profile: a second one would delete the first's temporary files and mark its
    live reply interrupted. A lock left by a crashed instance is stale and taken over."""
    from app import paths

    folder = paths.data_dir()
    folder.mkdir(parents=True, exist_ok=True)
    lock = QLockFile(str(folder / "specchat.lock"))
    lock.setStaleLockTime(0)  # stale only when its process is gone, however long it ran
    return lock if lock.tryLock(100) else None


def run_gui(args: argparse.Namespace) -> int:
    global _window
    log_file.install()  # before anything can fail: a menu launch has no terminal to read
    install_excepthook()
    app = QApplication.instance() or QApplication(sys.argv[:1])
    assert isinstance(app, QApplication)
    app.setApplicationName("SpecChat")
    app.setApplicationDisplayName("SpecChat")
    from ui.shell.app_identity import apply_identity

    apply_identity(app)  # setDesktopFileName("org.specchat.SpecChat") and the icon, before any window

    from ui.shell.main_window import MainWindow
    from ui.shell.theme import apply_theme

    lock = profile_lock()
    if lock is None:
        from app import paths

        text = (f"SpecChat is already running with this profile ({paths.data_dir()}). Switch to that window, "
                "or start another profile with SPECCHAT_HOME=/another/folder.")
        print(f"specchat: {text}", file=sys.stderr)
        QMessageBox.warning(None, "SpecChat", text)
        return 3
    saved, warning = settings_mod.load()
    settings = settings_with_args(saved, args)
    apply_theme(app, settings.theme)
    hints = QGuiApplication.styleHints()
    hints.colorSchemeChanged.connect(lambda _scheme: apply_theme(app, _window.settings.theme if _window else "system"))

    window = MainWindow(settings)
    window.force_load = bool(getattr(args, "force", False))
    _window = window
    from ui.shell.qt_check import refcount_bug

    broken = refcount_bug()
    if broken:
        print(f"specchat: warning: {broken}", file=sys.stderr)
    notes = [text for text in (broken, warning) if text]
    if notes:
        window.errors.show_message("\n".join(notes), "warning")
    script = Script(window, args)
    probe = None
    if getattr(args, "stall_report", None):
        from ui.shell.stall_probe import StallProbe

        probe = StallProbe(window, Path(args.stall_report))
    window.place_on_screen()
    window.show()

    import qasync

    async def until_quit() -> None:
        closing = asyncio.Event()
        app.aboutToQuit.connect(closing.set)
        QTimer.singleShot(0, script.start)  # models load once the window is on screen
        await closing.wait()

    try:
        qasync.run(until_quit())
    except asyncio.CancelledError:
        pass
    finally:
        _window = None
        lock.unlock()
        if probe is not None:
            probe.write()
        if window.worker.rpc_lost or window.worker.stuck:
            # The engine thread still waits (on a lost server, or a step that would not end) and cannot be joined;
            # everything is saved. Exit without destroying it, which would abort.
            logging.shutdown()
            sys.stdout.flush()
            os._exit(script.exit_code)
    return script.exit_code
