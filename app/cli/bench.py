"""`specchat bench`: plain, lookup and draft decoding on the same prompts, interleaved.

Each round runs every mode on a prompt back to back, so all modes see the same machine state; the
report quotes medians over rounds and ratios against `none` measured in the same round.
"""

from __future__ import annotations

import argparse
import importlib.resources
import json
import platform
import statistics
import sys
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from app import settings as settings_mod
from app.cli.options import gen_params, pair_config, resolve_models
from app.engine.events import Divergence, FinishEvent
from app.engine.session import GenParams, SpecSession

NEAR_TIE_MARGIN = 0.1  # logit gap under which batched vs one-token kernels may legitimately flip


@dataclass(frozen=True)
class BenchPrompt:
    id: str
    prompt: str


@dataclass
class BenchRun:
    prompt_id: str
    mode: str
    tokens: int
    tokens_per_second: float
    speedup: float
    acceptance_rate: float
    mean_accepted_length: float
    identical: bool
    divergence: dict[str, Any] | None
    engine_overhead: float  # share of decode time spent outside llama_decode (Python: drafting logic,
    # verification, sampling, bookkeeping)
    governor: list[str] = field(default_factory=list)
    token_ids: list[int] = field(default_factory=list, repr=False)
    rounds_tps: list[float] = field(default_factory=list)


def load_prompts(path: Path | None) -> list[BenchPrompt]:
    if path is None:
        text = importlib.resources.files("app").joinpath("data/bench_prompts.jsonl").read_text(encoding="utf-8")
        source = "the built-in suite"
    else:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise ValueError(f"Cannot read the prompts file {path}: {exc.strerror}") from exc
        source = str(path)
    prompts = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
            prompts.append(BenchPrompt(str(obj["id"]), str(obj["prompt"])))
        except (json.JSONDecodeError, KeyError, TypeError) as exc:
            raise ValueError(f"{source}, line {number}: expected a JSON object with \"id\" and \"prompt\" "
                             f"({exc.__class__.__name__}: {exc})") from exc
    if not prompts:
        raise ValueError(f"{source} holds no prompts")
    return prompts


def first_divergence(plain: FinishEvent, other: FinishEvent) -> Divergence | None:
    a, b = plain.tokens, other.tokens
    for i in range(min(len(a), len(b))):
        if a[i] != b[i]:
            margin = plain.margins[i] if i < len(plain.margins) else float("nan")
            return Divergence(i, a[i], b[i], margin, margin < NEAR_TIE_MARGIN)
    if len(a) != len(b):
        i = min(len(a), len(b))
        margin = plain.margins[i] if i < len(plain.margins) else float("nan")
        return Divergence(i, a[i] if i < len(a) else -1, b[i] if i < len(b) else -1, margin,
                          margin < NEAR_TIE_MARGIN)
    return None


def run_once(session: SpecSession, prompt: list[int], params: GenParams) -> FinishEvent:
    for event in session.generate(prompt, params):
        if isinstance(event, FinishEvent):
            return event
    raise RuntimeError("the engine ended without a FinishEvent")


def bench(session: SpecSession, prompts: list[BenchPrompt], params: GenParams, modes: list[str],
          repeat: int = 1, progress: Any = None) -> Iterator[BenchRun]:
    """Yield one BenchRun per prompt and mode (none first), medians over `repeat` interleaved rounds."""
    modes = ["none"] + [m for m in modes if m != "none"]
    for item in prompts:
        tokens = session.chat_prompt([{"role": "user", "content": item.prompt}])
        results: dict[str, list[FinishEvent]] = {m: [] for m in modes}
        for _ in range(repeat):
            for mode in modes:
                results[mode].append(run_once(session, tokens, params.with_mode(mode)))
                if progress is not None:
                    progress.update(1)
        plain_tps = [r.stats.tokens_per_second for r in results["none"]]
        for mode in modes:
            runs = results[mode]
            last = runs[-1]
            ratios = [r.stats.tokens_per_second / p for r, p in zip(runs, plain_tps, strict=True) if p > 0]
            div = first_divergence(results["none"][-1], last) if params.sampling.greedy else None
            yield BenchRun(
                prompt_id=item.id,
                mode=mode,
                tokens=last.stats.n_tokens,
                tokens_per_second=statistics.median(r.stats.tokens_per_second for r in runs),
                speedup=statistics.median(ratios) if ratios else 0.0,
                acceptance_rate=last.stats.acceptance_rate,
                mean_accepted_length=last.stats.mean_accepted_length,
                identical=div is None,
                divergence=asdict(div) if div else None,
                engine_overhead=statistics.median(r.stats.python_ms / r.stats.decode_ms for r in runs
                                                  if r.stats.decode_ms > 0),
                governor=[f"step {g.step}: {g.action}" for g in last.stats.governor],
                token_ids=list(last.tokens),
                rounds_tps=[r.stats.tokens_per_second for r in runs],
            )


