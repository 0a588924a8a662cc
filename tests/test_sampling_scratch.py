"""The sampling transforms write their vocabulary-wide work into reused per-thread buffers (issue 56, item 5):
the results must be bit for bit those of the fresh-array versions they replaced, whatever ran before."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from app.engine.sampling import SampleNoise, SamplingParams, distribution, top_prob

PARAMS = [
    SamplingParams(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05),  # the chat default: the top-k path
    SamplingParams(temperature=0.7, top_k=0, top_p=0.9, min_p=0.0),  # top-p over the whole vocabulary
    SamplingParams(temperature=0.7, top_k=0, top_p=1.0, min_p=0.05),  # min-p over the whole vocabulary
    SamplingParams(temperature=0.6, top_k=0, top_p=1.0, min_p=0.0),  # untruncated
]


def _rows(dtype: type = np.float32) -> list[np.ndarray]:
    rng = np.random.default_rng(5)
    rows = []
    for scale in (4.0, 2.0, 0.5):
        row = (rng.standard_normal(151936) * scale).astype(dtype)
        row[rng.integers(0, 151936, 4)] += 10
        rows.append(row)
    return rows


def _old_top_prob(logits: np.ndarray) -> tuple[int, float]:
    best = int(np.argmax(logits))
    return best, 1.0 / float(np.exp(logits - logits[best]).sum(dtype=np.float64))


def _old_untruncated(logits: np.ndarray, temperature: float) -> tuple[np.ndarray, np.ndarray]:
    best = int(np.argmax(logits))
    probs = np.exp((logits - logits[best]) / np.float32(temperature)).astype(np.float64)
    probs /= probs.sum()
    ids = np.arange(logits.shape[0], dtype=np.int64)
    ids[0], ids[best] = best, 0
    probs[0], probs[best] = probs[best], probs[0]
    return ids, probs


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_results_equal_the_fresh_array_versions_bit_for_bit(dtype):
    for row in _rows(dtype):
        assert top_prob(row) == _old_top_prob(row)
        d = distribution(row, PARAMS[3])
        ids, probs = _old_untruncated(row, PARAMS[3].temperature)
        assert np.array_equal(d.ids, ids) and np.array_equal(d.probs, probs)


def test_a_buffer_reused_by_other_rows_and_params_leaves_no_trace():
    rows = _rows()
    first = [(distribution(r, p), top_prob(r)) for p in PARAMS for r in rows]
    # Interleaved the other way round, with a smaller row in between (the buffers are sliced, not reallocated).
    distribution(rows[0][:1000].copy(), PARAMS[1])
    order = [(pi, ri) for pi in range(len(PARAMS)) for ri in range(len(rows))]
    by_key = {(pi, ri): (distribution(rows[ri], PARAMS[pi]), top_prob(rows[ri])) for pi, ri in reversed(order)}
    for key, (d, top) in zip(order, first, strict=True):
        d2, top2 = by_key[key]
        assert np.array_equal(d.ids, d2.ids) and np.array_equal(d.probs, d2.probs) and top == top2
    noise = SampleNoise(3)
    assert [noise.sample(d, i) for i, (d, _) in enumerate(first)] == \
           [noise.sample(by_key[k][0], i) for i, k in enumerate(order)]


def test_threads_do_not_share_buffers():
    rows = _rows()
    want = [distribution(r, PARAMS[2]) for r in rows]
    got: dict[int, list] = {}

    def run(i: int) -> None:
        got[i] = [distribution(r, PARAMS[2]) for r in rows for _ in range(3)][::3]

    threads = [threading.Thread(target=run, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i in range(3):
        for a, b in zip(want, got[i], strict=True):
            assert np.array_equal(a.ids, b.ids) and np.array_equal(a.probs, b.probs)
