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
