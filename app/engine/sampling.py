"""Sampling transforms and coupled sampling, on numpy arrays.

Order follows llama.cpp's default chain: the penalties (app/engine/penalties.py, applied to each row's
logits with that row's own context before `distribution`), then top-k, top-p and min-p on the
temperature-1 softmax, then temperature. Target (p) and draft (q) go through the same transforms.

Sampling is *coupled* (Gumbel-max / exponential race, as in drafter-invariant speculative decoding,
Daliri et al. 2024): token v at sequence position i gets one uniform number u(seed, i, v), and a
distribution d samples argmax_v d(v) / -log u(seed, i, v). The target and the draft use the same
numbers, so a draft token is accepted when the target's own sample equals it (llama.cpp's
sample-and-accept). Every emitted token is the target's own sample from p, so the output follows
the target's distribution exactly, and the same seed gives the same reply whatever the drafter
proposed and whatever K the governor picked: it is the reply plain decoding gives with that seed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """The defaults are plain greedy decoding without penalties: the "greedy" preset (app.settings), what
    the exactness checks, the bench and the comparison use."""

    temperature: float = 0.0  # <= 0: greedy (argmax), exact token-for-token verification
    top_k: int = 40  # <= 0: whole vocabulary
    top_p: float = 0.95
    min_p: float = 0.05
    seed: int | None = None
    # llama.cpp's penalties sampler (app/engine/penalties.py), first in the chain, on the last
    # `repeat_last_n` tokens of the context (prompt included): repeat divides a positive logit and
    # multiplies a negative one; frequency and presence subtract count * f + (count > 0) * p.
    repeat_penalty: float = 1.0  # 1: off
    repeat_last_n: int = 64  # 0: no penalties at all
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0

    @property
    def penalized(self) -> bool:
        """Whether the penalties change anything (llama.cpp's is_disabled, negated)."""
        return self.repeat_last_n > 0 and (
            self.repeat_penalty != 1.0 or self.frequency_penalty != 0.0 or self.presence_penalty != 0.0)

    def validate(self) -> None:
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top-p must be in (0, 1], got {self.top_p}")
        if not 0.0 <= self.min_p < 1.0:
            raise ValueError(f"min-p must be in [0, 1), got {self.min_p}")
        if not self.temperature >= 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not (math.isfinite(self.repeat_penalty) and self.repeat_penalty > 0
                and math.isfinite(1.0 / self.repeat_penalty)):
            raise ValueError(f"repeat penalty must be finite and > 0 (1: off), got {self.repeat_penalty}")
        if self.repeat_last_n < 0:
            raise ValueError(f"repeat-last-n must be >= 0 (0: penalties off), got {self.repeat_last_n}")
        for name, value in (("frequency", self.frequency_penalty), ("presence", self.presence_penalty)):
            if not math.isfinite(value):
                raise ValueError(f"{name} penalty must be finite, got {value}")


@dataclass(frozen=True, slots=True)
class Dist:
    """A sparse distribution: token ids (the most likely first; sorted unless it is the whole vocabulary)
    and their probabilities."""

    ids: np.ndarray
    probs: np.ndarray

    def prob(self, token: int) -> float:
        hit = np.flatnonzero(self.ids == token)
        return float(self.probs[hit[0]]) if hit.size else 0.0


def point_mass(token: int) -> Dist:
    """The 'distribution' of a deterministic drafter such as prompt lookup."""
    return Dist(np.array([token], dtype=np.int64), np.array([1.0]))


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x[0] if x.size else x)  # x is sorted descending, so x[0] is the max
    return e / e.sum()


def distribution(logits: np.ndarray, params: SamplingParams) -> Dist:
    n = logits.shape[0]
    if 0 < params.top_k < n:
        ids = _top_k_ids(logits, params.top_k)
        values = logits[ids].astype(np.float64)
        order = np.argsort(-values, kind="stable")
        ids, values = ids[order], values[order]
        probs = _softmax(values)  # top-p and min-p act on the top-k set, renormalised (llama.cpp)
    else:
        ids, values, probs = _whole_vocabulary(logits, params)
    keep = ids.size
    if params.top_p < 1.0:
        keep = min(keep, int(np.searchsorted(np.cumsum(probs), params.top_p, side="left")) + 1)
    if params.min_p > 0.0:
        keep = min(keep, int(np.count_nonzero(probs >= params.min_p * probs[0])))
    keep = max(keep, 1)
    ids, values = ids[:keep], values[:keep]
    temperature = params.temperature if params.temperature > 0 else 1.0
    return Dist(ids.astype(np.int64), _softmax(values / temperature))


# Every this-many-th logit is a sample that estimates where a row's top-k set begins.
_SAMPLE_STRIDE = 64


