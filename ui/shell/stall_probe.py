"""`specchat gui --stall-report FILE`: how smoothly the GUI thread runs while replies stream.

A timer on the GUI thread ticks every TICK_MS; while a reply streams, the gaps between its ticks are
recorded (a gap is how long the event loop was held up, plus the tick). At each reply's end and at
quit, FILE is rewritten atomically with {"max_gap_ms", "p99_gap_ms", "tokens", ...} over all replies.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, QTimer, Slot

from app.atomic import atomic_write_text

TICK_MS = 5


class StallProbe(QObject):
    def __init__(self, window: Any, report: Path) -> None:
        super().__init__(window)
        self.window, self.report = window, report
        self.gaps_ms: list[float] = []
        self.tokens = 0
        self.replies = 0
        self._last = 0.0
        self._timer = QTimer(self)
        self._timer.setInterval(TICK_MS)
        self._timer.timeout.connect(self._on_timer_timeout)
        window.controller.busyChanged.connect(self._on_busyChanged)
        window.controller.worker.events.connect(self._on_events)
        window.generationFinished.connect(lambda _ok: self.write())

    @Slot(bool)
    def _on_busyChanged(self, busy: bool) -> None:
        if busy:
            self._last = time.perf_counter()
            self._timer.start()
        else:
            self._timer.stop()
            self.replies += 1

    @Slot(str, object)
    def _on_events(self, _name: str, events: list[Any]) -> None:
        from app.engine.events import TokenEvent

        self.tokens += sum(isinstance(e, TokenEvent) for e in events)

    @Slot()
    def _on_timer_timeout(self) -> None:
        now = time.perf_counter()
        self.gaps_ms.append((now - self._last) * 1000.0)
        self._last = now

    def summary(self) -> dict[str, Any]:
        gaps = sorted(self.gaps_ms)
        p99 = gaps[min(len(gaps) - 1, int(0.99 * len(gaps)))] if gaps else 0.0
        return {
            "max_gap_ms": round(gaps[-1], 1) if gaps else 0.0,
            "p99_gap_ms": round(p99, 1),
            "tokens": self.tokens,
            "replies": self.replies,
            "ticks": len(gaps),
            "tick_ms": TICK_MS,
        }

    def write(self) -> None:
        self.report.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.report, json.dumps(self.summary(), indent=2) + "\n")
