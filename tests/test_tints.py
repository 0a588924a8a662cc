"""Message bars and comparison badges read on both themes: on the dark palette they are dark tints under light text
(they were light blocks with dark text, hard-coded), with at least WCAG's 4.5:1 contrast on either."""

from __future__ import annotations

from typing import Any

import pytest
from PySide6.QtGui import QColor, QPalette

from ui.base.message_bar import LEVEL_STYLES, MessageBar
from ui.base.tints import TEXT_COLOURS, contrast, style_text, text_colour
from ui.chat.compare_view import BADGE_STYLES, CompareView
from ui.shell.theme import DARK


def _dark() -> QPalette:
    palette = QPalette()
    for role, colour in DARK.items():
        palette.setColor(role, QColor(colour))
    return palette


@pytest.mark.parametrize("level", sorted(LEVEL_STYLES))
def test_message_bar_reads_on_both_themes(qtbot: Any, level: str) -> None:
    light, dark = MessageBar(), MessageBar()
    qtbot.addWidget(light)
    qtbot.addWidget(dark)
    dark.setPalette(_dark())
    light.setPalette(QPalette(QColor("#F5F5F5")))
    for bar in (light, dark):
        bar.show_message("A note", level)
        bg, fg = bar.colours
        assert contrast(bg, fg) >= 4.5, (level, bar.colours)
        assert f"background: {bg}" in bar.styleSheet()
    assert QColor(dark.colours[0]).lightness() < 100 < QColor(dark.colours[1]).lightness()
    assert QColor(light.colours[0]).lightness() > 200


@pytest.mark.parametrize("kind", sorted(TEXT_COLOURS))
def test_coloured_text_reads_on_both_themes(qtbot: Any, kind: str) -> None:
    """Errors, good and warning hints (the picker's lists and findings): 4.5:1 on either window, set by
    palette (a label's style sheet ignored the theme)."""
    from PySide6.QtWidgets import QLabel

    for palette, window in ((_dark(), DARK[QPalette.ColorRole.Window]), (QPalette(QColor("#F5F5F5")), "#F5F5F5")):
        label = QLabel("text")
        qtbot.addWidget(label)
        label.setPalette(palette)
        style_text(label, kind, bold=True)
        shown = label.palette().color(QPalette.ColorRole.WindowText).name()
        assert shown == text_colour(kind, palette).name() and label.font().bold() and not label.styleSheet()
        assert contrast(shown, window) >= 4.5, (kind, shown, window)


def test_compare_badges_read_on_the_dark_theme(qtbot: Any) -> None:
    view = CompareView()
    qtbot.addWidget(view)
    view.setPalette(_dark())
    for kind in BADGE_STYLES:
        view._set_badge("Identical", kind)
        sheet = view.badge.styleSheet()
        bg = sheet.split("background: ")[1].split(";")[0]
        fg = sheet.split("color: ")[1].split(";")[0]
        assert QColor(bg).lightness() < 100 and contrast(bg, fg) >= 4.5, (kind, bg, fg)


def test_the_window_names_its_parts_for_screen_readers(qtbot: Any) -> None:
    """Accessible names on the transcript, prompt box, plots, meters and selectors (only the picker had them)."""
    from PySide6.QtWidgets import QWidget

    from app.settings import Settings
    from ui.shell.main_window import MainWindow

    window = MainWindow(Settings(), save_settings=False)
    qtbot.addWidget(window)
    named = {w.accessibleName() for w in window.findChildren(QWidget) if w.accessibleName()}
    for name in ("Conversation", "Message to the model", "Speculation mode", "Sampling preset",
                 "Acceptance by draft position", "Drafting steps by tokens accepted",
                 "Rolling acceptance over the reply", "Time split: draft, target, other",
                 "Memory budget of the two models", "Plain decoding reply", "Speculative reply"):
        assert name in named, name
    window.close()
