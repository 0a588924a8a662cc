"""Repetition, frequency and presence penalties: llama.cpp's own sampler as the reference, incremental
counts against a recount, and a per-step cost that does not grow with the context."""

from __future__ import annotations

import ctypes
import random
import statistics
import time
from collections import Counter

import llama_cpp
import numpy as np
import pytest

from app.engine.penalties import PenaltyWindow
from app.engine.sampling import SamplingParams, distribution

CASES = [
    SamplingParams(repeat_penalty=1.3, repeat_last_n=64, frequency_penalty=0.2, presence_penalty=0.5),
    SamplingParams(repeat_penalty=1.05, repeat_last_n=64),
    SamplingParams(repeat_penalty=0.8, repeat_last_n=16, frequency_penalty=-0.1, presence_penalty=-0.3),
    SamplingParams(repeat_penalty=1.0, repeat_last_n=500, frequency_penalty=0.05),
    SamplingParams(repeat_penalty=1.5, repeat_last_n=1),
]


def _llama_cpp_penalised(logits: np.ndarray, history: list[int], p: SamplingParams) -> np.ndarray:
    """llama.cpp's `penalties` sampler (the vendored llama-sampler.cpp) applied to `logits`."""
    n = logits.size
    smpl = llama_cpp.llama_sampler_init_penalties(n, p.repeat_last_n, p.repeat_penalty, p.frequency_penalty,
                                                  p.presence_penalty)
    try:
        for token in history:
            llama_cpp.llama_sampler_accept(smpl, token)
        data = (llama_cpp.llama_token_data * n)()
        for i in range(n):
            data[i].id, data[i].logit, data[i].p = i, float(logits[i]), 0.0
        array = llama_cpp.llama_token_data_array(data=data, size=n, selected=-1, sorted=False)
        llama_cpp.llama_sampler_apply(smpl, ctypes.byref(array))
    finally:
        llama_cpp.llama_sampler_free(smpl)
    out = np.empty(n, dtype=np.float32)
    for i in range(array.size):
        out[array.data[i].id] = array.data[i].logit
    return out


@pytest.mark.parametrize("params", CASES)
def test_penalties_equal_llama_cpp_sampler(params):
    rng = np.random.default_rng(params.repeat_last_n)
    logits = (rng.standard_normal(400) * 3).astype(np.float32)  # both signs: repeat divides or multiplies
    history = rng.integers(0, 400, 300).tolist()
    history[-10:] = [7] * 10  # one token many times in the window
    window = PenaltyWindow(params, history[:100])
    for token in history[100:]:
        window.push(token)
    ours = window.apply(logits)
    theirs = _llama_cpp_penalised(logits, history, params)
    assert np.array_equal(ours, theirs), np.abs(ours - theirs).max()
    # The check can fail: penalties moved the logits of the tokens in the window, and only those.
    moved = np.flatnonzero(ours != logits)
    assert set(moved.tolist()) <= set(history[-params.repeat_last_n:]) and moved.size > 0


def test_formula_on_a_small_case():
    """llama.cpp's rule, by hand: divide positive logits, multiply negative ones, then subtract
    count * frequency + presence."""
    p = SamplingParams(repeat_penalty=2.0, repeat_last_n=3, frequency_penalty=0.5, presence_penalty=1.0)
    window = PenaltyWindow(p, [9, 1, 2, 2])  # the window holds the last three: 1, 2, 2
    out = window.apply(np.array([4.0, 4.0, -4.0, 4.0], dtype=np.float32))
    assert out.tolist() == [4.0, 4.0 / 2 - 0.5 - 1.0, -4.0 * 2 - 2 * 0.5 - 1.0, 4.0]
    assert window.counts() == {1: 1, 2: 2}


def test_counts_follow_a_recount_through_pushes_and_pops():
    rng = random.Random(5)
    for last_n in (0, 1, 5, 64):
        context = [rng.randrange(30) for _ in range(rng.randrange(0, 100))]
        window = PenaltyWindow(SamplingParams(repeat_penalty=1.1, repeat_last_n=last_n), context)
        sequence = list(context)
        floor = len(sequence)  # pops only undo pushes (the engine's rollback of a step's drafts)
        for _ in range(2000):
            if rng.random() < 0.6 or len(sequence) == floor:
                token = rng.randrange(30)
                window.push(token)
                sequence.append(token)
            else:
                window.pop()
                sequence.pop()
            if rng.random() < 0.05:
                floor = len(sequence)
            expected = Counter(sequence[-last_n:]) if last_n else Counter()
            assert window.counts() == dict(expected) and window.length == len(sequence)
        grown = sequence + [rng.randrange(30) for _ in range(7)]
        window.sync(grown)
        assert window.counts() == (dict(Counter(grown[-last_n:])) if last_n else {})


def test_penalised_distribution_is_the_reference_chain():
    """distribution() on penalised logits: the softmax chain of llama.cpp on the penalised values."""
    rng = np.random.default_rng(2)
    logits = (rng.standard_normal(5000) * 2).astype(np.float32)
    top = np.argsort(-logits)[:5].tolist()
    p = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, repeat_penalty=1.5, repeat_last_n=8,
                       frequency_penalty=0.4, presence_penalty=0.3)
    history = [top[0], top[0], top[1], 4999, top[0]]
    d = distribution(PenaltyWindow(p, history).apply(logits), p)
    ref = logits.astype(np.float64)
    for token, count in Counter(history).items():
        x = float(logits[token])
        ref[token] = (x / 1.5 if x > 0 else x * 1.5) - count * 0.4 - 0.3
    ref = np.exp(ref - ref.max())
    ref /= ref.sum()
    got = dict(zip(d.ids.tolist(), d.probs, strict=True))
    assert np.allclose([got[i] for i in range(5000)], ref, rtol=1e-5, atol=1e-12)
    assert got[top[0]] < float(np.exp(logits[top[0]] - logits.max())) / np.exp(logits - logits.max()).sum()


