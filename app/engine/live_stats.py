"""Statistics of a reply while it streams, from the events alone (the same tallies as the engine).

The engine's FinishEvent carries the exact final numbers; until it arrives, the GUI shows these.
Live tokens/s counts draft + verify time only (the engine's Python bookkeeping, a few percent, is
added at the end), so it is marked as an estimate in the panel.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from app.engine.acceptance import AcceptanceTally
from app.engine.events import Event, FinishEvent, GenerationStats, GovernorEvent, StepEvent, TokenEvent

ROLLING_STEPS = 8  # drafting steps in the rolling acceptance window


@dataclass
class LiveStats:
    tokens: int = 0
    first_tokens: int = 0  # tokens from the prompt's pass (no decode time of their own): not in the rate
    steps: int = 0
    draft_ms: float = 0.0
    verify_ms: float = 0.0
    other_ms: float = 0.0
    k: int = 0
    governor: GovernorEvent | None = None
    speculation_active: bool = True
    tally: AcceptanceTally = field(default_factory=AcceptanceTally)  # the engine's own bookkeeping
    rolling: list[tuple[int, float]] = field(default_factory=list)  # (reply index, acceptance)
    final: GenerationStats | None = None
    _window: deque[tuple[int, int]] = field(default_factory=lambda: deque(maxlen=ROLLING_STEPS))

    def apply(self, event: Event) -> None:
        if isinstance(event, TokenEvent):
            self.tokens += 1
        elif isinstance(event, StepEvent):
            self._step(event)
        elif isinstance(event, GovernorEvent):
            self.governor = event
            if event.scope == "draft" and event.action in ("disable", "enable"):
                self.speculation_active = event.action == "enable"
        elif isinstance(event, FinishEvent):
            self.finish(event.stats)

    def _step(self, e: StepEvent) -> None:
        self.steps += 1
        if e.from_prompt:
            self.first_tokens += e.emitted
        self.k = e.k
        self.draft_ms += e.draft_ms
        self.verify_ms += e.verify_ms
        n = len(e.drafted)
        if not n:
            return
        self.tally.add(n, e.accepted)
        self._window.append((n, e.accepted))
        drafted = sum(d for d, _ in self._window)
        self.rolling.append((e.position + e.emitted, sum(a for _, a in self._window) / drafted))

    def finish(self, stats: GenerationStats) -> None:
        self.final = stats
        self.tokens = stats.n_tokens
        self.k = stats.final_k
        self.other_ms = stats.other_ms
        self.speculation_active = stats.speculation_active
        if stats.governor:
            self.governor = stats.governor[-1]

    # --- what the panel shows: the engine's numbers once final ------------------------------------

    @property
    def tokens_per_second(self) -> float:
        if self.final:
            return self.final.tokens_per_second
        ms = self.draft_ms + self.verify_ms
        return (self.tokens - self.first_tokens) / (ms / 1000.0) if ms > 0 else 0.0

    @property
    def drafted(self) -> int:
        return self.final.drafted if self.final else self.tally.drafted

    @property
    def accepted(self) -> int:
        return self.final.accepted if self.final else self.tally.accepted

    @property
    def drafting_steps(self) -> int:
        return self.tally.drafting_steps

    @property
    def histogram(self) -> list[int]:
        return self.tally.histogram

    @property
    def acceptance_rate(self) -> float:
        return self.final.acceptance_rate if self.final else self.tally.acceptance_rate

    @property
    def mean_accepted_length(self) -> float:
        return self.final.mean_accepted_length if self.final else self.tally.mean_accepted_length

    @property
    def per_position_acceptance(self) -> tuple[float, ...]:
        return self.final.per_position_acceptance if self.final else self.tally.per_position()

    @property
    def accepted_length_histogram(self) -> tuple[int, ...]:
        return self.final.accepted_length_histogram if self.final else tuple(self.tally.histogram)

    @property
    def time_split(self) -> tuple[float, float, float]:
        """Draft, verify and other milliseconds."""
        if self.final:
            return self.final.draft_ms, self.final.verify_ms, self.final.other_ms
        return self.draft_ms, self.verify_ms, self.other_ms
