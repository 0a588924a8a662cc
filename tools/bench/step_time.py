"""Per-step Python time of the engine (issue 56, item 5): `python tools/step_time.py [--repo OTHER_CHECKOUT]`.

For each checkout (this one, then every --repo) a worker process loads the demo pair with that checkout's `app`
package; the rounds are interleaved across the workers (one runs at a time), so a before/after comparison sees
the same machine load. Reported per mode (none/lookup/draft) and sampling (greedy; sampled with penalties, the
chat default: temperature 0.8, top-k 40, top-p 0.95, min-p 0.05, repeat penalty 1.1 over the last 64 tokens):
the median over rounds and prompts of FinishEvent.stats.python_ms / stats.steps (decode time outside
llama_decode). The micro part times PenaltyWindow.apply and distribution() on real 151,936-wide Qwen rows.

Every worker also runs fixed-K replies (no governor, so no timing decides a batch shape) for a few seeds and
hashes the micro part's outputs; the parent checks that every checkout gave the very same tokens and bits.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]  # the checkout: tools/bench/step_time.py

TARGET = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"  # the demo pair, as tests/conftest.py names it
DRAFT = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"

PROMPTS = (
    "Rewrite this function with type hints and a docstring, keeping the body as it is:\n\n"
    "def mean(values):\n    total = 0\n    for v in values:\n        total += v\n    return total / len(values)\n",
    "Explain in a short paragraph what a hash map is and when to use one.",
    "List five uses of Python's itertools module, one line each.",
)
MODES = ("none", "lookup", "draft")
SEEDS = (1, 2, 3)


# --- the worker: one checkout's `app`, driven by JSON lines on stdin ---------------------------------------------

def _sampling(kind: str, seed: int | None) -> Any:
    from app.engine.sampling import SamplingParams

    if kind == "greedy":
        return SamplingParams()
    return SamplingParams(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05, repeat_penalty=1.1, repeat_last_n=64,
                          seed=seed)


def _reply(session: Any, prompt: list[int], mode: str, kind: str, seed: int | None, n_predict: int,
           fixed_k: int = 0) -> dict[str, Any]:
    from app.engine.events import FinishEvent
    from app.engine.session import GenParams
    from app.engine.speculative import SpecParams

    spec = SpecParams(draft_max=fixed_k, adaptive=False) if fixed_k else SpecParams()
    params = GenParams(mode=mode, n_predict=n_predict, sampling=_sampling(kind, seed), spec=spec)
    for event in session.generate(prompt, params):
        if isinstance(event, FinishEvent):
            s = event.stats
            return {"python_ms": s.python_ms, "steps": s.steps, "decode_ms": s.decode_ms, "tokens": list(event.tokens)}
    raise RuntimeError("no FinishEvent")


def _micro(session: Any, prompt: list[int], repeats: int) -> dict[str, Any]:
    """apply + distribution on real target rows, penalised with a 64-token window of the prompt."""
    import numpy as np

    from app.engine.penalties import PenaltyWindow
    from app.engine.sampling import SampleNoise, distribution, top_prob

    ctx = session.target_ctx
    ctx.clear()
    rows: list[np.ndarray] = []
    step = max(1, min(8, ctx.max_rows))
    for start in range(0, min(len(prompt), 32), step):
        ctx.decode(prompt[start:start + step], logits_for="all")
        rows += [np.array(ctx.logits(i)) for i in range(len(prompt[start:start + step]))]
    ctx.clear()
    params = _sampling("sampled", 7)
    window = PenaltyWindow(params, prompt)
    noise = SampleNoise(7)
    digest = hashlib.sha256()
    apply_us: list[float] = []
    dist_us: list[float] = []
    top_us: list[float] = []
    for r in range(repeats):
        for i, row in enumerate(rows):
            t0 = time.perf_counter()
            logits = window.apply(row)
            t1 = time.perf_counter()
            d = distribution(logits, params)
            t2 = time.perf_counter()
            best = top_prob(logits)
            t3 = time.perf_counter()
            apply_us.append((t1 - t0) * 1e6)
            dist_us.append((t2 - t1) * 1e6)
            top_us.append((t3 - t2) * 1e6)
            if r == 0:
                digest.update(np.asarray(logits, dtype=np.float32).tobytes())
                digest.update(np.asarray(d.ids, dtype=np.int64).tobytes())
                digest.update(np.asarray(d.probs, dtype=np.float64).tobytes())
                digest.update(repr((best, noise.sample(d, i))).encode())
    return {"apply_us": statistics.median(apply_us), "dist_us": statistics.median(dist_us),
            "top_prob_us": statistics.median(top_us), "rows": len(rows), "digest": digest.hexdigest()}


def worker(root: Path, threads: int) -> None:
    sys.path.insert(0, str(root))
    proto = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # llama.cpp and the app may print; only our replies go down the pipe
    from app import paths
    from app.engine.pair_config import PairConfig
    from app.engine.session import SpecSession

    models = Path(os.environ.get("SPECCHAT_TEST_MODELS") or paths.models_dir())
    session = SpecSession(PairConfig(models / TARGET, models / DRAFT, n_ctx=2048, n_threads=threads))
    prompts = [session.chat_prompt([{"role": "user", "content": p}]) for p in PROMPTS]
    proto.write(json.dumps({"ready": str(root)}) + "\n")
    proto.flush()
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd["cmd"] == "reply":
            out = _reply(session, prompts[cmd["prompt"]], cmd["mode"], cmd["kind"], cmd.get("seed"),
                         cmd["n_predict"], cmd.get("fixed_k", 0))
        elif cmd["cmd"] == "micro":
            out = _micro(session, prompts[0], cmd["repeats"])
        else:
            break
        proto.write(json.dumps(out) + "\n")
        proto.flush()
    session.close()


# --- the parent ----------------------------------------------------------------------------------------------------

class Worker:
    def __init__(self, root: Path, threads: int) -> None:
        self.root = root
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--worker", str(root),
                                      "--threads", str(threads)],
                                     cwd=root, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True)
        self.ask_raw()

    def ask_raw(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the worker for {self.root} died")
        result: dict[str, Any] = json.loads(line)
        return result

    def ask(self, **cmd: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        return self.ask_raw()

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def _label(root: Path) -> str:
    rev = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    return f"{root.name}@{rev.stdout.strip() or '?'}{'+' if dirty else ''}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", action="append", type=Path, default=[],
                        help="another checkout to measure, interleaved with this one (repeatable)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--n-predict", type=int, default=48)
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--micro-repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2,
                        help="llama.cpp threads (1 where other jobs share the cores)")
    parser.add_argument("--check-seeds", type=int, default=len(SEEDS))
    parser.add_argument("--no-check", action="store_true", help="skip the fixed-K same-tokens check")
    parser.add_argument("--json-out", type=Path, help="write every reply's per-step ms here")
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        worker(args.worker.resolve(), args.threads)
        return 0

    roots = [ROOT, *(r.resolve() for r in args.repo)]
    labels = [_label(r) for r in roots]
    workers = [Worker(r, args.threads) for r in roots]
    modes = args.modes.split(",")
    per_step: dict[tuple[str, str, int], list[float]] = {}
    tokens: dict[tuple[str, str, int, int, int], list[int]] = {}
    try:
        # Warm-up: the first reply of each mode pays one-off costs (imports, buffers, a first prefill).
        for w in workers:
            for mode in modes:
                w.ask(cmd="reply", prompt=0, mode=mode, kind="greedy", n_predict=8)
        for rnd in range(args.rounds):
            for mode in modes:
                for kind in ("greedy", "sampled"):
                    p = rnd % len(PROMPTS)  # one prompt a round, each in turn: short runs on shared cores
                    order = workers if rnd % 2 == 0 else workers[::-1]  # alternate who runs first
                    for w in order:
                        i = workers.index(w)
                        r = w.ask(cmd="reply", prompt=p, mode=mode, kind=kind, seed=SEEDS[p], n_predict=args.n_predict)
                        per_step.setdefault((mode, kind, i), []).append(r["python_ms"] / max(1, r["steps"]))
        micro = [w.ask(cmd="micro", repeats=args.micro_repeats) for w in workers]
        if not args.no_check:
            for mode in ("none", "lookup", "draft"):
                for seed in SEEDS[:args.check_seeds]:
                    for i, w in enumerate(workers):
                        r = w.ask(cmd="reply", prompt=0, mode=mode, kind="sampled", seed=seed,
                                  n_predict=args.n_predict, fixed_k=0 if mode == "none" else 4)
                        tokens[(mode, "sampled", seed, 0, i)] = r["tokens"]
    finally:
        for w in workers:
            w.close()

    if args.json_out is not None:
        raw = {f"{mode}/{kind}/{labels[i]}": v for (mode, kind, i), v in per_step.items()}
        args.json_out.write_text(json.dumps({"per_step_ms": raw, "micro": dict(zip(labels, micro, strict=True))},
                                            indent=1))
    width = max(len(x) for x in labels)
    print(f"per-step Python ms (median of {args.rounds} rounds, prompts in turn, n_predict {args.n_predict}, "
          f"{args.threads} llama.cpp threads)")
    print(f"{'mode':8} {'sampling':8} " + " ".join(f"{x:>{width}}" for x in labels))
    for mode in modes:
        for kind in ("greedy", "sampled"):
            cells = [statistics.median(per_step[(mode, kind, i)]) for i in range(len(workers))]
            extra = f"  ({cells[1] / cells[0]:.2f}x)" if len(cells) > 1 and cells[0] > 0 else ""
            print(f"{mode:8} {kind:8} " + " ".join(f"{c:>{width}.2f}" for c in cells) + extra)
    print("micro, per 151,936-wide row (median us): apply, distribution, top_prob")
    for label, m in zip(labels, micro, strict=True):
        print(f"  {label:{width}}  {m['apply_us']:8.1f} {m['dist_us']:8.1f} {m['top_prob_us']:8.1f}"
              f"  ({m['rows']} rows)")
    same = len({m["digest"] for m in micro}) == 1
    print(f"micro outputs bit-identical across checkouts: {same}")
    tokens_ok = True
    if tokens:
        for mode in ("none", "lookup", "draft"):
            for seed in SEEDS[:args.check_seeds]:
                runs = [tokens[(mode, "sampled", seed, 0, i)] for i in range(len(workers))]
                if any(r != runs[0] for r in runs):
                    tokens_ok = False
                    print(f"DIFFERENT tokens: {mode} seed {seed}")
        print(f"fixed-K sampled replies identical across checkouts: {tokens_ok}")
    return 0 if same and tokens_ok else 1


if __name__ == "__main__":
    sys.exit(main())
