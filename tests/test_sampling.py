"""The acceptance rule and the sampling transforms, on synthetic distributions (fast, many draws)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats as scipy_stats

from app.engine.sampling import Dist, SamplingParams, distribution, point_mass, speculative_accept, top_two_margin


def _dist(probs: dict[int, float]) -> Dist:
    ids = np.array(sorted(probs, key=probs.get, reverse=True), dtype=np.int64)
    values = np.array([probs[int(i)] for i in ids])
    return Dist(ids, values / values.sum())


@pytest.mark.parametrize("q", [
    {0: 0.7, 1: 0.2, 2: 0.1},  # draft over-confident on token 0
    {1: 0.5, 3: 0.5},  # draft proposes a token the target never emits (3)
    None,  # prompt lookup: a point mass on one token
])
def test_accept_then_residual_reproduces_p(q):
    p = _dist({0: 0.4, 1: 0.3, 2: 0.2, 4: 0.1})
    rng = np.random.default_rng(7)
    n = 20000
    counts = np.zeros(5)
    for _ in range(n):
        qd = point_mass(1) if q is None else _dist(q)
        x = qd.sample(rng)
        _ok, token = speculative_accept(p, qd, x, rng)
        counts[token] += 1
    expected = np.array([0.4, 0.3, 0.2, 0.0, 0.1]) * n
    assert counts[3] == 0
    mask = expected > 0
    assert scipy_stats.chisquare(counts[mask], expected[mask]).pvalue > 0.001


def test_rule_fails_when_draft_distribution_is_misreported():
    """Sanity check that the chi-square test above has power: lying about q breaks exactness."""
    p = _dist({0: 0.4, 1: 0.3, 2: 0.2, 4: 0.1})
    q_true, q_claimed = _dist({0: 0.9, 1: 0.1}), _dist({0: 0.4, 1: 0.6})
    rng = np.random.default_rng(1)
    n = 20000
    counts = np.zeros(5)
    for _ in range(n):
        x = q_true.sample(rng)
        counts[speculative_accept(p, q_claimed, x, rng)[1]] += 1
    expected = np.array([0.4, 0.3, 0.2, 0.0, 0.1]) * n
    mask = expected > 0
    assert scipy_stats.chisquare(counts[mask], expected[mask]).pvalue < 1e-6


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


def test_zero_draft_probability_is_an_error_not_a_silent_accept():
    with pytest.raises(ValueError, match="zero draft probability"):
        speculative_accept(_dist({0: 1.0}), _dist({1: 1.0}), 0, np.random.default_rng(0))


def test_margin():
    assert top_two_margin(np.array([1.0, 3.0, 2.5], dtype=np.float32)) == pytest.approx(0.5)


@pytest.mark.parametrize("bad", [dict(top_p=0.0), dict(min_p=1.0), dict(temperature=-1.0)])
def test_invalid_sampling_settings_are_named(bad):
    with pytest.raises(ValueError):
        SamplingParams(**bad).validate()
