"""The toolbar and every window-wide shortcut: one QAction per common action, each with its key."""

from __future__ import annotations

from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QComboBox, QLabel, QToolBar, QWidget

from app.engine.drafters import CHOICES
from app.settings import Settings


class MainToolBar(QToolBar):
    def __init__(self, window: QWidget, settings: Settings) -> None:
        super().__init__("Main", window)
        self.setObjectName("main-toolbar")
        self.setMovable(False)
        self._window = window
        self.new_action = self._action("New chat", "Ctrl+N")
        self.models_action = self._action("Models…", "Ctrl+M", "Choose the target and the draft")
        self.settings_action = self._action("Settings…", "Ctrl+,", "Sampling, speculation, runtime, theme")
        self.compare_action = self._action("Compare", "Ctrl+K", "Side by side: plain vs speculative decoding")
        self.compare_action.setCheckable(True)
        self.compare_action.setChecked(settings.compare)
        self.send_action = self._action("Send", "Ctrl+Return")
        self.stop_action = self._action("Stop", "Esc", "Stop the reply")
        self.search_action = self._action("Search chats", "Ctrl+F")
        self.quit_action = self._action("Quit", "Ctrl+Q")  # StandardKey.Quit is empty on some desktops
        self.mode_box = QComboBox()
        self.mode_box.setAccessibleName("Speculation mode")
        self.mode_box.addItems(CHOICES)
        self.mode_box.setToolTip("auto: hybrid with a GPU and a draft model, else lookup · "
                                 "draft: a draft model proposes tokens · hybrid: n-gram copies from the context "
                                 "where it has them, else the draft model · lookup: n-grams from the context · "
                                 "none: plain decoding")
        self.mode_box.setCurrentText(settings.mode)
        self.addAction(self.models_action)
        self.addAction(self.settings_action)
        self.addSeparator()
        self.addWidget(QLabel(" Mode "))
        self.addWidget(self.mode_box)
        self.addAction(self.compare_action)

    def _action(self, text: str, shortcut: str | QKeySequence.StandardKey | None, tip: str = "") -> QAction:
        act = QAction(text, self._window)
        if shortcut is None:
            act.setToolTip(tip or text)
        else:
            act.setShortcut(QKeySequence(shortcut))
            key = QKeySequence(shortcut).toString(QKeySequence.SequenceFormat.NativeText)
            act.setToolTip(f"{tip or text} ({key})")
        self._window.addAction(act)  # shortcuts work wherever the focus is
        return act
