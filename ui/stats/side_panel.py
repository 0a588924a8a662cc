"""The right-hand column: live statistics, the overlay legend and the compact memory meter."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QGroupBox, QScrollArea, QVBoxLayout, QWidget

from app.settings import Settings
from ui.stats.legend import Legend
from ui.stats.memory_meter import MemoryMeter
from ui.stats.stats_panel import StatsPanel


class SidePanel(QScrollArea):
    def __init__(self, settings: Settings, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.stats = StatsPanel()
        self.legend = Legend(settings.show_colours, settings.show_ghosts)
        legend_box = QGroupBox("Token overlay")
        QVBoxLayout(legend_box).addWidget(self.legend)
        self.meter = MemoryMeter(compact=True)
        self.meter_box = QGroupBox("Memory (predicted · measured)")
        QVBoxLayout(self.meter_box).addWidget(self.meter)
        self.meter_box.hide()  # until a prediction exists
        inner = QWidget()
        col = QVBoxLayout(inner)
        col.setContentsMargins(4, 4, 4, 4)
        col.addWidget(self.stats)
        col.addWidget(legend_box)
        col.addWidget(self.meter_box)
        col.addStretch(1)
        self.setWidget(inner)
        self.setWidgetResizable(True)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setMinimumWidth(300)
