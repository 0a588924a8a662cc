"""The speculative engine: draft, verify in one batched target pass, roll back, stream events.

Invariant between steps: the target KV cache holds every context token but the last; that last
token is the first row of the next verify batch, followed by the K drafted tokens. Row i's logits
judge draft token i; the row after the last accepted token gives the correction or the bonus.
With K = 0 the same loop is plain decoding, which is what `mode="none"` runs.

The first step is the exception: as llama.cpp's prompt evaluation does, the prefill decodes the whole
prompt and keeps the last row's logits, so the first reply token costs no decode of its own (one
plain step less per reply, and the same batch shapes as llama.cpp's, hence its numerics).
"""

from __future__ import annotations

import codecs
import threading
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from app.engine.acceptance import AcceptanceTally
from app.engine.cost_model import RowCosts
from app.engine.drafters import (
    AUTO_COPY_MAX,
    CHEAP_ROW_PRICE,
    CHEAP_ROWS_FROM,
    NO_DRAFT,
    SURE_COPY_LONG,
    SURE_COPY_MIN,
    SURE_COPY_MIN_CHEAP,
    SURE_COPY_RUN,
    SURE_COPY_RUN_CHEAP,
    Draft,
    Drafter,
)
from app.engine.events import (
    Event,
    FinishEvent,
    GenerationStats,
    GovernorEvent,
    PrefillEvent,
    StepEvent,
    TokenEvent,
    TokenFate,
)
from app.engine.governor import COPY_TUNING, Governor
from app.engine.penalties import PenaltyWindow
from app.engine.prompt_cache import PromptCache
from app.engine.sampling import SampleNoise, SamplingParams, distribution, top_two_margin
from app.engine.target_context import TargetContext
from app.llama_backend import ContextFullError, LlamaContext


@dataclass(frozen=True, slots=True)
class SpecParams:
    # K: the most tokens drafted per step (the governor picks K <= draft_max).
    draft_max: int = 6
    draft_min: int = 0  # never cut a draft for low confidence before this many tokens
    p_min: float = 0.75  # stop drafting when the draft's top probability falls below this
    adaptive: bool = True  # let the governor change K and turn drafting off when it loses
    # Keep verify batches within the rows that run one-token decoding's kernels where the backend
    # has such a bound (the model's one_token_kernel_rows: 7 rows on the CPU without repacking).
    one_token_kernels: bool = True
    k_start: int = 3  # first K when adaptive: a cheap first draft while the governor measures
    # The most tokens of a long running copy drafted per step (lookup and hybrid, adaptive runs only; 0: off),
    # under a governor of its own. The engine's own default is off; the app's is "auto" (drafters.COPY_MAX_AUTO,
    # negative), which SpecSession.resolve_spec turns into 31. The engine reads an unresolved negative value
    # as off.
    copy_max: int = 0
    # Take only sure copies instead (drafters.SURE_COPY_*): a copy that agreed for 16 tokens, cut before the
    # next token the reply edited before, at 12 tokens or more, when a fully accepted one beats drafting's
    # expected rate. What resolve_spec picks on the CPU, where a 16-row verify costs 6.7 plain steps and a long
    # copy that fails early loses more than the copy governor's successes win (docs/BENCHMARKS.md, runs 6-11).
    sure_copies: bool = False
    # With sure copies: once one of SURE_COPY_RUN tokens or more was accepted whole, the next may run to this many
    # tokens instead of copy_max (0: never; resolve_spec sets drafters.SURE_COPY_LONG where copy_max is "auto").
    sure_copy_long: int = 0
    # Keep the passes' shapes steady: a draft cut short (p-min, an end of turn, a short n-gram match) is verified
    # padded to K + 1 rows, and the draft cache catches up one row at a time. On CUDA llama.cpp replays a
    # captured graph only after two calls of one shape, so each change of shape costs two passes launched
    # kernel by kernel, 2-3x a small model's step on an H200. Off by default: on the H200 it made fixed-K
    # drafting's verify passes 2.2x faster, but the adaptive modes were not faster with it, and the version
    # without its measured flaw (empty drafts padded too) awaits a GPU run (docs/GPU.md).
    steady_shapes: bool = False


