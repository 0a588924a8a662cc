"""A small line chart drawn with QPainter: rolling acceptance over the reply."""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import QPointF, QRectF, QSize, Qt
from PySide6.QtGui import QColor, QFontMetrics, QPainter, QPainterPath, QPen
from PySide6.QtWidgets import QSizePolicy, QWidget

from ui.stats.painted import PaintedWidget


class LinePlot(PaintedWidget):
    """y in 0..1 against x (token index); a dashed line marks the overall mean."""

    def __init__(self, title: str, colour: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setAccessibleName(title)  # screen readers name the plot by its title
        self._title = title
        self._colour = QColor(colour)
        self._points: tuple[tuple[float, float], ...] = ()
        self._mean: float | None = None
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.setMinimumHeight(84)

    def set_points(self, points: Sequence[tuple[float, float]], mean: float | None = None) -> None:
        self._points = tuple(points)
        self._mean = mean
        last = f"{self._points[-1][1]:.0%} over the last steps" if self._points else "no drafts yet"
        self.setToolTip(f"{self._title}: {last}")
        self.update()

    def points(self) -> tuple[tuple[float, float], ...]:
        return self._points

    def sizeHint(self) -> QSize:  # noqa: N802 - Qt override
        return QSize(220, 84)

    def _paint(self, p: QPainter) -> None:
        fm = QFontMetrics(self.font())
        text, dim = self.text_colour(), self.text_colour(0.45)
        p.setPen(text)
        p.drawText(0, fm.ascent(), self._title)
        area = QRectF(38, fm.height() + 6, self.width() - 42, self.height() - fm.height() - 10)
        p.setPen(dim)
        for frac, label in ((0.0, "0%"), (1.0, "100%")):
            y = area.bottom() - area.height() * frac
            p.drawLine(QPointF(area.left(), y), QPointF(area.right(), y))
            p.drawText(QRectF(0, y - fm.height() / 2, 34, fm.height()), Qt.AlignmentFlag.AlignRight, label)
        if not self._points:
            p.drawText(area, Qt.AlignmentFlag.AlignCenter, "no drafts yet")
            return
        x_max = max(max(x for x, _ in self._points), 1.0)

        def at(x: float, y: float) -> QPointF:
            return QPointF(area.left() + area.width() * x / x_max, area.bottom() - area.height() * y)

        if self._mean is not None:
            p.setPen(QPen(dim, 1, Qt.PenStyle.DashLine))
            p.drawLine(at(0, self._mean), at(x_max, self._mean))
        path = QPainterPath(at(*self._points[0]))
        for x, y in self._points[1:]:
            path.lineTo(at(x, y))
        p.setPen(QPen(self._colour, 2))
        p.drawPath(path)
        if len(self._points) == 1:
            p.setBrush(self._colour)
            p.drawEllipse(at(*self._points[0]), 2.5, 2.5)
