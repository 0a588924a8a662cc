"""The draft policy: what is proposed each step, and whether drafting runs at all.

It wraps the mode's proposer (app/engine/proposal.py): each step it asks that proposer for a
sure copy (on the CPU) or a long running copy under the copy governor (on a GPU), else for a draft of the
governor's K, else, while drafting is off, for a free n-gram probe; and it learns from every verified outcome.
So the engine's loop has no branch of its own for copies, probes or K (app/engine/governor.py decides K and
on/off from the proposals' costs and history).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from app.engine.cost_model import RowCosts
from app.engine.events import GovernorEvent
from app.engine.governor import COPY_TUNING, Governor
from app.engine.one_token_bound import OneTokenBound
from app.engine.proposal import NO_PROPOSAL, Outcome, Proposal, Proposer
from app.engine.sampling import SampleNoise, SamplingParams
from app.engine.spec_params import COPY_MAX_AUTO, SpecParams

__all__ = ["COPY_MAX_AUTO", "AUTO_COPY_MAX", "STRICT_PREFIX", "DraftPolicy", "resolve_copies", "sure_copy_rule"]

# Long running copies (SpecParams.copy_max) on "auto" (COPY_MAX_AUTO), the settings' default: K up to 31 on a GPU and
# on the CPU, judged differently. A GPU verifies 32 rows for little more than one, so a copy that agrees for 8 tokens
# is worth verifying 31 tokens ahead under the copy governor, as llama.cpp's ngram-map-k does with 48 (replayed: 2.21x
# against 1.96x of plain steps with GPU-like costs). On the 2-core CPU a 32-row verify costs 11-16 plain steps, so a
# long copy that fails early loses more than the ones that succeed win (1.18x against 1.25x with the copy governor):
# there only sure copies are taken (SpecParams.sure_copies, SURE_COPY_*), which replayed at 1.16-1.32x against
# 1.14-1.28x with copies off on five measured cost tables (docs/BENCHMARKS.md, run 11).
AUTO_COPY_MAX = 31
# How the reason of a strict-mode stop begins (DraftPolicy._strict_note): the window's banner tells it from the
# governor's timing decisions by it.
STRICT_PREFIX = "strict: "
# Sure copies (the CPU's long copies): the running copy has agreed for SURE_COPY_RUN tokens and is cut before
# the next token the reply edited before; verified long only when that leaves SURE_COPY_MIN tokens or more
# (DraftPolicy._sure_copy). Replayed on the bench's prompts with three measured CPU cost tables, a 16-token run
# was ahead of 8 and 12, and a 12-token minimum ahead of 7, on each (docs/BENCHMARKS.md, run 11).
SURE_COPY_RUN = 16
SURE_COPY_MIN = 12
# After a sure copy of SURE_COPY_RUN tokens or more was accepted whole, the next one may run to SURE_COPY_LONG
# (SpecParams.sure_copy_long; "auto" on the CPU). llama.cpp's n-gram types verify 48 tokens at once, and 48 rows
# cost 0.42 plain steps a row against 32 rows' 0.44 (run 25). Replayed on five CPU cost tables, the reply's clean
# copy is what tells a long one apart: code-refactor, edit-rename-class and mt-rename-file gained 1.2-3.4%, no
# prompt of either suite lost; 47 for every sure copy cost mt-refactor 1-3% (docs/BENCHMARKS.md, runs 28-29).
SURE_COPY_LONG = 47
# Where long verifies are cheap (a CPU with fast batched kernels: 16 rows for 3.5 plain steps on a Xeon with
# AVX512-VNNI, 7-9 on the AMD EPYCs of runs 4-11), shorter runs pay: replayed on that Xeon's table, runs of 8
# and copies of 8 gave 1.61 against 1.56 mean over the suite, and lost 3% on an AMD's. So a reply switches to
# them once it has timed a verify of CHEAP_ROWS_FROM rows or more at under CHEAP_ROW_PRICE plain steps a row
# (0.19-0.22 on that Xeon, 0.34-0.49 on the AMDs): +1% there in the replay, nothing changed on five AMD tables
# (docs/BENCHMARKS.md, run 13).
SURE_COPY_RUN_CHEAP = 8
SURE_COPY_MIN_CHEAP = 8
CHEAP_ROW_PRICE = 0.3
CHEAP_ROWS_FROM = 16


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


class DraftPolicy:
    """One reply's governed proposer: `propose` picks the step's proposal, `learn` feeds the verdict back."""

    def __init__(self, proposer: Proposer, spec: SpecParams, most: int, strict: OneTokenBound | None,
                 is_eog: Callable[[int], bool]) -> None:
        """most: the draft tokens one verify may carry (its rows, less the context's last token); strict: where
        verifies give one-token decoding's bits (SpecParams.one_token_kernels), which `most` already keeps within
        by rows; the policy keeps them within it by position."""
        self.proposer = proposer
        self._strict = strict
        self._past_span = False  # the context reached past the span where strict verifies keep their bits
        self._notes: list[GovernorEvent] = []  # ... and the reply was told, or that no verify batch keeps them
        self._is_eog = is_eog
        self._steady = spec.steady_shapes
        k_max = min(spec.draft_max, most) if proposer.drafts else 0
        # Long copies get their own limit (only where K adapts: --no-adapt means K is draft_max for all).
        kc_max = 0
        if proposer.copies and spec.adaptive and k_max > 0 and spec.copy_max > 0:
            kc_max = min(max(spec.copy_max, k_max), most)
        self._sure_max = kc_max if spec.sure_copies else 0
        # Within the one-token kernels' rows no sure copy runs longer than copy_max allows.
        self._sure_long = self._sure_max
        if self._sure_max and strict is None:
            self._sure_long = min(max(spec.sure_copy_long, self._sure_max), most)
        self.longest = max(k_max, kc_max)  # the longest proposal but a sure copy after a clean one
        self._k_max = k_max
        self._costs = RowCosts(max(k_max, kc_max, self._sure_long) + 1)
        self.governor = Governor(k_max, spec.k_start, spec.adaptive, costs=self._costs)
        self.copy_governor = (Governor(kc_max, spec.k_start, tuning=COPY_TUNING, costs=self._costs, scope="copy",
                                       plain_first=False) if kc_max > 0 and not spec.sure_copies else None)
        self._clean_copy = False  # the last sure copy was long and accepted whole: the next may run to _sure_long

    @property
    def native_ms(self) -> float:
        return self.proposer.native_ms

    @property
    def events(self) -> tuple[GovernorEvent, ...]:
        """Both governors' decisions, in step order (each list is capped, so this stays small)."""
        copies = self.copy_governor.events if self.copy_governor is not None else ()
        return tuple(sorted((*self.governor.events, *copies, *self._notes), key=lambda g: g.step))

    @property
    def drafting(self) -> bool:
        """Whether drafting was on at the end: the governor had it on and strict mode had not stopped it."""
        return self.governor.enabled and not self._notes

    def propose(self, context: list[int], limit: int, sampling: SamplingParams, noise: SampleNoise) -> Proposal:
        """This step's proposal for at most `limit` tokens, ended at its first end-of-generation token, with the
        K it was asked at, whether it is a long copy, and its padding."""
        if self._strict is not None:
            room = self._strict.room(len(context))
            self._past_span |= room == 0 and self._strict.span is not None and len(context) >= self._strict.span
            limit = min(limit, room)
        if self._sure_max:
            sure_k = self._sure_long if self._clean_copy else self._sure_max
            proposal = self._sure_copy(context, min(sure_k, limit), sampling)
        else:
            proposal = self._long_copy(context, limit, sampling)
        if not proposal.copy:
            proposal = self._draft(context, limit, sampling, noise)
        proposal = _end_at_eog(proposal, self._is_eog)
        # Rows past the proposal are never read, and the rollback drops them with the rejected. An empty draft
        # stays a one-row step: padding it made lookup, which often finds nothing, pay K + 1 rows a step (0.72x
        # on the H200, docs/GPU.md).
        if self._steady and not proposal.copy and proposal.tokens:
            proposal = replace(proposal, pad=proposal.k - len(proposal.tokens))
        return proposal

    def learn(self, outcome: Outcome) -> list[GovernorEvent]:
        """Feed one verified step to the governors and the proposer; the decisions it changed."""
        p, accepted = outcome.proposal, outcome.accepted
        if p.copy and self._sure_max:
            self._clean_copy = accepted == len(p.tokens) >= SURE_COPY_RUN
        # The draft governor learns from every step, copies included (its pooled evidence is what it judged by
        # before long copies had a governor); the copy governor from the copies alone.
        events = [self.governor.observe(outcome.step, p.rows, outcome.verify_ms, len(p.tokens), accepted, p.ms,
                                        self.proposer.costs_time, k_asked=p.k, free_draft=p.free, catch_up=p.catch_up,
                                        catch_up_ms=p.catch_up_ms)]
        if self.copy_governor is not None and p.copy:
            events.append(self.copy_governor.observe(outcome.step, p.rows, outcome.verify_ms, len(p.tokens),
                                                     accepted, p.ms, False, k_asked=p.k))
        elif self.copy_governor is not None:
            self.copy_governor.idle(accepted + 1)
        self.proposer.observe(outcome)
        events.append(self._strict_note(outcome.step))
        return [e for e in events if e is not None]

    def _strict_note(self, step: int) -> GovernorEvent | None:
        """Once a reply: where strict mode stops drafting to keep the reply bit-exact (no verify batch gives
        one-token decoding's bits on this CPU, or the context passed the span where they do), and why."""
        bound = self._strict
        if bound is None or self._notes or not self.proposer.drafts:
            return None
        if bound.rows == 1:
            why = "no verify batch gives one-token decoding's bits on this CPU with this model"
        elif self._past_span:
            why = (f"past position {bound.span} this CPU's one-token decoding sums its attention in another order "
                   "than a verify batch does")
        else:
            return None
        reason = f"{STRICT_PREFIX}{why}, so drafting stops to keep the reply bit-exact (turn strict off to draft on)"
        self._notes.append(GovernorEvent(step, "disable", self.governor.current_k(), 0, reason))
        return self._notes[-1]

    def _draft(self, context: list[int], limit: int, sampling: SamplingParams, noise: SampleNoise) -> Proposal:
        """A draft of the governor's K; while drafting is off, a free copy the governor may take as a probe
        (verifying it costs only the extra rows)."""
        k = min(self.governor.current_k(), limit)
        if k > 0:
            return replace(self.proposer.propose(context, k, sampling, noise), k=k)
        if self._k_max > 0 and not self.governor.enabled and limit > 0:
            offer = self.proposer.propose_free(context, min(self.governor.probe_k(), limit), sampling)
            if self.governor.free_probe(len(offer.tokens)):
                return replace(offer, k=len(offer.tokens))
        return NO_PROPOSAL

    def _long_copy(self, context: list[int], limit: int, sampling: SamplingParams) -> Proposal:
        """This step's long running copy, or NO_PROPOSAL when there is none or the copy governor has long copies
        off (the draft governor then decides, as for any proposal)."""
        copies = self.copy_governor
        if copies is None or limit <= 0:
            return NO_PROPOSAL
        k = copies.current_k()
        if k > 0:
            # Never shorter than other drafts: the copy governor only lets copies run longer. Its evidence is
            # thin early in a reply, and a copy cut to 1-2 tokens paid less than the draft governor's K
            # (code-refactor, edit-fix-typos: docs/BENCHMARKS.md, run 6).
            k = min(max(k, self.governor.current_k()), limit)
            copy = self.proposer.propose_copy(context, k, sampling)
            return replace(copy, k=k, copy=True) if copy.tokens else NO_PROPOSAL
        if copies.enabled:
            return NO_PROPOSAL
        # Long copies are off: one may still be verified as a probe (it costs only its rows).
        offer = self.proposer.propose_copy(context, min(copies.probe_k(), limit), sampling)
        if offer.tokens and copies.free_probe(len(offer.tokens)):
            return replace(offer, k=len(offer.tokens), copy=True)
        return NO_PROPOSAL

    def _sure_copy(self, context: list[int], k: int, sampling: SamplingParams) -> Proposal:
        """This step's sure copy, or NO_PROPOSAL (the draft governor then decides). Taken only when long
        (SURE_COPY_MIN tokens, beyond the draft governor's K) and when, fully accepted, it would beat what the
        draft governor expects of its own K (Governor.copy_pays). Once this reply has timed a long verify as
        cheap per row, shorter runs and copies qualify (SURE_COPY_*_CHEAP)."""
        run, least = sure_copy_rule(self._costs)
        copy = self.proposer.propose_copy(context, k, sampling, sure_run=run)
        n = len(copy.tokens)
        if n >= least and n > self.governor.current_k() and self.governor.copy_pays(n):
            return replace(copy, k=n, copy=True)
        return NO_PROPOSAL


def _end_at_eog(proposal: Proposal, is_eog: Callable[[int], bool]) -> Proposal:
    """The proposal up to and including its first end-of-generation token. Rows after it are never used: if it is
    accepted the reply ends there, and if it is rejected so is all after it. A copy of earlier text runs into
    the end of the message it copies (its end-of-turn, then the template's next header): verifying those rows
    cost 15 plain steps on the CPU for nothing (docs/BENCHMARKS.md, run 16)."""
    for i, token in enumerate(proposal.tokens):
        if is_eog(token):
            if i + 1 == len(proposal.tokens):
                return proposal
            q = proposal.q[:i + 1] if proposal.q is not None else None
            return replace(proposal, tokens=proposal.tokens[:i + 1], q=q)
    return proposal
