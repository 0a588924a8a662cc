"""The check's last phase alone, on the agreeing and demo-shaped pairs: a quick second look at SpecChat
against llama.cpp's own tools in a GPU window, once check.py's synthesize phase made the models.

    python packaging/gpu_kit/native_pairs.py OUT MODELS [-dry]   # -dry: the dry run's models, 1 round, 2 threads
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent)]

import native_compare  # noqa: E402

PAIRS = {"agreeing-0.5b/2-layer": ("agree-target", "agree-draft"), "1.5b/0.5b": ("target-1.5b", "draft-0.5b")}


def main(argv: list[str]) -> int:
    out, models = Path(argv[0]), Path(argv[1])
    suffix = argv[2] if len(argv) > 2 else ""
    tools = Path(__file__).resolve().parent / "carry" / "native"
    root = Path(__file__).resolve().parents[2]
    results: dict = {}
    for pair, (target, draft) in PAIRS.items():
        try:
            results[pair] = native_compare.run_pair(
                pair, models / f"{target}{suffix}.gguf", models / f"{draft}{suffix}.gguf", tools, out, root,
                n_predict=128, repeat=1 if suffix else 3, threads=2 if suffix else 0, timeout_s=150)
        except Exception as exc:  # noqa: BLE001 - the next pair still runs
            results[pair] = {"failed": repr(exc)}
        (out / "native.json").write_text(json.dumps(results, indent=1))
        for mode, r in results[pair].get("modes", {}).items():
            print(pair, mode, r["median_tokens_per_second"], r["median_speedup_vs_llama_cpp"], r["identical"],
                  f"{r['accepted']}/{r['drafted']}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
