"""The research bench's `copy_bound` section: measured on the loaded pair after `specchat bench`'s timed runs
(an app.cli.bench.BenchAddOn), printed under its table, and optionally recorded as a replay corpus."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.cli.bench import BenchPrompt, BenchRun, machine_description
from app.engine.session import SpecSession
from app.engine.speculative import SpecParams
from tools.bench import bench_replay, copy_bound, native_replay, policy_replay


@dataclass(frozen=True)
class CopyBoundReport:
    replay_out: Path | None = None  # also write the replies and costs there, a corpus for bench-replay
    replay_name: str | None = None  # the corpus's name (default: replay_out's name without .json)
    key: str = "copy_bound"

    def measure(self, session: SpecSession, prompts: Sequence[BenchPrompt], runs: Sequence[BenchRun],
                spec: SpecParams) -> dict[str, Any]:
        """Each prompt's clairvoyant copy bound (copy_bound.py) for its plain reply, with this machine's row costs,
        timed after the runs (untimed for them) over the longest prompt; SpecChat's lookup replayed on the same
        reply and costs (policy_replay.py), to tell the policy's share of the gap from the wall clock's noise; and
        llama.cpp's own n-gram types replayed alike (native_replay.py)."""
        tokenized = {p.id: session.chat_prompt(p.chat()) for p in prompts}
        costs = copy_bound.measure_row_costs(session, max(tokenized.values(), key=len))
        plain = {r.prompt_id: r for r in runs if r.mode == "none" and r.engine == "specchat"}
        ids = [pid for pid in tokenized if pid in plain]
        is_eog = session.target_ctx.model.is_eog
        if self.replay_out is not None:
            eog = {t for tokens in tokenized.values() for t in tokens if is_eog(t)}
            bench_replay.write_corpus(self.replay_out, bench_replay.corpus(
                tokenized, plain, costs, sorted(eog), spec, machine_description(),
                self.replay_name or self.replay_out.stem))
        native = {}
        for pid in ids:
            end = policy_replay.template_end(tokenized[pid], is_eog)
            native[pid] = {mode: round(native_replay.replay(
                mode, tokenized[pid], plain[pid].token_ids, plain[pid].finish_reason == "stop", plain[pid].n_predict,
                end).speedup(costs), 3) for mode in native_replay.REPLAYED}
        return {"key": copy_bound.KEY, "row_costs": {str(r): round(c, 3) for r, c in costs.items()},
                "prompts": {pid: round(copy_bound.bound(tokenized[pid], plain[pid].token_ids, costs), 3)
                            for pid in ids},
                "lookup_replay": {pid: round(policy_replay.replayed_speedup(
                    tokenized[pid], plain[pid].token_ids, plain[pid].finish_reason == "stop", costs, spec,
                    plain[pid].n_predict, is_eog), 3)
                    for pid in ids},
                "llama_cpp_replay": native}

    def format(self, section: dict[str, Any], runs: Sequence[BenchRun]) -> list[str]:
        lines = ["A target pass of r rows, in one-row passes: "
                 + ", ".join(f"{r}: {c:.2f}" for r, c in section["row_costs"].items()),
                 f"Copy bound (a drafter that knows the reply, copies context text after {section['key']} matching "
                 "tokens and sizes each verify for these costs; x plain steps): "
                 + ", ".join(f"{pid} {b:.2f}x" for pid, b in section["prompts"].items())]
        replayed = section.get("lookup_replay", {})
        if replayed:
            lines.append("SpecChat's lookup replayed on the same replies and costs (x plain steps): "
                         + ", ".join(f"{pid} {b:.2f}x" for pid, b in replayed.items()))
        for pid, types in section.get("llama_cpp_replay", {}).items():
            best = max(types, key=lambda m: types[m])
            lines.append(f"llama.cpp's n-gram types replayed alike on {pid}: "
                         + ", ".join(f"{m} {x:.2f}x" for m, x in types.items())
                         + (f"; lookup / {best}: {replayed[pid] / types[best]:.2f}x" if pid in replayed else ""))
        return lines
