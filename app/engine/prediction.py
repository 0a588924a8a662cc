"""A request's predicted output as a proposer: OpenAI's "Predicted Outputs" (`prediction: {"type": "content", ...}`).

The request carries text the reply is expected to mostly repeat (typically the file being edited). While the reply
follows it, its continuation is the proposal; where the reply departs (an edit: an insertion, a deletion, a
replacement), the spot is noted and the reply's last tokens are looked up to find where it resumes, as lookup's
running copy resumes after an edit (app/engine/copy_tracker.py): short keys right after the break spot first (a
renamed name, an inserted line, a deleted one), longer keys anywhere in the prediction (a moved or deleted block).
Everywhere else the mode's own proposer (draft model, lookup, hybrid, none) proposes, so a prediction that never
matches costs nothing but the lookups.

`PredictionAlignment` follows the reply through the prediction (plain token lists, no model); `PredictionProposer`
wraps the mode's proposer with it (the `Proposer` interface, app/engine/proposal.py). Copies from the prediction
are free (point masses in sampled runs, as lookup's copies), and exactness does not depend on them: the target
verifies every token.

Trust, earned and lost quickly, so that a prediction that is wrong everywhere costs nothing:

- drafts (K tokens): while most tokens recently drafted from the prediction were right (decayed, as lookup's
  DraftFeedback), the prediction drafts once 2 reply tokens agree with it; before, 5, one of them foreseen, and only
  where the mode's proposer has nothing to offer (a free one, lookup, is asked every step either way, so its state
  follows the reply as without a prediction).
- long copies: on the CPU the policy verifies a copy long only when it is sure (DraftPolicy._sure_copy: it agreed
  for SURE_COPY_RUN tokens). A prediction is the user's own guess at the reply: once it has earned trust in this
  reply (a copy from it agreed that long, or the reply followed it from its first token for start_run tokens, or a
  long copy from it was accepted whole), its copies are sure after trusted_run agreeing tokens instead of 16, e.g.
  right after an edit. Two long copies in a row that fail early take the trust away (one is often a first-time
  edit, a renamed name, after which the prediction resumes at once).

Replayed on recorded greedy edit replies of Qwen2.5-Coder-1.5B with three measured CPU cost tables (the policy
replay of tools/bench/policy_replay.py), with the code being edited as the prediction: lookup gained 2.3% on the
four prompts the rules were tuned on (an own rename request, code-refactor, edit-add-types, edit-rename-class) and
8.6% on two held out (h-edit-docstrings, h-edit-logging). The code is in the prompt, so lookup already copies it;
what the prediction adds is the earlier trust. Mode none gained 59% and 29% (as lookup does without a
prediction), and a wrong prediction (another prompt's code) changed lookup's time by nothing and none's by 0.1%.
"""

from __future__ import annotations

import time
from bisect import bisect_left, bisect_right
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from app.engine.edit_memory import Applied, EditMemory
from app.engine.ngram_params import NgramParams
from app.engine.proposal import NO_PROPOSAL, Outcome, Proposal, Proposer
from app.engine.sampling import SampleNoise, SamplingParams, point_mass

__all__ = ["PredictionAlignment", "PredictionParams", "PredictionProposer"]


