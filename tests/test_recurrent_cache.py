"""Recurrent models keep one state, not a cache entry per token: llama.cpp refuses to cut it part-way
(llama_memory_seq_rm returns false). The cache and the engine's token list must never part (issue 54):
the cut says so loudly, and prefix reuse falls back to processing the whole prompt, which is exact."""

from __future__ import annotations

import numpy as np
import pytest

from app.llama_backend.core import ContextConfig, LlamaContext, LlamaModel, ModelConfig, PartialRemovalError
from tests.tiny_gguf import write_mamba


@pytest.fixture(scope="module")
def mamba(tmp_path_factory: pytest.TempPathFactory) -> LlamaModel:
    model = LlamaModel(ModelConfig(write_mamba(tmp_path_factory.mktemp("mamba") / "mamba.gguf")))
    yield model
    model.close()


def _logits_after(model: LlamaModel, tokens: list[int]) -> np.ndarray:
    ctx = LlamaContext(model, ContextConfig(n_ctx=128))
    try:
        ctx.decode(tokens)
        return np.array(ctx.logits(-1))
    finally:
        ctx.close()


def test_a_cut_the_state_cannot_take_empties_the_cache_and_says_why(mamba: LlamaModel):
    ctx = LlamaContext(mamba, ContextConfig(n_ctx=128))
    try:
        ctx.decode(list(range(3, 13)))
        with pytest.raises(PartialRemovalError, match="recurrent or hybrid"):
            ctx.truncate(5)  # a rejected draft's rollback
        assert ctx.n_past == 0 and ctx.tokens == []  # never a token list the state does not match
    finally:
        ctx.close()


def test_prefix_reuse_on_a_recurrent_model_processes_the_prompt_again_exactly(mamba: LlamaModel):
    first, follow_up = list(range(3, 13)), list(range(3, 9)) + [40, 41, 42]
    ctx = LlamaContext(mamba, ContextConfig(n_ctx=128))
    try:
        ctx.decode(first)
        kept = ctx.keep_common_prefix(follow_up)
        assert kept == 0  # the state holds all of `first`: nothing of it can serve `follow_up`
        ctx.decode(follow_up[kept:])
        reused = np.array(ctx.logits(-1))
    finally:
        ctx.close()
    # Ignoring the refusal (the bug) left the state after all 10 tokens while the list said 6: these differ.
    assert np.array_equal(reused, _logits_after(mamba, follow_up))
