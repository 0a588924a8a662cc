"""Exactness by replay: every token a run emitted is the target's own choice in the run's own batches.

A row's logits depend on the batch that computes it (repacked CPU kernels switch at 4 rows, GPU kernels have
switches of their own), so a speculative reply can part from one-token decoding without any fault. What the
engine promises is that each emitted token is what the target chooses on the rows the run decoded. That is
checked here exactly, with no margin: the target's cache is rebuilt in the run's own verify batches
(`[last context token, *drafted, *padding]`, rolled back to the accepted rows, as `parting.replay_row` does,
but once for the whole run), and at every emitted position (accepted drafts, corrections, bonus tokens) the
token must equal the replayed row's choice: its argmax (greedy) or its coupled sample with the run's seed at
that sequence position (sampled), after penalties recounted from scratch over the row's own context where the
run had penalties. The replay follows whatever batch shapes the run used (a governor's timing-driven K, padding,
copies), so no schedule can change the verdict, and deterministic kernels give the replay the run's own bits:
any engine fault that changes a token (a stale cache row, a row judged with the wrong context) is caught.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from app.engine.events import FinishEvent, StepEvent
from app.engine.parting import Batch, layout
from app.engine.sampling import SampleNoise, SamplingParams, distribution
from app.engine.target_context import TargetContext


@dataclass(frozen=True, slots=True)
class Mismatch:
    """The first emitted token that is not the target's choice on its replayed row."""

    position: int  # reply index
    emitted: int  # what the run emitted there (-1: the run stopped there on an end of generation)
    replayed: int  # the target's choice on the replayed row
    step: int  # the step (StepEvent.step) that emitted it


def prefill(ctx: TargetContext, prompt: Sequence[int]) -> None:
    """Make `ctx` hold the prompt as a fresh engine prefill does: in n_batch chunks, the last row's logits
    kept (the reply's first token is chosen from them)."""
    ctx.truncate(0)
    for _ in ctx.decode_batches(list(prompt)):
        pass
    ctx.keep_last_logits()


def recount_penalties(logits: np.ndarray, context: Sequence[int], sampling: SamplingParams) -> np.ndarray:
    """llama.cpp's penalties with counts recomputed from scratch over the context's last repeat_last_n tokens,
    in float32 as llama.cpp computes them (the reference for the engine's incremental window)."""
    out = np.array(logits, dtype=np.float32)
    if not sampling.penalized:
        return out
    repeat, freq, presence = (np.float32(v) for v in (sampling.repeat_penalty, sampling.frequency_penalty,
                                                        sampling.presence_penalty))
    for token, count in Counter(context[-sampling.repeat_last_n:]).items():
        x = out[token]
        x = x * repeat if x <= 0 else x / repeat
        out[token] = x - (np.float32(count) * freq + presence)
    return out


def replayed_rows(ctx: TargetContext, prompt: Sequence[int], reply: Sequence[int], batches: Sequence[Batch],
                  extra: bool = False) -> Iterator[tuple[int, int, np.ndarray]]:
    """(reply position, step, logits) for each emitted position, in order, from one replay of the run's batches.

    `ctx` must hold the prompt, the prompt pass's last row kept (`keep_last_logits`), as the run found it: a
    cached prefix as the run reused it, or a fresh `prefill`. What follows the prompt is dropped. A step's
    tokens are the reply from its position to the next step's; `extra` also yields the row after the reply's
    last token where the last step computed it (the row that chose the end of generation of a stopped run).
    The rows are views valid until the next one is yielded."""
    n = len(prompt)
    if ctx.tokens[:n] != list(prompt) or ctx.kept_logits(n) is None:
        raise ValueError("the context does not hold the prompt with its pass's logits kept")
    ctx.truncate(n)
    if batches and batches[0].position != 0:
        raise ValueError("the run's first step does not start the reply")
    for index, b in enumerate(batches):
        end = batches[index + 1].position if index + 1 < len(batches) else len(reply)
        if not 0 <= end - b.position <= b.accepted + 1:
            raise ValueError(f"step {index} emitted {end - b.position} tokens, not 0 to {b.accepted + 1}")
        agree = min(b.accepted, end - b.position)
        if tuple(reply[b.position:b.position + agree]) != b.drafted[:agree]:
            raise ValueError(f"step {index}: the drafts it accepted are not the reply's tokens")
        last = end + 1 if extra and index + 1 == len(batches) else end  # yield rows for positions below this
        if b.from_prompt:
            if b.position != 0:
                raise ValueError(f"step {index} took the prompt pass's row at reply position {b.position}")
            kept = ctx.kept_logits(n)
            assert kept is not None
            if last > 0:
                yield 0, index, kept
            continue
        # Between steps the cache holds the context but its last token, which leads the next verify.
        before = ctx.n_past
        if b.position == 0 or before != n + b.position - 1:
            raise ValueError(f"step {index} at reply position {b.position} does not follow the steps before it")
        ctx.decode([reply[b.position - 1], *b.drafted, *b.drafted[-1:] * b.padded], logits_for="all")
        for row in range(min(last - b.position, len(b.drafted) + 1)):
            yield b.position + row, index, ctx.logits(row)
        ctx.truncate(before + 1 + b.accepted)  # the rollback: the rejected drafts and the padding go


def first_mismatch(ctx: TargetContext, prompt: Sequence[int], reply: Sequence[int], batches: Sequence[Batch],
                   sampling: SamplingParams | None = None, is_eog: Callable[[int], bool] | None = None
                   ) -> Mismatch | None:
    """The first emitted position whose token is not the target's choice on the run's replayed row, or None.

    `sampling`: the run's (greedy without penalties by default); a sampled run needs its seed. `is_eog`: the
    run stopped on an end of generation, which the row after its last token must choose too."""
    sampling = sampling or SamplingParams()
    noise = None
    if not sampling.greedy:
        if sampling.seed is None:
            raise ValueError("a sampled run can be replayed only with its seed")
        noise = SampleNoise(sampling.seed)
    context = [*prompt, *reply]
    n = len(prompt)
    for position, step, row in replayed_rows(ctx, prompt, reply, batches, extra=is_eog is not None):
        logits = recount_penalties(row, context[:n + position], sampling) if sampling.penalized else row
        if noise is None:
            choice = int(np.argmax(logits))
        else:
            choice = noise.sample(distribution(logits, sampling), n + position)
        if position == len(reply):
            assert is_eog is not None
            if not is_eog(choice):
                return Mismatch(position, -1, choice, step)
        elif choice != reply[position]:
            return Mismatch(position, reply[position], choice, step)
    return None


def check_run(ctx: TargetContext, events: Iterable[object], sampling: SamplingParams | None = None,
              is_eog: Callable[[int], bool] | None = None) -> Mismatch | None:
    """`first_mismatch` for a run's whole event stream (its StepEvents and its FinishEvent). A run that
    finished on an end of generation ("stop") is checked to have chosen it there when `is_eog` is given."""
    events = list(events)
    finish = next(e for e in events if isinstance(e, FinishEvent))
    steps = layout(e for e in events if isinstance(e, StepEvent))
    stopped = finish.stats.finish_reason == "stop"
    return first_mismatch(ctx, finish.prompt_tokens, finish.tokens, steps, sampling,
                          is_eog if stopped else None)
