"""Prompt-lookup drafting: `PromptLookup`, the facade that composes the pieces of n-gram drafting.

- `NgramIndex` and `KeyFinder` (ngram_index.py): every n-gram of the context, updated incrementally, and the
  longest key with a usable continuation;
- `CopyTracker` (copy_tracker.py): the running copy and the spot where it last broke off;
- `EditMemory` (edit_memory.py): how the reply edits its source (substitutions, edited tokens, slots);
- `DraftFeedback` (draft_feedback.py): how the reply's drafts fared (trust), read from the context.

What this mirrors from llama.cpp (vendor/llama.cpp/common, the `--spec-type ngram-*` modes):

- ngram-map-k (`common_ngram_map_draft`, key_only; defaults size_n=12, size_m=48, min_hits=1): the n-gram at
  the context's end is looked up in a map that only the new positions are added to each step (`key_map`,
  `idx_last_check`).
- ngram-map-k4v (the same map with counted values, COMMON_NGRAM_MAX_VALUES=4): the key's most frequent
  continuation is drafted, and only when it dominates the others.
- ngram-cache (`common_ngram_cache_draft`, LLAMA_NGRAM_MIN..MAX = 1..4 with the "lax" context thresholds):
  keys of several lengths, the longest first, each with a minimum sample size {2, 2, 1, 1} and a minimum
  share of the most frequent continuation {66, 50, 50, 50} %.

Here (`NgramParams`): keys of 1, 2, 3, 4 and 6 tokens, the longest first (ngram-map-k's 12-token key added
nothing in our copy-with-edits simulation, since the running copy below outgrows any key); ngram-cache's
thresholds for lengths 1..4 (one hit and 50 % beyond); the most frequent continuation over the key's last 64
occurrences, copied from its most recent occurrence; a draft bounded by K, by the tokens known after the
source, by the match (2 draft tokens per matched token) and, for a key that drafted before, by what the
target accepted then plus one (ngram-map's `n_accepted`, plus one so that a key which failed once recovers;
DraftFeedback reads it from the context, so the engine need not report back).

The additions for copy-with-edits replies and lists of records, which llama.cpp's modes lack. Each is kept
because switching it off lowers the replayed speedup on the held-out prompts (app/data/bench_prompts_heldout.jsonl,
not tuned on) by more than 0.2 % on at least one recorded machine's costs, or pushes a held-out prompt further
below plain steps (docs/BENCHMARKS.md, run 43, `tools/lookup_ablation.py`); each can be switched off
(NgramParams, LookupDrafter's thresholds) to measure it again:

- a running copy: once a draft's source agrees with the reply, the next draft continues from the same
  source while the target keeps agreeing, so the match outgrows any key length;
- a resync: where the target departed from the copy (an edit), later keys are first looked up right around
  that spot, so the copy resumes after a renamed identifier or an inserted annotation even when the short
  key that re-finds it is ambiguous elsewhere in the context;
- substitutions: where the copy resumes after an edit that replaced a few source tokens with a few others (a
  rename, a fixed typo), later copies write the same replacement wherever the source has those tokens, until
  the reply once does not;
- slots: where a copy that was right breaks off, the reply varied a field (a record's id, name or price); a
  later copy stops before that position, so a draft through the next record's copy of it is not wasted;
- sure-copy cuts: a sure copy (verified long on the CPU) stops before a source token at which one of the
  reply's copies broke off before, and before a substitution the reply has made only once (a skipped passage
  looks like a rename); one that resumed at an edit is sure after SURE_LOCAL_RUN tokens;
- an accident guard: a key match wrong from its first token marks no edit and no slot;
- trust (LookupDrafter's cold threshold, DraftFeedback): until the reply's drafts are mostly right, past its
  opening, short matches wait; and free probes need a 4-token match.

Removed by run 43, gains on the tuning prompts only (none on any held-out prompt): a sure copy's cut where its
source parts from another spot that matches the context as well (edit-rename-class's two classes with the same
fields), and a full K draft for a copy resuming at an edit instead of 2 tokens per matched one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from app.engine.copy_tracker import CopyTracker
from app.engine.draft_feedback import DraftFeedback
from app.engine.edit_memory import Applied, EditMemory
from app.engine.ngram_index import KeyFinder, NgramIndex, common_prefix
from app.engine.ngram_params import NgramParams

__all__ = ["SURE_LOCAL_RUN", "NgramIndex", "NgramParams", "PromptLookup", "Proposal", "SureCut", "common_prefix"]

# A sure copy (running_copy with cut_at_edits) needs a long agreeing run, except a copy that resumed right where
# the last one broke off at an edit: it re-found its place, and after SURE_LOCAL_RUN tokens it is as sure as any.
# Replayed on five CPU cost tables, 8 beat 4, 6, 10, 12 and no exception (docs/BENCHMARKS.md, run 24).
SURE_LOCAL_RUN = 8


@dataclass(frozen=True, slots=True)
class Proposal:
    tokens: tuple[int, ...]
    source: int  # context position the tokens are copied from
    match: int  # context tokens before `source` that agree with the context's end
    key: tuple[int, int] | None  # (length, packed key) of the lookup that found it; None: a running copy
    local: bool = False  # found next to where the last copy broke off


# (context, a sure copy's tokens after it, already cut before any slot) -> how many of them the copy keeps.
SureCut = Callable[[Sequence[int], tuple[int, ...]], int]


class PromptLookup:
    """The n-gram proposer behind LookupDrafter and HybridDrafter: the index, the running copy, the edit memory
    and the drafts' feedback, composed.

    `propose(context, k)` indexes the tokens appended since the last call (and scores the last committed
    draft against them), then returns a Proposal or None; `commit(proposal)` tells it the proposal was
    drafted, so its key's draft length follows what the target accepts. `prepare(context)` starts a reply.
    """

    def __init__(self, params: NgramParams | None = None, sure_cut: SureCut | None = None) -> None:
        """`sure_cut`: replaces the rule for where a sure copy stops (see running_copy); the app never passes one.
        A policy replay does (tools/bench's clairvoyant lookup cuts each copy where the recorded reply parts from
        it), to measure what a perfect rule would give with everything else unchanged."""
        self.params = params or NgramParams()
        self.sure_cut = sure_cut
        self.index = NgramIndex(self.params.sizes)
        self.keys = KeyFinder(self.index, self.params)
        self._reset()

    def _reset(self) -> None:
        self.edits = EditMemory(self.params)
        self.copy = CopyTracker(self.params, self.edits)
        self.feedback = DraftFeedback(self.params)
        self._start = len(self.index.tokens)  # where the reply starts (prepare indexes the prompt first)

    def prepare(self, context: Sequence[int]) -> None:
        self.index.sync(context)
        self._reset()

    def propose(self, context: Sequence[int], k: int) -> Proposal | None:
        self._advance(context)
        if k <= 0:
            return None
        return self._select(context, k)

    def commit(self, proposal: Proposal) -> None:
        self.feedback.commit(proposal.tokens, proposal.key)

    @property
    def trusted(self) -> bool:
        """Were most of the tokens of this reply's recent drafts right, or is it still in its opening with no
        draft scored? (As of the last propose.) "Drafts" are committed proposals: those verified, and the free
        offers the governor was shown while drafting was off, verified or not, since each is scored from the
        context the target went on to write, which is what a verify would have found (greedy)."""
        return self.feedback.trusted(len(self.index.tokens) - self._start)

    def running_copy(self, context: Sequence[int], k: int, min_run: int, cut_at_edits: bool = False) -> Proposal | None:
        """The running copy's next tokens, where it agrees with at least the last `min_run` context tokens.

        cut_at_edits (a sure copy, verified long on the CPU, where a long verify that fails early costs up to 15
        plain steps): stop where `_sure_cut` says. And after a copy resumed at an edit, SURE_LOCAL_RUN agreeing
        tokens stand for `min_run`. Like every copy, it also stops before a slot (EditMemory.slots).
        Only looks: a following `propose` selects as it would have (a copy needs no commit, since
        CopyTracker.follow scores it from the context alone).
        """
        self._advance(context)
        copy, p = self.copy, self.params
        s = copy.src
        if cut_at_edits and p.sure_after_resync and copy.local and copy.copied >= SURE_LOCAL_RUN:
            min_run = min(min_run, SURE_LOCAL_RUN)
        if s is None or copy.run < min_run or k <= 0 or not p.running_copy:
            return None
        applied: Applied = []
        tokens, origins = self.edits.stream(context, s, copy.j, min(k, p.tokens_per_match * copy.run), applied)
        n = self.edits.cut(origins)
        if cut_at_edits and n > 0:
            n = (self._sure_cut(context, s, tokens[:n], origins[:n], applied) if self.sure_cut is None
                 else self.sure_cut(context, tokens[:n]))
        return Proposal(tokens[:n], s, copy.run, None) if n > 0 else None

    def _sure_cut(self, context: Sequence[int], s: int, tokens: tuple[int, ...], origins: list[int | None],
                  applied: Applied) -> int:
        """How many of a copy's tokens (from source s, already cut before any slot; `applied`: the learned
        substitutions they write) a sure copy keeps: those before the next source token at which one of this
        reply's copies broke off before (a rename edits every occurrence of the old name) and before a
        substitution the reply has not made twice yet (EditMemory.sure_cut).
        (policy_replay's clairvoyant lookup overrides it, to measure what a perfect rule would give.)"""
        return self.edits.sure_cut(context, origins, applied)

    def _advance(self, context: Sequence[int]) -> None:
        old = self.index.tokens
        n_old = len(old)
        if len(context) < n_old or (n_old and context[n_old - 1] != old[-1]):
            self.prepare(context)  # not a continuation of what was indexed
            return
        if len(context) == n_old:
            return
        new = context[n_old:]
        self.feedback.score(new)
        self.copy.follow(context, new, self._start)
        self.index.extend(new)

    def _select(self, context: Sequence[int], k: int) -> Proposal | None:
        copy, p = self.copy, self.params
        found: tuple[int, int, tuple[int, int] | None, bool] | None = None
        if copy.src is not None and p.running_copy:
            found = (copy.src, copy.run, None, False)
        if found is None or found[1] < self.index.sizes[-1]:
            found = self.keys.find(context, found[1] if found else 0, copy.anchor) or found
        if found is None:
            return None
        source, match, key, local = found
        if copy.start(source, match, local) and local:
            spot = copy.take_break()
            if spot is not None:
                self.edits.learn(context, spot[0], source - match, spot[1], len(context) - match)
        n = min(k, p.tokens_per_match * match)
        if key is not None:
            n = self.feedback.cap(key, n)
        tokens, origins = self.edits.stream(context, source, copy.j, n)
        n = self.edits.cut(origins)
        if n == 0:
            return None  # the copy starts at a slot; it goes on running, so its next tokens may still draft
        return Proposal(tokens[:n], source, match, key, local)
