"""The GUI half of `--self-test`, and the startup probe that times launch → window on screen.

`main()` runs the engine check (`app.cli.selftest`) and then this one: a QApplication (offscreen unless
QT_QPA_PLATFORM says otherwise), the real main window on a throw-away profile, the small model
loaded through the worker thread, one short reply, a non-blank grab of the window, a clean close.
A bundle missing a Qt plugin, a resource or a library fails here.

The probe (`SPECCHAT_STARTUP_PROBE=FILE`, or `--startup-probe` to the packaged launcher) creates
the QApplication before the app does (the app reuses an existing one), watches for the first
exposed top-level window, and reports seconds since the process started; with
`SPECCHAT_STARTUP_PROBE_QUIT=window|models` it then closes the app, for repeatable timing.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from app.cli import selftest
from ui.shell.platform_check import refuse_if_broken


def process_age_s() -> float:
    """Seconds since this process was created (its exec, so a PyInstaller bootloader is included)."""
    try:  # Linux: both numbers in clock ticks since boot, 10 ms resolution, no wall-clock skew
        with open("/proc/self/stat", encoding="ascii") as f:
            start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime", encoding="ascii") as f:
            uptime = float(f.read().split()[0])
        return uptime - start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        import psutil

        return time.time() - psutil.Process().create_time()


def _wait(app: Any, done: Callable[[], bool], timeout_s: float) -> bool:
    from PySide6.QtCore import QEventLoop

    deadline = time.monotonic() + timeout_s
    while not done():
        if time.monotonic() > deadline:
            return False
        app.processEvents(QEventLoop.ProcessEventsFlag.AllEvents, 50)
        time.sleep(0.005)
    return True


def _blank(image: Any) -> bool:
    """True when a grab is one flat colour (nothing was painted)."""
    small = image.scaled(32, 20)
    first = small.pixel(0, 0)
    return all(small.pixel(x, y) == first for x in range(small.width()) for y in range(small.height()))


def _reply_through_worker(app: Any, window: Any, model: Path, timeout_s: float) -> str:
    """Load the model on the worker thread, send one prompt once it is in, wait for the reply."""
    started = time.perf_counter()
    loaded: list[object] = []
    finished: list[bool] = []
    window.modelsLoaded.connect(loaded.append)
    window.generationFinished.connect(finished.append)  # also emitted (False) when loading fails
    window.load_models(model, None)
    if not _wait(app, lambda: bool(loaded or finished), timeout_s):
        raise selftest.SelfTestError(f"the model did not load through the worker within {timeout_s:.0f} s")
    if not loaded:
        raise selftest.SelfTestError("loading the model through the worker failed; see the messages above")
    load_s = time.perf_counter() - started
    if not window.submit("Reply with one short greeting."):
        raise selftest.SelfTestError("the window refused the prompt")
    if not _wait(app, lambda: bool(finished), timeout_s):
        raise selftest.SelfTestError(f"no reply within {timeout_s:.0f} s")
    if not finished[0]:
        raise selftest.SelfTestError("the reply failed; see the messages above")
    return f"model loaded by the worker in {load_s:.1f} s, reply in {time.perf_counter() - started - load_s:.1f} s"


def run_gui_selftest(model: Path | None, timeout_s: float = 120.0) -> int:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    if code := refuse_if_broken():  # QT_QPA_PLATFORM=xcb without the X11 libraries: say which
        return code
    profile = tempfile.TemporaryDirectory(prefix="specchat-selftest-")
    app: Any = None
    window: Any = None
    saved_home = os.environ.get("SPECCHAT_HOME")
    os.environ["SPECCHAT_HOME"] = profile.name  # settings and chats of the test never touch the user's
    try:
        from PySide6 import __version__ as pyside_version
        from PySide6.QtCore import QLibraryInfo
        from PySide6.QtWidgets import QApplication

        from app.chat.conversations import ChatStore
        from app.settings import Settings
        from ui.shell.app_identity import apply_identity, icon_files
        from ui.shell.main_window import MainWindow

        app = QApplication.instance() or QApplication(sys.argv[:1])
        apply_identity(app)
        if not icon_files():  # the files themselves: a theme icon installed on this desktop must not hide them
            raise selftest.SelfTestError("the application icon (resources/icons) was not found")
        settings = Settings(mode="lookup", n_predict=8, n_ctx=512)
        window = MainWindow(settings, ChatStore(Path(profile.name) / "chats"), save_settings=False)
        started = time.perf_counter()
        window.show()
        if not _wait(app, lambda: window.windowHandle() is not None and window.windowHandle().isExposed(), 10):
            raise selftest.SelfTestError("the main window was never exposed")
        shown_ms = (time.perf_counter() - started) * 1000
        reply = "no model"
        if model is not None:
            reply = _reply_through_worker(app, window, model, timeout_s)
        shot = window.grab().toImage()
        if shot.isNull() or _blank(shot):
            raise selftest.SelfTestError("the window grab is blank")
        size = f"{shot.width()}x{shot.height()}"
        qt_libs = QLibraryInfo.path(QLibraryInfo.LibraryPath.LibrariesPath)
    except Exception as exc:  # noqa: BLE001 - one clear line per failure
        print(f"gui self-test FAILED: {type(exc).__name__}: {exc}", file=sys.stderr)
        return selftest.EXIT_FAILED
    finally:
        if window is not None:  # stops the worker thread; a QThread destroyed running aborts
            window.close()
            _wait(app, lambda: not window.isVisible(), 10)
        profile.cleanup()
        if saved_home is None:
            os.environ.pop("SPECCHAT_HOME", None)
        else:
            os.environ["SPECCHAT_HOME"] = saved_home
    print(
        f"gui self-test OK: platform {app.platformName()}, window {size} exposed in {shown_ms:.0f} ms, "
        f"{reply} | PySide6 {pyside_version}, Qt libraries: {qt_libs}",
        flush=True,
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """`specchat --self-test [--model PATH] [--no-gui] [-n N]`: engine, then window."""
    import argparse

    parser = argparse.ArgumentParser(prog="specchat --self-test", description="check this installation")
    selftest.add_arguments(parser)
    args = parser.parse_args(argv)
    model = selftest.find_model(args.model)
    code = selftest.run_selftest(model, args.n_predict)
    if code != 0 or args.no_gui:
        return code
    return run_gui_selftest(model)


# --- startup probe ---------------------------------------------------------------------------------


def install_startup_probe(report: Path | None, quit_after: str = "") -> None:
    """Create the QApplication now and time the first exposed window (and the models, if asked)."""
    from PySide6.QtCore import QEvent, QObject, QTimer
    from PySide6.QtGui import QWindow
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication(sys.argv[:1])
    result: dict[str, Any] = {"pid": os.getpid(), "platform": app.platformName()}

    def emit() -> None:
        line = ", ".join(f"{k} {v:.3f} s" for k, v in result.items() if k.endswith("_s"))
        print(f"startup probe: {line} (since process start)", file=sys.stderr, flush=True)
        if report is not None:
            report.write_text(json.dumps(result), encoding="utf-8")

    def quit_app() -> None:
        app.closeAllWindows()
        QTimer.singleShot(0, app.quit)

    def on_models(*_args: object) -> None:
        result["models_loaded_s"] = process_age_s()
        emit()
        if quit_after == "models":
            quit_app()

    class Probe(QObject):
        def eventFilter(self, obj: QObject, event: QEvent) -> bool:  # noqa: N802 - Qt override
            if event.type() == QEvent.Type.Expose and isinstance(obj, QWindow) and obj.isExposed():
                result["window_shown_s"] = process_age_s()
                result["wall_time"] = time.time()
                app.removeEventFilter(self)
                emit()
                window = next((w for w in app.topLevelWidgets() if hasattr(w, "modelsLoaded")), None)
                if window is not None:
                    window.modelsLoaded.connect(on_models)
                if quit_after == "window" or (quit_after == "models" and window is None):
                    QTimer.singleShot(0, quit_app)
            return False

    probe = Probe(app)
    app.installEventFilter(probe)
    result["qapplication_s"] = process_age_s()