def _median_step_ms(n_ctx: int, params: SamplingParams, logits: np.ndarray, steps: int = 200) -> float:
    """One verify step at K = 6 as the engine runs it: sync, 7 penalised rows with a push after each of
    the first 6, then the rollback."""
    rng = random.Random(n_ctx)
    context = [min(int(rng.paretovariate(1.1)), 50_000) for _ in range(n_ctx)]
    window = PenaltyWindow(params, context)
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        window.sync(context)
        for i in range(7):
            int(np.argmax(window.apply(logits)))
            if i < 6:
                window.push(rng.randrange(50_000))
        window.truncate(len(context))
        times.append(time.perf_counter() - start)
        context += [rng.randrange(50_000) for _ in range(rng.randint(1, 7))]
    return statistics.median(times) * 1000.0


@pytest.mark.parametrize("last_n", [64, 1024])
def test_per_step_cost_does_not_grow_with_the_context(last_n):
    logits = np.random.default_rng(0).standard_normal(151_936).astype(np.float32)  # Qwen2.5's vocabulary
    params = SamplingParams(repeat_penalty=1.05, repeat_last_n=last_n)
    small = min(_median_step_ms(1024, params, logits) for _ in range(3))
    large = min(_median_step_ms(32_768, params, logits) for _ in range(3))
    print(f"\npenalised K=6 verify step (last_n {last_n}): {small:.3f} ms at 1k tokens, {large:.3f} ms at 32k")
    assert large <= 1.5 * small + 0.05


@pytest.mark.parametrize("bad", [dict(repeat_penalty=0.0), dict(repeat_penalty=float("inf")),
                                 dict(repeat_last_n=-1), dict(frequency_penalty=float("nan")),
                                 dict(presence_penalty=float("-inf"))])
def test_invalid_penalties_are_named(bad):
    with pytest.raises(ValueError, match="penalty|repeat-last-n"):
        SamplingParams(**bad).validate()


def test_penalties_off():
    assert not SamplingParams().penalized
    assert not SamplingParams(repeat_penalty=1.3, repeat_last_n=0).penalized
    assert SamplingParams(presence_penalty=0.1).penalized


def _old_apply(window: PenaltyWindow, params: SamplingParams, logits: np.ndarray) -> np.ndarray:
    """The full computation apply replaced: a fresh float32 copy, penalised at the window's ids."""
    out = np.array(logits, dtype=np.float32)
    counts = window.counts()
    if not counts:
        return out
    ids = np.fromiter(counts.keys(), dtype=np.intp, count=len(counts))
    count = np.fromiter(counts.values(), dtype=np.float32, count=len(counts))
    x = out[ids]
    repeat = np.float32(params.repeat_penalty)
    x = np.where(x <= 0, x * repeat, x / repeat)
    out[ids] = x - (count * np.float32(params.frequency_penalty) + np.float32(params.presence_penalty))
    return out


@pytest.mark.parametrize("params", CASES)
def test_apply_in_its_buffer_equals_the_full_computation(params):
    """apply reuses one buffer and rebuilds its id arrays only when the counts changed: on random rows, through
    pushes and rollbacks as a verify makes them, it equals a fresh copy penalised from the counts, and leaves the
    row it was given as it was."""
    rng = np.random.default_rng(params.repeat_last_n + 1)
    window = PenaltyWindow(params, rng.integers(0, 151_936, 80).tolist())
    for step in range(30):
        row = (rng.standard_normal(151_936) * 3).astype(np.float32)
        kept = row.copy()
        before = window.length
        for _ in range(int(rng.integers(1, 5))):
            ours = window.apply(row)
            assert np.array_equal(ours, _old_apply(window, params, row))
            assert np.array_equal(row, kept)
            window.push(int(rng.integers(0, 64)))  # small ids: the same tokens come back into the window
        if step % 2:
            window.truncate(before)
    same = window.apply(row)
    assert window.apply(row.astype(np.float64)) is same  # the one buffer (a float64 row is cast as before)
    assert np.array_equal(same, _old_apply(window, params, row.astype(np.float64)))


@pytest.mark.parametrize("params", CASES)
def test_penalise_in_place_equals_apply_and_restores_the_row(params):
    """The engine penalises llama.cpp's row in place: the same values as `apply`'s copy, and `restore` puts back the
    very bits (a second penalise restores a forgotten first; a float64 row gets the copy and is left alone)."""
    rng = np.random.default_rng(params.repeat_last_n + 7)
    window = PenaltyWindow(params, rng.integers(0, 64, 80).tolist())
    for _ in range(10):
        row = (rng.standard_normal(151_936) * 3).astype(np.float32)
        kept = row.copy()
        expected = window.apply(row).copy()
        assert window.penalise(row) is row
        assert np.array_equal(row, expected) and not np.array_equal(row, kept)
        window.restore()
        assert np.array_equal(row, kept)
        window.penalise(row)
        window.push(int(rng.integers(0, 64)))  # the counts change before the restore: the saved entries still go back
        window.penalise(kept.copy())  # and a new penalise restores the row it left
        assert np.array_equal(row, kept)
        window.restore()
    wide = kept.astype(np.float64)
    out = window.penalise(wide)
    assert out is not wide and np.array_equal(out, window.apply(wide)) and np.array_equal(wide, kept)
    window.restore()
