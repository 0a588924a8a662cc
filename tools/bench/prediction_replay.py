"""Predicted Outputs replayed on bench-serve's edit requests with measured verify costs: what a request's prediction
gains over the same mode without it, in plain steps, on a recorded CPU's costs and on the H200's (the GPU kit's
measured verify costs, docs/gpu-reports/run26-check.json), without a GPU and without timing noise.

Greedy output does not depend on what is proposed, so each request's plain reply is recorded once with the real
model; then the real engine, policy, governors and proposers (lookup, the prediction proposer around it, or around
plain decoding) are driven by policy_replay's stand-in target, which charges each verify the measured cost of its
row count. `python -m tools.bench.prediction_replay -m TARGET.gguf [--requests FILE] [--max-tokens N]`.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from app.cli.bench_serve import load_requests
from app.engine.draft_policy import resolve_copies
from app.engine.drafters import LookupDrafter, NoDrafter
from app.engine.events import FinishEvent
from app.engine.pair_config import PairConfig
from app.engine.prediction import PredictionProposer
from app.engine.proposal import Proposer
from app.engine.session import GenParams, SpecSession
from app.engine.speculative import SpecEngine, SpecParams
from tools.bench.policy_replay import ReplayClock, StandInTarget, template_end

ROOT = Path(__file__).resolve().parents[2]
# This project's CPU tables (plain steps by verify rows), docs/BENCHMARKS.md runs 15 and 19 (AMD EPYC, 2 cores).
CPU_TABLES = {
    "cpu-run15": {1: 1, 2: 1.84, 3: 2.50, 4: 2.81, 5: 3.54, 6: 4.67, 7: 5.51, 8: 7.50, 12: 8.60, 16: 8.54, 24: 12.55,
                  32: 15.31},
    "cpu-run19": {1: 1, 2: 1.80, 4: 3.13, 8: 7.52, 16: 9.21, 32: 14.83},
}
MODES = ("lookup", "lookup+prediction", "none+prediction")


def h200_table(path: Path = ROOT / "docs" / "gpu-reports" / "run26-check.json") -> dict[int, float]:
    """The H200's verify costs for the 1.5B target, in plain steps (one row = 1)."""
    ms = json.loads(path.read_text())["verify_ms"]["target-1.5b"]
    one = float(ms["1"])
    return {int(rows): float(v) / one for rows, v in ms.items()}


def replay_ms(prompt: Sequence[int], reply: Sequence[int], stopped: bool, costs: Mapping[int, float], mode: str,
              spec: SpecParams, prediction: Sequence[int], n_predict: int, is_eog: Any) -> float:
    """Decode time of `mode` ("none", or a MODES entry) writing `reply`, in plain-step ms."""
    eog = template_end(prompt, is_eog, max(*prompt, *reply) + 1)
    clock = ReplayClock()
    target = StandInTarget([*prompt, *reply, eog], eog, costs, clock, is_eog=is_eog)
    base, _, with_prediction = mode.partition("+")
    proposer: Proposer = LookupDrafter() if base == "lookup" else NoDrafter()
    if with_prediction:
        proposer = PredictionProposer(proposer, prediction)
    engine = SpecEngine(target, proposer, clock=clock)
    least = len(reply) + 1 if stopped else len(reply)
    n_predict = max(n_predict, least) if stopped else least
    [finish] = [e for e in engine.generate(prompt, n_predict, spec=spec) if isinstance(e, FinishEvent)]
    if list(finish.tokens) != list(reply):
        raise AssertionError(f"the {mode} replay did not reproduce the recorded reply")
    return finish.stats.decode_ms


