import json, sys
from pathlib import Path
sys.path[:0] = ["packaging/gpu_kit"]
import native_compare as n
out, models = Path(sys.argv[1]), Path(sys.argv[2])
sfx = sys.argv[3] if len(sys.argv) > 3 else ""
tools = Path("packaging/gpu_kit/carry/native")
res = {}
for pair, (t, d) in {"agreeing-0.5b/2-layer": ("agree-target", "agree-draft"), "1.5b/0.5b": ("target-1.5b", "draft-0.5b")}.items():
    try:
        res[pair] = n.run_pair(pair, models / f"{t}{sfx}.gguf", models / f"{d}{sfx}.gguf", tools, out, Path.cwd(),
                               n_predict=128, repeat=3 if not sfx else 1, threads=0 if not sfx else 2, timeout_s=150)
    except Exception as e:
        res[pair] = {"failed": repr(e)}
    (out / "native.json").write_text(json.dumps(res, indent=1))
    for m, r in res[pair].get("modes", {}).items():
        print(pair, m, r["median_tokens_per_second"], r["median_speedup_vs_llama_cpp"], r["identical"], f"{r['accepted']}/{r['drafted']}")
