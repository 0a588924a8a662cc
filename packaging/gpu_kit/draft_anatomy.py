"""Where a drafting step's time goes on this device: the one question run 26 left open.

On the H200 one row of the 0.5B-shaped draft cost 1.15 ms when timed alone (device_costs: the same row
decoded again and again), yet inside the engine each of its one-row passes cost about 2.7 ms, with steady
shapes too (docs/GPU.md, "Step by step"). The target's passes matched their timed cost. This script times
the draft's passes in patterns that add one difference at a time, so one short device call says which
difference costs it:

- `alone`: one-row passes at advancing positions (does a moving position break the CUDA graph?);
- `engine_pattern`: the engine's: roll back two cells, then three one-row passes, per step;
- `interleaved`: that, with the target's 4-row verify and rollback between steps (two contexts, one GPU);
- `interleaved_threads_N`: the same with both contexts made with N CPU threads (the embedding lookup
  stays on the CPU, and each context has its own threads);
- `engine`: the engine itself (fixed K = 3, with and without steady shapes), with every decode of the draft
  context timed and counted, and the Python time around them; once more with the draft context on one CPU
  thread (`-td 1`);
- all of it again in a child process with `GGML_CUDA_DISABLE_GRAPHS=1`: what a pass costs without a graph.

    python packaging/gpu_kit/draft_anatomy.py --models DIR --out FILE [--dry-run]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parents[1])]

from device_costs import prompt_tokens  # noqa: E402
from engine_runs import _generate, _prompt  # noqa: E402
from step_trace import PAIRS  # noqa: E402  (the demo-shaped and the agreeing pair, as the trace)

from app.engine.pair_config import PairConfig  # noqa: E402
from app.engine.sampling import top_prob  # noqa: E402
from app.engine.session import GenParams, SpecSession  # noqa: E402
from app.engine.speculative import SpecParams  # noqa: E402
from app.llama_backend import ContextConfig, LlamaContext, LlamaModel, ModelConfig  # noqa: E402
from app.llama_backend.core import add_log_sink  # noqa: E402

PREFIX = 64  # tokens in the cache before the timed passes


# llama.cpp's CUDA backend logs (at debug level) when a graph's warm-up completes or restarts and when
# llama.cpp hands it the very graph it ran last; each timed call counts the lines it caused. A call with
# none ran a captured graph or, during a warm-up, kernel by kernel (the no-graphs run tells them apart).
_graph_log: list[str] = []


def _graph_sink(_level: int, text: str) -> None:
    if "CUDA graph" in text or "CUDA Graph" in text:
        for tag in ("reused", "warmup complete", "warmup reset", "disabling"):
            if tag in text:
                _graph_log.append(tag)
                return
        _graph_log.append(text.strip()[:80])


class Passes:
    """Timed calls of one kind: their ms, and the CUDA graph log lines they caused."""

    def __init__(self) -> None:
        self.ms: list[float] = []
        self.graph: Counter[str] = Counter()

    def time(self, fn: Callable[[], object]) -> None:
        seen = len(_graph_log)
        start = time.perf_counter()
        fn()
        self.ms.append((time.perf_counter() - start) * 1000.0)
        self.graph.update(_graph_log[seen:] or ["no message"])

    def summary(self) -> dict:
        return {"median_ms": round(statistics.median(self.ms), 3), "first_ms": [round(t, 3) for t in self.ms[:4]],
                "n": len(self.ms), "graph_log": dict(self.graph)}


def _contexts(target: LlamaModel, draft: LlamaModel, threads: int) -> tuple[LlamaContext, LlamaContext]:
    cfg = ContextConfig(n_ctx=4096, n_threads=threads)
    return LlamaContext(target, cfg), LlamaContext(draft, cfg)


def _patterns(target_ctx: LlamaContext, draft_ctx: LlamaContext, steps: int, with_target: bool) -> dict:
    """The engine's drafting pattern by hand: per step, roll the draft back two cells and make three one-row
    passes (logits of each read and judged as the engine does), then, `with_target`, a 4-row verify rolled
    back to one accepted row."""
    tokens = prompt_tokens(PREFIX + 4 * steps + 8, seed=5)
    for ctx in (target_ctx, draft_ctx):
        ctx.clear()
        ctx.decode(tokens[:PREFIX], logits_for="last")
    draft, verify, python = Passes(), Passes(), Passes()
    for _ in range(steps):
        draft_ctx.truncate(max(PREFIX, draft_ctx.n_past - 2))
        at = draft_ctx.n_past
        for i in range(3):
            draft.time(partial(draft_ctx.decode, [tokens[at + i]], "last"))
            python.time(lambda: top_prob(draft_ctx.logits(-1)))
        if with_target:
            target_ctx.truncate(max(PREFIX, target_ctx.n_past - 3))
            base = target_ctx.n_past
            verify.time(partial(target_ctx.decode, tokens[base : base + 4], "all"))
            target_ctx.truncate(base + 1)
    out = {"draft_pass": draft.summary(), "logits_and_top_prob": python.summary()}
    if verify.ms:
        out["target_verify_4"] = verify.summary()
    return out


def _alone(ctx: LlamaContext, n: int) -> dict:
    tokens = prompt_tokens(PREFIX + n, seed=6)
    ctx.clear()
    ctx.decode(tokens[:PREFIX], logits_for="last")
    advancing, same = Passes(), Passes()
    for t in tokens[PREFIX:]:
        advancing.time(partial(ctx.decode, [t], "last"))
    for _ in range(n // 2):  # device_costs' way: the same position again and again
        ctx.truncate(PREFIX)
        same.time(partial(ctx.decode, [tokens[PREFIX]], "last"))
    return {"advancing": advancing.summary(), "same_position": same.summary()}


def _engine(session: SpecSession, steady: bool, n_predict: int) -> dict:
    """The engine's own drafting, fixed K = 3, with the draft context's decode calls timed one by one."""
    ctx = session.draft_ctx
    assert ctx is not None
    by_rows: dict[int, Passes] = {}  # the draft context's decode calls, by row count
    decode = ctx.decode

    def timed(tokens, logits_for="last"):  # type: ignore[no-untyped-def]
        by_rows.setdefault(len(tokens), Passes()).time(partial(decode, tokens, logits_for))

    params = GenParams(mode="draft", n_predict=n_predict,
                       spec=SpecParams(adaptive=False, draft_max=3, steady_shapes=steady))
    prompt = _prompt(48)
    _generate(session, prompt[:32], GenParams(mode="draft", n_predict=8, spec=params.spec))  # warm-up
    ctx.decode = timed  # type: ignore[method-assign]
    try:
        finish, steps = _generate(session, prompt, params)
    finally:
        del ctx.decode  # back to the class's method
    # The prompt's catch-up (the drafter's prepare, before the first step) is not drafting time.
    by_rows.pop(len(prompt) - 32, None)
    draft_ms = sum(s.draft_ms for s in steps)
    decode_ms = sum(sum(p.ms) for p in by_rows.values())
    return {"steps": len(steps), "drafted": finish.stats.drafted, "accepted": finish.stats.accepted,
            "draft_ms": round(draft_ms, 2), "draft_decode_ms": round(decode_ms, 2),
            "draft_decode_calls": sum(len(p.ms) for p in by_rows.values()),
            "draft_outside_decode_ms": round(draft_ms - decode_ms, 2),
            "decode_by_rows": {str(r): p.summary() for r, p in sorted(by_rows.items())},
            "verify_ms": round(sum(s.verify_ms for s in steps), 2)}


def measure(models: Path, suffix: str, steps: int, threads: list[int], n_predict: int) -> dict:
    report: dict = {"graphs_disabled": bool(os.environ.get("GGML_CUDA_DISABLE_GRAPHS"))}
    add_log_sink(_graph_sink)
    for pair, (target_name, draft_name) in PAIRS.items():
        paths = models / f"{target_name}{suffix}.gguf", models / f"{draft_name}{suffix}.gguf"
        out: dict = {}
        target, draft = (LlamaModel(ModelConfig(p, n_gpu_layers=-1)) for p in paths)
        try:
            for n_threads in threads:
                target_ctx, draft_ctx = _contexts(target, draft, n_threads)
                try:
                    tag = "" if n_threads == threads[0] else f"_threads_{n_threads or 'default'}"
                    if not tag:
                        out["alone"] = _alone(draft_ctx, 2 * steps)
                        out["engine_pattern"] = _patterns(target_ctx, draft_ctx, steps, with_target=False)
                    out[f"interleaved{tag}"] = _patterns(target_ctx, draft_ctx, steps, with_target=True)
                finally:
                    draft_ctx.close()
                    target_ctx.close()
        finally:
            draft.close()
            target.close()
        config = PairConfig(*paths, n_gpu_layers=-1, n_gpu_layers_draft=-1, n_ctx=4096, n_threads=threads[0])
        with SpecSession(config) as session:
            for steady in (True, False):
                out[f"engine{'_steady' if steady else ''}"] = _engine(session, steady, n_predict)
        # The app's -td: the draft context alone on one CPU thread, the target as before.
        with SpecSession(replace(config, n_threads_draft=1)) as session:
            out["engine_steady_threads_draft_1"] = _engine(session, True, n_predict)
        report[pair] = out
        print(pair, json.dumps({k: v.get("draft_pass", v.get("advancing", v.get("draft_decode_ms")))
                                for k, v in out.items()}), flush=True)
    return report


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--dry-run", action="store_true")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    suffix = "-dry" if args.dry_run else ""
    # threads: the engine's default (0: one per core) first, then 1 and 4.
    steps, threads, n_predict = (6, [2, 1], 24) if args.dry_run else (24, [0, 1, 4], 128)
    report = measure(args.models, suffix, steps, threads, n_predict)
    if not args.child:
        child_out = args.out.with_suffix(".no-graphs.json")
        env = {**os.environ, "GGML_CUDA_DISABLE_GRAPHS": "1"}
        cmd = [sys.executable, __file__, "--models", str(args.models), "--out", str(child_out), "--child"]
        rc = subprocess.run(cmd + (["--dry-run"] if args.dry_run else []), env=env, check=False).returncode
        report["no_graphs"] = json.loads(child_out.read_text()) if rc == 0 else {"failed": f"exit {rc}"}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
