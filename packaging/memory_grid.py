"""Predicted vs measured memory of the demo pair over the issue's grid, as a Markdown table.

    python packaging/memory_grid.py [SPECCHAT] [--model-compute] > table.md

Runs `specchat memory --measure --json` at contexts 2048/8192/32768 and zero, partial and full
offload (plus flash attention off), on whatever GPU the installed llama.cpp build has, and prints
predicted / measured MiB per buffer kind and device, then the worst error per kind. On GPU builds
the compute buffers come from llama.cpp's dry run unless `--model-compute` asks for SpecChat's
closed form. Used for docs/MEMORY.md; `packaging/vulkan_check.sh` runs both.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict

from app.models.demo_pair import demo_pair_paths

MiB = 1 << 20
GRID = [(c, n, nd, "on") for c in (2048, 8192, 32768) for n, nd in ((0, 0), (12, 10), (-1, -1))]
GRID += [(2048, -1, -1, "off"), (8192, -1, -1, "off"), (8192, 12, 10, "off")]


def main() -> int:
    args = [a for a in sys.argv[1:] if a != "--model-compute"]
    exe = args[0] if args else "specchat"
    extra = ["--model-compute"] if "--model-compute" in sys.argv[1:] else []
    pair = demo_pair_paths()
    if pair is None:
        print("memory_grid: the demo pair is missing; run `specchat models fetch-demo`", file=sys.stderr)
        return 2
    rows: list[str] = []
    worst: dict[tuple[str, str, str], float] = {}
    devices: list[str] = []
    for ctx, ngl, ngld, fa in GRID:
        cmd = [exe, "memory", "-m", str(pair.target), "-md", str(pair.draft), "-ngl", str(ngl),
               "-ngld", str(ngld), "-c", str(ctx), "--flash-attn", fa, "--measure", "--json", *extra]  # fmt: skip
        data = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
        gpus = [d["device"] for d in data["devices"] if d["device"] != "CPU"]
        devices = gpus[:1] + ["CPU"]
        for role in ("target", "draft"):
            model = data[role]
            pred: dict[tuple[str, str], int] = defaultdict(int)
            meas: dict[tuple[str, str], int] = defaultdict(int)
            for b in model["buffers"]:
                pred[(b["kind"].replace("repack", "model"), b["device"])] += b["bytes"]
            for b in model["measured"]:
                meas[(b["kind"].replace("repack", "model"), b["device"])] += b["bytes"]
            cells = []
            for dev in devices:
                for kind in ("model", "kv", "compute"):
                    p, g = pred.get((kind, dev), 0), meas.get((kind, dev), 0)
                    cells.append(f"{p / MiB:.2f} / {g / MiB:.2f}" if p or g else "–")
                    if g > MiB:
                        key = (kind, dev, "all layers on GPU" if ngl < 0 else "CPU layers")
                        worst[key] = max(worst.get(key, 0.0), abs(p - g) / g)
            n = ngl if role == "target" else ngld
            rows.append(f"| {role} | {ctx} | {n} | {fa} | " + " | ".join(cells) + " |")
    heads = [f"{d} {k}" for d in devices for k in ("weights", "KV", "compute")]
    print("| model | ctx | -ngl | FA | " + " | ".join(heads) + " |")
    print("|---" * (4 + len(heads)) + "|")
    print("\n".join(rows))
    print()
    for (kind, dev, where), err in sorted(worst.items()):
        print(f"- worst {kind} on {dev} ({where}): {err:.2%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
