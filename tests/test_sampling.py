"""Coupled sampling and the sampling transforms, on synthetic distributions (fast, many draws)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as scipy_stats

from app.engine.sampling import Dist, SampleNoise, SamplingParams, distribution, point_mass, top_two_margin


def _dist(probs: dict[int, float]) -> Dist:
    ids = np.array(sorted(probs, key=probs.get, reverse=True), dtype=np.int64)
    values = np.array([probs[int(i)] for i in ids])
    return Dist(ids, values / values.sum())


def _coupled_counts(dist: Dist, n: int, size: int, position: int = 3) -> np.ndarray:
    counts = np.zeros(size)
    for seed in range(n):
        counts[SampleNoise(seed).sample(dist, position)] += 1
    return counts


def test_coupled_sampling_follows_the_distribution():
    p = _dist({0: 0.4, 1: 0.3, 2: 0.2, 4: 0.1})
    n = 20000
    counts = _coupled_counts(p, n, 5)
    expected = np.array([0.4, 0.3, 0.2, 0.0, 0.1]) * n
    assert counts[3] == 0
    mask = expected > 0
    assert scipy_stats.chisquare(counts[mask], expected[mask]).pvalue > 0.001
    # Power check: the same counts are far from another distribution.
    other = np.array([0.25, 0.25, 0.25, 0.0, 0.25]) * n
    assert scipy_stats.chisquare(counts[mask], other[mask]).pvalue < 1e-6


def test_positions_draw_independently():
    """One seed, many positions: still p-distributed (the hash does not repeat along a reply)."""
    p = _dist({0: 0.5, 1: 0.3, 2: 0.2})
    noise = SampleNoise(12345)
    counts = np.zeros(3)
    for position in range(20000):
        counts[noise.sample(p, position)] += 1
    assert scipy_stats.chisquare(counts, np.array([0.5, 0.3, 0.2]) * 20000).pvalue > 0.001


def test_noise_depends_only_on_seed_position_and_token():
    noise = SampleNoise(7)
    numbers = noise.exponentials(10, np.array([5, 99, 1030, 151935]))
    assert noise.exponentials(10, np.array([99]))[0] == numbers[1]  # whatever else is in the candidate set
    assert noise.exponentials(10, np.array([151935, 1030]))[1] == numbers[2]  # the block draws too
    assert noise.exponentials(11, np.array([99]))[0] != numbers[1]
    assert SampleNoise(8).exponentials(10, np.array([99]))[0] != numbers[1]
    assert ((numbers > 0) & np.isfinite(numbers)).all()  # the uniforms behind them lie in (0, 1)


def test_block_wise_numbers_are_exponential_with_one_holder_per_block():
    """Each block of 1024 ids holds its least number once, at an offset that is uniform over the block, and
    the numbers are Exp(1): the block-wise draw has the law of independent draws."""
    ids = np.arange(2048)
    holders, values = [], []
    for position in range(400):
        numbers = SampleNoise(5).exponentials(position, ids)
        for block in numbers.reshape(2, 1024):
            holders.append(int(np.argmin(block)))
        values.append(numbers[::97])
    assert scipy_stats.kstest(np.concatenate(values), "expon").pvalue > 0.001
    assert scipy_stats.chisquare(np.bincount(np.array(holders) // 64, minlength=16)).pvalue > 0.001
    least = np.array([SampleNoise(5).exponentials(p, ids[:1024]).min() for p in range(2000)])
    assert scipy_stats.kstest(least * 1024, "expon").pvalue > 0.001  # the least of 1024 is Exp(1024)


def _llm_like(size: int, seed: int, temperature: float = 0.8) -> Dist:
    """A whole-vocabulary distribution as `distribution` builds it: a few likely tokens over a long tail."""
    rng = np.random.default_rng(seed)
    logits = (rng.standard_normal(size) * 2).astype(np.float32)
    logits[rng.choice(size, 5, replace=False)] += rng.uniform(6, 14, 5).astype(np.float32)
    return distribution(logits, SamplingParams(temperature=temperature, top_k=0, top_p=1.0, min_p=0.0))


@pytest.mark.parametrize("temperature", [0.3, 1.0, 3.0])
def test_pruned_race_picks_the_full_race_winner(temperature):
    """Large candidate sets race only the tokens whose block bound can beat the most likely one: the winner
    must be the full race's at every position, for peaked and flat rows alike."""
    dist = _llm_like(151936, 4, temperature)
    for position in range(60):
        noise = SampleNoise(100 + position)
        full = int(dist.ids[int(np.argmax(dist.probs / noise.exponentials(position, dist.ids)))])
        assert noise.sample(dist, position) == full