@dataclass(frozen=True, slots=True)
class PredictionParams:
    local_sizes: tuple[int, ...] = (3, 2, 1)  # keys looked up next to the break spot, longest first
    anywhere_sizes: tuple[int, ...] = (8, 6, 4)  # keys looked up anywhere in the prediction, longest first
    ahead: int = 64  # a local key's continuation may start up to this far after the break spot ...
    back: int = 4  # ... or this far before it (keys of 2 tokens or more)
    one_ahead: int = 16  # a 1-token key only this close after it (frequent tokens match anywhere)
    max_extend: int = 32  # a found match is measured backwards up to this many tokens
    min_run: int = 2  # reply tokens agreeing with the prediction before it drafts (a 1-token key alone never does)
    # ... while most of the tokens recently drafted from the prediction were right (draft_trust, decayed per draft as
    # lookup's DraftFeedback); before, cold_run, and a token foreseen since the key was found. Short accidental
    # matches of a prediction that is wrong everywhere are what this keeps from drafting.
    cold_run: int = 5
    draft_trust: float = 0.8
    probe_run: int = 4  # the same for a free offer while the governor has drafting off
    copy_run: int = 8  # the same for a long copy under the copy governor (a GPU), before trust is earned
    trusted_run: int = 6  # with trust earned: agreeing tokens after which a copy counts as sure
    # Trust is also earned where the reply has followed the prediction from its first token for this many tokens.
    start_run: int = 8
    # A long copy from the prediction accepted for less than this share of its tokens is a strike; max_strikes of
    # them with no copy accepted whole in between take the trust away (one is often a first-time edit, a renamed
    # name, after which the prediction resumes at once).
    lose_below: float = 0.5
    max_strikes: int = 2
    # A sure copy stops before a prediction token at which the reply departed before (edit_cuts), and before a
    # substitution the reply made only once (unconfirmed_cuts): EditMemory.sure_cut, as lookup's sure copies.
    edit_cuts: bool = True
    unconfirmed_cuts: bool = False
    substitutions: bool = True  # the replacements the reply made where it resumed are written in later copies


# A departure moves the break spot (and marks the prediction's token there as edited) only after an alignment agreed
# for this many tokens; a substitution is learned where a resume has agreed this long.
SHOWN_RUN = 3
ANYWHERE_TRIES = 8  # occurrences of a long key compared, each side of the break spot
TRUST_DECAY = 0.8  # per scored draft from the prediction: the last five or so count (as DraftFeedback's)


NgramPositions = dict[int, dict[tuple[int, ...], list[int]]]


def ngram_positions(prediction: tuple[int, ...], params: PredictionParams) -> NgramPositions:
    """n -> each n-gram of the prediction -> the positions right after its occurrences, ascending (n: the params'
    key sizes)."""
    index: NgramPositions = {n: {} for n in sorted({*params.local_sizes, *params.anywhere_sizes})}
    for n, table in index.items():
        for e in range(n, len(prediction) + 1):
            table.setdefault(prediction[e - n : e], []).append(e)
    return index


