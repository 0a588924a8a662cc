"""`python -m tools.bench bench-replay`: SpecChat's lookup policy replayed on recorded plain replies, on several
machines' costs.

Why: a timed bench on these 2-core machines needs about 20 rounds per prompt to see a 3% change (docs/BENCHMARKS.md,
runs 20-22), while the replay (tools/bench/policy_replay.py) prices the real engine's steps with measured row costs,
is deterministic and takes seconds. `python -m tools.bench bench --copy-bound --replay-out FILE` records a corpus:
each prompt's tokens, its greedy plain reply, the end-of-turn ids and that machine's row costs. This command
replays the current code's lookup on every corpus's replies with every corpus's row costs (a policy change must
not win on one CPU's costs and lose on another's), next to the clairvoyant copy bound on the same reply and costs,
and next to llama.cpp's own n-gram types replayed on the same reply and costs (tools/bench/native_replay.py).
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from app.atomic import atomic_write_text
from app.cli.options import UserError
from app.engine.draft_policy import AUTO_COPY_MAX, COPY_MAX_AUTO, resolve_copies
from app.engine.speculative import SpecParams
from tools.bench import copy_bound, native_replay, policy_replay

FORMAT = "specchat-replay-corpus/1"


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("bench-replay", help="replay the lookup policy on recorded plain replies with several "
                                                   "machines' row costs (deterministic, seconds)")
    p.add_argument("corpora", nargs="+", type=Path, metavar="CORPUS.json",
                   help="corpora written by `bench --copy-bound --replay-out`")
    p.add_argument("--row-costs", action="append", default=[], metavar="NAME=R:C,...",
                   help="one more cost table, in plain steps by row count (e.g. run4=1:1,4:2.22,8:5.77,16:6.74,"
                   "32:13.0, as docs/BENCHMARKS.md lists them); may be given more than once")
    p.add_argument("--clairvoyant", action="store_true",
                   help="also replay lookup with sure copies cut exactly where each reply parts from them: what a "
                   "perfect rule for where a sure copy stops would give (a third table)")
    p.add_argument("--json", action="store_true", help="print the results as one JSON object")
    p.set_defaults(func=_cmd_bench_replay)


def parse_row_costs(text: str) -> tuple[str, dict[int, float]]:
    """NAME=R:C,R:C,... -> (NAME, {R: C}); the one-row pass must be there (the unit of the table)."""
    name, sep, body = text.partition("=")
    problem = None
    costs: dict[int, float] = {}
    if not sep or not name.strip():
        problem = "it needs a name: NAME=R:C,R:C,..."
    else:
        for item in body.split(","):
            rows, colon, cost = item.strip().partition(":")
            try:
                r, c = int(rows), float(cost)
            except ValueError:
                problem = f"{item.strip()!r} is not ROWS:COST"
                break
            if not colon or r < 1 or c <= 0:
                problem = f"{item.strip()!r} is not ROWS:COST with rows >= 1 and a positive cost"
                break
            costs[r] = c
        if problem is None and costs.get(1) != 1.0:
            problem = "it must price one row at 1 (costs are in plain steps): add 1:1"
    if problem is not None:
        raise UserError(f"--row-costs {text!r}: {problem}.")
    return name.strip(), costs


def corpus(prompts: Mapping[str, Sequence[int]], replies: Mapping[str, Any], costs: Mapping[int, float],
           eog: Sequence[int], spec: SpecParams, machine: Mapping[str, Any], name: str) -> dict[str, Any]:
    """A corpus as `bench --replay-out` writes it. replies: BenchRun-like objects of the plain mode by prompt id."""
    return {
        "format": FORMAT, "name": name, "machine": dict(machine),
        "spec": {"copy_max": spec.copy_max, "sure_copies": spec.sure_copies, "sure_copy_long": spec.sure_copy_long},
        "row_costs": {str(r): round(c, 4) for r, c in costs.items()},
        "eog": sorted(set(eog)),
        "prompts": {pid: {"prompt": list(prompts[pid]), "reply": list(run.token_ids),
                          "stopped": run.finish_reason == "stop", "n_predict": run.n_predict}
                    for pid, run in replies.items() if pid in prompts},
    }


def corpus_spec(recorded: Mapping[str, Any]) -> SpecParams:
    """The settings a corpus's run drafted with. A corpus from before `sure_copy_long` holds what copy_max "auto"
    resolved to (every bench run so far used it), so it replays with today's "auto"."""
    copy_max, sure = int(recorded["copy_max"]), bool(recorded["sure_copies"])
    if "sure_copy_long" in recorded:
        return SpecParams(copy_max=copy_max, sure_copies=sure, sure_copy_long=int(recorded["sure_copy_long"]))
    if copy_max == AUTO_COPY_MAX:
        return resolve_copies(SpecParams(copy_max=COPY_MAX_AUTO), target_on_gpu=not sure)
    return SpecParams(copy_max=copy_max, sure_copies=sure)


