"""Helpers for the GUI tests: a main window on a throw-away profile, loaded once per module."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from PySide6.QtCore import QEventLoop, QTimer
from PySide6.QtGui import QTextCharFormat

from app.settings import Settings


def models_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *models: Path) -> Path:
    """A throw-away profile and Hub cache, and a folder holding `models` (symbolic links): what a picker lists."""
    monkeypatch.setenv("SPECCHAT_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("SPECCHAT_MODELS_DIR", raising=False)
    folder = tmp_path / "models"
    folder.mkdir()
    for p in models:
        (folder / p.name).symlink_to(p)
    return folder


def wait_for(signal: Any, timeout_ms: int) -> list[Any]:
    """Block (running the event loop) until `signal` fires; for fixtures wider than qtbot's scope."""
    loop = QEventLoop()
    got: list[list[Any]] = []

    def fired(*args: Any) -> None:
        got.append(list(args))
        loop.quit()

    signal.connect(fired)
    QTimer.singleShot(timeout_ms, loop.quit)
    loop.exec()
    signal.disconnect(fired)
    if not got:
        raise TimeoutError(f"no signal within {timeout_ms} ms")
    return got[0]


@contextmanager
def gui_home(folder: Path) -> Iterator[None]:
    old = os.environ.get("SPECCHAT_HOME")
    os.environ["SPECCHAT_HOME"] = str(folder)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("SPECCHAT_HOME", None)
        else:
            os.environ["SPECCHAT_HOME"] = old


def require_working_pyside() -> None:
    """PySide6 6.12.0 on Python 3.11 aborts the interpreter after some thousand Qt calls: say so plainly."""
    from ui.shell.qt_check import refcount_bug

    problem = refcount_bug()
    if problem:
        pytest.fail(problem, pytrace=False)


def open_window(target: Path, draft: Path | None, settings: Settings) -> Any:
    """A shown main window with `target` (+ `draft`) loaded on its worker thread."""
    from ui.shell.main_window import MainWindow

    require_working_pyside()
    window = MainWindow(settings, save_settings=False)
    window.show()
    window.load_models(target, draft)
    info = wait_for(window.modelsLoaded, 180_000)
    assert info, "the models did not load"
    return window


def fragments(view: Any) -> Iterator[tuple[str, QTextCharFormat, int]]:
    """(text, format, document position) of every fragment of a text view's document."""
    block = view.document().begin()
    while block.isValid():
        it = block.begin()
        while not it.atEnd():
            frag = it.fragment()
            yield frag.text(), frag.charFormat(), frag.position()
            it += 1
        block = block.next()
