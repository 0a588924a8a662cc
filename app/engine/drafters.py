"""The proposers of the modes (the interface: app/engine/proposal.py; `mtp`: app/engine/mtp_drafter.py).

- `draft`: a second, smaller GGUF with its own KV cache, kept in step with the reply and reused
  (never re-prefilled): only the tokens it has not seen yet are decoded before each draft.
- `lookup`: prompt-lookup n-gram drafting from the context itself (app/engine/ngram.py); costs almost nothing.
- `hybrid`: the n-gram copy where the context holds a long match, the draft model elsewhere.
- `none`: proposes nothing, so the engine runs plain decoding through the same code path.

How long a proposal may be, and whether drafting runs at all, is the policy's call (app/engine/draft_policy.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import replace

import numpy as np

from app.engine.ngram import NgramParams, PromptLookup
from app.engine.penalties import PenaltyWindow
from app.engine.prompt_cache import PromptCache
from app.engine.proposal import NO_PROPOSAL, Proposal, ProposerBase
from app.engine.sampling import Dist, SampleNoise, SamplingParams, distribution, point_mass, top_prob
from app.llama_backend import LlamaContext

MODES = ("draft", "lookup", "hybrid", "mtp", "none")
NEEDS_DRAFT = ("draft", "hybrid")
NEEDS_MTP = ("mtp",)  # a target with MTP (NextN) layers (app/engine/mtp_drafter.py)
# "auto" (the default) picks by what pays on this build: with a GPU a verify pass of a few rows costs
# about one token, so the draft model pays and hybrid adds free n-gram copies; on the CPU the draft
# model costs about half a target step (docs/BENCHMARKS.md), so prompt lookup, which costs nothing, is
# the mode that never loses there. The pick is shown (stats.mode, the banner), never silent.
CHOICES = ("auto", *MODES)


def auto_mode(has_draft: bool, gpu_offload: bool, has_mtp: bool = False) -> str:
    """On a GPU a target's own MTP head first (trained to draft for it, one layer per token: the reported gains
    are 1.6-3.3x), else hybrid with a draft model; on the CPU lookup, which costs nothing. The governor still
    turns drafting off where it loses."""
    if gpu_offload and has_mtp:
        return "mtp"
    return "hybrid" if has_draft and gpu_offload else "lookup"


class NoDrafter(ProposerBase):
    mode = "none"
    costs_time = False
    drafts = False

    def propose(self, context: list[int], k: int, sampling: SamplingParams, noise: SampleNoise) -> Proposal:
        return NO_PROPOSAL


class LookupDrafter(ProposerBase):
    """Prompt-lookup drafting from an n-gram index of the context (app/engine/ngram.py).

    The index is built once per reply in `prepare` (keeping what it already holds of the same conversation) and
    then only fed the tokens appended since the last step, so a step's cost does not grow with the context.
    """

    mode = "lookup"
    costs_time = False
    copies = True

    def __init__(self, params: NgramParams | None = None, min_match: int = 3, resync_min_match: int = 2,
                 cold_min_match: int = 5, probe_min_match: int | None = None) -> None:
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
        # A probe while drafting is off only for a long match: a failed probe costs its verify rows (on a repacked
        # CPU, a 2-row verify costs two plain steps), and the short accidental matches of prose and fresh code
        # were what made lookup 5-14% slower than plain there. Run 43: without it the held-out mean gains up to
        # 0.5%, but the lowest prompts fall further below plain steps (h-code-class 0.983 -> 0.956 on run 29b's costs,
        # edit-fix-typos 1.101 -> 0.914 on run 24's costs), so it stays.
        self.probe_min_match = max(min_match, PROBE_MIN_MATCH if probe_min_match is None else probe_min_match)

    def prepare(self, context: list[int]) -> Iterator[tuple[int, int]]:
        self.lookup.prepare(context)
        return iter(())

    def propose(self, context: list[int], k: int, sampling: SamplingParams, noise: SampleNoise) -> Proposal:
        return _ngram_draft(self.lookup, context, k, sampling, self.min_match, self.resync_min_match,
                            self.cold_min_match) or NO_PROPOSAL

    def propose_free(self, context: list[int], k: int, sampling: SamplingParams) -> Proposal:
        return _ngram_draft(self.lookup, context, k, sampling, self.probe_min_match) or NO_PROPOSAL

    def propose_copy(self, context: list[int], k: int, sampling: SamplingParams, sure_run: int = 0) -> Proposal:
        return _copy_draft(self.lookup, context, k, sampling, sure_run)


PROBE_MIN_MATCH = 4  # context tokens agreeing with a free probe's source (as hybrid's n-gram copies)
# A running copy that has agreed with this many context tokens is drafted as a long copy (propose_copy). In
# the bench's copy prompts such copies were right for 9 tokens in 10 or more; shorter ones often end at the
# next edit (docs/BENCHMARKS.md, run 6).
COPY_MIN_RUN = 8


def _copy_draft(lookup: PromptLookup, context: list[int], k: int, sampling: SamplingParams, sure_run: int) -> Proposal:
    start = time.perf_counter()
    proposal = lookup.running_copy(context, k, sure_run or COPY_MIN_RUN, cut_at_edits=sure_run > 0)
    return NO_PROPOSAL if proposal is None else _copy_as_draft(proposal.tokens, sampling, start)


def _copy_as_draft(tokens: tuple[int, ...], sampling: SamplingParams, start: float) -> Proposal:
    """Copied tokens as a draft: point masses for sampled runs (the copy is certain of them), timed from start."""
    q = tuple(point_mass(t) for t in tokens) if not sampling.greedy else None
    return Proposal(tokens, q, (time.perf_counter() - start) * 1000.0, free=True)


def _ngram_draft(lookup: PromptLookup, context: list[int], k: int, sampling: SamplingParams,
                 min_match: int = 0, resync_min_match: int | None = None,
                 cold_min_match: int | None = None) -> Proposal | None:
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


def draft_pick(logits: np.ndarray, sampling: SamplingParams, noise: SampleNoise, position: int,
               top: Callable[[np.ndarray], tuple[int, float]] = top_prob) -> tuple[int, float, Dist | None]:
    """A model drafter's token at context `position`, its confidence (what --draft-p-min cuts at) and, sampled,
    the distribution it came from. Greedy: the top token, its probability as `top` measures it; sampled: the
    coupled sample of the drafter's own distribution, which the target samples with the same noise, so its choice
    matches when p ~ q."""
    if sampling.greedy:
        token, confidence = top(logits)
        return token, confidence, None
    q = distribution(logits, sampling)
    return noise.sample(q, position), float(q.probs[0]), q


class ModelDrafter(ProposerBase):
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

    def propose(self, context: list[int], k: int, sampling: SamplingParams, noise: SampleNoise) -> Proposal:
        start = time.perf_counter()
        if k <= 0:
            return NO_PROPOSAL
        k = min(k, self.ctx.n_ctx - len(context))
        synced = self.sync(context)
        catch_up = max(0, synced - STEP_SYNC)
        catch_up_ms = (time.perf_counter() - start) * 1000.0 * catch_up / synced if catch_up else 0.0
        window = self._penalties(context, sampling)
        tokens: list[int] = []
        dists: list[Dist] = []
        for i in range(k):
            logits = self.ctx.logits(-1) if window is None else window.penalise(self.ctx.logits(-1))
            try:
                token, confidence, q = draft_pick(logits, sampling, noise, len(context) + i)
            finally:
                if window is not None:
                    window.restore()
            if i >= self.draft_min and confidence < self.p_min:
                break
            tokens.append(token)
            if q is not None:
                dists.append(q)
            if i == k - 1:
                break  # the target verifies it; no need to extend the draft cache
            self.ctx.decode([token], logits_for="last")
            if window is not None:
                window.push(token)
        if window is not None:
            window.truncate(len(context))
        q_out = tuple(dists) if not sampling.greedy else None
        return Proposal(tuple(tokens), q_out, (time.perf_counter() - start) * 1000.0, catch_up=catch_up,
                     catch_up_ms=catch_up_ms)

    def _penalties(self, context: list[int], sampling: SamplingParams) -> PenaltyWindow | None:
        if not sampling.penalized:
            return None
        if self._window is None:
            self._window = PenaltyWindow(sampling, context)
        self._window.sync(context)
        return self._window


class HybridDrafter(ProposerBase):
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

    def propose(self, context: list[int], k: int, sampling: SamplingParams, noise: SampleNoise) -> Proposal:
        start = time.perf_counter()
        copy = _ngram_draft(self.lookup, context, k, sampling, self.min_match)
        if copy is not None:
            return copy
        draft = self.model.propose(context, k, sampling, noise)
        return replace(draft, ms=(time.perf_counter() - start) * 1000.0)

    def propose_free(self, context: list[int], k: int, sampling: SamplingParams) -> Proposal:
        """While the governor has the draft model off, hybrid still offers long n-gram copies, as lookup does."""
        return _ngram_draft(self.lookup, context, k, sampling, max(self.min_match, PROBE_MIN_MATCH)) or NO_PROPOSAL

    def propose_copy(self, context: list[int], k: int, sampling: SamplingParams, sure_run: int = 0) -> Proposal:
        return _copy_draft(self.lookup, context, k, sampling, sure_run)