def load_corpus(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UserError(f"{path}: cannot read it ({exc.strerror or exc}).") from exc
    except json.JSONDecodeError as exc:
        raise UserError(f"{path}: not JSON ({exc.msg} at line {exc.lineno}); pass a file written by "
                        "`python -m tools.bench bench --copy-bound --replay-out`.") from exc
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise UserError(f"{path}: not a replay corpus (no \"format\": \"{FORMAT}\"); pass a file written by "
                        "`python -m tools.bench bench --copy-bound --replay-out`.")
    return data


def replay(corpora: Sequence[dict[str, Any]], extra: Sequence[tuple[str, dict[int, float]]] = (),
           clairvoyant: bool = False) -> dict[str, Any]:
    """Every corpus's replies on every corpus's row costs and on `extra` tables:
    {"tables": [...], "rows": [...], "geomean": {...}}. clairvoyant: each cell also holds the clairvoyant lookup's
    speedup and its ratio to llama.cpp's best type (policy_replay.clairvoyant_lookup)."""
    tables = [(c["name"], {int(r): float(v) for r, v in c["row_costs"].items()}) for c in corpora] + list(extra)
    rows: list[dict[str, Any]] = []
    modes = ("lookup", "clairvoyant") if clairvoyant else ("lookup",)
    for c in corpora:
        eog = set(c["eog"])
        spec = corpus_spec(c["spec"])
        for pid, p in c["prompts"].items():
            row: dict[str, Any] = {"corpus": c["name"], "prompt_id": pid, "tokens": len(p["reply"]), "costs": {}}
            end = policy_replay.template_end(p["prompt"], eog.__contains__)
            walks = {mode: native_replay.replay(mode, p["prompt"], p["reply"], p["stopped"], p["n_predict"], end)
                     for mode in native_replay.REPLAYED}  # the drafts are the same on every table: walked once
            for name, costs in tables:
                speedups = policy_replay.replayed_speedups(p["prompt"], p["reply"], p["stopped"], costs, spec,
                                                           p["n_predict"], eog.__contains__, modes)
                native = {mode: round(walk.speedup(costs), 4) for mode, walk in walks.items()}
                best = max(native, key=lambda m: native[m])
                cell = row["costs"][name] = {"lookup": round(speedups["lookup"], 4),
                                             "bound": round(copy_bound.bound(p["prompt"], p["reply"], costs), 4),
                                             "llama.cpp": native, "llama.cpp_best": best,
                                             "vs_llama_cpp_best": round(speedups["lookup"] / native[best], 4)}
                if clairvoyant:
                    cell["clairvoyant"] = round(speedups["clairvoyant"], 4)
                    cell["clairvoyant_vs_llama_cpp_best"] = round(speedups["clairvoyant"] / native[best], 4)
            rows.append(row)

    def means(key: str) -> dict[str, dict[str, float | None]]:
        """Each corpus's geometric mean of `key` over its prompts, per cost table."""
        return {c["name"]: {name: _geomean([r["costs"][name][key] for r in rows if r["corpus"] == c["name"]])
                            for name, _ in tables} for c in corpora}

    result = {"tables": [name for name, _ in tables], "rows": rows, "geomean": means("lookup"),
              "geomean_vs_llama_cpp_best": means("vs_llama_cpp_best")}
    if clairvoyant:
        result["geomean_clairvoyant_vs_llama_cpp_best"] = means("clairvoyant_vs_llama_cpp_best")
    return result


def _geomean(values: Sequence[float]) -> float | None:
    return round(math.exp(sum(math.log(v) for v in values) / len(values)), 4) if values else None


def format_replay(result: dict[str, Any]) -> str:
    width = max([len("prompt")] + [len(r["prompt_id"]) for r in result["rows"]]
                + [len(f"geometric mean [{c}]") for c in result["geomean"]])
    lines = ["lookup replayed / copy bound, in plain steps (1.00: no gain), on each corpus's row costs:"]
    lines += _per_prompt(result, width, lambda c: f"{c['lookup']:7.3f} / {c['bound']:5.2f}",
                         result["geomean"], "7.3f", 8)
    lines += ["", "lookup replayed / llama.cpp's best n-gram type replayed on the same reply and costs (which type; "
              "under 1.00: llama.cpp's is faster):"]
    lines += _vs_best(result, width, "vs_llama_cpp_best")
    if "geomean_clairvoyant_vs_llama_cpp_best" in result:
        lines += ["", "the same with clairvoyant sure-copy cuts (each copy stops exactly where the reply parts from "
                  "it): what a perfect cut rule would give:"]
        lines += _vs_best(result, width, "clairvoyant_vs_llama_cpp_best")
    return "\n".join(lines)


def _vs_best(result: dict[str, Any], width: int, key: str) -> list[str]:
    """The table of a ratio to llama.cpp's best type (`key`), each cell naming that type."""
    return _per_prompt(result, width, lambda c: f"{c[key]:5.3f} {c['llama.cpp_best'].removeprefix('ngram-'):>9}",
                       result[f"geomean_{key}"], "5.3f", 10)


def _per_prompt(result: dict[str, Any], width: int, cell: Callable[[dict[str, Any]], str],
                means: dict[str, dict[str, float]], mean_format: str, pad: int) -> list[str]:
    """A table of `cell` per prompt (rows grouped under their corpus) and cost table, then each corpus's means."""
    names = result["tables"]
    lines = ["prompt".ljust(width) + "".join(f"  {n:>15}" for n in names)]
    corpus_name = None
    for r in result["rows"]:
        if r["corpus"] != corpus_name:
            corpus_name = r["corpus"]
            lines.append(f"[{corpus_name}]")
        lines.append(r["prompt_id"].ljust(width) + "".join(f"  {cell(r['costs'][n])}" for n in names))
    for corpus_name, mean in means.items():
        lines.append(f"geometric mean [{corpus_name}]".ljust(width) + "".join(
            f"  {mean[n]:{mean_format}}{' ' * pad}" for n in names))
    return lines


def _cmd_bench_replay(args: argparse.Namespace) -> int:
    corpora = [load_corpus(p) for p in args.corpora]
    extra = [parse_row_costs(t) for t in args.row_costs]
    names = [c["name"] for c in corpora] + [name for name, _ in extra]
    if len(set(names)) != len(names):
        raise UserError(f"two cost tables have the same name ({', '.join(names)}): corpora are named by "
                        "--replay-name when recorded, --row-costs tables by their NAME.")
    result = replay(corpora, extra, clairvoyant=args.clairvoyant)
    print(json.dumps(result, indent=2) if args.json else format_replay(result))
    return 0


def write_corpus(path: Path, data: dict[str, Any]) -> None:
    atomic_write_text(path, json.dumps(data) + "\n")
