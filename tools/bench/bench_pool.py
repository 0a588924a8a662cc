"""`python -m tools.bench bench-pool`: one interval per prompt and mode from the rounds of several
`specchat bench --json-out` reports.

Why: on a noisy 2-core machine one prompt needs about 20 rounds before a 3% difference shows (docs/BENCHMARKS.md,
runs 20-21), more than one bench run should take. Reports of the same models and settings, from runs on different
days or machines of one kind, are pooled round by round: every round's ratio to the base mode is taken within its
own report (side by side, as the bench measures), and the intervals are computed on all of them together.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

from app.atomic import atomic_write_text
from app.cli.options import UserError
from app.cli.ratio_stats import log_sd, ratio_interval

# Settings that change a decode's speed or its reply: reports that differ in any of them are not pooled.
SAME_SETTINGS = ("n_ctx", "n_threads", "n_threads_draft", "flash_attn", "repack", "n_batch", "sampling", "spec",
                 "processes")
NATIVE_BASE = "llama.cpp:plain"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("bench-pool", help="pool the rounds of several `bench --json-out` reports into one "
                                                 "interval per prompt and mode")
    p.add_argument("reports", nargs="+", type=Path, metavar="REPORT.json", help="reports written by bench --json-out")
    p.add_argument("--base", default=None, help=f"the mode every ratio is to (default: {NATIVE_BASE} where every "
                                                "report ran it, else none)")
    p.add_argument("--json", action="store_true", help="print the pooled rows as one JSON object")
    p.add_argument("--json-out", metavar="FILE", type=Path, default=None, help="also write that JSON to FILE")
    p.set_defaults(func=_cmd_bench_pool)


def load_report(path: Path) -> dict[str, Any]:
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UserError(f"bench-pool: cannot read {path}: {exc.strerror or exc}") from exc
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UserError(f"bench-pool: {path} is not JSON ({exc}); give files written by `specchat bench "
                        "--json-out`") from exc
    runs = report.get("runs") if isinstance(report, dict) else None
    if not isinstance(runs, list) or not isinstance(report.get("settings"), dict):
        raise UserError(f"bench-pool: {path} is not a bench report (no \"runs\" list and \"settings\"); give files "
                        "written by `specchat bench --json-out`")
    for i, run in enumerate(runs):
        if not (isinstance(run, dict) and isinstance(run.get("prompt_id"), str) and isinstance(run.get("mode"), str)
                and isinstance(run.get("rounds_tps"), list)):
            raise UserError(f"bench-pool: {path}: runs[{i}] lacks prompt_id, mode or rounds_tps (a report from "
                            "before per-round speeds were kept cannot be pooled)")
    return report


def _identity(report: dict[str, Any]) -> dict[str, Any]:
    """What must agree between pooled reports: the model files (by name: paths differ between machines), the
    speed-relevant settings, and llama.cpp's tools where they ran."""
    models = report.get("models") or {}
    names = {role: Path(p).name if isinstance(p, str) else p for role, p in models.items()}
    settings = report["settings"]
    native = report.get("native") or {}
    return {"models": names, **{k: settings.get(k) for k in SAME_SETTINGS},
            "llama.cpp version": native.get("version") if isinstance(native, dict) else None}


def check_compatible(paths: list[Path], reports: list[dict[str, Any]]) -> None:
    seen: dict[str, Path] = {}
    for path, report in zip(paths, reports, strict=True):
        # The same rounds twice would count as twice the evidence: a copied or repeated file is refused.
        rounds = json.dumps([(r["prompt_id"], r["mode"], r["rounds_tps"]) for r in report["runs"]])
        if rounds in seen:
            raise UserError(f"bench-pool: {path} holds the same rounds as {seen[rounds]}; give each report once")
        seen[rounds] = path
    first = _identity(reports[0])
    for path, report in zip(paths[1:], reports[1:], strict=True):
        other = _identity(report)
        for key, value in first.items():
            if other[key] != value:
                theirs, ours = json.dumps(other[key], sort_keys=True), json.dumps(value, sort_keys=True)
                raise UserError(f"bench-pool: {path} was measured with other {key} than {paths[0]} ({theirs} against "
                                f"{ours}); pool only reports of the same models and settings")


