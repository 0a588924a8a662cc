"""Which pair is loaded: loading on the worker thread with progress, the memory meter, the picker.

No widgets of its own: it drives the status-bar label and progress bar and the compact memory
meter that the main window hands it.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Signal, Slot
from PySide6.QtWidgets import QDialog, QLabel, QProgressBar, QWidget

from app.memory import measured_segments
from app.settings import Settings
from ui.base.message_bar import MessageBar
from ui.base.worker import GenerationWorker, LoadFailure, LoadInfo
from ui.stats.memory_meter import MemoryMeter


class ModelsController(QObject):
    modelsLoaded = Signal(object)  # LoadInfo
    loadFailed = Signal(str, str)  # a LoadFailure (a str, so it travels in the Signal), message

    def __init__(self, worker: GenerationWorker, label: QLabel, progress: QProgressBar, meter: MemoryMeter,
                 meter_box: QWidget, errors: MessageBar, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.worker, self.label, self.progress = worker, label, progress
        self.meter, self.meter_box, self.errors = meter, meter_box, errors
        self._extra: dict[str, MemoryMeter] = {}  # bars for the devices after the first (device -> bar)
        self.loaded: LoadInfo | None = None
        self.pair: tuple[Path, Path | None] | None = None
        self.previous: tuple[Path, Path | None] | None = None
        self.incompatible: str | None = None
        self._prediction: Any = None
        worker.loadProgress.connect(self._on_worker_loadProgress)
        worker.loaded.connect(self._on_worker_loaded)
        worker.loadFailed.connect(self._on_worker_loadFailed)
        worker.memoryPredicted.connect(self._on_worker_memoryPredicted)

    @property
    def has_draft(self) -> bool:
        return bool(self.loaded and self.loaded.config.draft)

    def load(self, target: Path, draft: Path | None, settings: Settings, force: bool = False) -> bool:
        """Load a pair on the worker thread; the window stays usable and shows progress."""
        if self.worker.is_generating() or self.worker.is_loading():
            self.errors.show_message("Wait for the current reply or load to end before loading other models.",
                                     "warning")
            return False
        # The pair in use until now: a cancelled load goes back to it (the worker closed it to make room).
        self.previous = self.pair if self.loaded is not None else None
        self.pair = (Path(target), Path(draft) if draft else None)
        self.loaded = None
        self.incompatible = None
        self.label.setText(f"Loading {Path(target).name}" + (f" + {Path(draft).name}" if draft else "") + "…")
        self.progress.setRange(0, 100)  # the same bar shows prompt processing in tokens
        self.progress.setValue(0)
        self.progress.show()
        # force: load even when the memory prediction says the pair will not fit (the user asked)
        self.worker.load(replace(settings.pair_config(self.pair[0], self.pair[1]), force=force))
        return True

    def open_picker(self, parent: QWidget, settings: Settings) -> QDialog | None:
        """The model picker from ui.picker.model_picker, preselecting the current pair; None if unavailable."""
        try:
            from ui.picker.model_picker import open_picker
        except ImportError:
            self.errors.show_message("The model picker is not part of this build. Start SpecChat with "
                                     "<tt>-m TARGET.gguf -md DRAFT.gguf</tt>.", "warning")
            return None
        preselect: dict[str, Any] = {}
        if self.pair is not None:
            preselect = {"target": self.pair[0], "draft": self.pair[1]}
        return open_picker(parent, settings, **preselect)

    @Slot(str, float)
    def _on_worker_loadProgress(self, label: str, fraction: float) -> None:
        self.progress.setValue(int(fraction * 100))
        self.progress.setFormat(f"loading {label} %p%")

    @Slot(object)
    def _on_worker_loaded(self, info: LoadInfo) -> None:
        self.loaded = info
        self.progress.hide()
        names = Path(info.config.target).name + (f" + {Path(info.config.draft).name}" if info.config.draft else "")
        self.label.setText(f"{names} · loaded in {info.load_s:.1f} s")
        if self._prediction is not None and info.measured:
            buffers = [b for role in info.measured.values() for b in role]
            device = self._prediction.primary.device
            self.meter.set_measured(measured_segments(buffers, device, info.process_gpu.get(device)))
            for name, meter in self._extra.items():
                meter.set_measured(measured_segments(buffers, name, info.process_gpu.get(name)))
        self.modelsLoaded.emit(info)

    @Slot(str, str)
    def _on_worker_loadFailed(self, kind: str, message: str) -> None:
        self.progress.hide()
        self.label.setText("Loading cancelled" if kind == LoadFailure.CANCELLED else "No models loaded")
        if kind == LoadFailure.INCOMPATIBLE:
            self.incompatible = message
        self.loadFailed.emit(kind, message)

    @Slot(object)
    def _on_worker_memoryPredicted(self, prediction: Any) -> None:
        self._prediction = prediction
        self.meter_box.setVisible(prediction is not None)
        for meter in self._extra.values():
            meter.deleteLater()
        self._extra = {}
        if prediction is not None:
            self.meter.set_prediction(prediction)
            self.meter.set_measured(None)
            # A pair spread over several devices (GPUs, RPC servers' devices, RAM): one bar for each.
            layout = self.meter_box.layout()
            for use in prediction.uses:
                if use.device != prediction.primary.device and use.predicted_bytes > 0 and layout is not None:
                    meter = MemoryMeter(compact=True)
                    meter.set_prediction(prediction, use.device)
                    layout.addWidget(meter)
                    self._extra[use.device] = meter