@dataclass(slots=True)
class _Tally:
    """Running totals for the final statistics."""

    steps: int = 0
    decoded: int = 0  # tokens the decode steps produced (not the prefill's first), the end of turn included
    draft_ms: float = 0.0
    verify_ms: float = 0.0
    draft_prefill_ms: float = 0.0  # the draft model's share of the prompt's processing
    acceptance: AcceptanceTally = field(default_factory=AcceptanceTally)


def resolve_copies(spec: SpecParams, target_on_gpu: bool) -> SpecParams:
    """Long copies as the device pays for them: copy_max "auto" (negative) is K up to AUTO_COPY_MAX, judged by
    the copy governor where the target runs on a GPU; on the CPU only sure copies are taken, and "auto" lets one
    run to SURE_COPY_LONG after a clean one. Explicit values stand."""
    auto = spec.copy_max < 0
    return replace(spec, copy_max=AUTO_COPY_MAX if auto else spec.copy_max, sure_copies=not target_on_gpu,
                   sure_copy_long=SURE_COPY_LONG if auto and not target_on_gpu else 0)


def sure_copy_rule(costs: RowCosts) -> tuple[int, int]:
    """(agreeing run, least length) a sure copy needs: the cheap-rows pair once a verify of CHEAP_ROWS_FROM rows
    or more was timed under CHEAP_ROW_PRICE plain steps a row, else the default pair."""
    price = costs.long_row_price(CHEAP_ROWS_FROM)
    if price is not None and price < CHEAP_ROW_PRICE:
        return SURE_COPY_RUN_CHEAP, SURE_COPY_MIN_CHEAP
    return SURE_COPY_RUN, SURE_COPY_MIN


