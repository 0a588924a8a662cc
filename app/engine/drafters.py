"""Drafters: who proposes the next few tokens. One interface, three modes.

- `draft`: a second, smaller GGUF with its own KV cache, kept in step with the reply and reused
  (never re-prefilled): only the tokens it has not seen yet are decoded before each draft.
- `lookup`: prompt-lookup n-gram drafting from the context itself; costs almost nothing.
- `none`: proposes nothing, so the engine runs plain decoding through the same code path.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from app.engine.sampling import Dist, SamplingParams, distribution, point_mass, top_prob
from app.llama_backend import LlamaContext

MODES = ("draft", "lookup", "none")


@dataclass(frozen=True, slots=True)
class Draft:
    tokens: tuple[int, ...]
    q: tuple[Dist, ...] | None  # the draft distributions the tokens were sampled from (sampled runs)
    ms: float


class Drafter(Protocol):
    mode: str
    costs_time: bool  # False for drafters whose cost the governor may ignore

    def propose(self, context: list[int], k: int, sampling: SamplingParams, rng: np.random.Generator) -> Draft: ...

    def prepare(self, context: list[int]) -> None:
        """Called once per reply before the first step (the model drafter prefills the prompt)."""

    @property
    def native_ms(self) -> float:
        """Time this drafter has spent inside llama_decode (0 for drafters without a model)."""


class _ModelFree:
    """What a drafter without a model of its own does before a reply and inside llama.cpp: nothing."""

    native_ms = 0.0

    def prepare(self, context: list[int]) -> None:
        pass


class NoDrafter(_ModelFree):
    mode = "none"
    costs_time = False

    def propose(self, context: list[int], k: int, sampling: SamplingParams, rng: np.random.Generator) -> Draft:
        return Draft((), None, 0.0)


class LookupDrafter(_ModelFree):
    """Find the most recent earlier occurrence of the context's last n-gram and propose what followed."""

    mode = "lookup"
    costs_time = False

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1) -> None:
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram

    def propose(self, context: list[int], k: int, sampling: SamplingParams, rng: np.random.Generator) -> Draft:
        start = time.perf_counter()
        tokens = self._match(np.asarray(context, dtype=np.int64), k) if k > 0 else ()
        q = tuple(point_mass(t) for t in tokens) if not sampling.greedy else None
        return Draft(tokens, q, (time.perf_counter() - start) * 1000.0)

    def _match(self, ctx: np.ndarray, k: int) -> tuple[int, ...]:
        n_ctx = ctx.size
        for n in range(min(self.max_ngram, n_ctx - 1), self.min_ngram - 1, -1):
            pattern = ctx[n_ctx - n :]
            windows = np.lib.stride_tricks.sliding_window_view(ctx[: n_ctx - 1], n)
            hits = np.flatnonzero((windows == pattern).all(axis=1))
            if hits.size:
                follow = int(hits[-1]) + n
                return tuple(int(t) for t in ctx[follow : follow + k])
        return ()


class ModelDrafter:
    """Drafts with a small model. Stops early when its confidence falls below p_min."""

    mode = "draft"
    costs_time = True

    def __init__(self, ctx: LlamaContext, p_min: float = 0.75, draft_min: int = 0) -> None:
        self.ctx = ctx
        self.p_min = p_min
        self.draft_min = draft_min

    @property
    def native_ms(self) -> float:
        return self.ctx.native_ms

    def prepare(self, context: list[int]) -> None:
        self.sync(context)

    def sync(self, context: list[int]) -> None:
        """Bring the draft cache to `context`: keep the common prefix, decode only the rest."""
        # The last token is decoded again even when cached: its logits are what the draft starts from.
        common = self.ctx.keep_common_prefix(context[:-1])
        self.ctx.decode(context[common:], logits_for="last")

    def propose(self, context: list[int], k: int, sampling: SamplingParams, rng: np.random.Generator) -> Draft:
        start = time.perf_counter()
        if k <= 0:
            return Draft((), None, 0.0)
        k = min(k, self.ctx.n_ctx - len(context))
        self.sync(context)
        tokens: list[int] = []
        dists: list[Dist] = []
        for i in range(k):
            logits = self.ctx.logits(-1)
            if sampling.greedy:
                token, confidence = top_prob(logits)
            else:
                q = distribution(logits, sampling)
                token, confidence = q.sample(rng), float(q.probs[0])
                dists.append(q)
            if i >= self.draft_min and confidence < self.p_min:
                if not sampling.greedy:
                    dists.pop()
                break
            tokens.append(token)
            if i == k - 1:
                break  # the target verifies it; no need to extend the draft cache
            self.ctx.decode([token], logits_for="last")
        q_out = tuple(dists) if not sampling.greedy else None
        return Draft(tuple(tokens), q_out, (time.perf_counter() - start) * 1000.0)