def _top_k_ids(logits: np.ndarray, k: int) -> np.ndarray:
    """The ids of the k largest logits, unordered. A partition of the whole vocabulary costs ~1 ms for 152k
    tokens on every sampled row (a verify of 32 rows paid a plain step's time for it). Instead a strided
    sample's j-th largest value is taken as a cut that about 64 j logits pass (one comparison pass, ~0.05 ms),
    and only those are partitioned. If fewer than k pass, a lower cut is tried; the result is exact either
    way, and a row where no cut works falls back to the whole partition."""
    n = logits.shape[0]
    sample = logits[::_SAMPLE_STRIDE]
    j = 4 + 2 * k // _SAMPLE_STRIDE  # fewer than k pass such a cut in well under 1% of rows
    while j < sample.size:
        ids = np.flatnonzero(logits >= np.partition(sample, sample.size - j)[sample.size - j])
        if ids.size >= k:
            return ids[np.argpartition(logits[ids], ids.size - k)[ids.size - k :]]
        j *= 4
    return np.argpartition(logits, n - k)[n - k :]


def _whole_vocabulary(logits: np.ndarray, params: SamplingParams) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Candidates, logits and whole-vocabulary probabilities without sorting all 152k tokens (~20 ms):
    only the prefix that top-p or min-p can keep is sorted; with neither, the best comes first only."""
    x = logits.astype(np.float64)
    top = float(x.max())
    weights = np.exp(x - top)
    total = float(weights.sum())
    if params.min_p > 0.0:
        ids = np.flatnonzero(x >= top + np.log(params.min_p))  # p >= min_p * p_max
    elif params.top_p < 1.0:
        ids = _top_p_prefix(weights, total, params.top_p)
    else:
        ids = np.arange(x.size)
        best = int(np.argmax(x))
        ids[0], ids[best] = best, 0  # unsorted, but Dist.probs[0] must be the most likely token
        return ids, x[ids], weights[ids] / total
    order = np.argsort(-x[ids], kind="stable")
    ids = ids[order]
    return ids, x[ids], weights[ids] / total


def _top_p_prefix(weights: np.ndarray, total: float, top_p: float) -> np.ndarray:
    """The smallest set of most likely tokens whose mass reaches top_p, by growing partial selections."""
    n = weights.size
    m = min(256, n)
    while True:
        ids = np.argpartition(weights, n - m)[n - m :]
        if m == n or float(weights[ids].sum()) >= top_p * total:
            return ids
        m = min(n, m * 8)


def top_prob(logits: np.ndarray) -> tuple[int, float]:
    """Argmax and its full-vocabulary softmax probability (the draft's confidence for --draft-p-min)."""
    best = int(np.argmax(logits))
    # exp in float32 (3x faster than float64 here; every term is <= 1), summed in float64.
    return best, 1.0 / float(np.exp(logits - logits[best]).sum(dtype=np.float64))


def top_two_margin(logits: np.ndarray) -> float:
    """Gap between the two largest logits: how close a greedy choice was to a tie."""
    best = int(np.argmax(logits))
    second = max(float(logits[:best].max(initial=-np.inf)), float(logits[best + 1 :].max(initial=-np.inf)))
    return float(logits[best]) - second  # two passes instead of a partition of the whole row (~1 ms)


_MASK = (1 << 64) - 1


def _mix(x: int) -> int:
    """splitmix64's finaliser on a Python int: a well-spread 64-bit key from (seed, position)."""
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9 & _MASK
    x = (x ^ (x >> 27)) * 0x94D049BB133111EB & _MASK
    return x ^ (x >> 31)


@dataclass(frozen=True, slots=True)
class SampleNoise:
    """The reply's random numbers, one per (position, token id): a pure function of the seed, so they
    do not depend on how many tokens were drafted or in which order rows were judged."""

    seed: int

    @staticmethod
    def fresh() -> SampleNoise:
        return SampleNoise(int(np.random.default_rng().integers(0, 1 << 63)))

    def uniforms(self, position: int, ids: np.ndarray) -> np.ndarray:
        key = np.uint64(_mix((_mix(self.seed & _MASK) + position * 0x9E3779B97F4A7C15) & _MASK))
        x = ids.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15) + key  # wraps mod 2^64, as intended
        x ^= x >> np.uint64(30)
        x *= np.uint64(0xBF58476D1CE4E5B9)
        x ^= x >> np.uint64(27)
        x *= np.uint64(0x94D049BB133111EB)
        x ^= x >> np.uint64(31)
        return ((x >> np.uint64(11)).astype(np.float64) + 0.5) / float(1 << 53)  # in (0, 1)

    def sample(self, dist: Dist, position: int) -> int:
        """The exponential race: argmax d(v) / E_v with E_v = -log u(v) ~ Exp(1) picks v with probability
        d(v); with the same u, distributions that are close pick the same token."""
        if dist.ids.size == 1:
            return int(dist.ids[0])
        race = dist.probs / -np.log(self.uniforms(position, dist.ids))
        return int(dist.ids[int(np.argmax(race))])
