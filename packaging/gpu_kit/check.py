"""The GPU check, phase by phase, within a time budget; `packaging/gpu_check.sh` is its entry point.

    python packaging/gpu_kit/check.py --out DIR [--dry-run] [--budget-s 420]

Phases: synthetic models from the carried headers -> memory (prediction vs llama.cpp's report) ->
verify costs and logit identity -> the engine in each mode -> speedups predicted from the carried
acceptance traces -> Predicted Outputs on bench-serve's edit requests (serve_prediction.py) -> llama.cpp's
own tools. `report.json` and `report.md` are rewritten after every phase, so a run cut short still leaves what it
measured; a phase that fails is recorded under `errors` and the next one runs.
The dry run is the same code on whatever backend is installed (the CPU in CI) with fewer layers.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path[:0] = [str(ROOT)] if str(ROOT) not in sys.path else []

import carry_size  # noqa: E402
import device_costs  # noqa: E402
import engine_runs  # noqa: E402
import gguf_headers  # noqa: E402
import memory_check  # noqa: E402
import native_compare  # noqa: E402
import replay  # noqa: E402
import report_md  # noqa: E402
import serve_prediction  # noqa: E402
import synth_gguf  # noqa: E402

SHAPES = ("target-1.5b", "draft-0.5b", "target-7b")  # the demo pair's and the 7B's exact shapes
# Engine runs. The demo shapes write unrelated nonsense, so their draft rarely agrees; the agreeing
# pair (a 0.5B-shaped target whose later layers are quiet, and its first two layers as the draft)
# shows the governor where drafting pays. Replays of the real pair's traces use the demo shapes' costs.
PAIRS = {"1.5b/0.5b": ("target-1.5b", "draft-0.5b"), "7b/0.5b": ("target-7b", "draft-0.5b"),
         "agreeing-0.5b/2-layer": ("agree-target", "agree-draft")}
REPLAYED = ("1.5b/0.5b", "7b/0.5b")
# The phases in order, with the seconds each needs left to start; native last: issue 12's fields come first.
PHASES = {"environment": 1, "synthesize": 30, "memory": 30, "costs": 20, "engine": 20, "speedups": 2, "governor": 0,
          "serve": 10, "native": native_compare.MIN_LEFT_S}
# What a full run's report must hold (tests/test_gpu_kit.py checks the dry run's against this too).
REPORT_FIELDS = ("backend", "memory", "verify_ms", "identity", "engine_overhead_pct", "predicted_speedup",
                 "carry_bytes", "governor", "predicted_serve")


class Plan:
    """Sizes of one run: the GPU's full shapes, or the dry run's scaled-down ones."""

    def __init__(self, dry: bool) -> None:
        self.dry = dry
        # The dry run keeps every shape but the layer count (vocabulary-sized matrices dominate anyway).
        # Two layers at least: llama.cpp runs a model's last layer on the output rows only, so a
        # one-layer model's compute buffer is not the one the prediction models.
        self.scale = {"target-1.5b": 4, "draft-0.5b": 4, "target-7b": 2, "agree-target": 6} if dry else {}
        self.contexts = [2048, 8192, 32768]
        # K up to 16 needs 17 rows; long copies (K up to 31) 32; llama.cpp's n-gram types verify 48-64
        self.rows = [*range(1, 18), 24, 32, 48, 64]
        self.reps = 1 if dry else 7
        every = list(range(1, 17))
        self.identity_rows = dict.fromkeys(("target-1.5b", "target-7b"), [1, 2, 4, 8, 16] if dry else every)
        self.n_predict = 24 if dry else 256
        self.threads = 2 if dry else 0
        self.native_predict, self.native_repeat = (16, 1) if dry else (128, 3)


class Run:
    def __init__(self, out: Path, budget_s: float, plan: Plan) -> None:
        self.out, self.plan = out, plan
        self.deadline = time.monotonic() + budget_s
        self.report: dict = {"dry_run": plan.dry, "started": time.strftime("%Y-%m-%d %H:%M:%S"), "phases": {},
                             "errors": {}}

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def phase(self, name: str, needs_s: float, fn) -> None:  # type: ignore[no-untyped-def]
        if self.left() < needs_s:
            self.report["phases"][name] = {"skipped": f"{self.left():.0f} s left, needs ~{needs_s:.0f} s"}
            print(f"==> {name}: skipped, {self.left():.0f} s left", flush=True)
            self.save()
            return
        print(f"==> {name} ({self.left():.0f} s left)", flush=True)
        start = time.monotonic()
        try:
            fn()
            self.report["phases"][name] = {"seconds": round(time.monotonic() - start, 1)}
        except Exception as exc:  # noqa: BLE001 - one failed phase must not lose the others' results
            self.report["phases"][name] = {"failed": f"{type(exc).__name__}: {exc}",
                                           "seconds": round(time.monotonic() - start, 1)}
            self.report["errors"][name] = traceback.format_exc()
            print(traceback.format_exc(), file=sys.stderr, flush=True)
        self.save()

    def save(self) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        tmp = self.out / "report.json.tmp"
        tmp.write_text(json.dumps(self.report, indent=1) + "\n")
        tmp.replace(self.out / "report.json")
        (self.out / "report.md").write_text(report_md.render(self.report))


def _headers(args: argparse.Namespace) -> tuple[gguf_headers.Header, gguf_headers.Header]:
    folder = Path(args.headers)
    if not (folder / "demo-target.gguf.gz").is_file():
        if not args.dry_run:
            raise FileNotFoundError(f"{folder} holds no headers: run packaging/gpu_kit/prepare.sh before the GPU run")
        from app import paths

        gguf_headers.extract_demo(paths.models_dir(), folder)  # the dry run makes its own
    return (gguf_headers.load(folder / "demo-target.gguf.gz"), gguf_headers.load(folder / "demo-draft.gguf.gz"))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--dry-run", action="store_true")
    parser.add_argument("--budget-s", type=float, default=float(os.environ.get("GPU_CHECK_BUDGET_S", 420)))
    parser.add_argument("--headers", default=str(HERE / "carry" / "headers"))
    parser.add_argument("--models", type=Path,
                        default=Path(os.environ.get("GPU_CHECK_MODELS", "/tmp/specchat-gpu-kit")))
    parser.add_argument("--traces", type=Path, default=HERE / "acceptance_traces.json")
    parser.add_argument("--native", type=Path,
                        default=Path(os.environ.get("GPU_KIT_NATIVE", HERE / "carry" / "native")),
                        help="llama.cpp's llama-completion and llama-speculative-simple, built from the pinned sdist")
    parser.add_argument("--phases", default=",".join(PHASES),
                        help="comma-separated phases to run, in their fixed order (a later window's experiments "
                             "need only environment,synthesize)")
    args = parser.parse_args(argv)
    chosen = set(args.phases.split(","))
    if not chosen <= set(PHASES):
        parser.error(f"unknown phases {sorted(chosen - set(PHASES))}; the phases are {', '.join(PHASES)}")
    plan = Plan(args.dry_run)
    run = Run(args.out, args.budget_s, plan)
    rep = run.report
    models: dict[str, Path] = {}

    from app.llama_backend import devices as llama_devices

    def environment() -> None:
        build = llama_devices.build_spec()
        caps = llama_devices.capabilities()
        rep["backend"] = build.runtime
        rep["devices"] = [{"name": d.name, "type": d.type, "description": d.description, "free_bytes": d.free_bytes,
                           "total_bytes": d.total_bytes} for d in llama_devices.list_devices()]
        rep["llama_backends"] = list(caps.backends)
        rep["carry_bytes"] = int(os.environ.get("GPU_KIT_CARRY_BYTES") or carry_size.carry_bytes(exclude=args.out))
        if not args.dry_run and build.runtime != "cuda":
            raise RuntimeError(f"expected a CUDA device, llama.cpp sees {rep['devices']} (backends {caps.backends})")

    def synthesize() -> None:
        target, draft = _headers(args)
        sizes = {}
        specs = {**synth_gguf.demo_specs(target, draft, plan.scale), **synth_gguf.agreeing_specs(draft, plan.scale)}
        for name, spec in specs.items():
            path = args.models / f"{name}{'-dry' if plan.dry else ''}.gguf"
            meta = path.with_suffix(".json")
            fresh = path.is_file() and meta.is_file() and json.loads(meta.read_text()) == synth_gguf.meta(spec)
            if not fresh:
                synth_gguf.write(spec, path)
            models[name] = path
            sizes[name] = {"bytes": path.stat().st_size, "layers": spec.config.n_layer, "n_embd": spec.config.n_embd,
                           "tensors": len(spec.tensors)}
        rep["synthetic_models"] = sizes

    def memory() -> None:
        build = llama_devices.build_spec()
        rep["memory"] = []
        for name, path in models.items():
            if name not in SHAPES:
                continue
            if run.left() < 20:
                rep["memory_cut_short"] = f"stopped before {name}: time budget"
                break
            rep["memory"] += memory_check.grid({name: path}, plan.contexts, build)
            run.save()
        rows = rep["memory"]
        rep["memory_within_5pct"] = all(r["within_5pct"] for r in rows) if rows else None

    def costs() -> None:
        rep["verify_ms"], rep["identity"] = {}, {}
        for name, path in models.items():
            got = device_costs.measure(path, plan.rows, plan.reps, plan.identity_rows.get(name), plan.threads)
            rep["verify_ms"][name] = {str(k): v for k, v in got["verify_ms"].items()}
            if "identity" in got:
                rep["identity"][name] = {fa: {str(k): v for k, v in rows.items()}
                                         for fa, rows in got["identity"].items()}
            run.save()

    def engine() -> None:
        rep["engine"], rep["engine_overhead_pct"] = {}, {}
        for pair, (target, draft) in PAIRS.items():
            verify = {int(k): v for k, v in rep["verify_ms"][target].items()}
            draft_ms = rep["verify_ms"][draft]["1"]
            rep["engine"][pair] = engine_runs.run(models[target], models[draft], plan.n_predict, plan.threads,
                                                  verify, draft_ms, short=plan.dry)
            rep["engine_overhead_pct"][pair] = {m: r["engine_overhead_pct"] for m, r in rep["engine"][pair].items()}
            run.save()

    def speedups() -> None:
        traces = json.loads(args.traces.read_text())
        rep["traces"] = {"file": str(args.traces.relative_to(ROOT)) if args.traces.is_relative_to(ROOT) else
                         str(args.traces), "pair": traces["pair"], "recorded": traces["recorded"],
                         "replies": len(traces["traces"]), "tokens": sum(t["n_reply"] for t in traces["traces"])}
        rep["predicted_speedup"] = {}
        for pair in REPLAYED:
            target, draft = PAIRS[pair]
            if target not in rep.get("verify_ms", {}):
                continue
            steps = {m: r["outside_llama_ms_per_step"] for m, r in rep.get("engine", {}).get(pair, {}).items()}
            c = replay.Costs({int(k): v for k, v in rep["verify_ms"][target].items()}, rep["verify_ms"][draft]["1"],
                             steps)
            rep["predicted_speedup"][pair] = replay.predict(traces["traces"], c, traces["spec_defaults"]["draft_max"])

    def governor() -> None:
        rep["governor"] = {
            "engine": {pair: {m: {k: r[k] for k in ("governor", "drafting_at_end", "final_k", "governor_ok",
                                                    "best_fixed_k_speedup_expected", "conditional_acceptance")
                                  if k in r}
                              for m, r in runs.items() if m != "none"}
                       for pair, runs in rep.get("engine", {}).items()},
            "replay": {pair: {m: {k: r[k] for k in ("decisions", "governor_ok", "drafting_pays", "governed",
                                                    "best_fixed", "replies_drafting_at_end")}
                              for m, r in modes.items()}
                       for pair, modes in rep.get("predicted_speedup", {}).items()},
        }

    def serve() -> None:
        # The demo target's shape prices the replies the real 1.5B target wrote; the dry run's costs are the CPU's.
        verify = {int(k): v for k, v in rep["verify_ms"]["target-1.5b"].items()}
        rep["predicted_serve"] = serve_prediction.predict(verify, on_gpu=not plan.dry)

    def native() -> None:
        tools = native_compare.tools_dir(args.native)
        if tools is None:
            rep["native"] = {"skipped": f"no llama.cpp tools in {args.native} (prepare.sh with LLAMA_TOOLS=DIR)"}
            return
        rep["native"] = {}
        pairs = {pair: (models[PAIRS[pair][0]], models[PAIRS[pair][1]]) for pair in native_compare.PAIRS}
        for pair, result, error in native_compare.run_pairs(pairs, tools, args.out, ROOT, n_predict=plan.native_predict,
                                                            repeat=plan.native_repeat, threads=plan.threads,
                                                            left=run.left):
            rep["native"][pair] = result
            if error is not None:
                rep["errors"][f"native {pair}"] = error
            run.save()

    fns = {"environment": environment, "synthesize": synthesize, "memory": memory, "costs": costs, "engine": engine,
           "speedups": speedups, "governor": governor, "serve": serve, "native": native}
    for name, needs in PHASES.items():
        if name in chosen:
            run.phase(name, needs, fns[name])
        if name == "environment" and rep["errors"] and not args.dry_run:
            return 1  # the full-size models on a CPU would only spend the window
    rep["finished"] = time.strftime("%Y-%m-%d %H:%M:%S")
    run.save()
    print((args.out / "report.md").read_text())
    if chosen != set(PHASES):
        return 1 if rep["errors"] else 0
    missing = [k for k in REPORT_FIELDS if k not in rep]
    if missing or rep["errors"]:
        print(f"gpu_check: incomplete report (missing {missing}, failed {list(rep['errors'])})", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