def test_pruned_race_follows_the_distribution():
    dist = _llm_like(4096, 9, 1.5)  # above the direct race's size: every draw takes the pruned path
    heads = dist.ids[np.argsort(-dist.probs)[:6]]
    expected = np.append(dist.probs[np.argsort(-dist.probs)[:6]], 0.0)
    expected[-1] = 1.0 - expected[:-1].sum()  # the tail, one bucket
    n = 20000
    counts = np.zeros(7)
    for seed in range(n):
        token = SampleNoise(seed).sample(dist, 1)
        hit = np.flatnonzero(heads == token)
        counts[hit[0] if hit.size else 6] += 1
    assert expected[-1] > 0.05 and scipy_stats.chisquare(counts, expected * n).pvalue > 0.001


def test_close_distributions_choose_the_same_token():
    """Draft and target share the noise, so a draft close to the target is accepted often: at least
    the Gumbel-coupling bound overlap / (2 - overlap), and always when they are equal."""
    p = _dist({0: 0.4, 1: 0.3, 2: 0.2, 4: 0.1})
    q = _dist({0: 0.5, 1: 0.3, 2: 0.1, 3: 0.1})
    overlap = 0.4 + 0.3 + 0.1
    n = 5000
    agree = sum(SampleNoise(s).sample(p, 0) == SampleNoise(s).sample(q, 0) for s in range(n)) / n
    assert agree >= overlap / (2 - overlap)
    assert all(SampleNoise(s).sample(p, 0) == SampleNoise(s).sample(p, 0) for s in range(200))
    assert SampleNoise(0).sample(point_mass(42), 9) == 42


def _reference(logits: np.ndarray, params: SamplingParams) -> Dist:
    """The whole-vocabulary chain by a full sort: what the partial selections must reproduce."""
    order = np.argsort(-logits.astype(np.float64), kind="stable")
    values = logits[order].astype(np.float64)
    probs = np.exp(values - values[0])
    probs /= probs.sum()
    keep = probs.size
    if params.top_p < 1.0:
        keep = min(keep, int(np.searchsorted(np.cumsum(probs), params.top_p, side="left")) + 1)
    if params.min_p > 0.0:
        keep = min(keep, int(np.count_nonzero(probs >= params.min_p * probs[0])))
    values = values[:keep] / params.temperature
    out = np.exp(values - values[0])
    return Dist(order[:keep], out / out.sum())


@pytest.mark.parametrize("top_p,min_p", [(0.95, 0.0), (0.5, 0.0), (1.0, 0.05), (0.9, 0.02), (1.0, 0.0)])
def test_whole_vocabulary_without_a_full_sort_matches_the_reference(top_p, min_p):
    logits = (np.random.default_rng(3).standard_normal(151936) * 4).astype(np.float32)
    params = SamplingParams(temperature=0.7, top_k=0, top_p=top_p, min_p=min_p)
    got, ref = distribution(logits, params), _reference(logits, params)
    assert got.ids[0] == ref.ids[0] and got.ids.size == ref.ids.size
    assert set(got.ids.tolist()) == set(ref.ids.tolist())
    ref_probs = dict(zip(ref.ids.tolist(), ref.probs, strict=True))
    # The untruncated row's exponentials are float32 (llama.cpp's precision): the rounding of a logit's
    # distance from the best grows with the distance, so tails far below the best are ~1e-5 relative.
    rtol, atol = (1e-5, 1e-12) if top_p == 1.0 and min_p == 0.0 else (1e-9, 1e-15)
    assert np.allclose(got.probs, [ref_probs[int(t)] for t in got.ids], rtol=rtol, atol=atol)
    assert all(got.prob(int(t)) == p for t, p in zip(got.ids[:50], got.probs[:50], strict=True))
    assert got.prob(int(ref.ids[-1])) == pytest.approx(ref.probs[-1], rel=rtol) and got.prob(151936) == 0.0


