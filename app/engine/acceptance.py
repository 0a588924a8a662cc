"""Acceptance bookkeeping shared by the engine's final statistics and the GUI's live ones, so the
two always count alike: drafted and accepted tokens, acceptance by draft position, and the
histogram of accepted tokens per drafting step."""

from __future__ import annotations

from dataclasses import dataclass, field


def _grow(values: list[int], size: int) -> None:
    if len(values) < size:
        values.extend([0] * (size - len(values)))


@dataclass(slots=True)
class AcceptanceTally:
    drafted: int = 0
    accepted: int = 0
    reached: list[int] = field(default_factory=list)  # drafting steps that got to position i
    kept: list[int] = field(default_factory=list)  # ... and had position i accepted
    histogram: list[int] = field(default_factory=list)  # drafting steps that accepted 0, 1, 2, ...

    def presize(self, k_max: int) -> None:
        """Show every draft position up to K, even those no step reached."""
        _grow(self.reached, k_max)
        _grow(self.kept, k_max)
        _grow(self.histogram, k_max + 1)

    def add(self, n_drafted: int, n_accepted: int) -> None:
        if not n_drafted:
            return
        self.drafted += n_drafted
        self.accepted += n_accepted
        _grow(self.reached, n_drafted)
        _grow(self.kept, n_drafted)
        _grow(self.histogram, n_accepted + 1)
        # Position i is judged only when every earlier draft token was accepted.
        for i in range(min(n_drafted, n_accepted + 1)):
            self.reached[i] += 1
        for i in range(n_accepted):
            self.kept[i] += 1
        self.histogram[n_accepted] += 1

    @property
    def drafting_steps(self) -> int:
        return sum(self.histogram)

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def mean_accepted_length(self) -> float:
        steps = self.drafting_steps
        return self.accepted / steps if steps else 0.0

    def per_position(self) -> tuple[float, ...]:
        return tuple(k / r for k, r in zip(self.kept, self.reached, strict=False) if r)
