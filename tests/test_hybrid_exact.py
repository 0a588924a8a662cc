"""Hybrid and recurrent targets and drafts stay exact (issue 54): a recurrent state has no entry per position, so
every cut back (a rejected draft, a follow-up that shares a prefix, a restored chat) goes through llama.cpp's
per-token state snapshots, a checkpoint and a replay, or a full replay (app/llama_backend/core.py), never a token
list that the state does not match.

The models are small GGUFs written here (tests/tiny_gguf.py): LFM2 (short-convolution layers beside attention
layers: hybrid, with llama.cpp's snapshots) and Mamba (recurrent, no snapshots: checkpoints). A 16-token vocabulary
makes random-weight replies repeat, so lookup finds copies too; the draft is the target with a little noise in its
weights, so it agrees often but not always."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from app.engine.events import FinishEvent, StepEvent
from app.engine.pair_config import PairConfig
from app.engine.session import GenParams, SpecSession
from app.engine.spec_params import SpecParams
from app.llama_backend.core import ContextConfig, LlamaContext, LlamaModel, ModelConfig
from app.models.cache_kind import SNAPSHOT_TOKENS
from tests.test_recurrent_cache import BATCH_ROUNDING_ATOL, _logits_after
from tests.tiny_gguf import write_lfm2, write_mamba

N_VOCAB = 16
FIXED_K = SpecParams(adaptive=False, draft_max=4)  # drafts every step: rollbacks every step (no governor's say)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("hybrid")
    return {
        "lfm2": write_lfm2(root / "lfm2.gguf", n_vocab=N_VOCAB),
        "lfm2_draft": write_lfm2(root / "lfm2-draft.gguf", n_vocab=N_VOCAB, noise=0.05),
        "mamba": write_mamba(root / "mamba.gguf", n_vocab=N_VOCAB),
    }


def _tokens(n: int, seed: int) -> list[int]:
    return [int(t) for t in np.random.default_rng(seed).integers(3, N_VOCAB, n)]


def _next_logits(ctx: LlamaContext, token: int) -> np.ndarray:
    ctx.decode([token])
    return np.array(ctx.logits(-1))


@pytest.mark.parametrize("name", ["lfm2", "mamba"])
def test_every_kind_of_cut_leaves_the_state_of_the_kept_tokens(files, name):
    """A cut within the last decode (snapshot where the architecture has them), a cut back past several one-token
    decodes (a draft model's), and a second cut before any decode (snapshots are single-use): after each, the next
    token's logits are those of a fresh context fed the kept tokens (up to batch-size rounding)."""
    model = LlamaModel(ModelConfig(files[name]))
    ctx = LlamaContext(model, ContextConfig(n_ctx=256))
    toks = _tokens(40, seed=3)
    try:
        assert model.recurrent and model.hybrid == (name == "lfm2")
        # llama.cpp keeps snapshots for LFM2, not for Mamba
        assert ctx.n_rs_seq == (SNAPSHOT_TOKENS if name == "lfm2" else 0)
        ctx.decode(toks[:20])
        ctx.decode(toks[20:26], logits_for="all")  # a verify of 5 drafts ...
        ctx.truncate(22)  # ... 1 accepted
        assert np.allclose(_next_logits(ctx, toks[22]), _logits_after(model, toks[:23]), atol=BATCH_ROUNDING_ATOL)
        if name == "lfm2":
            assert ctx.cuts["snapshot"] == 1 and ctx.cuts["reprocess"] == 0
        else:
            assert ctx.cuts["checkpoint"] == 1 and ctx.cuts["reprocess"] == 0  # the state before the verify

        ctx.keep_common_prefix(toks[:23])  # a draft model's sync: its checkpoint
        for t in toks[23:30]:
            ctx.decode([t])
        before = dict(ctx.cuts)
        ctx.truncate(25)
        assert ctx.cuts["checkpoint"] == before["checkpoint"] + 1  # restored at 23, 2 tokens replayed
        assert np.allclose(_next_logits(ctx, toks[25]), _logits_after(model, toks[:26]), atol=BATCH_ROUNDING_ATOL)

        ctx.decode(toks[26:36], logits_for="all")
        ctx.truncate(33)
        ctx.truncate(31)  # no decode in between
        assert ctx.tokens == toks[:31]
        assert np.allclose(_next_logits(ctx, toks[31]), _logits_after(model, toks[:32]), atol=BATCH_ROUNDING_ATOL)
    finally:
        ctx.close()
        model.close()


def test_llamas_snapshots_past_the_last_decode_are_stale_and_never_used(files):
    """The control for the test above. llama.cpp's snapshot rollback checks only that the cut is within n_rs_seq,
    not within the last decode: after three one-token decodes it accepts a cut 2 tokens back and restores a
    snapshot left by the earlier prompt batch, silently wrong. `truncate` takes such a cut by its checkpoint."""
    import llama_cpp

    model = LlamaModel(ModelConfig(files["lfm2"]))
    toks = _tokens(30, seed=4)
    expected = _logits_after(model, toks[:22])
    contexts = [LlamaContext(model, ContextConfig(n_ctx=256)) for _ in range(2)]
    try:
        for ctx in contexts:
            ctx.decode(toks[:20])
            for t in toks[20:23]:
                ctx.decode([t])
        raw, checked = contexts
        assert llama_cpp.llama_memory_seq_rm(raw._mem, 0, 21, -1)  # llama.cpp takes it ...
        del raw.tokens[21:]
        # ... and the state is not toks[:21]'s: ten times the rounding the other checks allow
        assert np.abs(_next_logits(raw, toks[21]) - expected).max() > 10 * BATCH_ROUNDING_ATOL
        checked.truncate(21)
        assert checked.cuts["snapshot"] == 0
        assert np.allclose(_next_logits(checked, toks[21]), expected, atol=BATCH_ROUNDING_ATOL)
    finally:
        for ctx in contexts:
            ctx.close()
        model.close()


def _reply(session: SpecSession, prompt: list[int], mode: str, n: int = 200) -> tuple[list[int], list[StepEvent]]:
    events = list(session.generate(prompt, GenParams(mode, n, spec=FIXED_K)))
    finish = events[-1]
    assert isinstance(finish, FinishEvent)
    return list(finish.tokens), [e for e in events if isinstance(e, StepEvent)]


@pytest.fixture(scope="module")
def hybrid_pair(files):
    session = SpecSession(PairConfig(files["lfm2"], files["lfm2_draft"], n_ctx=1024, n_threads=2))
    yield session
    session.close()


@pytest.mark.parametrize("mode", ["lookup", "draft", "hybrid"])
def test_greedy_speculation_on_a_hybrid_pair_is_plain_decoding(hybrid_pair, mode):
    """Target and draft both hybrid; drafts every step, some accepted, some rejected: the reply is plain
    decoding's, token for token, with the target's rollbacks served by llama.cpp's snapshots and the draft
    model's (cut back past its one-token decodes) by checkpoints."""
    session = hybrid_pair
    prompt = _tokens(30, seed=1)
    prompt += prompt[:20]
    plain, _ = _reply(session, prompt, "none")
    cuts = dict(session.target_ctx.cuts)
    draft_cuts = dict(session.draft_ctx.cuts)
    reply, steps = _reply(session, prompt, mode)
    parted = next((i for i, (a, b) in enumerate(zip(reply, plain, strict=False)) if a != b), None)
    assert reply == plain, f"{mode} parted from plain decoding at reply token {parted}"
    accepted = sum(s.accepted for s in steps)
    rejected = sum(len(s.rejected) for s in steps)
    assert accepted > 20 and rejected > 10, (accepted, rejected)
    assert session.target_ctx.cuts["snapshot"] > cuts["snapshot"] + 5
    if mode != "lookup":
        assert session.draft_ctx.cuts["checkpoint"] > draft_cuts["checkpoint"] + 5


def test_a_follow_up_and_a_restored_chat_on_a_hybrid_target_stay_exact(files, hybrid_pair):
    """Prefix reuse: a follow-up turn continues the cache; going back to a chat restores its kept cache (state
    included). Each reply equals the one a fresh context gives in plain decoding."""
    session = hybrid_pair
    session.clear_caches()
    chat_a, chat_b = _tokens(80, seed=5), _tokens(80, seed=6)
    reply_a, _ = _reply(session, chat_a, "draft", 60)
    _reply(session, chat_b, "draft", 40)  # another chat: A's cache is kept aside
    follow_up = chat_a + reply_a + _tokens(6, seed=7)
    restored = session.prompt_cache.restored
    reply_follow, _ = _reply(session, follow_up, "draft", 60)
    assert session.prompt_cache.restored == restored + 1
    again, _ = _reply(session, follow_up + reply_follow + _tokens(5, seed=8), "lookup", 40)  # the cache continued

    with SpecSession(PairConfig(files["lfm2"], None, n_ctx=1024, n_threads=2, prompt_cache_mb=0)) as fresh:
        assert _reply(fresh, chat_a, "none", 60)[0] == reply_a
        fresh.target_ctx.clear()
        assert _reply(fresh, follow_up, "none", 60)[0] == reply_follow
        fresh.target_ctx.clear()
        assert _reply(fresh, follow_up + reply_follow + _tokens(5, seed=8), "none", 40)[0] == again


def test_a_recurrent_target_without_snapshots_rolls_back_by_checkpoints(files):
    """Mamba: llama.cpp keeps no snapshots for it, so each verify is preceded by a checkpoint and a rejected draft
    restores it and replays the accepted tokens. Drafted from a prediction (plain decoding's reply with every
    ninth token changed): long copies, a rejection at each change; the reply is plain decoding's."""
    with SpecSession(PairConfig(files["mamba"], None, n_ctx=1024, n_threads=2)) as session:
        prompt = _tokens(40, seed=2)
        plain, _ = _reply(session, prompt, "none")
        edited = [(t + 1) % N_VOCAB if i % 9 == 8 else t for i, t in enumerate(plain)]
        events = list(session.generate(prompt, GenParams("none", 200, spec=FIXED_K), prediction=edited))
        steps = [e for e in events if isinstance(e, StepEvent)]
        assert list(events[-1].tokens) == plain
        assert sum(s.accepted for s in steps) > 50 and sum(len(s.rejected) for s in steps) > 5
        assert session.target_ctx.n_rs_seq == 0 and session.target_ctx.cuts["checkpoint"] > 5


def test_check_pair_says_how_each_model_is_rolled_back(files):
    """The pair doctor (check-pair, the picker) names a hybrid or recurrent model's cache and its rollback."""
    from app.models.pair_doctor import check_pair

    report = check_pair(files["lfm2"], files["lfm2_draft"])
    notes = {f.code: f.message for f in report.findings if f.severity == "informs"}
    assert report.compatible
    assert notes["cache-target"].startswith("The target is hybrid: rollback by llama.cpp's state snapshots")
    assert "checkpoint at each step" in notes["cache-draft"]
    report = check_pair(files["mamba"], files["lfm2_draft"])
    notes = {f.code: f.message for f in report.findings if f.severity == "informs"}
    assert notes["cache-target"] == ("The target is recurrent: rollback by a state checkpoint and a replay of the "
                                     "accepted tokens (no snapshots in llama.cpp)")


def test_the_memory_meter_counts_the_state_and_only_the_attention_layers_kv(files):
    """LFM2 "cacac": KV rows for its 2 attention layers only; its 3 short-convolution layers keep (l_cache - 1) x
    n_embd floats each, 1 + SNAPSHOT_TOKENS times (the state and llama.cpp's rollback snapshots). Mamba: a state,
    no KV."""
    from app.memory.predict import ModelSettings, predict_model
    from app.models.gguf_meta import read_gguf

    def cache(path: Path) -> dict[str, int]:
        prediction = predict_model(read_gguf(path), ModelSettings(n_ctx=256, type_k="f16", type_v="f16"))
        return {b.label: b.bytes for b in prediction.buffers if b.kind == "kv"}

    lfm2 = cache(files["lfm2"])
    head_dim, n_head_kv = 64 // 4, 2
    assert lfm2["CPU KV"] == 2 * 2 * 256 * n_head_kv * head_dim * 2  # layers x (K, V) x cells x row x f16
    assert lfm2["CPU recurrent state"] == 3 * (64 * 2) * 4 * (1 + SNAPSHOT_TOKENS)
    mamba = cache(files["mamba"])
    assert "CPU KV" not in mamba and mamba["CPU recurrent state"] == 2 * (3 * 64 + 8 * 64) * 4
