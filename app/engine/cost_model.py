"""What a target pass of n rows costs, learned from the passes the engine timed.

Batch cost is not linear in rows: CPU kernels switch shape with the row count (4 rows ~2x a 1-row pass,
8 rows ~5x on the CI CPU) while a GPU runs 8 rows for about the price of one. So each row count keeps
its own recent estimate (an EWMA: the context, and so every pass, grows as the reply goes), and row
counts never measured are filled in conservatively from the measured ones.

The governors ask for the tables several times a step (every estimate, every decision) but a new timing comes
at most once a step: the tables are built when first asked for after an `add` and shared until the next one.
"""

from __future__ import annotations


class RowCosts:
    """Per-row-count EWMA of measured pass times, for row counts 1..max_rows."""

    def __init__(self, max_rows: int, alpha: float = 0.3) -> None:
        self.max_rows = max(1, max_rows)
        self.alpha = alpha
        self._ms = [0.0] * (self.max_rows + 1)  # index = rows; 0 unused
        self._seen = [False] * (self.max_rows + 1)
        self._table: list[float] | None = None  # what table() last built, None: to build at the next call
        self._optimistic: list[float] | None = None
        self._largest = 0  # largest_measured()

    def add(self, rows: int, ms: float) -> None:
        if not 1 <= rows <= self.max_rows or ms <= 0:
            return  # outside the table, or a clock glitch: nothing to learn
        if self._seen[rows]:
            self._ms[rows] += self.alpha * (ms - self._ms[rows])
        else:
            self._ms[rows], self._seen[rows] = ms, True
            self._largest = max(self._largest, rows)
        self._table = self._optimistic = None

    def measured(self, rows: int) -> bool:
        return 1 <= rows <= self.max_rows and self._seen[rows]

    def largest_measured(self) -> int:
        """The largest row count measured so far; 0 before any measurement."""
        return self._largest

    def table(self) -> list[float] | None:
        """Estimated ms for every row count (index = rows, index 0 unused); None before any measurement. The list
        is shared until the next `add`: read it, never change it.

        Measured values are made non-decreasing (a larger batch never costs less: a noisy low reading is
        lifted to its smaller neighbour's), gaps are interpolated linearly, row counts above the largest
        measured R cost R's per-row price (never assume a larger batch is cheaper per row), and row counts
        below the smallest measured one cost as much as it (the most monotonicity allows).
        """
        if not self._largest:
            return None
        if self._table is None:
            self._table = self._build_table()
        return self._table

    def optimistic_table(self) -> list[float] | None:
        """The least each row count can cost given monotonicity: the largest measured value at or below it (shared
        until the next `add`, as table()'s).

        Used only to ask whether measuring an unmeasured row count, or probing, might pay, never to pick K.
        """
        if not self._largest:
            return None
        if self._optimistic is None:
            self._optimistic = self._build_optimistic()
        return self._optimistic

    def _build_table(self) -> list[float]:
        points = self._monotone_points()  # not empty: something was measured
        out = [0.0] * (self.max_rows + 1)
        first_r, first_ms = points[0]
        for r in range(1, first_r + 1):
            out[r] = first_ms
        for (r0, m0), (r1, m1) in zip(points, points[1:], strict=False):
            for r in range(r0 + 1, r1 + 1):
                out[r] = m0 + (m1 - m0) * (r - r0) / (r1 - r0)
        last_r, last_ms = points[-1]
        for r in range(last_r + 1, self.max_rows + 1):
            out[r] = last_ms * r / last_r
        return out

    def _build_optimistic(self) -> list[float]:
        points = self._monotone_points()  # not empty: something was measured
        out = [0.0] * (self.max_rows + 1)
        i, current = 0, points[0][1]
        for r in range(1, self.max_rows + 1):
            while i < len(points) and points[i][0] <= r:
                current = points[i][1]
                i += 1
            out[r] = current
        return out

    def long_row_price(self, min_rows: int) -> float | None:
        """Plain steps per row of the largest measured verify of at least `min_rows` rows (its measured time /
        rows / the one-row time); None until both that and a one-row pass were timed."""
        largest = self.largest_measured()
        if largest < min_rows or not self._seen[1] or self._ms[1] <= 0:
            return None
        return self._ms[largest] / largest / self._ms[1]

    def _monotone_points(self) -> list[tuple[int, float]]:
        points: list[tuple[int, float]] = []
        running = 0.0
        for r in range(1, self.max_rows + 1):
            if self._seen[r]:
                running = max(running, self._ms[r])
                points.append((r, running))
        return points
