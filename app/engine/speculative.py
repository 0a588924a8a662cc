"""The speculative engine: propose, verify in one batched target pass, judge, roll back, emit.

Invariant between steps: the target KV cache holds every context token but the last; that last
token is the first row of the next verify batch, followed by the K proposed tokens. Row i's logits
judge proposed token i; the row after the last accepted token gives the correction or the bonus.
With nothing proposed the same loop is plain decoding, which is what `mode="none"` runs.

The first step is the exception: as llama.cpp's prompt evaluation does, the prefill decodes the whole
prompt and keeps the last row's logits, so the first reply token costs no decode of its own (one
plain step less per reply, and the same batch shapes as llama.cpp's, hence its numerics).

What is proposed, and how much, is the draft policy's call (app/engine/draft_policy.py); who proposes is a
Proposer (app/engine/proposal.py). This loop knows neither.
"""

from __future__ import annotations

import codecs
import threading
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from app.engine.acceptance import AcceptanceTally
from app.engine.draft_policy import DraftPolicy
from app.engine.events import (
    Event,
    FinishEvent,
    GenerationStats,
    PrefillEvent,
    StepEvent,
    TokenEvent,
    TokenFate,
)
from app.engine.one_token_bound import OneTokenBound
from app.engine.penalties import PenaltyWindow
from app.engine.prompt_cache import PromptCache
from app.engine.proposal import NO_PROPOSAL, Outcome, Proposal, Proposer
from app.engine.sampling import SampleNoise, SamplingParams, distribution, top_two_margin
from app.engine.spec_params import SpecParams
from app.engine.target_context import TargetContext
from app.llama_backend import ContextFullError, LlamaContext

__all__ = ["SpecEngine", "SpecParams"]

Judged = list[tuple[int, TokenFate, float | None, float | None]]  # (token, fate, p, q) per emitted row


@dataclass(slots=True)
class _Tally:
    """Running totals for the final statistics."""

    steps: int = 0
    decoded: int = 0  # tokens the decode steps produced (not the prefill's first), the end of turn included
    draft_ms: float = 0.0
    verify_ms: float = 0.0
    draft_prefill_ms: float = 0.0  # the draft model's share of the prompt's processing
    acceptance: AcceptanceTally = field(default_factory=AcceptanceTally)
    accepted_predicted: int = 0  # reply tokens drafted from a request's prediction and accepted
    rejected_predicted: int = 0  # tokens drafted from it and rejected

    def count(self, proposal: Proposal, accepted: int, verify_ms: float) -> int:
        """Add one step; its index."""
        self.steps += 1
        self.acceptance.add(len(proposal.tokens), accepted)
        self.draft_ms += proposal.ms
        self.verify_ms += verify_ms
        if proposal.predicted:
            self.rejected_predicted += len(proposal.tokens) - accepted
        return self.steps - 1


