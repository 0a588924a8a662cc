"""Where the window opens: where it was last closed, else fitted to the screen it opens on."""

from __future__ import annotations

from PySide6.QtCore import QByteArray, QRect, QSize
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QMainWindow

PREFERRED_SIZE = QSize(1280, 800)


def on_real_screen() -> bool:
    """False on the offscreen platform: its 800x600 "screen" is nobody's, so scripted runs and their pictures
    keep the default size, and the place a test window had is not kept."""
    return QGuiApplication.platformName() != "offscreen"


def fitted_geometry(available: QRect, preferred: QSize = PREFERRED_SIZE) -> QRect:
    """The first window's place: the preferred size, shrunk to 95% of a smaller screen's free area (a 1366x768
    laptop less its panel), centred on it."""
    width = min(preferred.width(), int(available.width() * 0.95))
    height = min(preferred.height(), int(available.height() * 0.95))
    rect = QRect(0, 0, width, height)
    rect.moveCenter(available.center())
    return rect


def place_on_screen(window: QMainWindow, saved: str) -> None:
    """Before the first show: at `saved` (the window's geometry, base64), else fitted to the screen it opens on
    (at 1280x800 it ran off a 1024x768 screen, the side panel out of reach). Qt moves a saved place that is no
    longer on any screen back onto one."""
    if not on_real_screen():
        return
    if saved and window.restoreGeometry(QByteArray.fromBase64(saved.encode("ascii", "ignore"))):
        return
    screen = window.screen() or QGuiApplication.primaryScreen()
    if screen is not None:
        window.setGeometry(fitted_geometry(screen.availableGeometry()))


def saved_geometry(window: QMainWindow) -> str | None:
    """The window's place to keep (None on the offscreen platform, or when it is not shown)."""
    if not (window.isVisible() and on_real_screen()):
        return None
    return bytes(window.saveGeometry().toBase64().data()).decode("ascii")
