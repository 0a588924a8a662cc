"""Recurrent models keep one state, not a cache entry per token: llama.cpp refuses to cut it part-way
(llama_memory_seq_rm returns false) unless a snapshot of the last decode reaches. The cache and the engine's token
list must never part (issue 54): a cut no snapshot or checkpoint serves replays the kept tokens, which is exact
(tests/test_hybrid_exact.py has the other ways)."""

from __future__ import annotations

import numpy as np
import pytest

from app.llama_backend.core import ContextConfig, LlamaContext, LlamaModel, ModelConfig
from tests.tiny_gguf import write_mamba


@pytest.fixture(scope="module")
def mamba(tmp_path_factory: pytest.TempPathFactory) -> LlamaModel:
    model = LlamaModel(ModelConfig(write_mamba(tmp_path_factory.mktemp("mamba") / "mamba.gguf")))
    yield model
    model.close()


# How far a row's logits may move with the batch shape that computed it (llama.cpp's CPU kernels round batched
# rows differently from one-token ones): up to 1.7e-4 measured on an AMD Zen 4 with AVX-512 for these tiny models'
# logits (magnitudes up to ~10), under 1e-4 on AVX2 machines. A state that is wrong moves them by more than 1e-2
# (test_hybrid_exact.py's control), so 1e-3 tells rounding from a fault on both.
BATCH_ROUNDING_ATOL = 1e-3


def _logits_after(model: LlamaModel, tokens: list[int]) -> np.ndarray:
    ctx = LlamaContext(model, ContextConfig(n_ctx=128))
    try:
        ctx.decode(tokens)
        return np.array(ctx.logits(-1))
    finally:
        ctx.close()


def test_prefix_reuse_on_a_recurrent_model_keeps_the_shared_prefix_exactly(mamba: LlamaModel):
    """A follow-up that shares only the first 6 tokens: the cut back to them (no snapshot reaches that far, no
    checkpoint is that old) replays them, and the cache serves the follow-up as a fresh context would."""
    first, follow_up = list(range(3, 13)), list(range(3, 9)) + [40, 41, 42]
    ctx = LlamaContext(mamba, ContextConfig(n_ctx=128))
    try:
        ctx.decode(first)
        kept = ctx.keep_common_prefix(follow_up)
        assert kept == 6 and ctx.tokens == follow_up[:6]
        assert ctx.cuts["checkpoint"] + ctx.cuts["reprocess"] == 1  # the tokens replayed
        ctx.decode(follow_up[kept:])
        reused = np.array(ctx.logits(-1))
    finally:
        ctx.close()
    assert np.allclose(reused, _logits_after(mamba, follow_up), atol=BATCH_ROUNDING_ATOL)
