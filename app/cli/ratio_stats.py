"""Statistics of per-round speed ratios, shared by `specchat bench` and tools/bench's bench-pool (no model needed)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

# Two-sided 95% quantiles of Student's t by degrees of freedom (1-30); beyond, the normal's 1.96 is within 2%.
_T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
        2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def ratio_interval(ratios: Sequence[float]) -> list[float] | None:
    """[low, geometric mean, high] of per-round ratios, a 95% t interval on their logs; None below 2 rounds.
    Rounds vary by a common factor (the machine's speed at the time), so the log is where they add up."""
    logs = _logs(ratios)
    if len(logs) < 2:
        return None
    mean, sd = statistics.fmean(logs), statistics.stdev(logs)
    df = len(logs) - 1
    half = (_T95[df - 1] if df <= len(_T95) else 1.96) * sd / math.sqrt(len(logs))
    return [math.exp(mean - half), math.exp(mean), math.exp(mean + half)]


def log_sd(ratios: Sequence[float]) -> float | None:
    """The standard deviation of one round's log ratio (the machine's noise per round); None below 2 rounds."""
    logs = _logs(ratios)
    return statistics.stdev(logs) if len(logs) >= 2 else None


def _logs(ratios: Sequence[float]) -> list[float]:
    return [math.log(r) for r in ratios if r > 0]