def _rounds(report: dict[str, Any]) -> dict[tuple[str, str], list[float]]:
    return {(r["prompt_id"], r["mode"]): [float(x) for x in r["rounds_tps"]] for r in report["runs"]}


def pool(reports: list[dict[str, Any]], base: str) -> list[dict[str, Any]]:
    """Per prompt and mode (the base excluded), the per-round ratios to the base from every report, pooled."""
    ratios: dict[tuple[str, str], list[float]] = {}
    counts: dict[tuple[str, str], int] = {}
    for report in reports:
        rounds = _rounds(report)
        for (prompt, mode), tps in rounds.items():
            ref = rounds.get((prompt, base))
            if mode == base or ref is None:
                continue
            # A round's ratio only within its own report and round: the two ran side by side.
            same_round = zip(tps, ref, strict=False)
            ratios.setdefault((prompt, mode), []).extend(a / b for a, b in same_round if a > 0 and b > 0)
            counts[(prompt, mode)] = counts.get((prompt, mode), 0) + 1
    rows = []
    for (prompt, mode), values in ratios.items():
        if not values:
            continue
        interval = ratio_interval(values)
        sd = log_sd(values)
        rows.append({"prompt_id": prompt, "mode": mode, "reports": counts[(prompt, mode)], "rounds": len(values),
                     "median": statistics.median(values), "interval": interval,
                     "sd_log_ratio": sd})
    return rows


def worst_by_mode(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each mode's prompt with the lowest pooled geometric mean (the row the "never slower" bar is about)."""
    worst: dict[str, dict[str, Any]] = {}
    for row in rows:
        if row["interval"] is None:
            continue
        held = worst.get(row["mode"])
        if held is None or row["interval"][1] < held["interval"][1]:
            worst[row["mode"]] = row
    return worst


def format_pool(rows: list[dict[str, Any]], base: str, paths: list[Path]) -> str:
    w = max([22, *(len(row["mode"]) for row in rows)])
    lines = [f"Pooled {len(paths)} reports: " + ", ".join(str(p) for p in paths),
             f"Per-round ratios to {base}, each taken within its own report and round; median, and the geometric "
             "mean with its 95% interval (t on the log ratios) over all pooled rounds.", "",
             f"{'prompt':18s} {'mode':{w}s} {'rounds':>6s} {'median':>7s} {'geo mean':>9s} {'95%':>12s} {'sd':>6s}"]
    for row in rows:
        band = row["interval"]  # None for a single round
        geo, ci = (f"{band[1]:.3f}x", f"{band[0]:.3f}-{band[2]:.3f}") if band else ("-", "-")
        sd = f"{row['sd_log_ratio']:.3f}" if row["sd_log_ratio"] is not None else "-"
        lines.append(f"{row['prompt_id']:18s} {row['mode']:{w}s} {row['rounds']:6d} {row['median']:6.3f}x {geo:>9s} "
                     f"{ci:>12s} {sd:>6s}")
    lines.append("")
    for mode, row in worst_by_mode(rows).items():
        low, mean, high = row["interval"]
        lines.append(f"{mode}: lowest on {row['prompt_id']}, {mean:.3f}x [{low:.3f}, {high:.3f}] over "
                     f"{row['rounds']} rounds")
    lines.append("sd: of one round's log ratio. An interval that holds 1.00 does not tell the mode from the base.")
    return "\n".join(lines)


def _cmd_bench_pool(args: argparse.Namespace) -> int:
    paths: list[Path] = list(args.reports)
    reports = [load_report(p) for p in paths]
    check_compatible(paths, reports)
    base = args.base
    if base is None:
        base = NATIVE_BASE if all(any(r["mode"] == NATIVE_BASE for r in rep["runs"]) for rep in reports) else "none"
    if not any(r["mode"] == base for rep in reports for r in rep["runs"]):
        modes = sorted({r["mode"] for rep in reports for r in rep["runs"]})
        raise UserError(f"bench-pool: no report ran the base mode {base!r}; its modes are {', '.join(modes)}")
    rows = pool(reports, base)
    result = {"base": base, "reports": [str(p) for p in paths], "rows": rows,
              "worst": {mode: {"prompt_id": row["prompt_id"], "interval": row["interval"]}
                        for mode, row in worst_by_mode(rows).items()}}
    if args.json_out is not None:
        atomic_write_text(args.json_out, json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2) if args.json else format_pool(rows, base, paths))
    return 0
