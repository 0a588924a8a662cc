"""SpecChat's engine in each mode on a synthetic pair at this device's speed: its time outside
llama.cpp per token, and what the governor decided and why, judged against the measured costs.

The synthetic models write nonsense, so acceptance is whatever their text gives: a random draft
rarely agrees with a random target (draft mode should stop drafting), while the loops that random
models fall into make prompt lookup pay (it should keep drafting). The verdict compares the
governor's final state with what the run's own acceptance and the device's costs say.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from device_costs import prompt_tokens

from app.engine.events import FinishEvent, StepEvent
from app.engine.pair_config import PairConfig
from app.engine.session import GenParams, SpecSession
from app.engine.spec_params import COPY_MAX_AUTO
from app.engine.speculative import SpecParams

MODES = ("none", "lookup", "draft", "hybrid")
# The app's default speculation settings (long copies on "auto": on where the target is on a GPU), and
# lookup once more with long copies off, to show what they add on this device.
NO_COPIES = "lookup-no-copies"
EVIDENCE = 8  # drafted tokens before a run's acceptance says anything


def _prompt(passage: int) -> list[int]:
    """A random passage said four times, then new text: something for prompt lookup to find."""
    return prompt_tokens(passage, seed=3) * 4 + prompt_tokens(passage // 2, seed=4)


def _pays(acceptance: float, verify_ms: dict[int, float], draft_ms: float, k_max: int) -> float:
    """Best expected speedup over fixed K <= k_max if every draft token were accepted with prob a."""
    plain = verify_ms[1]
    best = 0.0
    for k in range(1, k_max + 1):
        rows = min(k + 1, max(verify_ms))
        verify = verify_ms[rows] * (k + 1) / rows
        tokens = sum(acceptance**i for i in range(k + 1))
        best = max(best, tokens * plain / (k * draft_ms + verify))
    return best


def run(target: Path, draft: Path, n_predict: int, threads: int, verify_ms: dict[int, float],
        draft_ms: float, short: bool = False) -> dict:
    spec = SpecParams(copy_max=COPY_MAX_AUTO)
    config = PairConfig(target, draft, n_gpu_layers=-1, n_gpu_layers_draft=-1, n_ctx=4096, n_threads=threads)
    out: dict = {}
    prompt = _prompt(24 if short else 48)
    with SpecSession(config) as session:
        for mode in MODES:  # an untimed warm-up of every path first
            _generate(session, prompt[:32], GenParams(mode=mode, n_predict=4 if short else 8, spec=spec))
        for mode in (*MODES, NO_COPIES):
            run_spec = replace(spec, copy_max=0) if mode == NO_COPIES else spec
            params = GenParams(mode="lookup" if mode == NO_COPIES else mode, n_predict=n_predict, spec=run_spec)
            finish, steps = _generate(session, prompt, params)
            s = finish.stats
            drafting = [e for e in steps if e.drafted]
            accepted = sum(e.accepted for e in drafting)
            rejections = sum(e.accepted < len(e.drafted) for e in drafting)
            acceptance = (accepted + 1) / (accepted + rejections + 2)
            entry = {
                "tokens": s.n_tokens, "tokens_per_second": round(s.tokens_per_second, 2),
                "decode_ms": round(s.decode_ms, 2), "outside_llama_ms": round(s.python_ms, 2),
                "engine_overhead_pct": round(100 * s.python_ms / s.decode_ms, 2) if s.decode_ms else None,
                "outside_llama_ms_per_token": round(s.python_ms / max(s.n_tokens, 1), 4),
                "outside_llama_ms_per_step": round(s.python_ms / max(s.steps, 1), 4),
                "steps": s.steps, "drafted": s.drafted, "accepted": s.accepted,
                "acceptance_rate": round(s.acceptance_rate, 3),
                "drafting_at_end": s.speculation_active, "final_k": s.final_k,
                "copy_max": session.resolve_spec(run_spec).copy_max,
                "sure_copies": session.resolve_spec(run_spec).sure_copies,
                "governor": [{"step": e.step, "action": e.action, "k": [e.k_before, e.k_after], "reason": e.reason}
                             for e in s.governor],
            }
            if mode != "none":
                cost = draft_ms if mode != "lookup" else 0.0
                best = _pays(acceptance, verify_ms, cost, spec.draft_max)
                entry["conditional_acceptance"] = round(acceptance, 3)
                entry["best_fixed_k_speedup_expected"] = round(best, 3)
                # Judged only with evidence (a drafter that proposed next to nothing gave the governor
                # none) and in clear cases: within 10% of plain, either decision is right.
                if s.drafted < EVIDENCE:
                    entry["governor_ok"] = None
                else:
                    entry["governor_ok"] = (s.speculation_active if best > 1.1
                                            else (not s.speculation_active) if best < 0.9 else True)
            out[mode] = entry
    plain = out["none"]["tokens_per_second"]
    for mode in out:
        out[mode]["speedup_vs_none"] = round(out[mode]["tokens_per_second"] / plain, 3) if plain else None
    return out


def _generate(session: SpecSession, prompt: list[int], params: GenParams) -> tuple[FinishEvent, list[StepEvent]]:
    steps: list[StepEvent] = []
    for event in session.generate(prompt, params):
        if isinstance(event, StepEvent):
            steps.append(event)
        elif isinstance(event, FinishEvent):
            return event, steps
    raise RuntimeError("the engine ended without a FinishEvent")
