"""Light and dark themes: follow the system's colour scheme (Qt 6.5+), or the user's choice.

Fusion is used everywhere so both palettes look the same on every platform (and offscreen).
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QGuiApplication, QPalette
from PySide6.QtWidgets import QApplication

DARK = {
    QPalette.ColorRole.Window: "#202124",
    QPalette.ColorRole.WindowText: "#E8EAED",
    QPalette.ColorRole.Base: "#181A1D",
    QPalette.ColorRole.AlternateBase: "#26282C",
    QPalette.ColorRole.ToolTipBase: "#303134",
    QPalette.ColorRole.ToolTipText: "#E8EAED",
    QPalette.ColorRole.PlaceholderText: "#9AA0A6",
    QPalette.ColorRole.Text: "#E8EAED",
    QPalette.ColorRole.Button: "#2D2F33",
    QPalette.ColorRole.ButtonText: "#E8EAED",
    QPalette.ColorRole.BrightText: "#FFFFFF",
    QPalette.ColorRole.Highlight: "#2F6DB5",
    QPalette.ColorRole.HighlightedText: "#FFFFFF",
    QPalette.ColorRole.Link: "#6CB6FF",
}


def system_is_dark() -> bool:
    hints = QGuiApplication.styleHints()
    return hints.colorScheme() == Qt.ColorScheme.Dark


def resolve(theme: str) -> str:
    """ "light" or "dark" for a setting of "system", "light" or "dark"."""
    if theme in ("light", "dark"):
        return theme
    return "dark" if system_is_dark() else "light"


def apply_theme(app: QApplication, theme: str) -> str:
    app.setStyle("Fusion")
    chosen = resolve(theme)
    if chosen == "dark":
        palette = QPalette()
        for role, colour in DARK.items():
            palette.setColor(role, QColor(colour))
        palette.setColor(QPalette.ColorGroup.Disabled, QPalette.ColorRole.Text, QColor("#6F7378"))
        palette.setColor(QPalette.ColorGroup.Disabled, QPalette.ColorRole.ButtonText, QColor("#6F7378"))
    else:
        palette = app.style().standardPalette()
    app.setPalette(palette)
    return chosen