class SpecEngine:
    """Drives one target context and one proposer (the mode's drafter). Owned by a single thread."""

    def __init__(self, target: TargetContext, drafter: Proposer,
                 clock: Callable[[], float] = time.perf_counter, prompt_cache: PromptCache | None = None,
                 one_token: OneTokenBound | None = None) -> None:
        self.target = target
        self.model = target.model
        self.drafter = drafter
        self.prompt_cache = prompt_cache  # the session's kept caches of earlier prompts (shared by its engines)
        # Where the target's verify batches give one-token decoding's bits, as measured (one_token_bound.py); None
        # where no batch is known to (repacked weights, a GPU): strict replies then run unbounded.
        self.one_token = one_token
        # Seconds, for every timer the governors learn from. A replay (tools/bench/policy_replay.py) passes a clock
        # that its stand-in target advances by a measured cost per verify, so the real policy runs in a second.
        self.clock = clock

    def _prefill(self, prompt: Sequence[int], cancel: threading.Event | None) -> Iterator[PrefillEvent]:
        """Make the target cache hold the prompt, with the last row's logits, reusing the longest cached
        prefix, a batch at a time: progress after each, and a set `cancel` stops between batches (the
        cache then holds a shorter prefix, which the next prompt reuses as it would any other)."""
        tokens = list(prompt)
        if self.prompt_cache is not None and isinstance(self.target, LlamaContext):  # stand-ins keep no snapshots
            self.prompt_cache.swap_in(self.target, tokens)  # another chat's cache out, this one's back in
        common = self.target.keep_common_prefix(tokens)
        if common == len(tokens):
            if self.target.kept_logits(len(tokens)) is not None:
                return  # the same prompt again (a bench round, a regenerate): its prefill's logits are kept
            # Decoding the last token alone would round differently from the batch that first gave its logits.
            common = self.target.keep_common_prefix(tokens[:-1])
        total = len(tokens) - common
        if cancel is not None and cancel.is_set():
            return
        for done in self.target.decode_batches(tokens[common:]):
            if done == total:
                self.target.keep_last_logits()
            yield PrefillEvent(done, total)
            if cancel is not None and cancel.is_set():
                return

    def generate(
        self,
        prompt: Sequence[int],
        n_predict: int,
        sampling: SamplingParams | None = None,
        spec: SpecParams | None = None,
        cancel: threading.Event | None = None,
        track_margins: bool = False,
    ) -> Generator[Event, None, None]:
        """Continue `prompt` by up to `n_predict` tokens: propose, verify, judge, roll back, emit (see the
        module's invariant). Prefill progress, then per step a StepEvent, its TokenEvents and the governors'
        decisions, then one FinishEvent. `cancel` stops between batches and steps."""
        sampling = sampling or SamplingParams()
        sampling.validate()
        policy = self._policy(prompt, spec or SpecParams())
        noise = SampleNoise(sampling.seed) if sampling.seed is not None else SampleNoise.fresh()
        utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")
        t_start = self.clock()
        tally = _Tally()
        n_prefilled = yield from self._prepare(prompt, policy, tally, cancel)
        prefill_ms = (self.clock() - t_start) * 1000.0
        native_start = self.target.native_ms + policy.native_ms
        first = self.target.kept_logits(len(prompt))  # None: the prefill was cancelled
        context, emitted, text_parts = list(prompt), list[int](), list[str]()
        margins: list[float] = []
        window = PenaltyWindow(sampling, context) if sampling.penalized else None  # the context's last tokens
        tally.acceptance.presize(policy.longest)
        finish = "length"
        t_decode = self.clock()
        try:
            while len(emitted) < n_predict:
                if cancel is not None and cancel.is_set():
                    finish = "cancelled"
                    break
                from_prompt = first is not None and tally.steps == 0
                if from_prompt:  # the prompt's own pass gave this row (see _prefill): nothing to draft or decode
                    proposal, verify_ms, n_before, rows = NO_PROPOSAL, 0.0, self.target.n_past - 1, first
                else:
                    room = self.target.n_ctx - self.target.n_past - 2  # K + 1 rows, and the next turn's append
                    if room < 0:
                        finish = "context"
                        break
                    proposal = policy.propose(context, min(room, n_predict - len(emitted) - 1), sampling, noise)
                    n_before, rows = self.target.n_past, None
                    verify_ms = self._decode_verify(context[-1], proposal)
                if window is not None:
                    window.sync(context)
                out, accepted = self._verify(proposal, sampling, noise, len(context), window, track_margins,
                                             margins, rows)
                self.target.truncate(n_before + 1 + accepted)  # roll back: the rejected rows go
                step = tally.count(proposal, accepted, verify_ms)
                learned = [] if from_prompt else policy.learn(Outcome(step, proposal, accepted, verify_ms))
                keep, stopped = self._until_stop(out, n_predict - len(emitted))
                finish = "stop" if stopped else finish
                if not from_prompt:  # what llama.cpp's eval counts: every token a decode produced, the stop too
                    tally.decoded += len(keep) + (finish == "stop")
                yield self._step_event(step, len(emitted), proposal, accepted, len(keep), verify_ms, from_prompt)
                for token, fate, p, q in keep:
                    text_parts.append(utf8.decode(self.model.piece(token)))
                    predicted = proposal.predicted and fate is TokenFate.ACCEPTED
                    tally.accepted_predicted += predicted
                    yield TokenEvent(len(emitted), token, text_parts[-1], fate, step, p, q, predicted,
                                     head=proposal.head and fate is TokenFate.ACCEPTED)
                    emitted.append(token)
                    context.append(token)
                yield from learned
                if finish == "stop":
                    break
        finally:
            # Whatever happened (a stop, a cancel, an exception in a consumer), leave the cache
            # holding exactly the reply's tokens, so the next call can reuse it.
            self.target.keep_common_prefix(list(prompt) + emitted)
        decode_ms = (self.clock() - t_decode) * 1000.0
        native_ms = self.target.native_ms + policy.native_ms - native_start
        # Bytes of a character cut off by n_predict or a stop are dropped, not shown as U+FFFD, so the
        # text stays exactly the concatenation of the token events.
        stats = self._stats(tally, policy, len(prompt), n_prefilled, prefill_ms, decode_ms, len(emitted), finish,
                            max(0.0, decode_ms - native_ms))
        yield FinishEvent("".join(text_parts), tuple(prompt), tuple(emitted), stats, tuple(margins[: len(emitted)]))

    def _policy(self, prompt: Sequence[int], spec: SpecParams) -> DraftPolicy:
        """This reply's draft policy, once the prompt is known to fit. A verify's K + 1 rows must fit one batch
        (llama.cpp aborts the whole process otherwise), and in strict mode stay within the rows that run
        one-token decoding's kernels."""
        if not prompt:
            raise ValueError("The prompt is empty: there is nothing to continue from.")
        if len(prompt) >= self.target.n_ctx:
            raise ContextFullError(len(prompt) + 1, self.target.n_ctx)
        bound = self.one_token if spec.one_token_kernels else None
        most = (self.target.max_rows if bound is None else min(self.target.max_rows, bound.rows)) - 1
        return DraftPolicy(self.drafter, spec, most, bound, self.model.is_eog)

    def _prepare(self, prompt: Sequence[int], policy: DraftPolicy, tally: _Tally,
                 cancel: threading.Event | None) -> Generator[PrefillEvent, None, int]:
        """The target's prefill, then the proposer's (a draft model's batches), with progress; returns the
        prompt tokens the target processed."""
        n_prefilled = 0
        for progress in self._prefill(prompt, cancel):
            n_prefilled = progress.done
            yield progress
        if policy.longest > 0 and not (cancel is not None and cancel.is_set()):
            t_draft = self.clock()
            for done, total in policy.proposer.prepare(list(prompt)):
                tally.draft_prefill_ms = (self.clock() - t_draft) * 1000.0
                yield PrefillEvent(done, total, model="draft")
                if cancel is not None and cancel.is_set():
                    break
        return n_prefilled

    def _step_event(self, step: int, position: int, proposal: Proposal, accepted: int, emitted: int,
                    verify_ms: float, from_prompt: bool) -> StepEvent:
        rejected = proposal.tokens[accepted:]
        return StepEvent(step=step, position=position, k=proposal.k, drafted=proposal.tokens, accepted=accepted,
                         rejected=rejected, rejected_text=self.model.detokenize(rejected), emitted=emitted,
                         draft_ms=proposal.ms, verify_ms=verify_ms, from_prompt=from_prompt, copy=proposal.copy,
                         padded=proposal.pad, predicted=proposal.predicted)

    def _decode_verify(self, last: int, proposal: Proposal) -> float:
        """One target pass over [last context token, *proposal, padding]: logits for every row; its ms."""
        t_verify = self.clock()
        self.target.decode([last, *proposal.tokens, *proposal.tokens[-1:] * proposal.pad], logits_for="all")
        return (self.clock() - t_verify) * 1000.0

    def _until_stop(self, out: Judged, room: int) -> tuple[Judged, bool]:
        """The judged rows the reply takes, up to `room` tokens, and whether an end-of-generation token within
        that room ended it (not taken)."""
        for i, item in enumerate(out[:room]):
            if self.model.is_eog(item[0]):
                return out[:i], True
        return out[:room], False

    def _verify(self, draft: Proposal, sampling: SamplingParams, noise: SampleNoise, position: int,
                window: PenaltyWindow | None, track_margins: bool, margins: list[float],
                first: np.ndarray | None = None) -> tuple[Judged, int]:
        """Judge the draft row by row: row i's own choice (argmax, or the coupled sample for sequence
        position `position + i`) is emitted; the draft token is accepted when it equals that choice.
        With penalties, row i is penalised with its own context: the window holds the context, and each
        accepted draft token is pushed before the next row (and taken back out before returning).
        `first`: the first row's logits when they are not row 0 of the last decode (the prefill's, kept)."""
        if window is None:
            return self._judge(draft, sampling, noise, position, None, track_margins, margins, first)
        before = window.length
        try:
            return self._judge(draft, sampling, noise, position, window, track_margins, margins, first)
        finally:
            window.truncate(before)

    def _judge(self, draft: Proposal, sampling: SamplingParams, noise: SampleNoise, position: int,
               window: PenaltyWindow | None, track_margins: bool, margins: list[float],
               first: np.ndarray | None) -> tuple[Judged, int]:
        out: Judged = []
        n = len(draft.tokens)
        for i in range(n + 1):
            row = first if i == 0 and first is not None else self.target.logits(i)
            logits = row if window is None else window.penalise(row)  # in place, until the restore below
            try:
                if track_margins:
                    margins.append(top_two_margin(logits))
                p_choice: float | None = None
                q_choice: float | None = None
                if sampling.greedy:
                    choice = int(np.argmax(logits))
                else:
                    p = distribution(logits, sampling)
                    choice = noise.sample(p, position + i)
                    p_choice = p.prob(choice)
                    if i < n and draft.q is not None:
                        q_choice = draft.q[i].prob(choice)
            finally:
                if window is not None:
                    window.restore()
            if i < n and choice == draft.tokens[i]:
                out.append((choice, TokenFate.ACCEPTED, p_choice, q_choice))
                if window is not None:
                    window.push(choice)  # the next row's context ends with this token
                continue
            fate = TokenFate.CORRECTED if i < n else (TokenFate.BONUS if n else TokenFate.TARGET)
            out.append((choice, fate, p_choice, q_choice))
            return out, i
        return out, n

    def _stats(self, tally: _Tally, policy: DraftPolicy, n_prompt: int,
               n_prefilled: int, prefill_ms: float, decode_ms: float, n_tokens: int, finish: str,
               python_ms: float) -> GenerationStats:
        acc = tally.acceptance
        return GenerationStats(
            mode=policy.proposer.mode,
            n_prompt_tokens=n_prompt,
            n_tokens=n_tokens,
            tokens_per_second=tally.decoded / (decode_ms / 1000.0) if decode_ms > 0 else 0.0,
            prompt_tokens_per_second=n_prefilled / (prefill_ms / 1000.0) if prefill_ms > 0 and n_prefilled else 0.0,
            prefill_ms=prefill_ms,
            draft_prefill_ms=tally.draft_prefill_ms,
            decode_ms=decode_ms,
            draft_ms=tally.draft_ms,
            verify_ms=tally.verify_ms,
            other_ms=max(0.0, decode_ms - tally.draft_ms - tally.verify_ms),
            steps=tally.steps,
            drafted=acc.drafted,
            accepted=acc.accepted,
            acceptance_rate=acc.acceptance_rate,
            mean_accepted_length=acc.mean_accepted_length,
            tokens_per_step=n_tokens / tally.steps if tally.steps else 0.0,
            per_position_acceptance=acc.per_position(),
            accepted_length_histogram=tuple(acc.histogram) if acc.drafted else (),
            governor=policy.events,
            finish_reason=finish,
            final_k=policy.governor.active_k,
            speculation_active=policy.drafting,
            python_ms=python_ms,
            # A prediction proposer (app/engine/prediction.py) holds the request's prediction; other proposers none.
            prediction_tokens=len(getattr(policy.proposer, "prediction", ())),
            accepted_prediction_tokens=tally.accepted_predicted,
            rejected_prediction_tokens=tally.rejected_predicted,
        )
