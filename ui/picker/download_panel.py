"""Progress of a running download: one bar per file with bytes, speed and time left, and a Cancel button.

Fed from the GUI thread only (the picker turns worker-thread progress into a queued signal first).
"""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QGridLayout, QHBoxLayout, QLabel, QProgressBar, QPushButton, QVBoxLayout, QWidget

from app.models.hub_support import DownloadProgress

_BAR_MAX = 1000


def _mb(n: float) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e9 else f"{n / 1e6:.1f} MB"


def _eta(seconds: float | None) -> str:
    if seconds is None:
        return ""
    s = int(seconds + 0.5)
    return f", {s // 60} min {s % 60:02d} s left" if s >= 60 else f", {s} s left"


def progress_text(p: DownloadProgress) -> str:
    total = _mb(p.total) if p.total else "?"
    if p.phase == "verify":
        return f"verifying SHA-256: {_mb(p.done)} of {total}"
    if p.phase == "done":
        return f"done, {total} verified"
    resumed = f" (resumed at {_mb(p.resumed_from)})" if p.resumed_from else ""
    return f"{_mb(p.done)} of {total} at {_mb(p.speed)}/s{_eta(p.eta_s)}{resumed}"


class DownloadPanel(QWidget):
    cancelRequested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.title = QLabel()
        self.cancel_button = QPushButton("Stop download")
        self.cancel_button.setEnabled(False)
        self._grid = QGridLayout()
        self._rows: dict[str, tuple[QLabel, QProgressBar, QLabel]] = {}
        top = QHBoxLayout()
        top.addWidget(self.title, 1)
        top.addWidget(self.cancel_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(top)
        layout.addLayout(self._grid)
        self.cancel_button.clicked.connect(self._on_cancel_button_clicked)

    def start(self, title: str, files: list[tuple[str, str]]) -> None:
        """New download of `files` as (key, label) pairs."""
        for name, bar, status in self._rows.values():
            for w in (name, bar, status):
                w.deleteLater()
        self._rows.clear()
        self.title.setText(title)
        for row, (key, label) in enumerate(files):
            name, bar, status = QLabel(label), QProgressBar(), QLabel("waiting")
            bar.setRange(0, _BAR_MAX)
            bar.setAccessibleName(f"{label} progress")
            self._grid.addWidget(name, row, 0)
            self._grid.addWidget(bar, row, 1)
            self._grid.addWidget(status, row, 2)
            self._rows[key] = (name, bar, status)
        self._grid.setColumnStretch(1, 1)
        self.cancel_button.setEnabled(True)

    def update_file(self, key: str, p: DownloadProgress) -> None:
        row = self._rows.get(key)
        if row is None:
            return
        _, bar, status = row
        bar.setValue(int(_BAR_MAX * p.done / p.total) if p.total else 0)
        status.setText(progress_text(p))

    def finish(self, message: str) -> None:
        self.title.setText(message)
        self.cancel_button.setEnabled(False)

    def bar_value(self, key: str) -> float:
        """Fraction done for `key` (0..1; 0 before its row exists), for tests."""
        row = self._rows.get(key)
        return row[1].value() / _BAR_MAX if row else 0.0

    def _on_cancel_button_clicked(self) -> None:
        self.cancel_button.setEnabled(False)
        self.title.setText(self.title.text() + " — stopping…")
        self.cancelRequested.emit()
