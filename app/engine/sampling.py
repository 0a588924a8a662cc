"""Sampling transforms and the speculative acceptance rule, on numpy arrays.

Order follows llama.cpp's default chain: top-k, top-p and min-p on the temperature-1 softmax, then
temperature. Target (p) and draft (q) go through the same transforms, so min(1, p/q) compares like
with like (Leviathan et al. 2023; Chen et al. 2023).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class SamplingParams:
    temperature: float = 0.0  # <= 0: greedy (argmax), exact token-for-token verification
    top_k: int = 40  # <= 0: whole vocabulary
    top_p: float = 0.95
    min_p: float = 0.05
    seed: int | None = None

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0

    def validate(self) -> None:
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top-p must be in (0, 1], got {self.top_p}")
        if not 0.0 <= self.min_p < 1.0:
            raise ValueError(f"min-p must be in [0, 1), got {self.min_p}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")


@dataclass(frozen=True, slots=True)
class Dist:
    """A sparse distribution: token ids sorted by falling probability, and their probabilities."""

    ids: np.ndarray
    probs: np.ndarray

    def prob(self, token: int) -> float:
        hit = np.flatnonzero(self.ids == token)
        return float(self.probs[hit[0]]) if hit.size else 0.0

    def sample(self, rng: np.random.Generator) -> int:
        return int(self.ids[_draw(self.probs, rng)])


def point_mass(token: int) -> Dist:
    """The 'distribution' of a deterministic drafter such as prompt lookup."""
    return Dist(np.array([token], dtype=np.int64), np.array([1.0]))


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x[0] if x.size else x)  # x is sorted descending, so x[0] is the max
    return e / e.sum()


def _draw(probs: np.ndarray, rng: np.random.Generator) -> int:
    cdf = np.cumsum(probs)
    index = int(np.searchsorted(cdf, rng.random() * cdf[-1], side="right"))
    return min(index, probs.size - 1)


def distribution(logits: np.ndarray, params: SamplingParams) -> Dist:
    n = logits.shape[0]
    k = params.top_k if 0 < params.top_k < n else n
    ids = np.argpartition(logits, n - k)[n - k :] if k < n else np.arange(n)
    values = logits[ids].astype(np.float64)
    order = np.argsort(-values, kind="stable")
    ids, values = ids[order], values[order]
    probs = _softmax(values)
    keep = ids.size
    if params.top_p < 1.0:
        keep = min(keep, int(np.searchsorted(np.cumsum(probs), params.top_p, side="left")) + 1)
    if params.min_p > 0.0:
        keep = min(keep, int(np.count_nonzero(probs >= params.min_p * probs[0])))
    keep = max(keep, 1)
    ids, values = ids[:keep], values[:keep]
    temperature = params.temperature if params.temperature > 0 else 1.0
    return Dist(ids.astype(np.int64), _softmax(values / temperature))


def top_prob(logits: np.ndarray) -> tuple[int, float]:
    """Argmax and its full-vocabulary softmax probability (the draft's confidence for --draft-p-min)."""
    best = int(np.argmax(logits))
    # exp in float32 (3x faster than float64 here; every term is <= 1), summed in float64.
    return best, 1.0 / float(np.exp(logits - logits[best]).sum(dtype=np.float64))


def top_two_margin(logits: np.ndarray) -> float:
    """Gap between the two largest logits: how close a greedy choice was to a tie."""
    two = np.partition(logits, logits.shape[0] - 2)[-2:]
    return float(abs(two[1] - two[0]))


def speculative_accept(p: Dist, q: Dist, x: int, rng: np.random.Generator) -> tuple[bool, int]:
    """Accept draft token x ~ q with probability min(1, p(x)/q(x)); otherwise resample.

    Returns (accepted, token). On rejection the token comes from normalize(max(0, p - q)), which
    makes the emitted token exactly p-distributed whatever q was.
    """
    px, qx = p.prob(x), q.prob(x)
    if qx <= 0.0:
        raise ValueError(f"draft token {x} has zero draft probability: the drafter did not sample from q")
    if rng.random() < min(1.0, px / qx):
        return True, x
    q_on_p = np.array([q.prob(int(t)) for t in p.ids]) if q.ids.size < 64 else _lookup(q, p.ids)
    residual = np.maximum(p.probs - q_on_p, 0.0)
    if residual.sum() <= 0.0:  # p == q up to rounding: a rejection had probability ~0
        return False, p.sample(rng)
    return False, int(p.ids[_draw(residual, rng)])


def _lookup(q: Dist, ids: np.ndarray) -> np.ndarray:
    order = np.argsort(q.ids)
    sorted_ids = q.ids[order]
    pos = np.clip(np.searchsorted(sorted_ids, ids), 0, sorted_ids.size - 1)
    found = sorted_ids[pos] == ids
    return np.where(found, q.probs[order][pos], 0.0)
