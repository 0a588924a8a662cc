"""Live statistics of the reply being generated, replaced by the engine's exact figures at the end."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from PySide6.QtWidgets import QFormLayout, QGroupBox, QLabel, QVBoxLayout, QWidget

from app.engine.events import Event, GenerationStats, TokenFate
from app.engine.live_stats import LiveStats
from app.palette import FATE_COLOURS
from ui.stats.bar_plot import BarPlot
from ui.stats.line_plot import LinePlot
from ui.stats.split_bar import SplitBar

SPLIT_COLOURS = ("#E69F00", "#0072B2", "#999999")  # draft (orange), target (blue), other (grey)
FIELDS = ("tokens_per_second", "acceptance_rate", "mean_accepted_length", "k", "governor", "time_split")
TITLES = {
    "tokens_per_second": "Speed",
    "acceptance_rate": "Acceptance",
    "mean_accepted_length": "Mean accepted",
    "k": "Draft length K",
    "governor": "Governor",
    "time_split": "Time split",
}


def format_value(key: str, stats: LiveStats) -> str:
    """The text the panel shows for `key` (tests compare it with the engine's final numbers)."""
    live = "" if stats.final else "~"
    # A reply stopped before its first token has no speed or time split: "0.0 tok/s, other 100%" said otherwise.
    nothing = not (stats.final.n_tokens if stats.final else stats.tokens)
    if key == "tokens_per_second":
        return "—" if nothing else f"{live}{stats.tokens_per_second:.1f} tok/s"
    if key == "acceptance_rate":
        return f"{stats.acceptance_rate:.1%} ({stats.accepted}/{stats.drafted})" if stats.drafted else "—"
    if key == "mean_accepted_length":
        return f"{stats.mean_accepted_length:.2f} tokens/step" if stats.drafted else "—"
    if key == "k":
        return str(stats.k) if stats.speculation_active else f"{stats.k} (drafting off)"
    if key == "governor":
        g = stats.governor
        if g is None:
            return "no change"
        what = "long copies: " if g.scope == "copy" else ""
        return f"{what}{g.action} K {g.k_before}→{g.k_after} at step {g.step}"
    if key == "time_split":
        # The engine's verify time is every target pass: one-token steps while nothing is drafted as well as
        # verifies of drafts, so in lookup mode "verify 98%" read as if nearly every step had verified a draft.
        draft, target, other = stats.time_split
        total = draft + target + other
        if total <= 0 or nothing:
            return "—"
        return f"draft {draft / total:.0%} · target {target / total:.0%} · other {other / total:.0%}"
    raise KeyError(key)


class StatsPanel(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.stats = LiveStats()
        box = QGroupBox("This reply")
        form = QFormLayout(box)
        self._labels: dict[str, QLabel] = {}
        for key in FIELDS:
            label = QLabel("—")
            label.setWordWrap(True)  # the side panel is narrow; long values wrap rather than widen it
            label.setObjectName(f"stat_{key}")
            self._labels[key] = label
            form.addRow(TITLES[key], label)
        self._split = SplitBar(SPLIT_COLOURS)
        self._split.setToolTip("Decode time: draft model (orange), target passes: verifies and one-token steps (blue), "
                               "Python bookkeeping (grey)")
        form.addRow("", self._split)
        self._by_position = BarPlot("Acceptance by draft position", FATE_COLOURS[TokenFate.ACCEPTED],
                                    fraction=True, first_label=1)
        self._histogram = BarPlot("Drafting steps by tokens accepted", FATE_COLOURS[TokenFate.BONUS], fraction=False)
        self._rolling = LinePlot("Rolling acceptance over the reply", FATE_COLOURS[TokenFate.ACCEPTED])
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(box)
        for plot in (self._by_position, self._histogram, self._rolling):
            layout.addWidget(plot)
        layout.addStretch(1)
        self.refresh()

    def reset(self) -> None:
        self.stats = LiveStats()
        self.refresh()

    def apply(self, events: Iterable[Event]) -> None:
        for event in events:
            self.stats.apply(event)
        self.refresh()

    def finish(self, stats: GenerationStats) -> None:
        self.stats.finish(stats)
        self.refresh()

    def show_saved(self, stats: GenerationStats | None, rolling: Sequence[tuple[int, float]] = ()) -> None:
        """The figures of a stored reply (conversation switched), with its rolling acceptance, or blank."""
        self.stats = LiveStats()
        if stats is not None:
            self.stats.finish(stats)
            self.stats.rolling = list(rolling)
        self.refresh()

    def text(self, key: str) -> str:
        return self._labels[key].text()

    def plots(self) -> dict[str, object]:
        return {"by_position": self._by_position.values(), "histogram": self._histogram.values(),
                "rolling": self._rolling.points()}

    def refresh(self) -> None:
        s = self.stats
        for key, label in self._labels.items():
            label.setText(format_value(key, s))
        self._labels["tokens_per_second"].setToolTip(
            "Generated tokens per second of decoding (prompt processing excluded)."
            + ("" if s.final else " While generating: draft + verify time only (≈)."))
        self._split.set_values(s.time_split)
        self._by_position.set_values(s.per_position_acceptance)
        self._histogram.set_values(shown_histogram(s.accepted_length_histogram, len(s.per_position_acceptance)))
        self._rolling.set_points(s.rolling, s.acceptance_rate if s.drafted else None)


def shown_histogram(histogram: Sequence[int], positions: int) -> tuple[int, ...]:
    """Steps by tokens accepted, from 0 to the longest draft (`positions` drafted): the engine sizes its final
    histogram for the longest copy it may take (32 bins on a CPU), which left a short draft's bars as slivers
    and made the plot jump from the live tally's width to that at the end of a reply."""
    last = max((i for i, v in enumerate(histogram) if v), default=-1)
    return tuple(histogram[:max(positions + 1, last + 1)]) if histogram else ()

