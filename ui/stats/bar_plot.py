"""A small bar chart drawn with QPainter: acceptance by draft position, accepted-length histogram."""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import QRectF, QSize, Qt
from PySide6.QtGui import QColor, QFontMetrics, QPainter
from PySide6.QtWidgets import QSizePolicy, QWidget

from ui.stats.painted import PaintedWidget

_LABEL_STEPS = (1, 2, 5, 10, 20, 50, 100)


def labelled(n: int, first: int, slot: float, widest: float) -> list[int]:
    """Which of n bars get their number under them: every bar when the numbers fit their slots, else the
    first bar and every 2nd, 5th, 10th ... number (K up to 31 gives 31 bars in a panel 220 px wide)."""
    every = next((e for e in _LABEL_STEPS if slot * e >= widest), _LABEL_STEPS[-1])
    return [i for i in range(n) if i == 0 or (i + first) % every == 0]


class BarPlot(PaintedWidget):
    def __init__(self, title: str, colour: str, *, fraction: bool, first_label: int = 0,
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setAccessibleName(title)  # screen readers name the plot by its title
        self._title = title
        self._colour = QColor(colour)
        self._fraction = fraction  # values are 0..1 (shown as %), else counts scaled to the largest
        self._first_label = first_label
        self._values: tuple[float, ...] = ()
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.setMinimumHeight(92)

    def set_values(self, values: Sequence[float]) -> None:
        values = tuple(values)
        if values != self._values:
            self._values = values
            self.setToolTip(self._describe())
            self.update()

    def values(self) -> tuple[float, ...]:
        return self._values

    def sizeHint(self) -> QSize:  # noqa: N802 - Qt override
        return QSize(220, 92)

    def _describe(self) -> str:
        if not self._values:
            return f"{self._title}: no data yet"
        items = [f"{i + self._first_label}: " + (f"{v:.0%}" if self._fraction else f"{v:g}")
                 for i, v in enumerate(self._values)]
        return f"{self._title}\n" + ", ".join(items)

    def _paint(self, p: QPainter) -> None:
        fm = QFontMetrics(self.font())
        text, dim = self.text_colour(), self.text_colour(0.55)
        p.setPen(text)
        p.drawText(0, fm.ascent(), self._title)
        top = fm.height() + 4
        bottom = self.height() - fm.height() - 2
        area = QRectF(2, top, self.width() - 4, max(bottom - top, 4))
        p.setPen(dim)
        p.drawLine(area.bottomLeft(), area.bottomRight())
        if not self._values:
            p.drawText(area, Qt.AlignmentFlag.AlignCenter, "no drafts yet")
            return
        scale = 1.0 if self._fraction else max(max(self._values), 1.0)
        n = len(self._values)
        slot = area.width() / n
        bar_w = max(min(slot * 0.7, 36.0), 2.0)
        widest = fm.horizontalAdvance(str(n - 1 + self._first_label)) + 4
        labels = set(labelled(n, self._first_label, slot, widest))
        for i, v in enumerate(self._values):
            x = area.left() + slot * i + (slot - bar_w) / 2
            h = area.height() * max(min(v / scale, 1.0), 0.0)
            p.fillRect(QRectF(x, area.bottom() - h, bar_w, h), self._colour)
            p.setPen(dim)
            if i in labels:  # centred under its bar, as wide as the widest number
                centre = area.left() + slot * (i + 0.5)
                label_rect = QRectF(centre - widest / 2, area.bottom() + 1, widest, fm.height())
                p.drawText(label_rect, Qt.AlignmentFlag.AlignHCenter | Qt.AlignmentFlag.AlignTop,
                           str(i + self._first_label))
            if slot >= fm.horizontalAdvance("100%") + 2 and h > 0:
                value = f"{v:.0%}" if self._fraction else f"{v:g}"
                inside = h > area.height() - fm.height()  # no room above: write inside, in white
                p.setPen(QColor("#FFFFFF") if inside else text)
                top = area.bottom() - h + (0 if inside else -fm.height())
                p.drawText(QRectF(area.left() + slot * i, top, slot, fm.height()),
                           Qt.AlignmentFlag.AlignHCenter | Qt.AlignmentFlag.AlignVCenter, value)
