"""The speculation mode as the window shows it: the modes the loaded pair can run in the mode selector, the
fallback when the chosen one cannot run (said in the banner, never silently another mode, and not kept as the
user's preference), the governor's last switch, and the banner that says when speculation is not active."""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QObject, Slot

from app.engine.drafters import CHOICES
from app.engine.events import GovernorEvent
from ui.base.worker import LoadInfo
from ui.shell.spec_banner import SpecState


class ModeBanner(QObject):
    def __init__(self, window: Any) -> None:
        super().__init__(window)
        self._w = window
        self.governor: GovernorEvent | None = None  # the last on/off decision of this reply's governor
        self._fallback = ""  # the mode the user chose that the loaded models cannot run
        self._falling_back = False  # the selector is being set to the fallback: not the user's choice
        window.mode_box.currentTextChanged.connect(self._on_mode_box_currentTextChanged)
        window.controller.governorSwitched.connect(self._on_controller_governorSwitched)

    def pair_loaded(self, info: LoadInfo) -> None:
        box = self._w.mode_box
        available = {"auto", *info.modes}  # draft modes need a draft model, mtp a target with an MTP head
        for i, mode in enumerate(CHOICES):
            box.model().item(i).setEnabled(mode in available)
        self._fallback = ""
        if box.currentText() not in available:
            self._fallback = box.currentText()
            self._falling_back = True
            box.setCurrentText("lookup")
            self._falling_back = False
        self.update()

    def reply_started(self) -> None:
        self.governor = None
        self.update()

    def update(self) -> None:
        w = self._w
        if w.loaded is None and not w.models.incompatible:
            w.banner.hide()
            return
        w.banner.set_state(SpecState(w.policy().mode(), w.models.has_draft, w.models.incompatible, self.governor,
                                     auto=w.mode_box.currentText() == "auto",
                                     gpu_note=w.loaded.gpu_note if w.loaded is not None else "",
                                     fallback=self._fallback))

    @Slot(str)
    def _on_mode_box_currentTextChanged(self, mode: str) -> None:
        self.governor = None
        if not self._falling_back:
            self._fallback = ""  # the user picked a mode: the fallback note is done
            self._w.keeper.remember(mode=mode)
        self.update()

    @Slot(object)
    def _on_controller_governorSwitched(self, event: GovernorEvent) -> None:
        self.governor = event
        self.update()
