"""How far the target's own rounding moves one logit gap: measured where a greedy reply parted from plain decoding.

With repacked CPU weights (llama.cpp's default) a row's logits depend a little on the batch it is computed in,
so a speculative reply, whose rows are computed in verify batches, can part from one-token decoding. The bench
calls a parting a near-tie below a fixed margin (NEAR_TIE_MARGIN); this measures instead, at the very position,
the gap between the plain token and the speculative one computed three ways on the same tokens: one token at
a time (as plain decoding), the whole context in one pass, and its last BATCH_ROWS tokens as one verify-sized
batch. If the gap moves by more than plain decoding's own gap, the parting is within measured rounding: the
two replies are both the target's, computed in different batches (docs/BENCHMARKS.md, run 13).

Given the speculative run's own steps (`layout`), it also replays them with app.engine.parting.replay_row (the
replay the chat window's parting check runs too): the prompt prefilled as the engine does, then every verify batch
`[last token, *drafted]` decoded and rolled back to the accepted rows, up to the step that emitted the parting
token, whose row it reads. When that row's choice is the speculative token, the parting
is reproduced: the target itself picks that token when its cache was built in those batches, so the reply is
the target's own and no engine fault (a wrong row, a stale cache) is needed to explain it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from app.engine.parting import Batch, replay_row
from app.engine.session import SpecSession
from app.llama_backend.core import LlamaContext

BATCH_ROWS = 32  # the longest verify the CPU default runs (a sure copy of 31 tokens)


@dataclass(frozen=True)
class RoundingCheck:
    gaps: dict[str, float]  # logit(plain token) - logit(speculative token), by how the position was computed
    spread: float  # max - min of those gaps
    within: bool  # plain decoding's gap (one_token) is smaller than the spread: rounding can flip it
    # The run's own batches replayed: does the target pick the speculative token there? None: no layout given.
    reproduced: bool | None = None


def _gap(logits: np.ndarray, plain_token: int, spec_token: int) -> float:
    return float(logits[plain_token] - logits[spec_token])


def prefilled(session: SpecSession, prompt: Sequence[int]) -> LlamaContext:
    """The target's context from a fresh cache holding `prompt` with its last row's logits kept, as the engine
    leaves it before a reply: where app.engine.parting.replay_row starts replaying a run's batches."""
    ctx = session.target_ctx
    session.clear_caches()
    ctx.decode(list(prompt), logits_for="last")
    ctx.keep_last_logits()
    return ctx


def measure(session: SpecSession, prompt: Sequence[int], reply: Sequence[int], position: int, plain_token: int,
            spec_token: int, steps: Sequence[Batch] = ()) -> RoundingCheck:
    """Recompute the target's gap at reply index `position` (reply[:position] as context); with the speculative
    run's `steps`, also in its own batches. Leaves the caches empty."""
    ctx = session.target_ctx
    context = list(prompt) + list(reply[:position])
    gaps: dict[str, float] = {}
    try:
        session.clear_caches()
        ctx.decode(list(prompt), logits_for="last")  # the prompt in one pass, then one token at a time
        for token in reply[:position]:
            ctx.decode([token], logits_for="last")
        gaps["one_token"] = _gap(ctx.logits(-1), plain_token, spec_token)
        session.clear_caches()
        ctx.decode(context, logits_for="last")
        gaps["one_pass"] = _gap(ctx.logits(-1), plain_token, spec_token)
        rows = min(BATCH_ROWS, len(context), ctx.max_rows)
        session.clear_caches()
        ctx.decode(context[:-rows], logits_for="none")
        ctx.decode(context[-rows:], logits_for="all")
        gaps[f"batch_{rows}"] = _gap(ctx.logits(rows - 1), plain_token, spec_token)
        reproduced = None
        if steps:
            row = replay_row(prefilled(session, prompt), len(prompt), [*prompt, *reply], steps, position)
            gaps["engine_batches"] = _gap(row, plain_token, spec_token)
            reproduced = int(np.argmax(row)) == spec_token
    finally:
        session.clear_caches()
    spread = max(gaps.values()) - min(gaps.values())
    return RoundingCheck(gaps, spread, abs(gaps["one_token"]) < spread, reproduced)
