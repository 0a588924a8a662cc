"""Legend of the token overlay, with the toggles for colours and ghost text."""

from __future__ import annotations

from PySide6.QtCore import Signal, Slot
from PySide6.QtGui import QColor, QPainter, QPen
from PySide6.QtWidgets import QCheckBox, QGridLayout, QLabel, QWidget

from app.engine.events import TokenFate
from app.palette import FATE_LABELS, GHOST_COLOUR
from ui.base.token_style import tint
from ui.stats.painted import PaintedWidget


class _Swatch(PaintedWidget):
    def __init__(self, colour: QColor, ghost: bool = False, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._colour = colour
        self._ghost = ghost
        self.setFixedSize(22, 14)

    def _paint(self, p: QPainter) -> None:
        if self._ghost:
            p.setPen(QPen(self._colour, 1.5))
            p.drawLine(2, 7, 20, 7)
        else:
            p.fillRect(self.rect(), self._colour)


class Legend(QWidget):
    """What each tint means; the checkboxes switch colours and ghosts on and off."""

    coloursToggled = Signal(bool)
    ghostsToggled = Signal(bool)

    def __init__(self, colours: bool = True, ghosts: bool = True, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        grid = QGridLayout(self)
        grid.setContentsMargins(0, 0, 0, 0)
        grid.setHorizontalSpacing(6)
        grid.setVerticalSpacing(2)
        row = 0
        for fate in TokenFate:
            grid.addWidget(_Swatch(tint(fate)), row, 0)
            grid.addWidget(QLabel(FATE_LABELS[fate][:1].upper() + FATE_LABELS[fate][1:]), row, 1)
            row += 1
        grid.addWidget(_Swatch(QColor(GHOST_COLOUR), ghost=True), row, 0)
        ghost_label = QLabel("Rejected draft (ghost)")
        ghost_label.setToolTip("What the draft guessed where the target disagreed; the target's correction follows.")
        grid.addWidget(ghost_label, row, 1)
        row += 1
        self.colours_box = QCheckBox("Colour tokens by fate")
        self.colours_box.setChecked(colours)
        self.ghosts_box = QCheckBox("Show rejected drafts")
        self.ghosts_box.setChecked(ghosts)
        grid.addWidget(self.colours_box, row, 0, 1, 2)
        grid.addWidget(self.ghosts_box, row + 1, 0, 1, 2)
        self.colours_box.toggled.connect(self._on_colours_box_toggled)
        self.ghosts_box.toggled.connect(self._on_ghosts_box_toggled)

    @Slot(bool)
    def _on_colours_box_toggled(self, on: bool) -> None:
        self.coloursToggled.emit(on)

    @Slot(bool)
    def _on_ghosts_box_toggled(self, on: bool) -> None:
        self.ghostsToggled.emit(on)
