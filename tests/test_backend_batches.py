"""`LlamaContext.decode_batches`, the batch-wise decode that both prefills (target and draft model) run
so that Stop can end a long prompt between batches: it must lay out the batches exactly as `decode`
does, so the logits that start a reply do not depend on which of the two ran."""

from __future__ import annotations

import numpy as np
import pytest

from app.llama_backend.core import ContextConfig, LlamaContext, LlamaError


@pytest.fixture()
def small_batches(smol_session):
    ctxs = [LlamaContext(smol_session.target_model, ContextConfig(n_ctx=256, n_batch=8, n_ubatch=8, n_threads=2))
            for _ in range(2)]
    yield ctxs
    for ctx in ctxs:
        ctx.close()


def _prompt(smol_session) -> list[int]:
    text = "The quick brown fox jumps over the lazy dog, and then it sleeps in the warm afternoon sun beside the barn."
    tokens = smol_session.target_model.tokenize(text)
    assert len(tokens) > 16, "the test needs three batches of 8"
    return tokens[:20]


def test_batches_match_decode_and_report_progress(smol_session, small_batches) -> None:
    whole, stepped = small_batches
    tokens = _prompt(smol_session)
    whole.decode(tokens, logits_for="last")
    done = list(stepped.decode_batches(tokens))
    assert done == [8, 16, 20]
    assert stepped.tokens == whole.tokens == tokens
    assert np.array_equal(stepped.logits(-1), whole.logits(-1)), "same batches, same logits"


def test_stopping_part_way_keeps_the_batches_done(smol_session, small_batches) -> None:
    ctx = small_batches[0]
    tokens = _prompt(smol_session)
    for done in ctx.decode_batches(tokens):
        if done >= 8:
            break
    assert ctx.tokens == tokens[:8]
    ctx.decode(tokens[8:], logits_for="last")  # the rest catches up as any cached prefix would
    assert ctx.tokens == tokens


def test_checks_run_before_the_first_batch(smol_session, small_batches) -> None:
    ctx = small_batches[0]
    with pytest.raises(LlamaError, match="rows with logits"):
        ctx.decode_batches(list(range(100)), logits_for="all")
    assert ctx.tokens == []
