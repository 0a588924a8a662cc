"""Drafters: who proposes the next few tokens. One interface, four modes.

- `draft`: a second, smaller GGUF with its own KV cache, kept in step with the reply and reused
  (never re-prefilled): only the tokens it has not seen yet are decoded before each draft.
- `lookup`: prompt-lookup n-gram drafting from the context itself (app/engine/ngram.py); costs almost nothing.
- `hybrid`: the n-gram copy where the context holds a long match, the draft model elsewhere.
- `none`: proposes nothing, so the engine runs plain decoding through the same code path.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Protocol

from app.engine.ngram import NgramParams, PromptLookup
from app.engine.penalties import PenaltyWindow
from app.engine.prompt_cache import PromptCache
from app.engine.sampling import Dist, SampleNoise, SamplingParams, distribution, point_mass, top_prob
from app.llama_backend import LlamaContext

MODES = ("draft", "lookup", "hybrid", "none")
NEEDS_DRAFT = ("draft", "hybrid")
# "auto" (the default) picks by what pays on this build: with a GPU a verify pass of a few rows costs
# about one token, so the draft model pays and hybrid adds free n-gram copies; on the CPU the draft
# model costs about half a target step (docs/BENCHMARKS.md), so prompt lookup, which costs nothing, is
# the mode that never loses there. The pick is shown (stats.mode, the banner), never silent.
CHOICES = ("auto", *MODES)


def auto_mode(has_draft: bool, gpu_offload: bool) -> str:
    return "hybrid" if has_draft and gpu_offload else "lookup"


# Long running copies (SpecParams.copy_max) on "auto", the settings' default: K up to 31 on a GPU and on the
# CPU, judged differently. A GPU verifies 32 rows for little more than one, so a copy that agrees for 8 tokens
# is worth verifying 31 tokens ahead under the copy governor, as llama.cpp's ngram-map-k does with 48 (replayed:
# 2.21x against 1.96x of plain steps with GPU-like costs). On the 2-core CPU a 32-row verify costs 11-16 plain
# steps, so a long copy that fails early loses more than the ones that succeed win (1.18x against 1.25x with
# the copy governor): there only sure copies are taken (SpecParams.sure_copies, SURE_COPY_*), which replayed
# at 1.16-1.32x against 1.14-1.28x with copies off on five measured cost tables (docs/BENCHMARKS.md, run 11).
COPY_MAX_AUTO = -1
AUTO_COPY_MAX = 31


@dataclass(frozen=True, slots=True)
class Draft:
    tokens: tuple[int, ...]
    q: tuple[Dist, ...] | None  # the draft distributions the tokens were sampled from (sampled runs)
    ms: float
    # Made without a model pass (an n-gram copy, also hybrid's): its time says nothing of what the draft model
    # costs per position, so the governor leaves it out of that estimate (Governor.observe).
    free: bool = False
    # The tokens a draft model decoded to catch up with a context that moved on without it (steps it sat out),
    # beyond the one or two every drafting step syncs, and their share of `ms`: a price of having been off,
    # not of drafting, which the governor keeps apart (Governor.observe).
    catch_up: int = 0
    catch_up_ms: float = 0.0


NO_DRAFT = Draft((), None, 0.0)


class Drafter(Protocol):
    mode: str
    costs_time: bool  # False for drafters whose cost the governor may ignore
    copies: bool  # whether propose_copy may return anything

    def propose(self, context: list[int], k: int, sampling: SamplingParams, noise: SampleNoise) -> Draft: ...

    def propose_free(self, context: list[int], k: int, sampling: SamplingParams) -> Draft:
        """A proposal that costs nothing to make (an n-gram copy), or an empty draft. The engine offers it to
        the governor as a probe while drafting is off."""

    def propose_copy(self, context: list[int], k: int, sampling: SamplingParams, sure_run: int = 0) -> Draft:
        """Up to k tokens of a long running copy (the reply has agreed with an earlier passage for at least
        COPY_MIN_RUN tokens), or an empty draft. Such copies are judged by a governor of their own: they are
        right far more often than other proposals, so they pay at a K that other drafts would lose at.
        sure_run > 0: a sure copy, one that has agreed for sure_run tokens (SURE_COPY_RUN, or
        SURE_COPY_RUN_CHEAP), cut before the next token the reply edited before (PromptLookup.running_copy):
        what the CPU verifies long."""

    def prepare(self, context: list[int]) -> Iterator[tuple[int, int]]:
        """Called once per reply before the first step, and run to its end unless the reply is stopped.

        A model drafter decodes the prompt's uncached tail a batch at a time and yields (done, total) tokens
        after each, so the engine reports progress and a Stop ends it between batches: on a CPU the draft's
        prefill of a 1.5k-token prompt took half as long as the target's (docs/BENCHMARKS.md, run 36).
        Drafters without a model index the context and yield nothing."""

    @property
    def native_ms(self) -> float:
        """Time this drafter has spent inside llama_decode (0 for drafters without a model)."""


class _ModelFree:
    """What a drafter without a model of its own does before a reply and inside llama.cpp: nothing."""

    native_ms = 0.0
    copies = False

    def prepare(self, context: list[int]) -> Iterator[tuple[int, int]]:
        return iter(())

    def propose_free(self, context: list[int], k: int, sampling: SamplingParams) -> Draft:
        return NO_DRAFT

    def propose_copy(self, context: list[int], k: int, sampling: SamplingParams, sure_run: int = 0) -> Draft:
        return NO_DRAFT


class NoDrafter(_ModelFree):
    mode = "none"
    costs_time = False

    def propose(self, context: list[int], k: int, sampling: SamplingParams, noise: SampleNoise) -> Draft:
        return NO_DRAFT


class LookupDrafter(_ModelFree):
    """Prompt-lookup drafting from an n-gram index of the context (app/engine/ngram.py).

    The index is built once per reply in `prepare` (keeping what it already holds of the same conversation) and
    then only fed the tokens appended since the last step, so a step's cost does not grow with the context.
    """

    mode = "lookup"
    costs_time = False
    copies = True

    def __init__(self, params: NgramParams | None = None, min_match: int = 3, resync_min_match: int = 2,
                 cold_min_match: int = 5) -> None:
        self.lookup = PromptLookup(params)
        # Only matches of min_match context tokens or more are drafted (resync_min_match for a copy resuming
        # next to where it broke off at an edit: it has re-found its spot). On a repacked CPU a failed 3-token
        # draft costs 2.2 plain steps, and the one- and two-token matches of fresh text mostly fail
        # (docs/BENCHMARKS.md, run 4). Until this reply's drafts are mostly right (PromptLookup.trusted: past
        # its first tokens, a reply must earn that with a right draft), a match needs cold_min_match tokens:
        # the 3- and 4-token matches of prose and fresh code cost lookup 2-4% against plain decoding there,
        # and copies rarely need them (runs 7 and 8).
        self.min_match = min_match
        self.resync_min_match = resync_min_match
        self.cold_min_match = cold_min_match

    def prepare(self, context: list[int]) -> Iterator[tuple[int, int]]:
        self.lookup.prepare(context)
        return iter(())

    def propose(self, context: list[int], k: int, sampling: SamplingParams, noise: SampleNoise) -> Draft:
        return _ngram_draft(self.lookup, context, k, sampling, self.min_match, self.resync_min_match,
                            self.cold_min_match) or NO_DRAFT

    def propose_free(self, context: list[int], k: int, sampling: SamplingParams) -> Draft:
        # A probe while drafting is off only for a long match: a failed probe costs its verify rows
        # (on a repacked CPU, a 2-row verify costs two plain steps), and the short accidental matches
        # of prose and fresh code were what made lookup 5-14% slower than plain there.
        return _ngram_draft(self.lookup, context, k, sampling, max(self.min_match, PROBE_MIN_MATCH)) or NO_DRAFT

    def propose_copy(self, context: list[int], k: int, sampling: SamplingParams, sure_run: int = 0) -> Draft:
        return _copy_draft(self.lookup, context, k, sampling, sure_run)


PROBE_MIN_MATCH = 4  # context tokens agreeing with a free probe's source (as hybrid's n-gram copies)
# A running copy that has agreed with this many context tokens is drafted as a long copy (propose_copy). In
# the bench's copy prompts such copies were right for 9 tokens in 10 or more; shorter ones often end at the
# next edit (docs/BENCHMARKS.md, run 6).
COPY_MIN_RUN = 8
# Sure copies (the CPU's long copies): the running copy has agreed for SURE_COPY_RUN tokens and is cut before
# the next token the reply edited before; verified long only when that leaves SURE_COPY_MIN tokens or more
# (SpecEngine._sure_copy). Replayed on the bench's prompts with three measured CPU cost tables, a 16-token run
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


def _copy_draft(lookup: PromptLookup, context: list[int], k: int, sampling: SamplingParams, sure_run: int) -> Draft:
    start = time.perf_counter()
    proposal = lookup.running_copy(context, k, sure_run or COPY_MIN_RUN, cut_at_edits=sure_run > 0)
    return NO_DRAFT if proposal is None else _copy_as_draft(proposal.tokens, sampling, start)


def _copy_as_draft(tokens: tuple[int, ...], sampling: SamplingParams, start: float) -> Draft:
    """Copied tokens as a draft: point masses for sampled runs (the copy is certain of them), timed from start."""
    q = tuple(point_mass(t) for t in tokens) if not sampling.greedy else None
    return Draft(tokens, q, (time.perf_counter() - start) * 1000.0, free=True)


def _ngram_draft(lookup: PromptLookup, context: list[int], k: int, sampling: SamplingParams,
                 min_match: int = 0, resync_min_match: int | None = None,
                 cold_min_match: int | None = None) -> Draft | None:
    """The n-gram continuation as a draft (point masses for sampled runs), committed to the index; None
    when there is none, or its match is shorter than `min_match` (`resync_min_match` for a copy resuming
    next to where it broke off; `cold_min_match` while the reply's drafts have not been mostly right)."""
    start = time.perf_counter()
    proposal = lookup.propose(context, k)
    if proposal is None or not proposal.tokens:
        return None
    if proposal.local and resync_min_match is not None:
        needed = resync_min_match
    elif cold_min_match is not None and not lookup.trusted:
        needed = cold_min_match
    else:
        needed = min_match
    if proposal.match < needed:
        return None
    lookup.commit(proposal)
    return _copy_as_draft(proposal.tokens, sampling, start)


# A step's catch-up (the last draft token, the correction or bonus) is one to a few tokens; a longer tail (a new
# prompt) goes as one batch.
CATCH_UP_ONE_ROW_MAX = 8
# What a drafting step leaves the draft cache behind by: its last draft token (never decoded) and the target's
# bonus token, or just the correction. More is a catch-up with steps the draft model sat out.
STEP_SYNC = 2


class ModelDrafter:
    """Drafts with a small model. Stops early when its confidence falls below p_min. With penalties, each
    draft position is penalised as the target will penalise it (context plus the tokens drafted before
    it), so the draft agrees with the target as often as without them."""

    mode = "draft"
    costs_time = True
    copies = False

    def __init__(self, ctx: LlamaContext, p_min: float = 0.75, draft_min: int = 0) -> None:
        self.ctx = ctx
        self.p_min = p_min
        self.draft_min = draft_min
        self.one_row_catch_up = False  # SpecParams.steady_shapes: drafting's one-row passes keep their CUDA graph
        self.prompt_cache: PromptCache | None = None  # the session's kept draft caches of earlier prompts
        self._agreed = 0
        self._window: PenaltyWindow | None = None

    @property
    def native_ms(self) -> float:
        return self.ctx.native_ms

    def propose_free(self, context: list[int], k: int, sampling: SamplingParams) -> Draft:
        return NO_DRAFT

    def propose_copy(self, context: list[int], k: int, sampling: SamplingParams, sure_run: int = 0) -> Draft:
        return NO_DRAFT

    def prepare(self, context: list[int]) -> Iterator[tuple[int, int]]:
        self._agreed = 0  # a new reply: compare the whole cache once
        self._window = None  # made at the first draft, with that reply's sampling
        return self._prefill(context)

    def _prefill(self, context: list[int]) -> Iterator[tuple[int, int]]:
        # A generator of its own, so that prepare() resets the reply's state even if it is never iterated.
        # The last token is decoded again even when cached: its logits are what the first draft starts from.
        if self.prompt_cache is not None:
            self.prompt_cache.swap_in(self.ctx, context[:-1])  # another chat's cache out, this one's back in
        tail = context[self.ctx.keep_common_prefix(context[:-1]):]
        for done in self.ctx.decode_batches(tail):
            yield done, len(tail)
        self._agreed = len(context)  # stopped before the end: the next sync compares the whole cache again

    def sync(self, context: list[int]) -> int:
        """Bring the draft cache to `context`: keep the common prefix, decode only the rest (returned: how many)."""
        # The last token is decoded again even when cached: its logits are what the draft starts from.
        common = self.ctx.keep_common_prefix(context[:-1], known=self._agreed)
        tail = context[common:]
        if self.one_row_catch_up and len(tail) <= CATCH_UP_ONE_ROW_MAX:
            for token in tail:
                self.ctx.decode([token], logits_for="last")
        else:
            self.ctx.decode(tail, logits_for="last")
        # Within a reply the context only grows, so what agrees now still agrees at the next step.
        self._agreed = len(context)
        return len(tail)

    def propose(self, context: list[int], k: int, sampling: SamplingParams, noise: SampleNoise) -> Draft:
        start = time.perf_counter()
        if k <= 0:
            return NO_DRAFT
        k = min(k, self.ctx.n_ctx - len(context))
        synced = self.sync(context)
        catch_up = max(0, synced - STEP_SYNC)
        catch_up_ms = (time.perf_counter() - start) * 1000.0 * catch_up / synced if catch_up else 0.0
        window = self._penalties(context, sampling)
        tokens: list[int] = []
        dists: list[Dist] = []
        for i in range(k):
            logits = self.ctx.logits(-1) if window is None else window.apply(self.ctx.logits(-1))
            if sampling.greedy:
                token, confidence = top_prob(logits)
            else:
                q = distribution(logits, sampling)
                # The target samples this position with the same noise, so its choice matches when p ~ q.
                token, confidence = noise.sample(q, len(context) + i), float(q.probs[0])
                dists.append(q)
            if i >= self.draft_min and confidence < self.p_min:
                if not sampling.greedy:
                    dists.pop()
                break
            tokens.append(token)
            if i == k - 1:
                break  # the target verifies it; no need to extend the draft cache
            self.ctx.decode([token], logits_for="last")
            if window is not None:
                window.push(token)
        if window is not None:
            window.truncate(len(context))
        q_out = tuple(dists) if not sampling.greedy else None
        return Draft(tuple(tokens), q_out, (time.perf_counter() - start) * 1000.0, catch_up=catch_up,
                     catch_up_ms=catch_up_ms)

    def _penalties(self, context: list[int], sampling: SamplingParams) -> PenaltyWindow | None:
        if not sampling.penalized:
            return None
        if self._window is None:
            self._window = PenaltyWindow(sampling, context)
        self._window.sync(context)
        return self._window


class HybridDrafter:
    """The draft model, except where the context already holds the continuation: then a free n-gram copy.

    The n-gram draft is taken when its match is long (at least `min_match` tokens of context agree with its
    source: a running copy or a long key that passed its support thresholds), else the model drafts. A skipped
    step costs the model only a catch-up: ModelDrafter.sync decodes the tokens it missed in one batch.
    """

    mode = "hybrid"
    costs_time = True
    copies = True

    def __init__(self, model: ModelDrafter, lookup: PromptLookup | None = None, min_match: int = 4) -> None:
        self.model = model
        self.lookup = lookup or PromptLookup()
        self.min_match = min_match

    @property
    def native_ms(self) -> float:
        return self.model.native_ms

    def prepare(self, context: list[int]) -> Iterator[tuple[int, int]]:
        self.lookup.prepare(context)
        return self.model.prepare(context)

    def propose(self, context: list[int], k: int, sampling: SamplingParams, noise: SampleNoise) -> Draft:
        start = time.perf_counter()
        copy = _ngram_draft(self.lookup, context, k, sampling, self.min_match)
        if copy is not None:
            return copy
        draft = self.model.propose(context, k, sampling, noise)
        return replace(draft, ms=(time.perf_counter() - start) * 1000.0)

    def propose_free(self, context: list[int], k: int, sampling: SamplingParams) -> Draft:
        """While the governor has the draft model off, hybrid still offers long n-gram copies, as lookup does."""
        return _ngram_draft(self.lookup, context, k, sampling, max(self.min_match, PROBE_MIN_MATCH)) or NO_DRAFT

    def propose_copy(self, context: list[int], k: int, sampling: SamplingParams, sure_run: int = 0) -> Draft:
        return _copy_draft(self.lookup, context, k, sampling, sure_run)
