"""A one-line stacked bar: where decode time went (draft, verify, other)."""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import QRectF, QSize
from PySide6.QtGui import QColor, QPainter
from PySide6.QtWidgets import QSizePolicy, QWidget

from ui.stats.painted import PaintedWidget


class SplitBar(PaintedWidget):
    def __init__(self, colours: Sequence[str], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setAccessibleName("Time split: draft, target, other")
        self._colours = [QColor(c) for c in colours]
        self._values: tuple[float, ...] = ()
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.setFixedHeight(10)

    def set_values(self, values: Sequence[float]) -> None:
        self._values = tuple(max(v, 0.0) for v in values)
        self.update()

    def sizeHint(self) -> QSize:  # noqa: N802 - Qt override
        return QSize(200, 10)

    def _paint(self, p: QPainter) -> None:
        p.fillRect(self.rect(), self.text_colour(0.12))
        total = sum(self._values)
        x = 0.0
        for value, colour in zip(self._values, self._colours, strict=False):
            w = self.width() * value / total if total > 0 else 0.0
            p.fillRect(QRectF(x, 0, w, self.height()), colour)
            x += w
