"""The memory meter: a stacked bar of the pair's predicted memory against one device's budget.

Segments: target weights, draft weights, target KV, draft KV, compute + output, runtime overhead,
then free memory. The state is green (free memory at least the margin), amber (free below the
margin) or red (over the budget); it is also spelled out in text, so colour is never the only cue.
Compact mode (main window): a thin bar with one line of text. Full mode (model picker): the bar,
the budget marker and one labelled row per segment, with predicted and, after loading, measured.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import QEvent, QPoint, QRectF, QSize, Qt, Signal
from PySide6.QtGui import QColor, QFontMetrics, QHelpEvent, QPainter, QPalette, QPen
from PySide6.QtWidgets import QSizePolicy, QToolTip, QWidget

from app.memory import SEGMENTS, GiB, PairPrediction, meter_segments
from ui.stats.painted import PaintedWidget

# Okabe-Ito: told apart with the common colour-vision deficiencies; neighbours differ in lightness.
SEGMENT_COLOURS = {
    "target_weights": "#0072B2",  # blue
    "draft_weights": "#56B4E9",  # sky blue
    "target_kv": "#E69F00",  # orange
    "draft_kv": "#F0E442",  # yellow
    "compute": "#CC79A7",  # reddish purple
    "overhead": "#999999",  # grey
}
SEGMENT_LABELS = {
    "target_weights": "Target weights",
    "draft_weights": "Draft weights",
    "target_kv": "Target KV cache",
    "draft_kv": "Draft KV cache",
    "compute": "Compute + logits",
    "overhead": "Runtime overhead",
}
FREE_COLOUR = "#E6E6E6"  # free memory on a light theme


def free_colour(palette: QPalette) -> QColor:
    """Free memory: a light grey on light themes, a grey just above the background on dark ones
    (the light grey glared beside the dark window and hid the segments' edges)."""
    base = palette.window().color()
    return QColor(FREE_COLOUR) if base.lightness() >= 128 else base.lighter(170)
STATE_COLOURS = {"ok": "#009E73", "tight": "#E69F00", "over": "#D55E00"}  # green, amber, red (vermillion)
STATE_TEXT = {"ok": "fits", "tight": "tight: less free than the margin", "over": "over budget"}


@dataclass(frozen=True)
class SegmentRect:
    key: str  # a SEGMENTS name, or "free"
    x: float
    width: float


def layout_segments(values: dict[str, int], budget: int, width: float) -> list[SegmentRect]:
    """Segment x/width in a bar `width` wide; the scale is the budget, or the use when that is larger."""
    used = sum(max(values.get(k, 0), 0) for k in SEGMENTS)
    scale = max(budget, used, 1)
    out, x = [], 0.0
    for key in SEGMENTS:
        w = width * max(values.get(key, 0), 0) / scale
        if w > 0:
            out.append(SegmentRect(key, x, w))
            x += w
    if budget > used:
        out.append(SegmentRect("free", x, width * (budget - used) / scale))
    return out


def meter_state(used: int, budget: int, margin: int) -> str:
    spare = budget - used
    return "over" if spare < 0 else "tight" if spare < margin else "ok"


def device_label(name: str) -> str:
    """A device as the user knows it: an RPC device by its server ("RPC0 · 10.0.0.2:50052")."""
    from app.llama_backend import rpc

    endpoint = rpc.endpoint_of(name) if rpc.is_rpc_device(name) else None
    return f"{name} · {endpoint}" if endpoint else name


def _gib(n: int) -> str:
    return f"{n / GiB:.2f} GiB"


class MemoryMeter(PaintedWidget):
    """Stacked bar of predicted (and measured) memory against a device budget."""

    stateChanged = Signal(str)  # "ok", "tight" or "over"

    def __init__(self, parent: QWidget | None = None, compact: bool = False, reserve_rows: int = 0) -> None:
        super().__init__(parent)
        self.setAccessibleName("Memory budget of the two models")
        self._compact = compact
        # Rows whose height is kept even while empty: a meter in a dialog then never changes its height as
        # values arrive, and the dialog is not laid out again (a stall of tens of ms on a slow machine).
        self._reserve_rows = reserve_rows
        self._values: dict[str, int] = dict.fromkeys(SEGMENTS, 0)
        self._measured: dict[str, int] | None = None
        self._overhead_source = "NVML"
        self._budget = 0
        self._margin = GiB
        self._device = "system RAM"
        self._state = "ok"
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.setMouseTracking(True)
        self._update_geometry()

    # --- public API -------------------------------------------------------------------------------

    def set_compact(self, compact: bool) -> None:
        self._compact = compact
        self._update_geometry()
        self.update()

    def is_compact(self) -> bool:
        return self._compact

    def set_usage(
        self,
        values: dict[str, int],
        budget_bytes: int,
        margin_bytes: int = GiB,
        device_label: str = "system RAM",
    ) -> None:
        """Predicted bytes per segment (keys from `app.memory.SEGMENTS`) against `budget_bytes` free."""
        unknown = set(values) - set(SEGMENTS)
        if unknown:
            raise ValueError(f"unknown meter segments: {', '.join(sorted(unknown))}")
        self._values = {k: max(int(values.get(k, 0)), 0) for k in SEGMENTS}
        self._budget, self._margin, self._device = (
            max(int(budget_bytes), 0),
            max(int(margin_bytes), 0),
            device_label,
        )
        self._refresh()

    def set_prediction(self, pair: PairPrediction, device: str | None = None) -> None:
        """Show a pair prediction on `device` (default: the first GPU, or system RAM without one)."""
        use = pair.use(device) if device else pair.primary
        if use is None:
            raise ValueError(f"no budget for device {device!r}")
        label = "system RAM" if use.kind == "ram" else device_label(use.device)
        self.set_usage(meter_segments(pair, use.device), use.free_bytes, use.margin_bytes, label)

    def set_measured(self, values: dict[str, int] | None, overhead_source: str = "NVML") -> None:
        """Measured bytes per segment after loading, shown beside the prediction (None clears).

        A segment missing from `values` was not measured and says so: llama.cpp reports its buffers
        but not the runtime's own overhead, which only NVML (`overhead_source`) sees.
        """
        unknown = set(values or ()) - set(SEGMENTS)
        if unknown:
            raise ValueError(f"unknown meter segments: {', '.join(sorted(unknown))}")
        self._measured = None if values is None else {k: max(int(v), 0) for k, v in values.items()}
        self._overhead_source = overhead_source
        self._refresh()

    def state(self) -> str:
        return self._state

    def used_bytes(self) -> int:
        return sum(self._values.values())

    def segment_rects(self) -> list[SegmentRect]:
        """Where each segment is drawn, in widget coordinates (the bar's own x offset included)."""
        bar = self._bar_rect()
        return [
            SegmentRect(s.key, bar.x() + s.x, s.width)
            for s in layout_segments(self._values, self._budget, bar.width())
        ]

    def compact_lines(self) -> list[str]:
        """The compact bar's text as painted: the prediction, then what was measured on a line of its own
        ("system RAM 2.36/22.85 GiB, fits, measured 2.31" was cut at the side panel's width)."""
        state = {"ok": "fits", "tight": "tight", "over": "over"}[self._state]
        lines = [f"{self._device} {self.used_bytes() / GiB:.2f}/{_gib(self._budget)}, {state}"]
        if self._measured is not None:
            lines.append(f"measured {_gib(sum(self._measured.values()))}")
        return lines

    def summary(self) -> str:
        used = self.used_bytes()
        text = (
            f"{self._device}: {_gib(used)} predicted of {_gib(self._budget)} free — {STATE_TEXT[self._state]}"
        )
        if self._measured is not None:
            text += f" (measured {_gib(sum(self._measured.values()))})"
        return text

    # --- Qt -----------------------------------------------------------------------------------------

    def sizeHint(self) -> QSize:
        return QSize(320, self._height())

    def minimumSizeHint(self) -> QSize:
        return QSize(120, self._height())

    def event(self, e: QEvent) -> bool:
        if e.type() == QEvent.Type.ToolTip and isinstance(e, QHelpEvent):
            text = self._tooltip_at(e.pos())
            if text:
                QToolTip.showText(e.globalPos(), text, self)
            else:
                QToolTip.hideText()
                e.ignore()
            return True
        return super().event(e)

    def _paint(self, p: QPainter) -> None:
        bar = self._bar_rect()
        for s in self.segment_rects():
            colour = free_colour(self.palette()) if s.key == "free" else QColor(SEGMENT_COLOURS[s.key])
            p.fillRect(QRectF(s.x, bar.y(), s.width, bar.height()), colour)
        state_colour = QColor(STATE_COLOURS[self._state])
        p.setPen(QPen(state_colour, 2))
        p.drawRect(bar.adjusted(-1, -1, 1, 1))
        used = self.used_bytes()
        if used > self._budget > 0:  # budget marker inside an overflowing bar
            x = bar.x() + bar.width() * self._budget / used
            p.setPen(QPen(self.palette().windowText().color(), 2, Qt.PenStyle.DashLine))  # visible on dark too
            p.drawLine(int(x), int(bar.top()) - 2, int(x), int(bar.bottom()) + 2)
        p.setPen(self.palette().windowText().color())
        fm = QFontMetrics(self.font())
        text_y = int(bar.bottom()) + fm.ascent() + 3
        for i, line in enumerate(self.compact_lines() if self._compact else [self.summary()]):
            p.drawText(QPoint(int(bar.x()), text_y + i * fm.height()),
                       fm.elidedText(line, Qt.TextElideMode.ElideRight, int(bar.width())))
        if self._compact:
            return
        y = text_y + fm.height() + 2
        for key in SEGMENTS:
            if not self._values[key] and not (self._measured and self._measured.get(key)):
                continue
            p.fillRect(QRectF(bar.x(), y - fm.ascent() + 2, 10, 10), QColor(SEGMENT_COLOURS[key]))
            p.drawText(QPoint(int(bar.x()) + 16, y), self._row_text(key))
            y += fm.height() + 2

    # --- internals ----------------------------------------------------------------------------------

    def _refresh(self) -> None:
        state = meter_state(self.used_bytes(), self._budget, self._margin)
        changed = state != self._state
        self._state = state
        self.setToolTip("")
        self.setAccessibleDescription(self.summary())
        self._update_geometry()
        self.update()
        if changed:
            self.stateChanged.emit(state)

    def _row_text(self, key: str) -> str:
        text = f"{SEGMENT_LABELS[key]}: {_gib(self._values[key])}"
        if self._measured is None:
            return text
        if key not in self._measured:
            return text + "  (not measured: llama.cpp does not report it)"
        source = f" by {self._overhead_source}" if key == "overhead" else ""
        return text + f"  (measured {_gib(self._measured[key])}{source})"

    def _tooltip_at(self, pos: QPoint) -> str:
        bar = self._bar_rect()
        if not bar.adjusted(0, -2, 0, 2).contains(pos.x(), pos.y()):
            return self.summary() if self._compact else ""
        for s in self.segment_rects():
            if s.x <= pos.x() < s.x + s.width:
                if s.key == "free":
                    return f"Free: {_gib(self._budget - self.used_bytes())} ({self._device})"
                return self._row_text(s.key)
        return ""

    def _height(self) -> int:
        fm = QFontMetrics(self.font())
        bar = 10 if self._compact else 22
        measured = self._measured or {}
        rows = 0 if self._compact else sum(1 for k in SEGMENTS if self._values.get(k) or measured.get(k))
        rows = max(rows, 0 if self._compact else self._reserve_rows)
        lines = len(self.compact_lines()) if self._compact else 1
        return 4 + bar + 3 + lines * fm.height() + rows * (fm.height() + 2) + 4

    def _update_geometry(self) -> None:
        height = self._height()
        if height != self.height() or self.minimumHeight() != height:  # unchanged: no relayout to ask for
            self.setFixedHeight(height)
            self.updateGeometry()

    def _bar_rect(self) -> QRectF:
        return QRectF(4, 4, max(self.width() - 8, 1), 10 if self._compact else 22)