def machine_description() -> dict[str, Any]:
    import psutil

    from app.llama_backend import supports_gpu_offload

    return {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_physical": psutil.cpu_count(logical=False),
        "cpu_logical": psutil.cpu_count(),
        "ram_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "gpu_offload": supports_gpu_offload(),
        "python": platform.python_version(),
    }


def summarise(runs: list[BenchRun]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for mode in dict.fromkeys(r.mode for r in runs):
        mine = [r for r in runs if r.mode == mode]
        out[mode] = {
            "median_tokens_per_second": statistics.median(r.tokens_per_second for r in mine),
            "median_speedup": statistics.median(r.speedup for r in mine),
            "min_speedup": min(r.speedup for r in mine),
            "identical": sum(r.identical for r in mine),
            "prompts": len(mine),
            "median_engine_overhead": statistics.median(r.engine_overhead for r in mine),
        }
    return out


def run_bench_cli(args: argparse.Namespace) -> int:
    from tqdm import tqdm


    settings, _warning = settings_mod.load()
    prompts = load_prompts(args.prompts)
    target, draft = resolve_models(args, settings)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if "draft" in modes and draft is None:
        modes.remove("draft")
        print("specchat: note: no draft model, so the draft mode is skipped", file=sys.stderr)
    params = gen_params(args, settings, draft is not None)
    params = GenParams(params.mode, params.n_predict if args.n_predict else 128, params.sampling, params.spec,
                       track_margins=True)
    cfg = pair_config(args, settings, target, draft)
    runs: list[BenchRun] = []
    reference: dict[str, float] = {}
    with SpecSession(cfg) as session:
        total = len(prompts) * len(set(modes) | {"none"}) * args.repeat
        with tqdm(total=total, desc="bench", unit="run", file=sys.stderr, disable=None) as bar:
            for run in bench(session, prompts, params, modes, args.repeat, bar):
                runs.append(run)
        if args.compare_llama_cpp_python:
            reference = _reference_lookup(session, prompts, params, cfg)
    report = {
        "machine": machine_description(),
        "models": {"target": str(target), "draft": str(draft) if draft else None},
        "settings": {"n_predict": params.n_predict, "sampling": asdict(params.sampling),
                     "spec": asdict(params.spec), "n_ctx": cfg.n_ctx, "n_threads": cfg.n_threads,
                     "flash_attn": cfg.flash_attn, "repeat": args.repeat},
        "runs": [{k: v for k, v in asdict(r).items() if k != "token_ids"} for r in runs],
        "summary": summarise(runs),
    }
    if reference:
        report["llama_cpp_python_prompt_lookup"] = reference
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(format_report(runs, report))
    return 0


def _reference_lookup(session: SpecSession, prompts: list[BenchPrompt], params: GenParams,
                      cfg: Any) -> dict[str, dict[str, float]]:
    """llama-cpp-python's own LlamaPromptLookupDecoding on the same prompts, for comparison."""
    from app.llama_backend import reference_prompt_lookup_tps

    tokenized = {p.id: session.chat_prompt([{"role": "user", "content": p.prompt}]) for p in prompts}
    return reference_prompt_lookup_tps(cfg.target, tokenized, params.n_predict, cfg.n_ctx, cfg.n_threads)


def format_report(runs: list[BenchRun], report: dict[str, Any]) -> str:
    lines = [f"{'prompt':<16} {'mode':<7} {'tokens':>6} {'tok/s':>7} {'speedup':>8} {'accept':>7} "
             f"{'identical':<28}"]
    for r in runs:
        if r.identical:
            same = "yes"
        else:
            d = r.divergence or {}
            kind = "near-tie" if d.get("near_tie") else "REAL DIFFERENCE"
            same = f"no @{d.get('position')} ({kind}, margin {d.get('margin', float('nan')):.4f})"
        lines.append(f"{r.prompt_id:<16} {r.mode:<7} {r.tokens:>6} {r.tokens_per_second:>7.2f} "
                     f"{r.speedup:>7.2f}x {r.acceptance_rate:>7.1%} {same:<28}")
    lines.append("")
    for mode, s in report["summary"].items():
        lines.append(f"{mode:<7} median {s['median_tokens_per_second']:.2f} tok/s, median speedup "
                     f"{s['median_speedup']:.2f}x (min {s['min_speedup']:.2f}x), identical {s['identical']}/"
                     f"{s['prompts']}, engine overhead {s['median_engine_overhead']:.2%}")
    ref = report.get("llama_cpp_python_prompt_lookup")
    if ref:
        lines.append("")
        lines.append("llama-cpp-python's own Llama (same prompts, greedy; first to last streamed token):")
        ours = {r.prompt_id: r.tokens_per_second for r in runs if r.mode == "lookup"}
        for prompt_id, row in ref.items():
            lines.append(f"{prompt_id:<16} plain {row.get('plain', 0):.2f} tok/s, LlamaPromptLookupDecoding "
                         f"{row.get('prompt_lookup', 0):.2f} tok/s; SpecChat lookup {ours.get(prompt_id, 0):.2f} tok/s")
    return "\n".join(lines)