def _rows() -> dict[str, np.ndarray]:
    """Rows a top-k search meets: an LLM-like spread, one token far ahead of the rest (the k largest lie
    far below the best), a flat row, and a row with most tokens masked (-inf, as a logit bias writes)."""
    rng = np.random.default_rng(11)
    spread = (rng.standard_normal(151936) * 4).astype(np.float32)
    peaked = (rng.standard_normal(151936) * 0.5).astype(np.float32)
    peaked[1234] = 900.0
    flat = rng.permutation(151936).astype(np.float32) * np.float32(1e-6)  # distinct: ties are ordered freely
    masked = np.full(151936, -np.inf, dtype=np.float32)
    masked[rng.choice(151936, 30, replace=False)] = rng.standard_normal(30).astype(np.float32)
    return {"spread": spread, "peaked": peaked, "flat": flat, "masked": masked}


@pytest.mark.parametrize("row", ["spread", "peaked", "flat", "masked"])
@pytest.mark.parametrize("top_k", [1, 20, 40, 64])
def test_top_k_without_a_whole_partition_matches_a_full_sort(row, top_k):
    logits = _rows()[row]
    params = SamplingParams(temperature=0.7, top_k=top_k, top_p=0.8, min_p=0.05)
    order = np.argsort(-logits.astype(np.float64), kind="stable")[:top_k]  # the reference top-k set
    ref = _reference(logits[order], params)  # the chain on that set, ids relative to it
    got = distribution(logits, params)
    assert got.ids.tolist() == order[ref.ids].tolist()
    assert np.allclose(got.probs, ref.probs, rtol=1e-9, atol=1e-15)
    unfiltered = distribution(logits, SamplingParams(temperature=1.0, top_k=top_k, top_p=1.0, min_p=0.0))
    assert unfiltered.ids.size == top_k
    finite = sorted(t for t in unfiltered.ids.tolist() if np.isfinite(logits[t]))  # which -inf ones fill it is free
    assert finite == sorted(t for t in order.tolist() if np.isfinite(logits[t]))


def test_transforms_follow_llama_cpp_order():
    logits = np.log(np.array([0.5, 0.2, 0.15, 0.1, 0.05], dtype=np.float32))
    d = distribution(logits, SamplingParams(temperature=1.0, top_k=4, top_p=0.8, min_p=0.0))
    assert list(d.ids) == [0, 1, 2]  # top-k 4 keeps 0..3, top-p 0.8 stops once 0.85 is reached
    assert d.probs.sum() == pytest.approx(1.0)
    d = distribution(logits, SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.25))
    assert list(d.ids) == [0, 1, 2]  # min-p keeps p >= 0.25 * 0.5
    hot = distribution(logits, SamplingParams(temperature=2.0, top_k=0, top_p=1.0, min_p=0.0))
    cold = distribution(logits, SamplingParams(temperature=0.5, top_k=0, top_p=1.0, min_p=0.0))
    assert hot.probs[0] < 0.5 < cold.probs[0]


def test_margin():
    assert top_two_margin(np.array([1.0, 3.0, 2.5], dtype=np.float32)) == pytest.approx(0.5)
    assert top_two_margin(np.array([3.0, 1.0, 2.0], dtype=np.float32)) == pytest.approx(1.0)  # best first
    assert top_two_margin(np.array([1.0, 2.0, 3.5], dtype=np.float32)) == pytest.approx(1.5)  # best last
    assert top_two_margin(np.array([2.0, 3.0, 3.0], dtype=np.float32)) == 0.0  # a tie


@pytest.mark.parametrize("bad", [dict(top_p=0.0), dict(min_p=1.0), dict(temperature=-1.0)])
def test_invalid_sampling_settings_are_named(bad):
    with pytest.raises(ValueError):
        SamplingParams(**bad).validate()
