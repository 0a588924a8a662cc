"""The draft-length governor: keep speculation only while it beats plain decoding.

It measures, as the reply goes, what a plain target step costs, what a verify pass of n rows costs,
what a drafted token costs and how often drafts are accepted; then picks the K that maximises the
expected tokens per second, (1 - a^(K+1)) / (1 - a) tokens per (K * draft + verify(K + 1)) ms, and
turns drafting off for the rest of the reply when even the best K is slower than plain decoding.
"""

from __future__ import annotations

from collections import deque

from app.engine.events import GovernorEvent


class Governor:
    def __init__(self, k_max: int, k_start: int, adaptive: bool = True, warmup_steps: int = 1) -> None:
        self.k_max = max(0, k_max)
        # Without adaptation K is fixed at its maximum: what --no-adapt and the exactness tests ask for.
        self.k = min(self.k_max, max(0, k_start)) if adaptive else self.k_max
        self.adaptive = adaptive
        self.enabled = self.k_max > 0
        self.warmup_steps = warmup_steps
        self.events: list[GovernorEvent] = []
        self._plain_ms: float | None = None
        self._verify: deque[tuple[int, float]] = deque(maxlen=48)  # (rows, ms)
        self._draft_ms_per_token: float | None = None
        self._drafted = 0
        self._accepted = 0
        self._draft_steps = 0

    @property
    def wants_probe(self) -> bool:
        """The first step runs plain, so the cost of one target token is measured, not guessed."""
        return self.adaptive and self.enabled and self._plain_ms is None

    def current_k(self) -> int:
        if not self.enabled or self.wants_probe:
            return 0
        return self.k

    def observe(self, step: int, rows: int, verify_ms: float, drafted: int, accepted: int, draft_ms: float,
                draft_costs_time: bool) -> GovernorEvent | None:
        self._verify.append((rows, verify_ms))
        if rows == 1:
            self._plain_ms = verify_ms if self._plain_ms is None else 0.7 * self._plain_ms + 0.3 * verify_ms
        if drafted:
            self._drafted += drafted
            self._accepted += accepted
            self._draft_steps += 1
            per_token = draft_ms / drafted if draft_costs_time else 0.0
            old = self._draft_ms_per_token
            self._draft_ms_per_token = per_token if old is None else 0.7 * old + 0.3 * per_token
        if not (self.adaptive and self.enabled) or self._plain_ms is None or self._draft_steps < self.warmup_steps:
            return None
        return self._decide(step)

    def acceptance(self) -> float:
        # A Beta(1, 1) prior keeps the first few observations from swinging the estimate to 0 or 1.
        return (self._accepted + 1) / (self._drafted + 2)

    def verify_ms(self, rows: int) -> float:
        """Least-squares line through the measured (rows, ms) pairs, anchored by the plain step."""
        points = list(self._verify)
        n = len(points)
        mean_x = sum(r for r, _ in points) / n
        mean_y = sum(m for _, m in points) / n
        var = sum((r - mean_x) ** 2 for r, _ in points)
        if var == 0:
            plain = self._plain_ms or mean_y
            return plain + (mean_y - plain) * (rows - 1) / max(mean_x - 1, 1)
        slope = max(0.0, sum((r - mean_x) * (m - mean_y) for r, m in points) / var)
        return max(1e-3, mean_y + slope * (rows - mean_x))

    def expected_rate(self, k: int) -> float:
        """Tokens per millisecond with draft length k."""
        if k == 0:
            return 1.0 / (self._plain_ms or 1.0)
        a = min(self.acceptance(), 0.999)
        tokens = (1 - a ** (k + 1)) / (1 - a)
        return tokens / (k * (self._draft_ms_per_token or 0.0) + self.verify_ms(k + 1))

    def _decide(self, step: int) -> GovernorEvent | None:
        rates = {k: self.expected_rate(k) for k in range(1, self.k_max + 1)}
        best = max(rates, key=lambda k: rates[k])
        plain = self.expected_rate(0)
        before = self.k
        summary = (
            f"acceptance {self.acceptance():.0%}, draft {self._draft_ms_per_token or 0:.1f} ms/token, "
            f"verify({best + 1}) {self.verify_ms(best + 1):.1f} ms, plain {self._plain_ms:.1f} ms/token"
        )
        if rates[best] < plain:
            self.enabled = False
            self.k = 0
            event = GovernorEvent(
                step, "disable", before, 0,
                f"speculation would be slower than plain decoding ({rates[best] * 1000:.1f} vs "
                f"{plain * 1000:.1f} tokens/s expected: {summary}); drafting off for the rest of this reply",
            )
        elif best != before:
            self.k = best
            action = "shrink" if best < before else "grow"
            event = GovernorEvent(
                step, action, before, best,
                f"K {before} -> {best}: expected {rates[best] * 1000:.1f} tokens/s vs "
                f"{plain * 1000:.1f} plain ({summary})",
            )
        else:
            return None
        self.events.append(event)
        return event
