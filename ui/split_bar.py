"""A one-line stacked bar: where decode time went (draft, verify, other)."""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import QRectF, QSize
from PySide6.QtGui import QColor, QPainter, QPaintEvent
from PySide6.QtWidgets import QSizePolicy, QWidget


class SplitBar(QWidget):
    def __init__(self, colours: Sequence[str], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._colours = [QColor(c) for c in colours]
        self._values: tuple[float, ...] = ()
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.setFixedHeight(10)

    def set_values(self, values: Sequence[float]) -> None:
        self._values = tuple(max(v, 0.0) for v in values)
        self.update()

    def sizeHint(self) -> QSize:  # noqa: N802 - Qt override
        return QSize(200, 10)

    def paintEvent(self, _event: QPaintEvent) -> None:  # noqa: N802 - Qt override
        p = QPainter(self)
        try:
            empty = QColor(self.palette().windowText().color())
            empty.setAlphaF(0.12)
            p.fillRect(self.rect(), empty)
            total = sum(self._values)
            x = 0.0
            for value, colour in zip(self._values, self._colours, strict=False):
                w = self.width() * value / total if total > 0 else 0.0
                p.fillRect(QRectF(x, 0, w, self.height()), colour)
                x += w
        finally:
            p.end()
