"""`LlamaContext.decode_batches`, the batch-wise decode that both prefills (target and draft model) run
so that Stop can end a long prompt between batches: it reports progress after each batch of n_batch tokens
and leaves the batches done when stopped."""

from __future__ import annotations

import pytest

from app.llama_backend.core import ContextConfig, LlamaContext, LlamaError


@pytest.fixture()
def small_batches(smol_session):
    ctx = LlamaContext(smol_session.target_model, ContextConfig(n_ctx=256, n_batch=8, n_ubatch=8, n_threads=2))
    yield ctx
    ctx.close()


def _prompt(smol_session) -> list[int]:
    text = "The quick brown fox jumps over the lazy dog, and then it sleeps in the warm afternoon sun beside the barn."
    tokens = smol_session.target_model.tokenize(text)
    assert len(tokens) > 16, "the test needs three batches of 8"
    return tokens[:20]


def test_batches_report_progress_and_chunk_at_n_batch(smol_session, small_batches) -> None:
    ctx = small_batches
    tokens = _prompt(smol_session)
    done = list(ctx.decode_batches(tokens))
    assert done == [8, 16, 20]
    assert ctx.tokens == tokens
    # (`decode` is a loop over decode_batches, so comparing their logits could not fail; the layout that matters,
    # a fresh prefill's against the engine's, is checked bit for bit in tests/test_engine_exact.py.)


def test_stopping_part_way_keeps_the_batches_done(smol_session, small_batches) -> None:
    ctx = small_batches
    tokens = _prompt(smol_session)
    for done in ctx.decode_batches(tokens):
        if done >= 8:
            break
    assert ctx.tokens == tokens[:8]
    ctx.decode(tokens[8:], logits_for="last")  # the rest catches up as any cached prefix would
    assert ctx.tokens == tokens


def test_checks_run_before_the_first_batch(smol_session, small_batches) -> None:
    ctx = small_batches
    with pytest.raises(LlamaError, match="rows with logits"):
        ctx.decode_batches(list(range(100)), logits_for="all")
    assert ctx.tokens == []


def test_logits_rows_are_llama_cpps_rows(smol_session, small_batches) -> None:
    """`logits(i)` reads the last decode's output rows through one view of llama.cpp's buffer: each row equals what
    llama_get_logits_ith gives for it, after "all", after "last" (a multi-batch prompt: only the last chunk's last
    token) and after the buffer grew for more rows; a row the decode did not ask for is refused, not read."""
    import llama_cpp
    import numpy as np

    ctx = small_batches
    n_vocab = ctx.model.n_vocab

    def theirs(row: int) -> np.ndarray:
        return np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(ctx._ctx, row), shape=(n_vocab,)).copy()

    tokens = _prompt(smol_session)
    ctx.decode(tokens[:12], logits_for="last")  # two chunks of 8 and 4
    assert np.array_equal(ctx.logits(-1), theirs(-1)) and np.array_equal(ctx.logits(0), theirs(-1))
    with pytest.raises(LlamaError, match="no logits for row 1"):
        ctx.logits(1)
    for width in (2, 5, 8):  # more rows than before: llama.cpp may move its buffer
        ctx.decode(tokens[12 : 12 + width] if width <= 8 else tokens[12:], logits_for="all")
        for row in range(min(width, 8)):
            assert np.array_equal(ctx.logits(row), theirs(row)), row
        assert np.array_equal(ctx.logits(-1), theirs(-1))
        ctx.truncate(12)
    ctx.decode(tokens[12:14], logits_for="none")
    with pytest.raises(LlamaError, match="no logits"):
        ctx.logits(-1)