class PredictionAlignment:
    """Where the reply is in the prediction: a pointer that follows the reply while it agrees, and a resync after
    each departure. Fed the reply token by token (`follow`); `continuation` is what it predicts next."""

    def __init__(self, prediction: Sequence[int], params: PredictionParams | None = None,
                 index: NgramPositions | None = None) -> None:
        """index: the prediction's `ngram_positions` for these params, when already built (a reply's alignment is
        made afresh for each reply; the index of a long prediction takes a while)."""
        self.params = params or PredictionParams()
        self.prediction = tuple(prediction)
        self.index = index if index is not None else ngram_positions(self.prediction, self.params)
        prm = self.params
        self.edits = EditMemory(NgramParams(slot_cuts=False, substitutions=prm.substitutions, edit_cuts=prm.edit_cuts,
                                            unconfirmed_cuts=prm.unconfirmed_cuts))
        self.reply: list[int] = []
        # Aligned: `ptr` is the prediction position the reply's next token should match (`j`: tokens of a learned
        # substitution at ptr already written); `run`: reply tokens agreeing before it; `followed`: of those, the
        # ones that came after the alignment was found (a key match alone is not evidence it goes on).
        self.ptr: int | None = 0
        self.j = 0
        self.run = 0
        self.followed = 0
        self.local = False  # the alignment resumed next to the break spot (or is the prediction's start)
        self.anchor = 0  # prediction position where the reply last departed (the start until it does)
        self.broke_at = 0  # reply position of that departure
        self._pending_sub: tuple[tuple[int, ...], tuple[int, ...]] | None = None
        self.origin = 0  # prediction position where the current alignment's agreement starts
        self.departures = 0
        self.resyncs = 0

    @property
    def aligned(self) -> bool:
        return self.ptr is not None

    def extend(self, tokens: Sequence[int]) -> None:
        for token in tokens:
            self.follow(token)

    def follow(self, token: int) -> None:
        """The reply's next token: advance the pointer, or note the departure; when lost, look for the resume."""
        here = len(self.reply)
        self.reply.append(token)
        if self.ptr is not None:
            self._advance(token, here)
            if self.ptr is not None:
                return
        self._resync()

    def _advance(self, token: int, here: int) -> None:
        p, s, j = self.prediction, self.ptr, self.j
        assert s is not None
        sub = self.edits.sub_at(p, s, len(p)) if self.edits.subs and s < len(p) else None
        expected = (sub[1][j] if sub is not None else p[s]) if s < len(p) else None
        if token != expected:
            if sub is not None:
                self.edits.forget(sub)  # the reply did not make this substitution here
            # Only an alignment that had shown itself (SHOWN_RUN agreeing tokens) moves the break spot and marks an
            # edited token: a short key match that is wrong at once says nothing about the prediction there.
            if self.run >= SHOWN_RUN:
                if s < len(p) and j == 0:
                    self.edits.edited.add(p[s])
                self.anchor, self.broke_at = s, here
            self.departures += 1
            self.ptr, self.j, self.run, self.followed, self.local = None, 0, 0, 0, False
            self._pending_sub = None
            return
        if self._pending_sub is not None and self.run + 1 >= SHOWN_RUN:
            self.edits.learn_sides(*self._pending_sub)  # the resume held: what the reply wrote was a replacement
            self._pending_sub = None
        if sub is not None and j + 1 < len(sub[1]):
            j += 1
        else:
            if sub is not None:
                self.edits.confirm(sub[0])
            s, j = s + (len(sub[0]) if sub is not None else 1), 0
        self.ptr, self.j = s, j
        self.run += 1
        self.followed += 1

    def _resync(self) -> None:
        """Look the reply's last tokens up in the prediction: next to the break spot first, then anywhere."""
        found = self._local() or self._anywhere()
        if found is None:
            return
        e, match, local = found
        self._pending_sub = None
        if local and self.params.substitutions:
            # What the reply wrote between the departure and the resume replaced what the prediction had there
            # (learned once the resume has held for SHOWN_RUN tokens).
            after = min(match, len(self.reply) - self.broke_at)
            self._pending_sub = (self.prediction[self.anchor : e - after],
                                 tuple(self.reply[self.broke_at : len(self.reply) - after]))
        self.ptr, self.j, self.run, self.followed, self.local = e, 0, match, 0, local
        self.origin = e - match
        self.resyncs += 1

    def _local(self) -> tuple[int, int, bool] | None:
        a, prm, reply = self.anchor, self.params, self.reply
        for n in prm.local_sizes:
            if n > len(reply):
                continue
            positions = self.index[n].get(tuple(reply[-n:]))
            if not positions:
                continue
            # The resume is after the break (an insertion resumes at it, a replacement or a deletion past it), so
            # the first occurrence after it; a key of 2 tokens or more may also sit just before it.
            i = bisect_right(positions, a)
            ahead = prm.one_ahead if n == 1 else prm.ahead
            if i < len(positions) and positions[i] <= a + ahead:
                return positions[i], self._extend(positions[i], n), True
            if n > 1 and i > 0 and positions[i - 1] >= a - prm.back:
                return positions[i - 1], self._extend(positions[i - 1], n), True
        return None

    def _anywhere(self) -> tuple[int, int, bool] | None:
        """The occurrence of a long key whose match reaches back furthest, if no other reaches as far (code repeats
        its 4-token phrases: the first one after the break was often another function's)."""
        a, reply = self.anchor, self.reply
        for n in self.params.anywhere_sizes:
            if n > len(reply):
                continue
            positions = self.index[n].get(tuple(reply[-n:]))
            if not positions:
                continue
            if len(positions) == 1:
                return positions[0], self._extend(positions[0], n), False
            i = bisect_left(positions, a)  # nearest from the break spot on first, so a tie goes there
            ordered = positions[i:i + ANYWHERE_TRIES] + positions[max(0, i - ANYWHERE_TRIES):i][::-1]
            matches = sorted(((self._extend(e, n), e) for e in ordered), key=lambda m: -m[0])
            if matches[0][0] > matches[1][0]:
                return matches[0][1], matches[0][0], False
            return None  # ambiguous: a longer key, or the next token, may tell
        return None

    def _extend(self, e: int, n: int) -> int:
        """Reply tokens agreeing with the prediction before position e (at least the key's n)."""
        p, reply = self.prediction, self.reply
        m = n
        while m < self.params.max_extend and e - m > 0 and m < len(reply) and p[e - m - 1] == reply[-m - 1]:
            m += 1
        return m

    def continuation(self, k: int, sure: bool = False) -> tuple[int, ...]:
        """Up to k tokens the prediction says come next (learned substitutions written); sure: cut before the next
        edit the reply will likely make again (EditMemory.sure_cut). Empty while not aligned."""
        s = self.ptr
        if s is None or k <= 0:
            return ()
        applied: Applied = []
        edits, p = self.edits, self.prediction
        tokens, origins = edits.stream(p, s, self.j, k, applied)  # inside a substitution (j > 0): its rest first
        if sure:
            return tokens[: edits.sure_cut(p, origins, applied)]
        return tokens


