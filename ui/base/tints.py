"""Tinted strips (message bars, badges) that read on the palette in use.

The light tints with dark text were hard-coded, so on the dark theme a bar was a bright block in a dark window.
On a dark palette the accent is mixed into the window colour instead, under the palette's own text colour.
"""

from __future__ import annotations

from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import QWidget

DARK_MIX = 0.3  # the accent's share of a tint on a dark window: visible, and under 4.5:1 contrast never
# Coloured text (light window, dark window): each pair reads at 4.5:1 or more on its theme's window.
TEXT_COLOURS = {
    "error": ("#b42318", "#f97066"),
    "good": ("#1b7f3b", "#47cd89"),
    "warn": ("#8a5d00", "#fdb022"),
}


def is_dark(palette: QPalette) -> bool:
    return palette.color(QPalette.ColorRole.Window).lightness() < 128


def tint(light_bg: str, light_fg: str, accent: str, palette: QPalette) -> tuple[str, str]:
    """(background, text) for a strip of `accent`'s kind: the light pair on a light palette, else a dark mix."""
    if not is_dark(palette):
        return light_bg, light_fg
    window, a = palette.color(QPalette.ColorRole.Window), QColor(accent)
    mixed = QColor(*(round(DARK_MIX * x + (1 - DARK_MIX) * y) for x, y in
                     ((a.red(), window.red()), (a.green(), window.green()), (a.blue(), window.blue()))))
    return mixed.name(), palette.color(QPalette.ColorRole.WindowText).name()


def text_colour(kind: str, palette: QPalette) -> QColor:
    """The text colour of `kind` (error, good, warn) for this palette's window."""
    light, dark = TEXT_COLOURS[kind]
    return QColor(dark if is_dark(palette) else light)


def contrast(a: str, b: str) -> float:
    """WCAG 2 contrast ratio of two colours (1 to 21)."""

    def luminance(name: str) -> float:
        c = QColor(name)
        parts = [v / 255 for v in (c.red(), c.green(), c.blue())]
        lin = [p / 12.92 if p <= 0.03928 else ((p + 0.055) / 1.055) ** 2.4 for p in parts]
        return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]

    hi, lo = sorted((luminance(a), luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def style_text(widget: QWidget, kind: str | None = None, *, role: QPalette.ColorRole | None = None,
               bold: bool = False, italic: bool = False) -> None:
    """A label's emphasis by font and palette, not a style sheet (which sends the widget through Qt's slow
    style-sheet style and ignores the theme): `kind`'s colour (text_colour) or the palette's `role`."""
    font = widget.font()
    font.setBold(bold or font.bold())
    font.setItalic(italic or font.italic())
    widget.setFont(font)
    palette = widget.palette()
    colour = text_colour(kind, palette) if kind else palette.color(role) if role is not None else None
    if colour is not None:
        palette.setColor(QPalette.ColorRole.WindowText, colour)
        palette.setColor(QPalette.ColorRole.Text, colour)
        widget.setPalette(palette)
