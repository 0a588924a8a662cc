"""Lookup's heuristics switched off one at a time, replayed on the tuning and the held-out corpora.

Why (issue 56): each heuristic of app/engine/ngram.py was kept for a 1-3% gain on the ten bench prompts it was
tuned on. This replays SpecChat's lookup (tools/bench/policy_replay.py: the real engine, drafter and governors against
a stand-in target, priced with measured row costs) with one heuristic off, on every corpus's replies and every
corpus's cost table, and reports each prompt set's geometric mean of the speedup over plain steps per table:
prompts whose id starts with "h-" are the held-out set (app/data/bench_prompts_heldout.jsonl), the rest were
tuned on. Usage, from the repository root:

    python -m tools.bench.lookup_ablation docs/bench-reports/corpus-*.json [--only NAME,...] [--json-out FILE]
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from app.engine.drafters import LookupDrafter
from app.engine.ngram import NgramParams
from tools.bench import bench_replay, policy_replay

Variant = Callable[[], LookupDrafter]


def _params(**off: bool) -> Variant:
    changes: dict[str, Any] = dict(off)
    return lambda: LookupDrafter(replace(NgramParams(), **changes))


# Each heuristic off, alone; "current" is the default lookup.
VARIANTS: dict[str, Variant] = {
    "current": LookupDrafter,
    "running copy": _params(running_copy=False),
    "resync": _params(resync=False),
    "substitutions": _params(substitutions=False),
    "slots": _params(slot_cuts=False),
    "sure cut: edited tokens": _params(edit_cuts=False),
    "sure cut: unconfirmed subs": _params(unconfirmed_cuts=False),
    "sure after resync (8)": _params(sure_after_resync=False),
    "key caps (n_accepted)": _params(key_caps=False),
    "accident guard": _params(accident_guard=False),
    "trust opening": _params(trust_opening=False),
    "cold threshold (trust)": lambda: LookupDrafter(cold_min_match=3),
    "resync min match 2": lambda: LookupDrafter(resync_min_match=3),
    "probe min match 4": lambda: LookupDrafter(probe_min_match=3),
}
# Removed in run 43 (docs/BENCHMARKS.md), each paying nothing on the held-out set: a sure copy's cut where another
# spot parts from its source, and a full K draft for a copy resuming at an edit. Replay them at 827f1f9.



def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def run(paths: list[Path], names: list[str]) -> dict[str, Any]:
    corpora = [bench_replay.load_corpus(p) for p in paths]
    tables = [(c["name"], {int(r): float(v) for r, v in c["row_costs"].items()}) for c in corpora]
    original = policy_replay.LookupDrafter
    speedups: dict[str, dict[str, dict[str, list[float]]]] = {n: {} for n in names}
    lowest: dict[str, dict[str, dict[str, tuple[float, str]]]] = {n: {} for n in names}
    try:
        for c in corpora:
            eog = set(c["eog"])
            spec = bench_replay.corpus_spec(c["spec"])
            for pid, p in c["prompts"].items():
                group = "held-out" if pid.startswith("h-") else "tuning"
                args = (p["prompt"], p["reply"], p["stopped"])
                for table, costs in tables:
                    plain = policy_replay.replay_ms(*args, costs, "none", spec, p["n_predict"], eog.__contains__)
                    for name in names:
                        setattr(policy_replay, "LookupDrafter", VARIANTS[name])  # noqa: B010 - the replay's drafter
                        ms = policy_replay.replay_ms(*args, costs, "lookup", spec, p["n_predict"], eog.__contains__)
                        x = plain / ms if ms > 0 else 1.0
                        speedups[name].setdefault(group, {}).setdefault(table, []).append(x)
                        low = lowest[name].setdefault(group, {})
                        if table not in low or x < low[table][0]:
                            low[table] = (round(x, 4), f"{c['name']}:{pid}")
    finally:
        setattr(policy_replay, "LookupDrafter", original)  # noqa: B010
    return {name: {group: {table: round(geomean(v), 4) for table, v in per.items()}
                   for group, per in groups.items()} | {"lowest": lowest[name]} for name, groups in speedups.items()}


def report(result: dict[str, Any]) -> str:
    base = result["current"]
    lines = ["heuristic off | tuning: geomean on -> off (change min..max over tables) | held-out: same"]
    for name, groups in result.items():
        cells = []
        for group in ("tuning", "held-out"):
            on, off = base[group], groups[group]
            d = [100.0 * (off[t] / on[t] - 1.0) for t in on]
            low = min(groups["lowest"][group].values())
            cells.append(f"{geomean(list(on.values())):.4f} -> {geomean(list(off.values())):.4f} "
                         f"({min(d):+.2f}..{max(d):+.2f} %; lowest {low[0]:.3f} {low[1]})")
        lines.append(f"{name} | " + " | ".join(cells))
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("corpora", nargs="+", type=Path)
    ap.add_argument("--only", default="", help="comma-separated variant names (default: all)")
    ap.add_argument("--json-out", type=Path)
    args = ap.parse_args()
    names = ["current"] + [n for n in (args.only.split(",") if args.only else VARIANTS) if n and n != "current"]
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        ap.error(f"no variant {', '.join(unknown)}; choose from {', '.join(VARIANTS)}")
    result = run(args.corpora, names)
    if args.json_out:
        args.json_out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(report(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