def _as_draft(tokens: tuple[int, ...], sampling: SamplingParams, start: float) -> Proposal:
    """Prediction tokens as a free draft: point masses in sampled runs (as lookup's copies, drafters._copy_as_draft)."""
    q = tuple(point_mass(t) for t in tokens) if not sampling.greedy else None
    return Proposal(tokens, q, (time.perf_counter() - start) * 1000.0, free=True, predicted=True)


class PredictionProposer:
    """The mode's proposer, with copies of a request's predicted output wherever the reply is following it.

    `mode` stays the wrapped mode's (the stats report it); `drafts` is always true, so a prediction drafts in mode
    "none" too. One per reply: `prepare` starts following at the reply's first token.
    """

    copies = True
    drafts = True

    def __init__(self, inner: Proposer, prediction: Sequence[int], params: PredictionParams | None = None) -> None:
        self.inner = inner
        self.mode = inner.mode
        self.costs_time = inner.costs_time
        self.params = params or PredictionParams()
        self.prediction = tuple(prediction)
        self.alignment = PredictionAlignment(self.prediction, self.params)
        self._index = self.alignment.index
        self.start: int | None = None  # context position of the reply's first token
        # Trust (see the module's docstring): earned by a copy that agreed for the policy's sure run, or by a long
        # copy accepted whole; lost by a long copy that failed before half its tokens.
        self.trusted = False
        self._strikes = 0  # copies from the prediction that failed early since the last one accepted whole
        self._offered: tuple[int, ...] = ()  # the last proposal made from the prediction, to score it in observe
        # Its drafts' tokens accepted and tried, decayed per draft; the prior (1 of 2) is below draft_trust, so the
        # first drafts need a cold run.
        self._hits, self._tries = 1.0, 2.0

    @property
    def native_ms(self) -> float:
        return self.inner.native_ms

    def prepare(self, context: list[int]) -> Iterator[tuple[int, int]]:
        self.alignment = PredictionAlignment(self.prediction, self.params, self._index)
        self.start, self.trusted, self._strikes, self._offered = len(context), False, 0, ()
        self._hits, self._tries = 1.0, 2.0
        return self.inner.prepare(context)

    def propose(self, context: list[int], limit: int, sampling: SamplingParams, noise: SampleNoise) -> Proposal:
        """The prediction's continuation while its drafts are mostly right (or the reply is following it from its
        first token); before that, the mode's proposal, and the prediction's only where the mode has none."""
        start = time.perf_counter()
        run = self._sync(context)
        warm = self._warm()
        tokens = self.alignment.continuation(limit) if run >= self._min_run(warm) or self._at_start() else ()
        # A free proposer (lookup) is asked every step, so that its state (its running copy, its drafts' feedback)
        # follows the reply as it would without a prediction; a model is asked only where its draft is used.
        theirs = self.inner.propose(context, limit, sampling, noise) if not self.inner.costs_time else None
        if tokens and (warm or self._at_start()):
            return self._offer(tokens, sampling, start)
        self._offered = ()
        if theirs is None:
            theirs = self.inner.propose(context, limit, sampling, noise)
        if theirs.tokens or not tokens:
            return theirs
        return self._offer(tokens, sampling, start)

    def propose_free(self, context: list[int], limit: int, sampling: SamplingParams) -> Proposal:
        start = time.perf_counter()
        run = self._sync(context)
        tokens = self.alignment.continuation(limit) if run >= max(self.params.probe_run, self._min_run()) else ()
        if tokens and self._warm():
            return self._offer(tokens, sampling, start)
        self._offered = ()
        theirs = self.inner.propose_free(context, limit, sampling)
        if theirs.tokens or not tokens:
            return theirs
        return self._offer(tokens, sampling, start)

    def propose_copy(self, context: list[int], limit: int, sampling: SamplingParams, sure_run: int = 0) -> Proposal:
        start = time.perf_counter()
        run = self._sync(context)
        prm = self.params
        if run >= sure_run > 0 or (self.alignment.origin == 0 and run >= prm.start_run):
            self.trusted = True  # it agreed as long as the policy's rule asks of any copy, or from its first token
        if sure_run > 0:
            needed = min(sure_run, prm.trusted_run) if self.trusted else sure_run
        else:
            needed = min(prm.copy_run, prm.trusted_run) if self.trusted else prm.copy_run
        if run >= needed:
            tokens = self.alignment.continuation(limit, sure=sure_run > 0)
            if tokens:
                return self._offer(tokens, sampling, start)
        self._offered = ()
        return self.inner.propose_copy(context, limit, sampling, sure_run) if self.inner.copies else NO_PROPOSAL

    def observe(self, outcome: Outcome) -> None:
        p = outcome.proposal
        if p.predicted and p.tokens and self._offered[: len(p.tokens)] == p.tokens:
            self._hits = self._hits * TRUST_DECAY + outcome.accepted
            self._tries = self._tries * TRUST_DECAY + len(p.tokens)
            if p.copy and outcome.accepted < self.params.lose_below * len(p.tokens):
                self._strikes += 1
                if self._strikes >= self.params.max_strikes:
                    self.trusted = False
            elif p.copy and outcome.accepted == len(p.tokens):
                self.trusted = True
                self._strikes = 0
        self._offered = ()
        self.inner.observe(outcome)

    def _offer(self, tokens: tuple[int, ...], sampling: SamplingParams, start: float) -> Proposal:
        self._offered = tokens
        return _as_draft(tokens, sampling, start)

    def _warm(self) -> bool:
        """Were most of the tokens recently drafted from the prediction right?"""
        return self._hits >= self.params.draft_trust * self._tries

    def _min_run(self, warm: bool | None = None) -> int:
        """The run a draft needs: min_run while the prediction is warm; else cold_run, and the alignment must have
        foreseen a token of the reply since its key was found (an accidental match rarely does)."""
        prm = self.params
        if self._warm() if warm is None else warm:
            return prm.min_run
        return max(prm.min_run, prm.cold_run) if self.alignment.followed else 1 << 30

    def _at_start(self) -> bool:
        """The reply is at the prediction's start, or has followed it from there: the prediction is the expected
        reply, so its first tokens draft without a run."""
        a = self.alignment
        return a.ptr is not None and a.ptr == a.run == len(a.reply)

    def _sync(self, context: Sequence[int]) -> int:
        """Feed the alignment the reply's tokens it has not seen; the run it agrees for (0: not aligned)."""
        if self.start is None:
            self.start = len(context)
        a = self.alignment
        seen = self.start + len(a.reply)
        if len(context) < seen:  # not the reply that was being followed: start again from its first token
            self.alignment = a = PredictionAlignment(self.prediction, self.params, self._index)
            seen = self.start
        a.extend(context[seen:])
        return a.run if a.ptr is not None else 0