class SpecEngine:
    """Drives one target context and one drafter. Owned by a single thread."""

    def __init__(self, target: TargetContext, drafter: Drafter,
                 clock: Callable[[], float] = time.perf_counter, prompt_cache: PromptCache | None = None) -> None:
        self.target = target
        self.model = target.model
        self.drafter = drafter
        self.prompt_cache = prompt_cache  # the session's kept caches of earlier prompts (shared by its engines)
        # Seconds, for every timer the governors learn from. A replay (app/cli/policy_replay.py) passes a clock
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
        sampling = sampling or SamplingParams()
        spec = spec or SpecParams()
        sampling.validate()
        if not prompt:
            raise ValueError("The prompt is empty: there is nothing to continue from.")
        n_ctx = self.target.n_ctx
        if len(prompt) >= n_ctx:
            raise ContextFullError(len(prompt) + 1, n_ctx)
        # Draft tokens a verify may carry: K + 1 rows must fit one batch (llama.cpp aborts the whole process
        # otherwise), and in strict mode stay within the rows that run one-token decoding's kernels.
        strict_rows = self.model.one_token_kernel_rows if spec.one_token_kernels else None
        most = (self.target.max_rows if strict_rows is None else min(self.target.max_rows, strict_rows)) - 1
        k_max = 0 if self.drafter.mode == "none" else min(spec.draft_max, most)
        # Long copies get their own governor (only where K adapts: --no-adapt means K is draft_max for all).
        kc_max = 0
        if self.drafter.copies and spec.adaptive and k_max > 0 and spec.copy_max > 0:
            kc_max = min(max(spec.copy_max, k_max), most)
        sure_max = kc_max if spec.sure_copies else 0
        # Within the one-token kernels' rows no sure copy runs longer than copy_max allows.
        sure_long = sure_max
        if sure_max and strict_rows is None:
            sure_long = min(max(spec.sure_copy_long, sure_max), most)
        costs = RowCosts(max(k_max, kc_max, sure_long) + 1)
        governor = Governor(k_max, spec.k_start, spec.adaptive, costs=costs)
        copies = (Governor(kc_max, spec.k_start, tuning=COPY_TUNING, costs=costs, scope="copy", plain_first=False)
                  if kc_max > 0 and not spec.sure_copies else None)
        clean_copy = False  # the reply's last sure copy was long and accepted whole: the next may run to sure_long
        noise = SampleNoise(sampling.seed) if sampling.seed is not None else SampleNoise.fresh()
        utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")

        t_start = self.clock()
        n_prefilled = 0
        for progress in self._prefill(prompt, cancel):
            n_prefilled = progress.done
            yield progress
        draft_prefill_ms = 0.0  # the draft model's batches (a drafter without a model yields none)
        if k_max > 0 and not (cancel is not None and cancel.is_set()):
            t_draft = self.clock()
            for done, total in self.drafter.prepare(list(prompt)):
                draft_prefill_ms = (self.clock() - t_draft) * 1000.0
                yield PrefillEvent(done, total, model="draft")
                if cancel is not None and cancel.is_set():
                    break
        prefill_ms = (self.clock() - t_start) * 1000.0

        native_start = self.target.native_ms + self.drafter.native_ms
        # The prefill ran to the end: the first reply token's logits are kept (None: it was cancelled).
        first = self.target.kept_logits(len(prompt))
        context = list(prompt)
        # Counts of the context's last tokens, kept in step with `context` (None: no penalties).
        window = PenaltyWindow(sampling, context) if sampling.penalized else None
        emitted: list[int] = []
        margins: list[float] = []
        text_parts: list[str] = []
        tally = _Tally(draft_prefill_ms=draft_prefill_ms)
        tally.acceptance.presize(max(k_max, kc_max))
        finish = "length"
        t_decode = self.clock()
        try:
            while len(emitted) < n_predict:
                if cancel is not None and cancel.is_set():
                    finish = "cancelled"
                    break
                from_prompt = first is not None and tally.steps == 0
                if from_prompt:
                    # The prompt's own pass gave this row (see _prefill): nothing to draft, decode or time.
                    draft, k, copying, verify_ms, pad = NO_DRAFT, 0, False, 0.0, 0
                    n_before, rows = self.target.n_past - 1, first
                else:
                    # Rows n_past..n_past+K must fit, and the reply (prompt + tokens) must too: the next
                    # turn appends to it.
                    room = n_ctx - self.target.n_past - 2
                    if room < 0:
                        finish = "context"
                        break
                    limit = min(room, n_predict - len(emitted) - 1)
                    sure_k = sure_long if clean_copy else sure_max
                    draft, k, copying = (self._sure_copy(governor, costs, context, min(sure_k, limit), sampling)
                                         if sure_max else self._long_copy(copies, governor, context, limit, sampling))
                    if not copying:
                        k = min(governor.current_k(), limit)
                        draft = self.drafter.propose(context, k, sampling, noise) if k > 0 else NO_DRAFT
                        if k == 0 and k_max > 0 and not governor.enabled and limit > 0:
                            # Drafting is off, but the drafter may hold a free copy (an n-gram match): verifying
                            # it costs only the extra rows, so the governor may take it as a probe.
                            offer = self.drafter.propose_free(context, min(governor.probe_k(), limit), sampling)
                            if governor.free_probe(len(offer.tokens)):
                                draft, k = offer, len(offer.tokens)
                    draft = _end_at_eog(draft, self.model.is_eog)
                    n_before, rows = self.target.n_past, None
                    # Rows past the draft are never read, and the rollback below drops them with the rejected.
                    # An empty draft stays a one-row step: padding it made lookup, which often finds nothing, pay
                    # K + 1 rows a step (0.72x on the H200, docs/GPU.md).
                    pad = k - len(draft.tokens) if spec.steady_shapes and not copying and draft.tokens else 0
                    t_verify = self.clock()
                    self.target.decode([context[-1], *draft.tokens, *draft.tokens[-1:] * pad], logits_for="all")
                    verify_ms = (self.clock() - t_verify) * 1000.0
                if window is not None:
                    window.sync(context)
                out, accepted = self._verify(draft, sampling, noise, len(context), window, track_margins, margins,
                                             rows)
                # Roll back: keep the last context token and the accepted drafts, drop the rejected rows.
                self.target.truncate(n_before + 1 + accepted)

                step = tally.steps
                tally.steps += 1
                tally.acceptance.add(len(draft.tokens), accepted)
                if copying and sure_max:
                    clean_copy = accepted == len(draft.tokens) >= SURE_COPY_RUN
                tally.draft_ms += draft.ms
                tally.verify_ms += verify_ms
                events: list[GovernorEvent | None] = []
                if not from_prompt:
                    # The draft governor learns from every step, copies included (its pooled evidence is what it
                    # judged by before long copies had a governor); the copy governor from the copies alone.
                    rows_decoded = len(draft.tokens) + 1 + pad
                    events.append(governor.observe(step, rows_decoded, verify_ms, len(draft.tokens), accepted,
                                                   draft.ms, self.drafter.costs_time, k_asked=k,
                                                   free_draft=draft.free, catch_up=draft.catch_up,
                                                   catch_up_ms=draft.catch_up_ms))
                    if copies is not None and copying:
                        events.append(copies.observe(step, rows_decoded, verify_ms, len(draft.tokens), accepted,
                                                     draft.ms, False, k_asked=k))
                    elif copies is not None:
                        copies.idle(accepted + 1)

                keep: list[tuple[int, TokenFate, float | None, float | None]] = []
                for item in out:
                    if self.model.is_eog(item[0]):
                        finish = "stop"
                        break
                    keep.append(item)
                    if len(emitted) + len(keep) >= n_predict:
                        break
                if not from_prompt:
                    # What llama.cpp's eval counts: every token a decode produced, the end of turn included.
                    tally.decoded += len(keep) + (finish == "stop")
                rejected = draft.tokens[accepted:]
                yield StepEvent(
                    step=step, position=len(emitted), k=k, drafted=draft.tokens, accepted=accepted,
                    rejected=rejected, rejected_text=self.model.detokenize(rejected), emitted=len(keep),
                    draft_ms=draft.ms, verify_ms=verify_ms, from_prompt=from_prompt, copy=copying, padded=pad,
                )
                for token, fate, p, q in keep:
                    text = utf8.decode(self.model.piece(token))
                    text_parts.append(text)
                    yield TokenEvent(len(emitted), token, text, fate, step, p, q)
                    emitted.append(token)
                    context.append(token)
                for event in events:
                    if event is not None:
                        yield event
                if finish == "stop":
                    break
        finally:
            # Whatever happened (a stop, a cancel, an exception in a consumer), leave the cache
            # holding exactly the reply's tokens, so the next call can reuse it.
            self.target.keep_common_prefix(list(prompt) + emitted)
        decode_ms = (self.clock() - t_decode) * 1000.0
        native_ms = self.target.native_ms + self.drafter.native_ms - native_start
        # Bytes of a character cut off by n_predict or a stop are dropped, not shown as U+FFFD, so the
        # text stays exactly the concatenation of the token events.
        stats = self._stats(tally, governor, copies, len(prompt), n_prefilled, prefill_ms, decode_ms,
                            len(emitted), finish, max(0.0, decode_ms - native_ms))
        yield FinishEvent("".join(text_parts), tuple(prompt), tuple(emitted), stats,
                          tuple(margins[: len(emitted)]))

    def _long_copy(self, copies: Governor | None, governor: Governor, context: list[int], limit: int,
                   sampling: SamplingParams) -> tuple[Draft, int, bool]:
        """This step's long running copy and the K it was asked at; (NO_DRAFT, 0, False) when there is none
        or the copy governor has long copies off (the draft governor then decides, as for any proposal)."""
        if copies is None or limit <= 0:
            return NO_DRAFT, 0, False
        k = copies.current_k()
        if k > 0:
            # Never shorter than other drafts: the copy governor only lets copies run longer. Its evidence is
            # thin early in a reply, and a copy cut to 1-2 tokens paid less than the draft governor's K
            # (code-refactor, edit-fix-typos: docs/BENCHMARKS.md, run 6).
            k = min(max(k, governor.current_k()), limit)
            copy = self.drafter.propose_copy(context, k, sampling)
            return (copy, k, True) if copy.tokens else (NO_DRAFT, 0, False)
        if copies.enabled:
            return NO_DRAFT, 0, False
        # Long copies are off: one may still be verified as a probe (it costs only its rows).
        offer = self.drafter.propose_copy(context, min(copies.probe_k(), limit), sampling)
        if offer.tokens and copies.free_probe(len(offer.tokens)):
            return offer, len(offer.tokens), True
        return NO_DRAFT, 0, False

    def _sure_copy(self, governor: Governor, costs: RowCosts, context: list[int], k: int,
                   sampling: SamplingParams) -> tuple[Draft, int, bool]:
        """This step's sure copy and the K it was asked at, or (NO_DRAFT, 0, False) (the draft governor then
        decides). Taken only when long (SURE_COPY_MIN tokens, beyond the draft governor's K) and when, fully
        accepted, it would beat what the draft governor expects of its own K (Governor.copy_pays). Once this
        reply has timed a long verify as cheap per row, shorter runs and copies qualify (SURE_COPY_*_CHEAP)."""
        run, least = sure_copy_rule(costs)
        copy = self.drafter.propose_copy(context, k, sampling, sure_run=run)
        n = len(copy.tokens)
        if n >= least and n > governor.current_k() and governor.copy_pays(n):
            return copy, n, True
        return NO_DRAFT, 0, False

    def _verify(self, draft: Draft, sampling: SamplingParams, noise: SampleNoise, position: int,
                window: PenaltyWindow | None, track_margins: bool, margins: list[float],
                first: np.ndarray | None = None) -> tuple[list[tuple[int, TokenFate, float | None, float | None]], int]:
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

    def _judge(self, draft: Draft, sampling: SamplingParams, noise: SampleNoise, position: int,
               window: PenaltyWindow | None, track_margins: bool, margins: list[float],
               first: np.ndarray | None) -> tuple[list[tuple[int, TokenFate, float | None, float | None]], int]:
        out: list[tuple[int, TokenFate, float | None, float | None]] = []
        n = len(draft.tokens)
        for i in range(n + 1):
            row = first if i == 0 and first is not None else self.target.logits(i)
            logits = row if window is None else window.apply(row)
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
            if i < n and choice == draft.tokens[i]:
                out.append((choice, TokenFate.ACCEPTED, p_choice, q_choice))
                if window is not None:
                    window.push(choice)  # the next row's context ends with this token
                continue
            fate = TokenFate.CORRECTED if i < n else (TokenFate.BONUS if n else TokenFate.TARGET)
            out.append((choice, fate, p_choice, q_choice))
            return out, i
        return out, n

    def _stats(self, tally: _Tally, governor: Governor, copies: Governor | None, n_prompt: int,
               n_prefilled: int, prefill_ms: float, decode_ms: float, n_tokens: int, finish: str,
               python_ms: float) -> GenerationStats:
        acc = tally.acceptance
        return GenerationStats(
            mode=self.drafter.mode,
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
            # Both governors' decisions, in step order (each list is capped, so this stays small).
            governor=tuple(sorted((*governor.events, *(copies.events if copies else ())), key=lambda g: g.step)),
            finish_reason=finish,
            final_k=governor.active_k,
            speculation_active=governor.enabled,
            python_ms=python_ms,
        )


def _end_at_eog(draft: Draft, is_eog: Callable[[int], bool]) -> Draft:
    """The draft up to and including its first end-of-generation token. Rows after it are never used: if it is
    accepted the reply ends there, and if it is rejected so is all after it. A copy of earlier text runs into
    the end of the message it copies (its end-of-turn, then the template's next header): verifying those rows
    cost 15 plain steps on the CPU for nothing (docs/BENCHMARKS.md, run 16)."""
    for i, token in enumerate(draft.tokens):
        if is_eog(token):
            if i + 1 == len(draft.tokens):
                return draft
            return replace(draft, tokens=draft.tokens[:i + 1], q=draft.q[:i + 1] if draft.q is not None else None)
    return draft
