"""Predicted speedups: the real pair's acceptance traces (recorded on the CPU, `traces.py`) replayed
against one device's measured costs, at every fixed K and under SpecChat's own governor.

A replayed step at reply position j with draft length K: `draft` accepts min(K, run of agreeing
positions from j) tokens and costs K draft tokens plus a verify of K + 1 rows; `lookup` verifies the
n-gram proposal recorded at j (at most K tokens, free to make); `hybrid` takes that proposal where
its match is >= 4 tokens, as HybridDrafter does, else drafts with the model. Each step also pays
SpecChat's own per-step time (measured in the engine runs). Plain decoding pays one verify row and
the same per-step time per token. The governor replay drives `app.engine.governor.Governor` exactly
as `SpecEngine.generate` does, with the device's costs, and records what it decided and why.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.engine.governor import Governor

MODES = ("draft", "lookup", "hybrid")
HYBRID_MIN_MATCH = 4  # HybridDrafter.min_match


@dataclass(frozen=True)
class Costs:
    verify_ms: dict[int, float]  # target, by row count
    draft_ms: float  # one draft token (the draft model's one-row decode)
    step_ms: dict[str, float]  # SpecChat's time per step outside llama.cpp, by mode ("none" for plain)

    def verify(self, rows: int) -> float:
        known = max(r for r in self.verify_ms if r <= rows) if rows not in self.verify_ms else rows
        return self.verify_ms[known] * rows / known  # beyond the measured rows: the last per-row price


def _run_length(bits: str, j: int, k: int) -> int:
    n = 0
    while n < k and j + n < len(bits) and bits[j + n] == "1":
        n += 1
    return n


def _step(trace: dict, mode: str, j: int, k: int) -> tuple[int, int, bool]:
    """(drafted, accepted, used the draft model) for a step at reply position j asked for K tokens."""
    proposed, agreed, match = trace["lookup"][j] if j < len(trace["lookup"]) else (0, 0, 0)
    if mode == "lookup" or (mode == "hybrid" and proposed and match >= HYBRID_MIN_MATCH):
        n = min(proposed, k)
        return n, min(agreed, n), False
    return k, _run_length(trace["draft_agree"], j, k), True


def simulate(trace: dict, mode: str, costs: Costs, k: int) -> tuple[float, float]:
    """(time with mode at fixed K, plain time) in ms for the trace's reply."""
    n = trace["n_reply"]
    plain = n * (costs.verify(1) + costs.step_ms.get("none", 0.0))
    j = spent = 0
    while j < n:
        kk = min(k, n - j - 1)
        drafted, accepted, model = _step(trace, mode, j, kk) if kk > 0 else (0, 0, False)
        spent += costs.verify(drafted + 1) + costs.step_ms.get(mode, 0.0) + (drafted * costs.draft_ms if model else 0)
        j += accepted + 1
    return spent, plain


def governed(trace: dict, mode: str, costs: Costs, k_max: int) -> dict:
    """The reply replayed under SpecChat's governor: time, plain time, and its decisions."""
    n = trace["n_reply"]
    gov = Governor(k_max, 3, True)
    plain = n * (costs.verify(1) + costs.step_ms.get("none", 0.0))
    j = spent = step = 0
    while j < n:
        limit = n - j - 1
        k = min(gov.current_k(), limit)
        drafted, accepted, model = _step(trace, mode, j, k) if k > 0 else (0, 0, False)
        if k == 0 and not gov.enabled and limit > 0 and mode != "draft":
            offered = min(trace["lookup"][j][0], k_max, limit)
            if trace["lookup"][j][0] and gov.free_probe(offered):
                k = offered
                drafted, accepted = offered, min(trace["lookup"][j][1], offered)
                model = False
        draft_ms = drafted * costs.draft_ms if model else 0.0
        verify = costs.verify(drafted + 1)
        spent += verify + draft_ms + costs.step_ms.get(mode, 0.0)
        gov.observe(step, drafted + 1, verify, drafted, accepted, draft_ms, mode != "lookup", k_asked=k)
        step += 1
        j += accepted + 1
    return {"ms": spent, "plain_ms": plain, "drafting_at_end": gov.enabled, "final_k": gov.active_k,
            "decisions": [{"step": e.step, "action": e.action, "k": [e.k_before, e.k_after], "reason": e.reason}
                          for e in gov.events]}


def predict(traces: list[dict], costs: Costs, k_max: int, k_range: range = range(1, 17)) -> dict:
    """Per mode: speedup under the governor and at the best fixed K, over all traces' tokens."""
    out = {}
    for mode in MODES:
        fixed = {}
        for k in k_range:
            spent = plain = 0.0
            for t in traces:
                s, p = simulate(t, mode, costs, k)
                spent, plain = spent + s, plain + p
            fixed[k] = plain / spent
        best_k = max(fixed, key=lambda k: fixed[k])
        runs = [governed(t, mode, costs, k_max) for t in traces]
        spent = sum(r["ms"] for r in runs)
        plain = sum(r["plain_ms"] for r in runs)
        speedup = plain / spent
        best_in_range = max(v for k, v in fixed.items() if k <= k_max)
        pays = best_in_range > 1.05
        out[mode] = {
            "governed": round(speedup, 3),
            "best_fixed_k": best_k,
            "best_fixed": round(fixed[best_k], 3),
            "fixed_k": {str(k): round(v, 3) for k, v in fixed.items()},
            "drafting_pays": pays,
            # The governor must keep drafting where the costs say it pays, and not lose where it does not.
            "governor_ok": (speedup >= 1.0 + 0.5 * (best_in_range - 1.0)) if pays else speedup >= 0.95,
            "replies_drafting_at_end": sum(r["drafting_at_end"] for r in runs),
            "replies": len(runs),
            "decisions": {t["id"]: r["decisions"][:12] for t, r in zip(traces, runs, strict=True)},
        }
    return out
