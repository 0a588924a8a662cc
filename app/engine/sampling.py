"""Sampling transforms and coupled sampling, on numpy arrays.

Order follows llama.cpp's default chain: the penalties (app/engine/penalties.py, applied to each row's
logits with that row's own context before `distribution`), then top-k, top-p and min-p on the
temperature-1 softmax, then temperature. Target (p) and draft (q) go through the same transforms.

Sampling is *coupled* (Gumbel-max / exponential race, as in drafter-invariant speculative decoding,
Daliri et al. 2024): token v at sequence position i gets one Exp(1) number E(seed, i, v), and a
distribution d samples argmax_v d(v) / E(seed, i, v). The target and the draft use the same
numbers, so a draft token is accepted when the target's own sample equals it (llama.cpp's
sample-and-accept). Every emitted token is the target's own sample from p, so the output follows
the target's distribution exactly, and the same seed gives the same reply whatever the drafter
proposed and whatever K the governor picked: it is the reply plain decoding gives with that seed.
"""

from __future__ import annotations

import math
import threading
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
        if self.ids[0] == token:
            return float(self.probs[0])
        if token < self.ids.size and self.ids[token] == token:  # the whole vocabulary in id order
            return float(self.probs[token])
        hit = np.flatnonzero(self.ids == token)
        return float(self.probs[hit[0]]) if hit.size else 0.0


def point_mass(token: int) -> Dist:
    """The 'distribution' of a deterministic drafter such as prompt lookup."""
    return Dist(np.array([token], dtype=np.int64), np.array([1.0]))


class _Scratch(threading.local):
    """Vocabulary-sized work arrays, one set per thread (engines of different sessions may sample at once).

    Every sampled row used to allocate a comparison mask, and every exponential pass over the vocabulary two or
    three float arrays of its own: page-faulting allocations on each draft token and each verify row. The same
    operations now write into these buffers, so the results are bit for bit what they were."""

    def __init__(self) -> None:
        self.mask = np.empty(0, dtype=bool)
        self.values: dict[np.dtype, np.ndarray] = {}


_scratch = _Scratch()


def _mask(n: int) -> np.ndarray:
    if _scratch.mask.size < n:
        _scratch.mask = np.empty(n, dtype=bool)
    return _scratch.mask[:n]


def _values(n: int, dtype: np.dtype) -> np.ndarray:
    buf = _scratch.values.get(dtype)
    if buf is None or buf.size < n:
        buf = _scratch.values[dtype] = np.empty(n, dtype=dtype)
    return buf[:n]


def _at_least(logits: np.ndarray, cut: np.generic | float) -> np.ndarray:
    """np.flatnonzero(logits >= cut), without a new mask."""
    mask = _mask(logits.shape[0])
    np.greater_equal(logits, cut, out=mask)
    return np.flatnonzero(mask)


def _above(logits: np.ndarray, cut: np.generic | float) -> np.ndarray:
    """np.flatnonzero(logits > cut), without a new mask."""
    mask = _mask(logits.shape[0])
    np.greater(logits, cut, out=mask)
    return np.flatnonzero(mask)


def _shifted_exp(logits: np.ndarray, top: np.generic, scale: np.generic | None = None) -> np.ndarray:
    """np.exp((logits - top) [/ scale]) in a scratch buffer, valid until the next call on this thread."""
    dtype = np.result_type(logits, top) if scale is None else np.result_type(logits, top, scale)
    out = _values(logits.shape[0], dtype)
    np.subtract(logits, top, out=out)
    if scale is not None:
        np.divide(out, scale, out=out)
    return np.exp(out, out=out)


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x[0] if x.size else x)  # x is sorted descending, so x[0] is the max
    return e / e.sum()


def distribution(logits: np.ndarray, params: SamplingParams) -> Dist:
    n = logits.shape[0]
    temperature = params.temperature if params.temperature > 0 else 1.0
    if 0 < params.top_k < n:
        ids = _top_k_ids(logits, params.top_k)
        values = logits[ids].astype(np.float64)
        order = np.argsort(-values, kind="stable")
        ids, values = ids[order], values[order]
        probs = _softmax(values)  # top-p and min-p act on the top-k set, renormalised (llama.cpp)
    elif params.top_p >= 1.0 and params.min_p <= 0.0:
        return _untruncated(logits, temperature)
    else:
        ids, values, probs = _whole_vocabulary(logits, params)
    keep = ids.size
    if params.top_p < 1.0:
        keep = min(keep, int(np.searchsorted(np.cumsum(probs), params.top_p, side="left")) + 1)
    if params.min_p > 0.0:
        keep = min(keep, int(np.count_nonzero(probs >= params.min_p * probs[0])))
    keep = max(keep, 1)
    ids, values = ids[:keep], values[:keep]
    return Dist(ids.astype(np.int64), _softmax(values / temperature))


