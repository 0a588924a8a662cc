"""An inline message strip (errors, warnings, notes) that never blocks the window like a dialog."""

from __future__ import annotations

from enum import Enum

from PySide6.QtCore import Qt, Signal, Slot
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QToolButton, QWidget

from ui.base.tints import tint

LEVEL_STYLES = {
    # (light background, dark text, accent): the light pair on a light palette; a dark palette gets the accent
    # mixed into its window colour (ui.base.tints).
    "info": ("#E8F1FA", "#0B3D66", "#0072B2"),
    "warning": ("#FFF4E0", "#5C3B00", "#E69F00"),
    "error": ("#FBE9E2", "#6B1E00", "#D55E00"),
}


class MessageBar(QFrame):
    # The Enum member given to show_message with the button pressed; each owner of a choice declares its own Enum
    # (ChatChoice, BannerChoice, WindowChoice) and handles only its members.
    actionTriggered = Signal(object)

    def __init__(self, parent: QWidget | None = None, closable: bool = True) -> None:
        super().__init__(parent)
        self._action_key: Enum | None = None
        self._label = QLabel()
        self._label.setWordWrap(True)
        self._label.setOpenExternalLinks(True)
        self._button = QPushButton()
        self._button.hide()
        self._extra: list[QPushButton] = []  # more choices than one (show_message's `more`)
        self._close = QToolButton()
        self._close.setText("✕")
        self._close.setAutoRaise(True)
        self._close.setToolTip("Dismiss")
        self._close.setVisible(closable)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(10, 6, 6, 6)
        layout.addWidget(self._label, 1)
        layout.addWidget(self._button)
        layout.addWidget(self._close)
        self._button.clicked.connect(self._on_button_clicked)
        self._close.clicked.connect(self._on_close_clicked)
        self.level = "info"
        self.details = ""
        self.colours = ("", "")  # (background, text) of the message shown
        self.hide()

    def show_message(self, text: str, level: str = "info", action: tuple[str, Enum] | None = None,
                     rich: bool = False, more: tuple[tuple[str, Enum], ...] = (), details: str = "") -> None:
        """Show `text`; `action` is (button text, Enum member emitted by actionTriggered). Plain text unless
        `rich`: an error quoting `<|im_end|>` or a file name with `<` must show as written. `details` (a
        traceback, a log excerpt): a "Copy details" button puts them on the clipboard for a bug report."""
        self._label.setTextFormat(Qt.TextFormat.RichText if rich else Qt.TextFormat.PlainText)
        light_bg, light_fg, edge = LEVEL_STYLES[level]
        bg, fg = tint(light_bg, light_fg, edge, self.palette())
        self.colours = (bg, fg)
        self.level = level
        self.setStyleSheet(f"MessageBar {{ background: {bg}; border-left: 4px solid {edge}; }}"
                           f" QLabel {{ color: {fg}; }}")
        self._label.setText(text)
        if action:
            self._button.setText(action[0])
            self._action_key = action[1]
            self._button.show()
        else:
            self._button.hide()
        for button in self._extra:
            button.deleteLater()
        self._extra = []
        for label, key in more:
            button = QPushButton(label)
            button.clicked.connect(lambda _checked=False, k=key: self.actionTriggered.emit(k))
            self.layout().insertWidget(self.layout().count() - 1, button)
            self._extra.append(button)
        self.details = details
        if details:
            button = QPushButton("Copy details")
            button.setToolTip("Copy the technical details (for a bug report)")
            button.clicked.connect(self._on_copy_details_clicked)
            self.layout().insertWidget(self.layout().count() - 1, button)
            self._extra.append(button)
        self.show()

    def buttons(self) -> list[QPushButton]:
        """The visible choices, in order (tests, scripts)."""
        return [b for b in (self._button, *self._extra) if not b.isHidden()]

    def text(self) -> str:
        return self._label.text()

    @Slot()
    def _on_button_clicked(self) -> None:
        self.actionTriggered.emit(self._action_key)

    @Slot()
    def _on_copy_details_clicked(self) -> None:
        QGuiApplication.clipboard().setText(self.details)

    @Slot()
    def _on_close_clicked(self) -> None:
        self.hide()
