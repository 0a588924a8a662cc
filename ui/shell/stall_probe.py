"""`specchat gui --stall-report FILE`: how smoothly the GUI thread runs while replies stream.

A timer on the GUI thread ticks every TICK_MS; while a reply streams, the gaps between its ticks are
recorded (a gap is how long the event loop was held up, plus the tick). At each reply's end and at
quit, FILE is rewritten atomically with {"max_gap_ms", "p99_gap_ms", "max_held_ms", "tokens", ...} over
all replies. A gap's `held` part leaves out the time the GUI thread was ready to run but waited for a CPU
(Linux's schedstat): that share is the machine's other load, not the window's own work or waits.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, QTimer, Slot

from app.atomic import atomic_write_text

TICK_MS = 5
_SCHEDSTAT = Path("/proc/thread-self/schedstat")


def cpu_wait_ms() -> float:
    """How long the calling thread has waited, runnable, for a CPU so far (Linux's schedstat: on-CPU ns,
    run-queue ns, slices); 0.0 where the kernel does not say."""
    try:
        return int(_SCHEDSTAT.read_text().split()[1]) / 1e6
    except (OSError, IndexError, ValueError):
        return 0.0


class GapClock:
    """The gaps between calls of `tick()` on one thread: the wall-clock gap and its `held` part, the gap
    less the time the thread waited for a CPU in it."""

    def __init__(self) -> None:
        self.gaps_ms: list[float] = []
        self.held_ms: list[float] = []
        self.restart()

    def restart(self) -> None:
        self._last, self._last_wait = time.perf_counter(), cpu_wait_ms()

    def tick(self) -> None:
        now, wait = time.perf_counter(), cpu_wait_ms()
        gap = (now - self._last) * 1000.0
        self.gaps_ms.append(gap)
        self.held_ms.append(max(0.0, gap - (wait - self._last_wait)))
        self._last, self._last_wait = now, wait


class StallProbe(QObject):
    def __init__(self, window: Any, report: Path) -> None:
        super().__init__(window)
        self.window, self.report = window, report
        self.clock = GapClock()
        self.tokens = 0
        self.replies = 0
        self._timer = QTimer(self)
        self._timer.setInterval(TICK_MS)
        self._timer.timeout.connect(self._on_timer_timeout)
        window.controller.busyChanged.connect(self._on_busyChanged)
        window.controller.worker.events.connect(self._on_events)
        window.generationFinished.connect(lambda _ok: self.write())

    @Slot(bool)
    def _on_busyChanged(self, busy: bool) -> None:
        if busy:
            self.clock.restart()
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
        self.clock.tick()

    def summary(self) -> dict[str, Any]:
        gaps = sorted(self.clock.gaps_ms)
        p99 = gaps[min(len(gaps) - 1, int(0.99 * len(gaps)))] if gaps else 0.0
        return {
            "max_gap_ms": round(gaps[-1], 1) if gaps else 0.0,
            "p99_gap_ms": round(p99, 1),
            "max_held_ms": round(max(self.clock.held_ms, default=0.0), 1),
            "tokens": self.tokens,
            "replies": self.replies,
            "ticks": len(gaps),
            "tick_ms": TICK_MS,
        }

    def write(self) -> None:
        self.report.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.report, json.dumps(self.summary(), indent=2) + "\n")
