"""The toolbar: the actions that ui.shell.actions puts on it, around the speculation mode selector."""

from __future__ import annotations

from PySide6.QtWidgets import QComboBox, QLabel, QToolBar, QWidget

from app.engine.drafters import CHOICES
from app.settings import Settings
from ui.shell.actions import WindowActions


class MainToolBar(QToolBar):
    def __init__(self, window: QWidget, settings: Settings, actions: WindowActions) -> None:
        super().__init__("Main", window)
        self.setObjectName("main-toolbar")
        self.setMovable(False)
        self.mode_box = QComboBox()
        self.mode_box.setAccessibleName("Speculation mode")
        self.mode_box.addItems(CHOICES)
        self.mode_box.setToolTip("auto: hybrid with a GPU and a draft model, else lookup · "
                                 "draft: a draft model proposes tokens · hybrid: n-gram copies from the context "
                                 "where it has them, else the draft model · lookup: n-grams from the context · "
                                 "none: plain decoding")
        self.mode_box.setCurrentText(settings.mode)
        self.addActions(actions.toolbar(1))
        self.addSeparator()
        self.addWidget(QLabel(" Mode "))
        self.addWidget(self.mode_box)
        self.addActions(actions.toolbar(2))
