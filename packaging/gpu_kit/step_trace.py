"""Step by step, what the engine's passes cost at device speed: the governor decides on its first
steps, so this shows how those compare with the steady ones (CUDA graphs are captured only after two
calls of one shape, so a shape's first passes run kernel by kernel).

    python packaging/gpu_kit/step_trace.py --models DIR --out FILE [--dry-run]

DIR holds the check's synthetic models (check.py's synthesize phase writes them).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1])]

from check import PAIRS as CHECK_PAIRS  # noqa: E402
from engine_runs import _generate, _prompt  # noqa: E402

from app.engine.pair_config import PairConfig  # noqa: E402
from app.engine.session import GenParams, SpecSession  # noqa: E402
from app.engine.spec_params import COPY_MAX_AUTO  # noqa: E402
from app.engine.speculative import SpecParams  # noqa: E402

PAIRS = {pair: CHECK_PAIRS[pair] for pair in ("agreeing-0.5b/2-layer", "1.5b/0.5b")}
# Each drafting run twice: with the default shapes and with SpecParams.steady_shapes.
RUNS = {"none": GenParams(mode="none")}
for _steady in (False, True):
    _tag = "-steady" if _steady else ""
    RUNS |= {
        f"draft-fixed-k3{_tag}": GenParams(mode="draft", spec=SpecParams(adaptive=False, draft_max=3,
                                                                          steady_shapes=_steady)),
        f"draft{_tag}": GenParams(mode="draft", spec=SpecParams(copy_max=COPY_MAX_AUTO, steady_shapes=_steady)),
        f"hybrid{_tag}": GenParams(mode="hybrid", spec=SpecParams(copy_max=COPY_MAX_AUTO, steady_shapes=_steady)),
    }


def trace(target: Path, draft: Path, n_predict: int, threads: int) -> dict:
    config = PairConfig(target, draft, n_gpu_layers=-1, n_gpu_layers_draft=-1, n_ctx=4096, n_threads=threads)
    prompt = _prompt(48)
    out: dict = {}
    with SpecSession(config) as session:
        for name, params in RUNS.items():
            _generate(session, prompt[:32], replace(params, n_predict=8))  # warm-up
            start = time.perf_counter()
            finish, steps = _generate(session, prompt, replace(params, n_predict=n_predict))
            s = finish.stats
            out[name] = {
                "tokens": list(finish.tokens),
                "wall_s": round(time.perf_counter() - start, 4), "tokens_per_second": round(s.tokens_per_second, 1),
                "decode_ms": round(s.decode_ms, 2), "draft_ms": round(s.draft_ms, 2),
                "verify_ms": round(s.verify_ms, 2), "other_ms": round(s.other_ms, 2),
                "drafted": s.drafted, "accepted": s.accepted,
                # step, k, drafted, accepted, emitted, draft ms, verify ms, copy
                "steps": [[e.step, e.k, len(e.drafted), e.accepted, e.emitted, round(e.draft_ms, 3),
                           round(e.verify_ms, 3), int(e.copy)] for e in steps],
                "governor": [{"step": g.step, "action": g.action, "k": [g.k_before, g.k_after], "reason": g.reason}
                             for g in s.governor],
            }
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--dry-run", action="store_true")
    args = parser.parse_args(argv)
    suffix = "-dry" if args.dry_run else ""
    report = {}
    for pair, (target, draft) in PAIRS.items():
        report[pair] = trace(args.models / f"{target}{suffix}.gguf", args.models / f"{draft}{suffix}.gguf",
                             24 if args.dry_run else 256, 2 if args.dry_run else 0)
        plain = report[pair]["none"]["tokens"]
        for name, r in report[pair].items():
            r["same_as_none"] = r["tokens"] == plain
            r["parts_at"] = next((i for i, (a, b) in enumerate(zip(r["tokens"], plain, strict=False)) if a != b), None)
            print(f"{pair} {name}: {r['tokens_per_second']} tok/s, draft {r['draft_ms']} verify {r['verify_ms']} "
                  f"other {r['other_ms']} ms, {r['accepted']}/{r['drafted']}, same as none: {r['same_as_none']} "
                  f"(parts at {r['parts_at']})", flush=True)
        args.out.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