def record(model: Path, requests_path: Path | None, max_tokens: int, threads: int,
           only: Sequence[str] = ()) -> list[dict[str, Any]]:
    """Each edit request's prompt, plain greedy reply and prediction, as token ids."""
    out: list[dict[str, Any]] = []
    with SpecSession(PairConfig(model, None, n_ctx=4096, n_threads=threads)) as session:
        for request in load_requests(requests_path):
            if request.prediction is None or (only and request.id not in only):
                continue
            prompt = session.chat_prompt(request.messages())
            [finish] = [e for e in session.generate(prompt, GenParams("none", max_tokens))
                        if isinstance(e, FinishEvent)]
            out.append({"id": request.id, "prompt": prompt, "reply": list(finish.tokens),
                        "stopped": finish.stats.finish_reason == "stop",
                        "prediction": session.prediction_tokens(request.prediction)})
            print(f"recorded {request.id}: {len(finish.tokens)} tokens", file=sys.stderr, flush=True)
        tokens = {t for r in out for part in ("prompt", "reply") for t in r[part]}
        eog_ids = sorted(t for t in tokens if session.target_model.is_eog(t))
    for r in out:
        r["eog"] = eog_ids
    return out


def speedups(recorded: list[dict[str, Any]], tables: Mapping[str, tuple[Mapping[int, float], bool]],
             max_tokens: int) -> dict[str, Any]:
    """Per table (costs, on a GPU?) and request: each mode against plain decoding, in plain steps."""
    result: dict[str, Any] = {}
    for name, (costs, gpu) in tables.items():
        spec = resolve_copies(SpecParams(), target_on_gpu=gpu)
        rows = {}
        for r in recorded:
            eog = set(r["eog"])

            def is_eog(t: int, eog: set[int] = eog) -> bool:
                return t in eog

            args = (r["prompt"], r["reply"], r["stopped"], costs)
            plain = replay_ms(*args, "none", replace(spec), r["prediction"], max_tokens, is_eog)
            rows[r["id"]] = {mode: plain / replay_ms(*args, mode, spec, r["prediction"], max_tokens, is_eog)
                             for mode in MODES}
        result[name] = rows
    return result


def _geomean(values: Sequence[float]) -> float:
    product = 1.0
    for v in values:
        product *= v
    return product ** (1 / len(values)) if values else 0.0


def format_table(result: dict[str, Any]) -> str:
    lines = []
    for name, rows in result.items():
        lines.append(f"{name}: speedup over plain decoding (plain steps); prediction's gain over lookup alone")
        lines.append(f"  {'request':26} {'lookup':>8} {'lookup+pred':>12} {'none+pred':>10} {'pred/lookup':>12}")
        for rid, cell in rows.items():
            gain = cell["lookup+prediction"] / cell["lookup"]
            lines.append(f"  {rid:26} {cell['lookup']:8.2f} {cell['lookup+prediction']:12.2f} "
                         f"{cell['none+prediction']:10.2f} {gain:12.2f}")
        means = {m: _geomean([c[m] for c in rows.values()]) for m in MODES}
        lines.append(f"  {'geometric mean':26} {means['lookup']:8.2f} {means['lookup+prediction']:12.2f} "
                     f"{means['none+prediction']:10.2f} {means['lookup+prediction'] / means['lookup']:12.2f}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.bench.prediction_replay", description=__doc__)
    p.add_argument("-m", "--model", type=Path, required=True, help="the target GGUF that writes the replies")
    p.add_argument("--requests", type=Path, default=None, help="bench-serve's requests (default: the shipped ones)")
    p.add_argument("--max-tokens", type=int, default=1024)
    p.add_argument("-t", "--threads", type=int, default=2)
    p.add_argument("--json-out", type=Path, default=None)
    p.add_argument("--only", default="", help="comma-separated request ids (default: every edit request)")
    args = p.parse_args(argv)
    only = [i for i in args.only.split(",") if i]
    recorded = record(args.model, args.requests, args.max_tokens, args.threads, only)
    tables = {name: (costs, False) for name, costs in CPU_TABLES.items()}
    tables["h200-run26"] = (h200_table(), True)
    result = speedups(recorded, tables, args.max_tokens)
    print(format_table(result))
    if args.json_out:
        args.json_out.write_text(json.dumps({"recorded": recorded, "speedups": result}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
