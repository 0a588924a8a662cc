"""`specchat gui` from the command line: Qt stays out of the other commands, the scripted options
(--prompt, --screenshot, --quit-when-done) work end to end, and bad input is a message, not a crash."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtGui import QImage

from tests.gui_support import require_working_pyside

ROOT = Path(__file__).resolve().parent.parent


def _run(args: list[str], home: Path, timeout: int = 240) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SPECCHAT_HOME": str(home), "QT_QPA_PLATFORM": "offscreen",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "ui.shell.entry", *args], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=timeout)


def test_other_commands_never_load_qt() -> None:
    code = ("import sys, ui.shell.entry, app.cli.main; app.cli.main.build_parser([ui.shell.entry._register_gui]); "
            "print(sorted(m for m in sys.modules if m.startswith(('PySide6', 'qasync'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.gui
def test_scripted_run_answers_and_takes_a_picture(smol_path: Path, tmp_path: Path) -> None:
    require_working_pyside()
    shot = tmp_path / "shot.png"
    result = _run(["gui", "-m", str(smol_path), "--mode", "lookup", "-n", "12", "--prompt", "Say hello.",
                   "--system", "Always answer in French.", "--screenshot", str(shot), "--quit-when-done"],
                  tmp_path / "home")
    assert result.returncode == 0, result.stderr[-2000:]
    image = QImage(str(shot))
    assert image.width() >= 1000 and image.height() >= 600
    [chat] = (tmp_path / "home" / "data" / "chats").glob("*.json")
    saved = json.loads(chat.read_text(encoding="utf-8"))
    messages = saved["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant"]
    assert messages[1]["status"] == "done" and messages[1]["tokens"] and messages[1]["stats"]["n_tokens"] <= 12
    # The session's --system is what the reply was answered under: saved with the chat and its reply, and
    # exported by the command line, which knows nothing of that session.
    assert saved["system"] == messages[1]["system"] == "Always answer in French."
    env = {**os.environ, "SPECCHAT_HOME": str(tmp_path / "home")}
    md = subprocess.run([sys.executable, "-m", "app.cli", "chats", "export", chat.stem], capture_output=True,
                        text=True, env=env, cwd=ROOT, timeout=120)
    assert md.returncode == 0 and "## System\n\nAlways answer in French." in md.stdout, md.stderr


@pytest.mark.gui
def test_missing_model_is_reported_in_the_window(tmp_path: Path) -> None:
    shot = tmp_path / "shot.png"
    result = _run(["gui", "-m", str(tmp_path / "nope.gguf"), "--screenshot", str(shot), "--quit-when-done"],
                  tmp_path / "home", timeout=60)
    assert result.returncode == 2
    assert shot.is_file()
    assert "Traceback" not in result.stderr


def test_uncaught_errors_show_in_the_window_and_the_log(qtbot: Any, monkeypatch: pytest.MonkeyPatch,
                                                        tmp_path: Path) -> None:
    """An uncaught exception: its traceback in the log file (a menu launch has no terminal), the window's bar
    names the log and offers "Copy details", and a non-modal box holds the details."""
    import logging
    import logging.handlers

    from PySide6.QtGui import QGuiApplication
    from PySide6.QtWidgets import QMessageBox, QWidget

    import ui.shell.app as gui_app
    from app import log_file
    from ui.base.message_bar import MessageBar

    monkeypatch.setenv("SPECCHAT_HOME", str(tmp_path / "home"))
    path = log_file.install()
    root = logging.getLogger()
    try:
        assert path == tmp_path / "home" / "logs" / "specchat.log"
        window = QWidget()
        qtbot.addWidget(window)
        window.errors = MessageBar(window)  # type: ignore[attr-defined]
        monkeypatch.setattr(gui_app, "_window", window)
        monkeypatch.setattr(sys, "excepthook", sys.excepthook)  # restored afterwards
        gui_app.install_excepthook()
        try:
            raise ValueError("boom")
        except ValueError:
            sys.excepthook(*sys.exc_info())
        bar = window.errors  # type: ignore[attr-defined]
        assert "ValueError: boom" in bar.text() and str(path) in bar.text() and bar.level == "error"
        [copy] = [b for b in bar.buttons() if b.text() == "Copy details"]
        copy.click()
        assert "Traceback" in QGuiApplication.clipboard().text() and "boom" in QGuiApplication.clipboard().text()
        box = window.findChild(QMessageBox, "uncaught-error")
        assert box is not None and box.isVisible() and "raise ValueError" in box.detailedText()
        for handler in root.handlers:
            handler.flush()
        logged = path.read_text(encoding="utf-8")
        assert "CRITICAL" in logged and "Traceback" in logged and "ValueError: boom" in logged
    finally:
        for handler in [h for h in root.handlers if isinstance(h, logging.handlers.RotatingFileHandler)]:
            root.removeHandler(handler)
            handler.close()


@pytest.mark.gui
def test_closing_with_a_stuck_engine_exits_cleanly(tmp_path: Path) -> None:
    """Closing waits for the engine thread to end its step; when it does not (a lost server, a step that will not
    end), the app used to destroy the running QThread and Qt aborted the process. Now it logs, flushes the store
    and exits with its own status."""
    require_working_pyside()
    script = textwrap.dedent("""
        import sys, threading
        from PySide6.QtCore import QTimer
        from ui.shell.main_window import MainWindow
        from ui.shell.entry import main

        MainWindow.close_timeout_ms = 300
        block = threading.Event()  # never set: the engine thread stays busy for good
        shown = MainWindow.show

        def show(self):
            shown(self)
            QTimer.singleShot(0, self.worker._runner, block.wait)
            QTimer.singleShot(800, self.close)

        MainWindow.show = show
        sys.exit(main(["gui", "-m", sys.argv[1]]))
    """)
    env = {**os.environ, "SPECCHAT_HOME": str(tmp_path / "home"), "QT_QPA_PLATFORM": "offscreen",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path / "none.gguf")], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=120)
    assert done.returncode >= 0, f"killed by signal {-done.returncode}: {done.stderr[-2000:]}"
    log = (tmp_path / "home" / "logs" / "specchat.log").read_text(encoding="utf-8")
    assert "did not stop within 300 ms" in log
