"""Where the main window opens: fitted to the screen the first time, then where it was closed."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.gui


def test_first_window_fits_small_screens_and_keeps_its_size_on_large_ones() -> None:
    from PySide6.QtCore import QRect

    from ui.shell.window_geometry import PREFERRED_SIZE, fitted_geometry

    for screen in (QRect(0, 0, 1024, 768 - 32), QRect(0, 27, 1366, 768 - 27), QRect(1920, 0, 1920, 1050)):
        rect = fitted_geometry(screen)
        assert screen.contains(rect), (screen, rect)  # nothing off screen, on a second monitor too
        assert abs(rect.center().x() - screen.center().x()) <= 1 and abs(rect.center().y() - screen.center().y()) <= 1
        assert rect.width() == min(PREFERRED_SIZE.width(), int(screen.width() * 0.95))
        assert rect.height() == min(PREFERRED_SIZE.height(), int(screen.height() * 0.95))
    assert fitted_geometry(QRect(0, 0, 2560, 1400)).size() == PREFERRED_SIZE


def test_window_reopens_where_it_was_closed(qtbot: Any, tmp_path: Any, monkeypatch: Any) -> None:
    from app import settings as settings_mod
    from tests.gui_support import gui_home
    from ui.shell import window_geometry
    from ui.shell.main_window import MainWindow

    monkeypatch.setattr(window_geometry, "on_real_screen", lambda: True)  # as on a desktop
    with gui_home(tmp_path):
        first = MainWindow(settings_mod.load()[0])
        first.place_on_screen()  # nothing saved yet: fitted to the (800x600 offscreen) screen
        fitted = first.geometry()
        first.show()
        first.setGeometry(30, 40, 760, 520)
        qtbot.waitExposed(first)
        closed_at = first.geometry()
        first.close()
        saved = settings_mod.load()[0]
        assert saved.window_geometry  # written on close, atomically, with the other settings
        second = MainWindow(saved)
        qtbot.addWidget(second)
        second.place_on_screen()
        assert second.geometry() == closed_at and closed_at.width() == 760
        # A damaged value is ignored, and the window is fitted to the screen instead.
        third = MainWindow(settings_mod.Settings(window_geometry="not base64 géométrie"))  # hand-edited
        qtbot.addWidget(third)
        third.place_on_screen()
        assert third.geometry() == fitted != closed_at