def _untruncated(logits: np.ndarray, temperature: float) -> Dist:
    """The whole vocabulary in id order, except that the most likely token swaps places with id 0 (Dist's
    probs[0] is the most likely): two swaps instead of gathering 152k ids into a new order. The exponentials
    are float32, as llama.cpp's softmax (0.1 ms against 0.2-0.7 ms in float64; relative error ~1e-7)."""
    best = int(np.argmax(logits))
    probs = _shifted_exp(logits, logits[best], np.float32(temperature)).astype(np.float64)
    probs /= probs.sum()
    ids = np.arange(logits.shape[0], dtype=np.int64)
    ids[0], ids[best] = best, 0
    probs[0], probs[best] = probs[best], probs[0]
    return Dist(ids, probs)


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
        ids = _at_least(logits, np.partition(sample, sample.size - j)[sample.size - j])
        if ids.size >= k:
            return ids[np.argpartition(logits[ids], ids.size - k)[ids.size - k :]]
        j *= 4
    return np.argpartition(logits, n - k)[n - k :]


def _whole_vocabulary(logits: np.ndarray, params: SamplingParams) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Candidates, logits and whole-vocabulary probabilities for top-p or min-p without sorting all 152k
    tokens (~20 ms): only the prefix that they can keep is found and sorted."""
    top = float(logits.max())
    # The normaliser: exp in float32 (every term is <= 1, 3x faster than float64), summed in float64.
    total = float(_shifted_exp(logits, np.float32(top)).sum(dtype=np.float64))
    if params.min_p > 0.0:
        # p >= min_p * p_max; the float64 scalar keeps the comparison in float64 (NEP 50)
        ids = _at_least(logits, np.float64(top + math.log(params.min_p)))
    else:
        ids = _top_p_prefix(logits, top, total, params.top_p)
    x = logits[ids].astype(np.float64)
    order = np.argsort(-x, kind="stable")
    ids, x = ids[order], x[order]
    return ids, x, np.exp(x - top) / total


def _top_p_prefix(logits: np.ndarray, top: float, total: float, top_p: float) -> np.ndarray:
    """The ids at or above a logit cut whose mass reaches top_p: the cut is a logit value, so they are a
    prefix of the sorted vocabulary and hold top-p's set. A strided sample estimates where the cut lies
    (like _top_k_ids); each guess costs one comparison pass (~0.05 ms) instead of a partition (~0.5 ms)."""
    sample = np.sort(logits[::_SAMPLE_STRIDE])[::-1]
    need = top_p * total * (1.0 + 1e-9)  # a hair more, so float rounding in the caller's cumsum keeps the set
    head = _above(logits, sample[0])  # ~64 tokens, above the whole sample; LLM rows peak here
    head_mass = float(np.exp(logits[head].astype(np.float64) - top).sum())
    if head_mass >= need:
        return head
    estimate = head_mass + np.cumsum(np.exp(sample.astype(np.float64) - top)) * _SAMPLE_STRIDE
    last = sample.size - 1
    j = min(int(np.searchsorted(estimate, need)) + 4, last)  # the sample misses peaks: then it is too low
    while True:
        ids = _at_least(logits, sample[j])
        if float(np.exp(logits[ids].astype(np.float64) - top).sum()) >= need:
            return ids
        if j == last:
            return np.arange(logits.size)
        j = min(2 * j, last)


def top_prob(logits: np.ndarray) -> tuple[int, float]:
    """Argmax and its full-vocabulary softmax probability (the draft's confidence for --draft-p-min)."""
    best = int(np.argmax(logits))
    # exp in float32 (3x faster than float64 here; every term is <= 1), summed in float64.
    return best, 1.0 / float(_shifted_exp(logits, logits[best]).sum(dtype=np.float64))


def top_two_margin(logits: np.ndarray) -> float:
    """Gap between the two largest logits: how close a greedy choice was to a tie."""
    best = int(np.argmax(logits))
    second = max(float(logits[:best].max(initial=-np.inf)), float(logits[best + 1 :].max(initial=-np.inf)))
    return float(logits[best]) - second  # two passes instead of a partition of the whole row (~1 ms)


_MASK = (1 << 64) - 1

# The race's numbers come in blocks of ids (SampleNoise.exponentials); the block draws hash keys that no token
# id reaches. Candidate sets up to _DIRECT_RACE tokens race directly; larger ones are pruned by block.
_BLOCK_BITS = 10
_BLOCK = 1 << _BLOCK_BITS
_BLOCK_SALT = 1 << 40
_DIRECT_RACE = 512


def _mix(x: int) -> int:
    """splitmix64's finaliser on a Python int: a well-spread 64-bit key from (seed, position)."""
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9 & _MASK
    x = (x ^ (x >> 27)) * 0x94D049BB133111EB & _MASK
    return x ^ (x >> 31)


def _unit(hashes: np.ndarray) -> np.ndarray:
    """Uniform numbers in (0, 1) from the high 53 bits of 64-bit hashes."""
    return ((hashes >> np.uint64(11)).astype(np.float64) + 0.5) / float(1 << 53)


@dataclass(frozen=True, slots=True)
class SampleNoise:
    """The reply's random numbers, one per (position, token id): a pure function of the seed, so they
    do not depend on how many tokens were drafted or in which order rows were judged."""

    seed: int

    @staticmethod
    def fresh() -> SampleNoise:
        return SampleNoise(int(np.random.default_rng().integers(0, 1 << 63)))

    def _hashes(self, position: int, ids: np.ndarray) -> np.ndarray:
        """splitmix64 of (seed, position, id): 64 well-mixed bits per id."""
        key = np.uint64(_mix((_mix(self.seed & _MASK) + position * 0x9E3779B97F4A7C15) & _MASK))
        x = ids.astype(np.uint64)
        x *= np.uint64(0x9E3779B97F4A7C15)
        x += key  # wraps mod 2^64, as intended
        x ^= x >> np.uint64(30)
        x *= np.uint64(0xBF58476D1CE4E5B9)
        x ^= x >> np.uint64(27)
        x *= np.uint64(0x94D049BB133111EB)
        x ^= x >> np.uint64(31)
        return x

    def exponentials(self, position: int, ids: np.ndarray) -> np.ndarray:
        """One Exp(1) number per token, independent across tokens, drawn block-wise: each block of 1024 ids
        first draws its minimum m (the least of 1024 Exp(1) is Exp(1024)) and which of its ids holds it, and
        every other id gets m + Exp(1). By memorylessness that is the same joint law as independent draws, and
        m bounds every number in its block from below, which lets `sample` skip tokens that cannot win."""
        n = ids.size
        hashes = self._hashes(position, np.concatenate((ids, (ids >> _BLOCK_BITS) + _BLOCK_SALT)))  # one pass
        numbers = -np.log(_unit(hashes))
        holder = (hashes[n:] & np.uint64(_BLOCK - 1)).astype(np.int64)  # the low bits; _unit reads the high 53
        return numbers[n:] / _BLOCK + np.where((ids & (_BLOCK - 1)) == holder, 0.0, numbers[:n])

    def _block_minima(self, position: int, count: int) -> np.ndarray:
        """The least numbers of blocks 0..count-1, as `exponentials` draws them."""
        return -np.log(_unit(self._hashes(position, np.arange(count, dtype=np.int64) + _BLOCK_SALT))) / _BLOCK

    def sample(self, dist: Dist, position: int) -> int:
        """The exponential race: argmax d(v) / E_v with E_v ~ Exp(1) picks v with probability d(v); with the
        same E, distributions that are close pick the same token."""
        if dist.ids.size == 1:
            return int(dist.ids[0])
        if dist.ids.size <= _DIRECT_RACE:
            race = dist.probs / self.exponentials(position, dist.ids)
            return int(dist.ids[int(np.argmax(race))])
        # A large set (the untruncated vocabulary, top-p over a flat row): drawing 152k numbers costs ~5 ms a
        # row. A token scores at most d(v) / m of its block, so only tokens whose bound beats the most likely
        # token's score can win, and only theirs are drawn: the same winner as the full race.
        least = self._block_minima(position, int(dist.ids.max()) // _BLOCK + 1)
        first = float(dist.probs[0] / self.exponentials(position, dist.ids[:1])[0])
        bar = first / (1.0 + 1e-9)  # a hair low for rounding
        rivals = np.flatnonzero(dist.probs > bar * least.min())  # one scalar first, then each rival's block
        rivals = rivals[dist.probs[rivals] > bar * least[dist.ids[rivals] >> _BLOCK_BITS]]
        if not rivals.size:
            return int(dist.ids[0])
        race = dist.probs[rivals] / self.exponentials(position, dist.ids[rivals])
        best = int(np.argmax(race))
        return int(dist.ids[rivals[best]]) if race[best] > first else int(dist.ids[0])
