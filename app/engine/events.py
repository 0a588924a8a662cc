"""The stream: small frozen dataclasses that the engine yields.

The GUI worker, the CLI, the benchmark and the tests all consume this one stream, so everything a
consumer shows (colours, ghost text, live statistics) must be derivable from these events alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum


class TokenFate(StrEnum):
    ACCEPTED = "accepted"  # proposed by the drafter and verified by the target
    CORRECTED = "corrected"  # the target's own token at the first rejected draft position
    BONUS = "bonus"  # the target's extra token after every draft token was accepted
    TARGET = "target"  # plain decoding: the step had no draft
    # For display only: an ACCEPTED token whose draft came from a request's predicted output (TokenEvent.predicted,
    # app/engine/prediction.py). The engine's own events keep ACCEPTED with the flag; records and colours use this.
    PREDICTED = "predicted"
    # For display only, the same way: an ACCEPTED token drafted by the target's own MTP head (TokenEvent.head).
    MTP = "mtp"


@dataclass(frozen=True, slots=True)
class TokenEvent:
    index: int  # position in the reply, 0-based
    token_id: int
    text: str  # text this token completes; "" while a UTF-8 character is still open
    fate: TokenFate
    step: int
    p: float | None = None  # target probability of the token (sampled runs)
    q: float | None = None  # draft probability of the token (sampled runs, drafted tokens)
    # An accepted token (fate ACCEPTED) that was drafted from the request's predicted output
    # (app/engine/prediction.py): one of GenerationStats.accepted_prediction_tokens.
    predicted: bool = False
    # An accepted token drafted by the target's own MTP head (mode mtp, app/engine/mtp_drafter.py).
    head: bool = False


def shown_fate(event: TokenEvent) -> TokenFate:
    """The fate a token is shown with: accepted tokens drafted from a request's prediction, or by the target's
    MTP head, have their own."""
    return TokenFate.PREDICTED if event.predicted else TokenFate.MTP if event.head else event.fate


@dataclass(frozen=True, slots=True)
class StepEvent:
    step: int
    position: int  # reply index of the first token this step emitted
    k: int  # draft length asked for this step
    drafted: tuple[int, ...]  # what the drafter proposed (may be shorter than k: p-min cut, no n-gram)
    accepted: int  # how many of `drafted` the target kept
    rejected: tuple[int, ...]  # drafted[accepted:]: ghost text
    rejected_text: str
    emitted: int  # tokens this step added to the reply (accepted + correction/bonus, cut at a stop)
    draft_ms: float
    verify_ms: float
    # The reply's first step: its logits came from the prompt's pass (no draft, no decode, no time of its own).
    from_prompt: bool = False
    # The draft was a long running copy of earlier text (the copy governor's, or a sure copy on the CPU).
    copy: bool = False
    # Rows appended to the verify batch after the draft (copies of its last token; SpecParams.steady_shapes).
    padded: int = 0
    # The draft was copied from the request's predicted output (app/engine/prediction.py), not the mode's drafter.
    predicted: bool = False


@dataclass(frozen=True, slots=True)
class GovernorEvent:
    step: int
    action: str  # "shrink", "grow", "disable" (drafting off), "enable" (a probe showed drafting pays again)
    k_before: int
    k_after: int
    reason: str
    # "draft": the drafts of the mode in use; "copy": long running copies of earlier text, which have a
    # governor (K, on/off) of their own. Only "draft" events say whether speculation is on.
    scope: str = "draft"


@dataclass(frozen=True, slots=True)
class Divergence:
    """Where a speculative greedy run parted from plain decoding, and how close the call was."""

    position: int
    plain_token: int
    spec_token: int
    margin: float  # the plain run's top-two logit gap at that position
    near_tie: bool


@dataclass(frozen=True, slots=True)
class GenerationStats:
    mode: str
    n_prompt_tokens: int
    n_tokens: int
    # Tokens the decode steps produced / decode time, counted as llama.cpp's eval counts them: the first
    # token comes from the prompt's pass (prefill time), and a closing end-of-turn token is one decode's work.
    tokens_per_second: float
    prompt_tokens_per_second: float
    prefill_ms: float  # the prompt's processing, the draft model's share included
    decode_ms: float
    draft_ms: float
    verify_ms: float
    other_ms: float  # Python bookkeeping: sampling, acceptance, detokenising
    steps: int
    drafted: int
    accepted: int
    acceptance_rate: float  # accepted / drafted
    mean_accepted_length: float  # accepted draft tokens per step that drafted
    tokens_per_step: float
    per_position_acceptance: tuple[float, ...]  # P(accept at draft position i | reached i)
    accepted_length_histogram: tuple[int, ...]  # steps that accepted 0, 1, 2, ... tokens
    governor: tuple[GovernorEvent, ...]
    finish_reason: str  # "stop" (end of generation), "length", "cancelled", "context"
    final_k: int
    speculation_active: bool  # False when the governor had drafting off at the end of the reply
    python_ms: float = 0.0  # decode time spent outside llama_decode (both models): the engine's overhead
    draft_prefill_ms: float = 0.0  # the draft model's share of prefill_ms (its pass over the prompt)
    # A request's predicted output (OpenAI's "Predicted Outputs"; app/engine/prediction.py), 0 without one:
    # prediction_tokens: its length in tokens. accepted_prediction_tokens: reply tokens that were drafted from it
    # and accepted by the target (the TokenEvents marked `predicted`; also counted in `accepted`).
    # rejected_prediction_tokens: tokens drafted from it that the target rejected, so verified for nothing (what
    # OpenAI bills as rejected prediction tokens; also counted in `drafted`). Prediction tokens never drafted
    # (where the reply departed from it, or the mode's drafter proposed) are in neither count.
    prediction_tokens: int = 0
    accepted_prediction_tokens: int = 0
    rejected_prediction_tokens: int = 0


@dataclass(frozen=True, slots=True)
class FinishEvent:
    text: str
    prompt_tokens: tuple[int, ...]
    tokens: tuple[int, ...]
    stats: GenerationStats
    # Top-two logit margins of the target at each emitted position (greedy runs; used to judge
    # whether a divergence from plain decoding sits on a floating-point near-tie).
    margins: tuple[float, ...] = field(default=(), repr=False)


@dataclass(frozen=True, slots=True)
class PrefillEvent:
    """Prompt processing: `done` of `total` new prompt tokens are in `model`'s cache (the cached prefix
    of an earlier turn is not counted). Yielded per batch, so a long prompt shows progress and Stop ends
    it between batches: first the target's ("target"), then, in the modes that draft with it, the draft
    model's ("draft")."""

    done: int
    total: int
    model: str = "target"


Event = TokenEvent | StepEvent | GovernorEvent | FinishEvent | PrefillEvent
