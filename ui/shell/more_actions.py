"""Menu entries for what had only a mouse path: renaming and deleting the chat, the last message's copy, edit
and delete, the overlay switches, the comparison's replay and the mode. Each drives the widget that already does
the job, so the menu and the mouse cannot disagree."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QObject
from PySide6.QtGui import QAction, QActionGroup

from app.engine.drafters import CHOICES


class MoreActions(QObject):
    def __init__(self, window: Any) -> None:
        super().__init__(window)
        self._w = window
        make = window.toolbar._action
        self.rename_chat = make("Rename chat…", "F2", "Give the current chat another title")
        self.delete_chat = make("Delete chat", "Ctrl+Shift+Backspace", "Delete the current chat (Undo brings it back)")
        self.copy_reply = make("Copy last reply", "Ctrl+Shift+C", "Copy the last reply's text")
        self.edit_prompt = make("Edit last prompt…", "Ctrl+Shift+Up", "Edit the last prompt and send it again")
        self.delete_last = make("Delete last message", None, "Delete the last prompt or reply (Undo brings it back)")
        self.replay = make("Replay side by side", None, "Play the last comparison at its measured speeds")
        self.colours = make("Colour tokens by fate", None)
        self.ghosts = make("Show rejected drafts", None)
        for action, box in ((self.colours, window.legend.colours_box), (self.ghosts, window.legend.ghosts_box)):
            action.setCheckable(True)
            action.setChecked(box.isChecked())
            action.toggled.connect(box.setChecked)
            box.toggled.connect(action.setChecked)
        self.modes = QActionGroup(self)
        for mode in CHOICES:
            action = make(f"Mode: {mode}", None, f"Speculate with {mode}")
            action.setCheckable(True)
            action.setChecked(window.mode_box.currentText() == mode)
            action.triggered.connect(lambda _on=False, m=mode: window.mode_box.setCurrentText(m))
            self.modes.addAction(action)
        window.mode_box.currentTextChanged.connect(self._on_mode_changed)
        self.rename_chat.triggered.connect(self._on_rename_chat_triggered)
        self.delete_chat.triggered.connect(self._on_delete_chat_triggered)
        self.copy_reply.triggered.connect(lambda: self._on_last("assistant", "copy"))
        self.edit_prompt.triggered.connect(lambda: self._on_last("user", "edit"))
        self.delete_last.triggered.connect(lambda: self._on_last(None, "delete"))
        self.replay.triggered.connect(window.compare_view.replay_button.click)

    def chat_menu(self) -> tuple[QAction | None, ...]:
        return (self.rename_chat, self.delete_chat, None, self.copy_reply, self.edit_prompt, self.delete_last)

    def view_menu(self) -> tuple[QAction | None, ...]:
        return (self.colours, self.ghosts, None, self.replay, None, *self.modes.actions())

    def _on_mode_changed(self, mode: str) -> None:
        for action in self.modes.actions():
            action.setChecked(action.text() == f"Mode: {mode}")

    def _on_rename_chat_triggered(self) -> None:
        conversations = self._w.conversations
        conversations._rename(conversations.list.currentItem())

    def _on_delete_chat_triggered(self) -> None:
        conv = self._w.controller.conv
        if conv is not None:
            self._w.controller.delete(conv.id)

    def _on_last(self, role: str | None, action: str) -> None:
        """The per-message control `action` on the last message (of `role`), as the transcript's link sends it."""
        conv = self._w.controller.conv
        messages = conv.messages if conv is not None else []
        index = next((i for i in range(len(messages) - 1, -1, -1) if role in (None, messages[i].role)), None)
        if index is None:
            self._w.errors.show_message("This chat has no such message yet.", "info")
            return
        self._w.transcript.messageAction.emit(action, index)
