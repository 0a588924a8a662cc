"""Predicted Outputs on this device (issue 57: "the GPU kit predicts the GPU figure from its verify costs").

bench-serve's edit requests were answered once on the CPU by the real 1.5B target, greedy (`prediction_replies.json`,
recorded by `python packaging/gpu_kit/serve_prediction.py --record`). Greedy output does not depend on what is
proposed, so the real engine, policy, governors and proposers (lookup; the prediction proposer around lookup and
around plain decoding) replay those replies against this device's measured verify costs of the 1.5B shape
(tools/bench/prediction_replay.py): what `prediction` gains over the same server without it, and over plain
decoding, in plain steps, with no timing noise. Acceptance is a property of the text and the model, not of the
device; the costs are the device's.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from statistics import geometric_mean
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path[:0] = [str(ROOT)] if str(ROOT) not in sys.path else []

from app.atomic import atomic_write_text  # noqa: E402
from tools.bench import prediction_replay  # noqa: E402

REPLIES = HERE / "prediction_replies.json"


def predict(verify_ms: Mapping[int, float], on_gpu: bool, replies: Path = REPLIES) -> dict[str, Any]:
    """Per request and as geometric means: lookup, lookup+prediction and none+prediction against plain decoding,
    and prediction's gain over lookup alone, on these verify costs (ms by row count; row 1 = one plain step)."""
    data = json.loads(replies.read_text())
    one = float(verify_ms[1])
    table = {int(rows): float(ms) / one for rows, ms in verify_ms.items()}
    rows = prediction_replay.speedups(data["requests"], {"device": (table, on_gpu)}, data["max_tokens"])["device"]
    rows = {rid: {mode: round(v, 3) for mode, v in cell.items()} for rid, cell in rows.items()}
    means = {mode: round(geometric_mean([cell[mode] for cell in rows.values()]), 3) for mode in prediction_replay.MODES}
    return {"file": str(replies.relative_to(ROOT)) if replies.is_relative_to(ROOT) else str(replies),
            "model": data["model"], "recorded": data["recorded"], "requests": len(rows),
            "tokens": sum(len(r["reply"]) for r in data["requests"]), "on_gpu": on_gpu, "per_request": rows,
            "geomean": means,
            "prediction_over_lookup": round(means["lookup+prediction"] / means["lookup"], 3) if means["lookup"] else 0}


def record(model: Path, out: Path, max_tokens: int, threads: int) -> None:
    """Answer bench-serve's edit requests with the real target (plain greedy) and keep prompt, reply, prediction."""
    requests = prediction_replay.record(model, None, max_tokens, threads)
    data = {"model": model.name, "max_tokens": max_tokens, "recorded": time.strftime("%Y-%m-%d"),
            "requests": requests}
    atomic_write_text(out, json.dumps(data, separators=(",", ":")) + "\n")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--record", action="store_true", help=f"record the replies into {REPLIES.name} (the CPU's job)")
    p.add_argument("-m", "--model", type=Path, help="the real target GGUF (--record)")
    p.add_argument("--max-tokens", type=int, default=1024)
    p.add_argument("-t", "--threads", type=int, default=2)
    args = p.parse_args(argv)
    if args.record:
        if args.model is None:
            p.error("--record needs -m TARGET.gguf")
        record(args.model, REPLIES, args.max_tokens, args.threads)
        return 0
    # Without --record: this machine's CPU table from prediction_replay, as a check of the replies file.
    print(json.dumps(predict(prediction_replay.CPU_TABLES["cpu-run19"], on_gpu=False), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
