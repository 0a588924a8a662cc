"""The status bar's own widgets: the loaded pair, the load's or the prompt's progress, and the context's fill."""

from __future__ import annotations

from PySide6.QtCore import QObject, Slot
from PySide6.QtWidgets import QLabel, QProgressBar, QStatusBar

PREFILL_FORMATS = {"target": "processing prompt %p%", "draft": "processing prompt (draft model) %p%"}


class StatusLine(QObject):
    def __init__(self, bar: QStatusBar) -> None:
        super().__init__(bar)
        self.model_label = QLabel("No models loaded")
        self.progress = QProgressBar()  # loading (ui.picker.models_controller), then processing a prompt
        self.progress.setMaximumWidth(220)
        self.progress.setRange(0, 100)
        self.progress.hide()
        bar.addWidget(self.model_label, 1)
        self.context_bar = QProgressBar()
        self.context_bar.setMaximumWidth(260)
        self.context_bar.setMinimumWidth(190)  # "context 12,345 / 32,768" on one line
        self.context_bar.setToolTip("Tokens this conversation fills in the model's context (the last reply "
                                    "included). When it would overflow, you choose what to leave out.")
        self.context_bar.hide()
        bar.addPermanentWidget(self.context_bar)
        bar.addPermanentWidget(self.progress)

    @Slot(int, int, str)
    def show_prefill(self, done: int, total: int, model: str) -> None:
        """Between Send and the first token: "processing prompt" with progress (Stop cancels it), the
        target's and then, in the modes that draft with it, the draft model's."""
        if total == 0:
            if self.progress.format().startswith("processing"):
                self.progress.hide()
                self.progress.setMinimumWidth(0)
            return
        text = PREFILL_FORMATS.get(model, PREFILL_FORMATS["target"])
        self.progress.setFormat(text)
        # On one line: the status bar squeezes its widgets for a long model label, and the text wrapped.
        wide = self.progress.fontMetrics().horizontalAdvance(text.replace("%p", "100")) + 32
        self.progress.setMinimumWidth(wide)
        self.progress.setMaximumWidth(max(220, wide))
        self.progress.setRange(0, max(total, 0))  # (0, 0): busy until the first batch reports
        self.progress.setValue(done)
        self.progress.show()

    def show_context(self, used: int, n_ctx: int) -> None:
        if n_ctx <= 0:
            self.context_bar.hide()
            return
        self.context_bar.setRange(0, n_ctx)
        self.context_bar.setValue(min(used, n_ctx))
        self.context_bar.setFormat(f"context {used:,} / {n_ctx:,}")
        self.context_bar.show()
