"""GPU layers for target and draft, the context size, and the memory meter that follows them.

Every change re-predicts the pair with `app.memory.predict_pair` (metadata only, a few ms) and shows
it on a full MemoryMeter. "Auto-fit" asks `fit_pair` for the layers and context that fit the budget.
A slider at its right end means all layers (llama.cpp's -1); with no GPU the sliders are disabled.
While the dialog still finds the devices (`finding_devices`), the meter budgets system RAM and says so;
`set_devices` puts the found ones in.
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QGridLayout,
    QLabel,
    QPushButton,
    QSlider,
    QVBoxLayout,
    QWidget,
)

from app.engine.memory_plan import engine_settings
from app.memory import (
    BuildSpec,
    DeviceBudget,
    GiB,
    ModelSettings,
    PairPrediction,
    PredictionError,
    fit_pair,
    predict_pair,
)
from app.models.gguf_meta import GGUFInfo
from ui.stats.memory_meter import SEGMENTS, MemoryMeter, device_label

CONTEXT_CHOICES = (2048, 4096, 8192, 16384, 32768, 65536, 131072)


class PairSettings(QWidget):
    """-ngl, -ngld and -c for the chosen pair, with the predicted memory against the budget."""

    changed = Signal()

    def __init__(self, build: BuildSpec, budgets: list[DeviceBudget], parent: QWidget | None = None,
                 draft_build: BuildSpec | None = None, finding_devices: bool = False) -> None:
        super().__init__(parent)
        self._build, self._budgets = build, budgets
        self._draft_build = draft_build  # the draft's devices where they differ (RPC servers: local only)
        self._finding = finding_devices  # the devices are still being found: `build` is a stand-in
        self._target: GGUFInfo | None = None
        self._draft: GGUFInfo | None = None
        self._want = (-1, -1, 4096)  # what the user asked for, kept while no model can take it
        self.prediction: PairPrediction | None = None

        self.ngl = self._slider("ngl")
        self.ngld = self._slider("ngld")
        self.ngl_label, self.ngld_label = QLabel(), QLabel()
        self.ctx = QComboBox()
        self.ctx.setAccessibleName("context size")
        # As wide as the longest choice from the start: filled later, it would be cut ("4,096 tol").
        self.ctx.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.ctx.setMinimumContentsLength(len(f"{max(CONTEXT_CHOICES):,} tokens"))
        self.fit_button = QPushButton("Auto-fit")
        self.fit_button.setToolTip("Choose GPU layers (draft fully on the GPU first) and, if needed, a smaller context")
        self.note = QLabel()
        self.note.setWordWrap(True)
        self.meter = MemoryMeter(compact=False, reserve_rows=len(SEGMENTS))
        keep = self.meter.sizePolicy()
        keep.setRetainSizeWhenHidden(True)  # shown once a target is chosen: the dialog keeps its layout
        self.meter.setSizePolicy(keep)

        grid = QGridLayout()
        grid.addWidget(QLabel("Target GPU layers (-ngl)"), 0, 0)
        grid.addWidget(self.ngl, 0, 1)
        grid.addWidget(self.ngl_label, 0, 2)
        grid.addWidget(QLabel("Context size (-c)"), 0, 3)
        grid.addWidget(self.ctx, 0, 4)
        grid.addWidget(QLabel("Draft GPU layers (-ngld)"), 1, 0)
        grid.addWidget(self.ngld, 1, 1)
        grid.addWidget(self.ngld_label, 1, 2)
        grid.addWidget(self.fit_button, 1, 4)
        grid.setColumnStretch(1, 1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(grid)
        layout.addWidget(self.meter)
        layout.addWidget(self.note)

        self.ngl.valueChanged.connect(self._on_ngl_valueChanged)
        self.ngld.valueChanged.connect(self._on_ngld_valueChanged)
        self.ctx.currentIndexChanged.connect(self._on_ctx_currentIndexChanged)
        self.fit_button.clicked.connect(self._on_fit_button_clicked)
        self._sync_enabled()

    # --- public API -------------------------------------------------------------------------------

    def set_models(self, target: GGUFInfo | None, draft: GGUFInfo | None) -> None:
        if target is self._target and draft is self._draft and self.ctx.count():
            return  # the same pair, already shown: the prediction stands
        self._target, self._draft = target, draft
        for slider, info in ((self.ngl, target), (self.ngld, draft)):
            slider.blockSignals(True)
            slider.setRange(0, (info.n_layer + 1) if info else 0)
            slider.blockSignals(False)
        self._fill_contexts(self._want[2])
        self.set_values(*self._want)

    def set_devices(self, build: BuildSpec, budgets: list[DeviceBudget], draft_build: BuildSpec | None = None) -> None:
        """The devices found (they replace the stand-in the dialog opened with)."""
        self._build, self._budgets, self._draft_build = build, budgets, draft_build
        self._finding = False
        self.set_values(*self._want)

    def set_values(self, ngl: int, ngld: int, n_ctx: int) -> None:
        self._want = (ngl, ngld, n_ctx)
        for slider, value in ((self.ngl, ngl), (self.ngld, ngld)):
            slider.blockSignals(True)
            slider.setValue(slider.maximum() if value < 0 else min(value, slider.maximum()))
            slider.blockSignals(False)
        self._select_context(n_ctx)
        self._update()

    def values(self) -> tuple[int, int, int]:
        """(ngl, ngld, n_ctx); -1 stands for all layers, as on llama.cpp's command line."""

        def layers(s: QSlider, wanted: int) -> int:
            if not s.maximum():  # no model in this role: keep what was asked for
                return wanted
            return -1 if s.value() == s.maximum() else s.value()

        ctx = self.ctx.currentData()
        return layers(self.ngl, self._want[0]), layers(self.ngld, self._want[1]), int(ctx) if ctx else self._want[2]

    # --- slots ------------------------------------------------------------------------------------

    def _on_ngl_valueChanged(self, _value: int) -> None:
        self._user_changed()

    def _on_ngld_valueChanged(self, _value: int) -> None:
        self._user_changed()

    def _on_ctx_currentIndexChanged(self, _index: int) -> None:
        self._user_changed()

    def _on_fit_button_clicked(self) -> None:
        if self._target is None:
            return
        ts, ds = self._settings()
        try:
            fit = fit_pair(self._target, self._draft, ts, ds, self._build, self._budgets,
                           draft_build=self._draft_build)
        except PredictionError as e:
            self.note.setText(f"Cannot fit: {e}")
            return
        self.set_values(fit.target_ngl, fit.draft_ngl if fit.draft_ngl is not None else 0, fit.n_ctx)
        self.note.setText(("Auto-fit: " + fit.explanation) if fit.ok else f"{fit.explanation}. {fit.suggestion}")

    # --- internals --------------------------------------------------------------------------------

    def _user_changed(self) -> None:
        self._want = self.values()
        self.note.clear()  # an Auto-fit explanation no longer describes the settings
        self._update()

    def _slider(self, name: str) -> QSlider:
        s = QSlider(Qt.Orientation.Horizontal)
        s.setObjectName(name)
        s.setAccessibleName(name)
        s.setTickPosition(QSlider.TickPosition.TicksBelow)
        return s

    def _fill_contexts(self, current: int) -> None:
        limit = self._target.context_length if self._target else CONTEXT_CHOICES[-1]
        choices = sorted({c for c in CONTEXT_CHOICES if c <= limit} | {min(current, limit)})
        if choices == [self.ctx.itemData(i) for i in range(self.ctx.count())]:
            return  # the same sizes offered
        self.ctx.blockSignals(True)
        self.ctx.clear()
        for c in choices:
            self.ctx.addItem(f"{c:,} tokens", c)
        self.ctx.blockSignals(False)

    def _select_context(self, n_ctx: int) -> None:
        index = self.ctx.findData(n_ctx)
        if index < 0:  # the nearest offered size below
            below = [i for i in range(self.ctx.count()) if int(self.ctx.itemData(i)) <= n_ctx]
            index = below[-1] if below else 0
        self.ctx.blockSignals(True)
        self.ctx.setCurrentIndex(index)
        self.ctx.blockSignals(False)

    def _settings(self) -> tuple[ModelSettings, ModelSettings]:
        ngl, ngld, n_ctx = self.values()
        # As the session will open them (the meter beside the chat shows the same numbers).
        return (engine_settings("target", n_ctx=n_ctx, n_gpu_layers=ngl),
                engine_settings("draft", n_ctx=n_ctx, n_gpu_layers=ngld))

    def _sync_enabled(self) -> None:
        gpu = self._build.has_gpu
        self.ngl.setEnabled(gpu and self._target is not None)
        self.ngld.setEnabled(gpu and self._draft is not None)
        self.fit_button.setEnabled(not self._finding)  # fitting against the stand-in would mislead
        tip = "" if gpu else "Finding devices…" if self._finding else (
            self._build.gpu_note or "No GPU found: every layer runs on the CPU, the meter budgets system RAM")
        self.ngl.setToolTip(tip)
        self.ngld.setToolTip(tip)

    def _update(self) -> None:
        self._sync_enabled()
        for slider, label, info in (
            (self.ngl, self.ngl_label, self._target),
            (self.ngld, self.ngld_label, self._draft),
        ):
            if info is None:
                label.setText("–")
            elif not self._build.has_gpu:
                label.setText("…" if self._finding else "CPU only")
            elif slider.value() == slider.maximum():
                label.setText(f"all {info.n_layer}")
            else:
                label.setText(f"{slider.value()} of {info.n_layer}")
        self.prediction = None
        self.meter.setVisible(self._target is not None)  # an empty bar against no budget says nothing
        if self._target is not None:
            ts, ds = self._settings()
            try:
                self.prediction = predict_pair(self._target, self._draft, ts, ds, self._build, self._budgets,
                                               draft_build=self._draft_build)
            except PredictionError as e:
                self.note.setText(f"Cannot predict the memory: {e}")
            else:
                self.meter.set_prediction(self.prediction)
                if not self.note.text().startswith("Auto-fit"):
                    self.note.setText(self._status_text(self.prediction) + self._elsewhere(self.prediction))
        self.changed.emit()

    def _elsewhere(self, p: PairPrediction) -> str:
        """The devices besides the meter's (other GPUs, RPC servers' devices, RAM), one line each."""
        lines = [f"\n{'system RAM' if u.kind == 'ram' else device_label(u.device)}: {u.predicted_bytes / GiB:.2f} "
                 f"GiB predicted of {u.free_bytes / GiB:.1f} GiB free"
                 for u in p.uses if u.device != p.primary.device and u.predicted_bytes > 0]
        return "".join(lines)

    def _status_text(self, p: PairPrediction) -> str:
        if self._finding:
            return "Finding devices… until then the meter budgets system RAM."
        if not self._build.has_gpu:
            if self._build.gpu_note:
                return f"{self._build.gpu_note} The meter budgets system RAM."
            return "No GPU found: both models run on the CPU; the meter budgets system RAM."
        return {"ok": "Fits with the safety margin.", "tight": "Fits, but with less than the safety margin free.",
                "over": "Will not fit: lower the GPU layers or the context, or press Auto-fit."}[p.status]  # fmt: skip
