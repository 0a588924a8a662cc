"""Where a greedy speculative reply parts from plain decoding, and whether the target itself chose it there.

With repacked CPU weights (llama.cpp's default) a row's logits depend a little on the batch that computes
it, so a speculative reply, whose rows come from verify batches, can part from one-token decoding where the
target's two best tokens are close. A fixed margin cannot tell that apart from an engine fault: on some CPUs
the gap moves by 0.18 with the batch shape. Replaying the speculative run's own batches can: the target's
cache rebuilt in exactly those batches, its row at the parting read again. When its argmax is the speculative
token, the reply is the target's own output in those batches; when not, the engine emitted a token its own
batches do not compute, which is a fault (docs/BENCHMARKS.md, runs 13-14).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from app.engine.events import Divergence, FinishEvent, StepEvent
from app.llama_backend.core import LlamaContext

NEAR_TIE_MARGIN = 0.1  # logit gap under which batched vs one-token kernels may legitimately flip


def first_divergence(plain: FinishEvent, other: FinishEvent) -> Divergence | None:
    """Where `other` first differs from the plain run (a shorter reply parts where it ends), with the plain
    run's top-two margin there (its `margins`, from a run with track_margins)."""
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


@dataclass(frozen=True, slots=True)
class Batch:
    """One step of a speculative run, as much as replaying its verify batch needs (from its StepEvent)."""

    position: int  # reply index of the step's first token
    drafted: tuple[int, ...]
    accepted: int
    from_prompt: bool  # the row came from the prompt's pass: no batch of its own
    padded: int = 0  # rows of padding after the draft (steady shapes): they set the batch's shape too


def layout(steps: Iterable[StepEvent]) -> tuple[Batch, ...]:
    return tuple(Batch(s.position, s.drafted, s.accepted, s.from_prompt, s.padded) for s in steps)


class ReplayCancelled(Exception):
    """Stop was pressed while a replay ran."""


def replay_row(ctx: LlamaContext, prompt_len: int, tokens: Sequence[int], steps: Sequence[Batch], position: int,
               cancel: threading.Event | None = None) -> np.ndarray:
    """The target's logits for reply index `position`, computed in the batches the speculative run decoded.

    `ctx` must hold `tokens[:prompt_len]` (the prompt) and nothing after it, with the prompt pass's last row
    kept (`keep_last_logits`), as the engine leaves it before a reply. Then each verify `[last token, *drafted]`
    is decoded and rolled back to its accepted rows, up to the step that emitted `position`. `tokens` is prompt
    and reply; the reply must agree with the run's accepted drafts before `position`. A verify padded to
    steady shapes is replayed with its padding: the rows a batch holds decide how its kernels round."""
    for b in steps:
        if b.position > position:
            break
        if cancel is not None and cancel.is_set():
            raise ReplayCancelled
        if b.from_prompt:
            if b.position == position:
                kept = ctx.kept_logits(prompt_len)
                if kept is None:
                    raise ValueError("the prompt's pass left no logits to replay the reply's first token from")
                return kept.copy()
            continue
        at = prompt_len + b.position
        agree = min(b.accepted, position - b.position)  # the parting step's own drafts differ from `position` on
        if tuple(tokens[at:at + agree]) != b.drafted[:agree]:
            raise ValueError(f"step at reply position {b.position}: its accepted drafts are not the reply's tokens")
        n_before = ctx.n_past
        ctx.decode([tokens[at - 1], *b.drafted, *b.drafted[-1:] * b.padded], logits_for="all")
        if position <= b.position + b.accepted:
            return ctx.logits(position - b.position).copy()
        ctx.truncate(n_before + 1 + b.accepted)
    raise ValueError(f"the run's steps do not reach reply position {position}")


@dataclass(frozen=True, slots=True)
class PartingReplay:
    """The speculative run's own batches replayed up to the parting."""

    gap: float  # logit(plain token) - logit(speculative token) in those batches: below 0, the target picks spec's
    reproduced: bool  # the replayed row's argmax is the speculative token: the target's own choice there


@dataclass(frozen=True, slots=True)
class NotReplayed:
    """Why a parting was not replayed (the user sees the margin's verdict with this reason)."""

    why: str


def replay_parting(ctx: LlamaContext, prompt: Sequence[int], reply: Sequence[int], steps: Sequence[Batch],
                   divergence: Divergence, cancel: threading.Event | None = None) -> PartingReplay | NotReplayed:
    """Replay a finished speculative run's batches on the cache it ran on: its prompt is still cached (as
    computed then: a chat's earlier turns were decoded in their own replies' batches, which a fresh prefill
    would not repeat), so only what followed is dropped. Not replayed where the parting has no speculative
    token (a reply ended there), the cache no longer holds that prompt, or `cancel` was set. The cache is
    left holding the prompt and the reply up to about the parting, a prefix the next turn reuses."""
    if divergence.spec_token < 0 or divergence.plain_token < 0:
        return NotReplayed("one reply ended there")
    n = len(prompt)
    if ctx.n_past < n or ctx.tokens[:n] != list(prompt) or ctx.kept_logits(n) is None:
        return NotReplayed("the cache no longer holds the prompt")
    ctx.truncate(n)
    try:
        row = replay_row(ctx, n, [*prompt, *reply], steps, divergence.position, cancel)
    except ReplayCancelled:  # the cache holds the prompt and part of the reply, which the next prefix match reuses
        return NotReplayed("stopped before the replay finished")
    gap = float(row[divergence.plain_token] - row[divergence.spec_token])
    return PartingReplay(gap, int(np.argmax(row)) == divergence.spec_token)
