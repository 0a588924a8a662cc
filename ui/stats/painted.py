"""Base for the widgets SpecChat draws itself (plots, bars, the memory meter, legend swatches)."""

from __future__ import annotations

from PySide6.QtGui import QColor, QPainter, QPaintEvent
from PySide6.QtWidgets import QWidget


class PaintedWidget(QWidget):
    """Opens an antialiased painter for `_paint` and always ends it, even when drawing raises
    (a painter left open aborts Qt)."""

    def paintEvent(self, _event: QPaintEvent) -> None:  # noqa: N802 - Qt override
        p = QPainter(self)
        try:
            p.setRenderHint(QPainter.RenderHint.Antialiasing)
            self._paint(p)
        finally:
            p.end()

    def _paint(self, p: QPainter) -> None:
        raise NotImplementedError

    def text_colour(self, alpha: float = 1.0) -> QColor:
        """The palette's text colour, faded to `alpha` for axes, grids and empty space."""
        colour = QColor(self.palette().windowText().color())
        colour.setAlphaF(alpha)
        return colour
