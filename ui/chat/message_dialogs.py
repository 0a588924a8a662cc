"""Small text dialogs of the chat: edit a prompt before resending it, and the system prompt.

Opened with open() (window-modal), so the event loop never blocks while one is up.
"""

from __future__ import annotations

from PySide6.QtWidgets import QCheckBox, QDialog, QDialogButtonBox, QLabel, QPlainTextEdit, QVBoxLayout, QWidget


class TextDialog(QDialog):
    def __init__(self, title: str, label: str, text: str, ok: str, option: str = "",
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle(title)
        self.resize(560, 320)
        self.editor = QPlainTextEdit(text)
        self.option = QCheckBox(option)
        self.option.setVisible(bool(option))
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        buttons.button(QDialogButtonBox.StandardButton.Ok).setText(ok)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        note = QLabel(label)
        note.setWordWrap(True)
        layout.addWidget(note)
        layout.addWidget(self.editor, 1)
        layout.addWidget(self.option)
        layout.addWidget(buttons)
        self.editor.setFocus()

    def text(self) -> str:
        return self.editor.toPlainText()


def edit_prompt_dialog(text: str, parent: QWidget | None = None) -> TextDialog:
    return TextDialog("Edit and resend", "The reply to this prompt and every later message are replaced.",
                      text, "Resend", "Keep the conversation as it was, as a separate chat", parent)


def system_prompt_dialog(text: str, default: str, parent: QWidget | None = None) -> TextDialog:
    note = ("Instructions the model reads before the conversation, for this chat only "
            "(the default for new chats is in Settings). Empty: no system prompt.")
    dialog = TextDialog("System prompt", note, text, "Apply", "Also make this the default for new chats", parent)
    dialog.option.setChecked(False)
    dialog.setProperty("default_text", default)
    return dialog
