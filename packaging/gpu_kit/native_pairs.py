"""The check's last phase alone, on the agreeing and demo-shaped pairs: a quick second look at SpecChat
against llama.cpp's own tools in a GPU window, once check.py's synthesize phase made the models.

    python packaging/gpu_kit/native_pairs.py OUT MODELS [-dry] [--steady-shapes]

-dry: the dry run's models, 1 round, 2 threads. --steady-shapes: SpecChat's modes with SpecParams.steady_shapes
(the JSON files get a `-steady` tag), to set against a run without it.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent)]

import native_compare  # noqa: E402
from step_trace import PAIRS  # noqa: E402  (the same two pairs)

TIMEOUT_S = 150  # per pair; no budget otherwise


def main(argv: list[str]) -> int:
    steady = "--steady-shapes" in argv
    args = [a for a in argv if a != "--steady-shapes"]
    out, models = Path(args[0]), Path(args[1])
    suffix = args[2] if len(args) > 2 else ""
    tag = "-steady" if steady else ""
    tools = Path(os.environ.get("GPU_KIT_NATIVE", Path(__file__).resolve().parent / "carry" / "native"))
    root = Path(__file__).resolve().parents[2]
    results: dict = {}
    pairs = {pair: (models / f"{target}{suffix}.gguf", models / f"{draft}{suffix}.gguf")
             for pair, (target, draft) in PAIRS.items()}
    for pair, result, error in native_compare.run_pairs(pairs, tools, out, root, n_predict=128,
                                                        repeat=1 if suffix else 3, threads=2 if suffix else 0,
                                                        left=lambda: TIMEOUT_S + 5,
                                                        extra=("--steady-shapes",) if steady else (), tag=tag):
        results[pair] = result
        if error is not None:
            print(error, file=sys.stderr, flush=True)
        (out / f"native{tag}.json").write_text(json.dumps(results, indent=1))
        for mode, r in results[pair].get("modes", {}).items():
            print(pair, mode, r["median_tokens_per_second"], r["median_speedup_vs_llama_cpp"], r["identical"],
                  f"{r['accepted']}/{r['drafted']}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
