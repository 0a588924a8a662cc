"""`mtp`: drafts from the target's own MTP (NextN) head (app/llama_backend/mtp.py), llama.cpp's `draft-mtp`.

No second model: the head is one extra layer of the target, fed the target's hidden state, so it drafts for the
price of a layer per token and agrees with the target more than a small draft model of the family does. It drafts
as llama.cpp's common_speculative_impl_draft_mtp does (greedy: the head's top token, drafting stops where its
probability among its top 10 falls below --draft-p-min), so on the same GGUF, prompt and K its drafts and
acceptance equal llama.cpp's own (`llama-speculative-simple --spec-type draft-mtp`, tests/test_mtp.py). Sampled
runs draft from the head's distribution under the reply's sampling, as the draft model does, so the verify
keeps the target's distribution.
"""

from __future__ import annotations

import time

import numpy as np

from app.engine.drafters import draft_pick
from app.engine.proposal import NO_PROPOSAL, Proposal, ProposerBase
from app.engine.sampling import Dist, SampleNoise, SamplingParams
from app.llama_backend.mtp import MtpContext

__all__ = ["MtpDrafter"]

TOP_K = 10  # llama.cpp's MTP draft sampler: the confidence is the top token's share of the top 10


def top10_prob(logits: np.ndarray) -> tuple[int, float]:
    """The head's top token and its probability renormalised over its top TOP_K tokens (llama.cpp's p_min test)."""
    k = min(TOP_K, logits.shape[0])
    ids = np.argpartition(-logits, k - 1)[:k]
    values = logits[ids].astype(np.float64)
    best = int(ids[int(np.argmax(values))])
    exp = np.exp(values - values.max())
    return best, float(1.0 / exp.sum())


class MtpDrafter(ProposerBase):
    mode = "mtp"
    costs_time = True

    def __init__(self, head: MtpContext, p_min: float = 0.75, draft_min: int = 0) -> None:
        self.head = head
        self.p_min = p_min
        self.draft_min = draft_min

    @property
    def native_ms(self) -> float:
        return self.head.native_ms

    def propose(self, context: list[int], k: int, sampling: SamplingParams, noise: SampleNoise) -> Proposal:
        """Up to k tokens after `context`, whose last token the target has not decoded yet (the head pairs it with
        the target's hidden state before it, then each drafted token with its own)."""
        start = time.perf_counter()
        head = self.head
        if k <= 0 or len(head.tokens) != len(context) - 1:
            return NO_PROPOSAL  # the head does not follow this context (cannot happen while attached)
        k = min(k, head.target.n_ctx - len(context))
        token, h = context[-1], head.pending
        tokens: list[int] = []
        dists: list[Dist] = []
        for i in range(k):
            logits, h = head.draft_logits(token, h)
            token, confidence, q = draft_pick(logits, sampling, noise, len(context) + i, top10_prob)
            if i >= self.draft_min and confidence < self.p_min:
                break
            tokens.append(token)
            if q is not None:
                dists.append(q)
        q_out = tuple(dists) if not sampling.greedy else None
        return Proposal(tuple(tokens), q_out, (time.perf_counter() - start) * 1000.0, head=True)
