"""The prompt editor: Enter sends, Shift+Enter starts a new line."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QKeyEvent
from PySide6.QtWidgets import QPlainTextEdit, QWidget


class PromptBox(QPlainTextEdit):
    submitted = Signal(str)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setAccessibleName("Message to the model")
        self.setPlaceholderText("Message the model — Enter to send, Shift+Enter for a new line")
        self.setTabChangesFocus(True)
        self.setMaximumHeight(120)

    def keyPressEvent(self, event: QKeyEvent) -> None:  # noqa: N802 - Qt override
        if event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter):
            mods = event.modifiers()
            if mods & Qt.KeyboardModifier.ShiftModifier:
                self.insertPlainText("\n")
                return
            if not mods & Qt.KeyboardModifier.AltModifier:  # Enter and Ctrl+Enter send
                self.submit()
                return
        super().keyPressEvent(event)

    def submit(self) -> None:
        text = self.toPlainText().strip()
        if text:
            self.submitted.emit(text)

    def clear_after_send(self) -> None:
        self.clear()
