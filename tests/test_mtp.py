"""`--mode mtp` (issue 54): the target's own MTP (NextN) head drafts (app/engine/mtp_drafter.py,
app/llama_backend/mtp.py), on a small Qwen3.5-style GGUF written here (tests/tiny_gguf.py: gated delta-net layers,
one full-attention layer, one NextN block; a hybrid target, so every rollback goes through the state snapshots).
`mtp_agree` crafts a head that agrees with the trunk for most tokens: drafts are then accepted and rejected."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

from app.engine.events import FinishEvent, StepEvent, TokenEvent, TokenFate, shown_fate
from app.engine.pair_config import PairConfig
from app.engine.sampling import SamplingParams
from app.engine.session import GenParams, SpecSession
from app.engine.spec_params import SpecParams
from app.llama_backend import LlamaError
from tests.tiny_gguf import write_lfm2, write_qwen35

NATIVE_BIN = Path(os.environ.get("SPECCHAT_NATIVE_BIN", "/work/native/build/bin"))
PROMPT = [3, 4, 5, 6]  # "t3t4t5t6" with the file's text tokens
FIXED = SpecParams(draft_max=4, p_min=0.0, adaptive=False)  # llama.cpp's draft-mtp: p_min 0, K fixed


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("mtp")
    return {
        "random": write_qwen35(root / "qwen35-mtp.gguf", text_tokens=True),
        "agreeing": write_qwen35(root / "qwen35-mtp-agree.gguf", mtp_agree=0.95, text_tokens=True),
        "no_head": write_lfm2(root / "lfm2.gguf", n_vocab=16),
    }


def _run(session: SpecSession, prompt: list[int], mode: str, n: int = 64, spec: SpecParams = FIXED,
         sampling: SamplingParams | None = None) -> tuple[FinishEvent, list[StepEvent], list[TokenEvent]]:
    events = list(session.generate(prompt, GenParams(mode, n, sampling=sampling or SamplingParams(), spec=spec)))
    finish = events[-1]
    assert isinstance(finish, FinishEvent)
    return (finish, [e for e in events if isinstance(e, StepEvent)], [e for e in events if isinstance(e, TokenEvent)])


def _chat(n: int, seed: int) -> list[int]:
    return [int(t) for t in np.random.default_rng(seed).integers(3, 16, n)]


@pytest.mark.parametrize("head", ["random", "agreeing"])
def test_mtp_across_a_follow_up_and_a_restored_chat_stays_plain_decoding(files, head):
    """Mode mtp with the prompt cache: chat A, then chat B (A's cache, with the head's pairs of the same positions,
    is kept aside), then a follow-up on A, which gets that copy back instead of processing A again. Every reply
    equals a fresh context's plain decoding, and the head's drafts after the restore are the ones a session
    without any kept cache drafts on the same follow-up: its cache and hidden state came back with the target's
    (without them the target's next decode would find the head missing positions, or it would draft from another
    state)."""
    chat_a, chat_b = _chat(90, seed=5), _chat(90, seed=6)
    with SpecSession(PairConfig(files[head], None, n_ctx=512, n_threads=2)) as session:
        assert session.prompt_cache is not None
        reply_a, _, _ = _run(session, chat_a, "mtp", n=40)
        _run(session, chat_b, "mtp", n=40)  # another chat: A's cache goes aside, the head's with it
        follow_up = [*chat_a, *reply_a.tokens, *_chat(6, seed=7)]
        restored = session.prompt_cache.restored
        reply_f, steps, _ = _run(session, follow_up, "mtp", n=40)
        assert session.prompt_cache.restored == restored + 1, "the follow-up did not get A's cache back"
        again, _, _ = _run(session, [*follow_up, *reply_f.tokens, *_chat(5, seed=8)], "mtp", n=30)
    with SpecSession(PairConfig(files[head], None, n_ctx=512, n_threads=2, prompt_cache_mb=0)) as fresh:
        _run(fresh, chat_a, "mtp", n=40)
        _run(fresh, chat_b, "mtp", n=40)
        unkept, unkept_steps, _ = _run(fresh, follow_up, "mtp", n=40)  # A processed again
        assert unkept.tokens == reply_f.tokens
        assert [s.drafted for s in steps] == [s.drafted for s in unkept_steps]
        for prompt, reply, n in ((chat_a, reply_a, 40), (follow_up, reply_f, 40),
                                 ([*follow_up, *reply_f.tokens, *_chat(5, seed=8)], again, 30)):
            fresh.clear_caches()
            plain, _, _ = _run(fresh, prompt, "none", n=n)
            assert plain.tokens == reply.tokens


@pytest.mark.parametrize("head", ["random", "agreeing"])
def test_mtp_replies_are_plain_decoding_and_show_the_heads_tokens(files, head):
    with SpecSession(PairConfig(files[head], None, n_ctx=256, n_threads=2)) as session:
        assert "mtp" in session.available_modes and session.target_model.config.load_mtp
        plain, _, _ = _run(session, PROMPT, "none")
        session.clear_caches()
        finish, steps, tokens = _run(session, PROMPT, "mtp")
        assert finish.tokens == plain.tokens and finish.stats.mode == "mtp"
        drafted, accepted = sum(len(s.drafted) for s in steps), sum(s.accepted for s in steps)
        assert drafted > 40
        assert accepted > 30 if head == "agreeing" else accepted < 0.2 * drafted
        assert sum(t.head for t in tokens) == accepted  # every accepted token drafted by the head is marked ...
        assert all(shown_fate(t) is TokenFate.MTP for t in tokens if t.head)  # ... and shown in its own colour


def test_a_seeded_sample_with_mtp_is_the_plain_sample(files):
    """Sampled runs draft from the head's distribution and verify by the target's: with the same seed, the reply
    is the one plain decoding samples (the coupled sample of each position decides)."""
    sampling = SamplingParams(temperature=0.8, seed=11)
    with SpecSession(PairConfig(files["agreeing"], None, n_ctx=256, n_threads=2)) as session:
        plain, _, _ = _run(session, PROMPT, "none", sampling=sampling)
        session.clear_caches()
        finish, steps, _ = _run(session, PROMPT, "mtp", sampling=sampling)
        assert finish.tokens == plain.tokens
        assert sum(s.accepted for s in steps) > 0


def test_the_head_follows_a_follow_up_and_a_mode_switch(files):
    """The head pairs every cached position with the target's hidden state: after a lookup reply (head detached)
    and a follow-up turn, it re-joins the target's cache and its drafts are still accepted; replies stay exact."""
    with SpecSession(PairConfig(files["agreeing"], None, n_ctx=512, n_threads=2)) as session:
        first, _, _ = _run(session, PROMPT, "mtp", 40)
        follow_up = [*PROMPT, *first.tokens, 7, 8, 9]
        looked, _, _ = _run(session, follow_up, "lookup", 30)
        third_prompt = [*follow_up, *looked.tokens, 10, 11]
        again, steps, _ = _run(session, third_prompt, "mtp", 40)
        assert sum(s.accepted for s in steps) > 20
    with SpecSession(PairConfig(files["agreeing"], None, n_ctx=512, n_threads=2)) as fresh:
        assert _run(fresh, PROMPT, "none", 40)[0].tokens == first.tokens
        fresh.clear_caches()
        assert _run(fresh, follow_up, "none", 30)[0].tokens == looked.tokens
        fresh.clear_caches()
        assert _run(fresh, third_prompt, "none", 40)[0].tokens == again.tokens


def test_a_target_without_an_mtp_head_has_no_mtp_mode(files):
    with SpecSession(PairConfig(files["no_head"], None, n_ctx=256, n_threads=2)) as session:
        assert "mtp" not in session.available_modes and "lookup" in session.available_modes
        with pytest.raises(LlamaError, match="needs a target with MTP"):
            _run(session, PROMPT, "mtp")


@pytest.mark.skipif(not (NATIVE_BIN / "llama-speculative-simple").is_file(),
                    reason=f"llama.cpp's tools are not built in {NATIVE_BIN} (set SPECCHAT_NATIVE_BIN; see "
                           "docs/BENCHMARKS.md, \"Comparing with llama.cpp itself\")")
@pytest.mark.parametrize("head", ["random", "agreeing"])
def test_drafts_and_acceptance_equal_llamas_draft_mtp(files, head):
    """Parity with llama.cpp: `llama-speculative-simple --spec-type draft-mtp` on the same file, prompt and K
    (greedy, p_min 0). llama.cpp drafts at its first step too (it keeps the prompt's last token back), SpecChat
    takes the first token from the prompt's pass; from the second step on, step by step, the same number of
    tokens is drafted and accepted, and the text is the same."""
    env = {**os.environ, "LD_LIBRARY_PATH": str(NATIVE_BIN)}
    out = subprocess.run([str(NATIVE_BIN / "llama-speculative-simple"), "-m", str(files[head]), "-p", "t3t4t5t6",
                          "-n", "64", "--spec-type", "draft-mtp", "--spec-draft-n-max", "4", "--temp", "0",
                          "-c", "256", "-t", "2", "-ngl", "0", "-v"],
                         capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    log = out.stdout + out.stderr
    native = [(int(n), int(a)) for a, n in re.findall(r"accepted (\d+)/(\d+) draft tokens", log)]
    native_drafts: list[list[int]] = []  # each draft's tokens: llama.cpp's top candidate at each position
    for pos, token in re.findall(r"draft candidate +0, pos +(\d+): +(\d+) ", log):
        if pos == "0":
            native_drafts.append([])
        native_drafts[-1].append(int(token))
    with SpecSession(PairConfig(files[head], None, n_ctx=256, n_threads=2)) as session:
        finish, steps, _ = _run(session, PROMPT, "mtp")
        ours = [(len(s.drafted), s.accepted) for s in steps if not s.from_prompt]
        drafts = [list(s.drafted) for s in steps if not s.from_prompt]
        text = session.target_model.detokenize(finish.tokens)
    assert len(native) > 10 and len(native_drafts) >= len(native)  # and one it drafts after its last step
    # The last steps of each are cut short by its own token limit: compare the steps before the first short one.
    common = min(len(ours), len(native) - 1, next((i for i, (n, _) in enumerate(ours) if n < 4), len(ours)))
    assert ours[:common] == native[1 : common + 1]
    assert drafts[:common] == native_drafts[1 : common + 1]
    assert text in log.replace("\n", "")  # llama.cpp prints the same tokens (and more: it stops past -n)


def test_check_pair_names_the_mtp_head(files):
    from app.models.pair_doctor import check_pair

    report = check_pair(files["agreeing"], files["random"])
    notes = {f.code: f.message for f in report.findings}
    assert notes["mtp"] == "The target has an MTP head: --mode mtp drafts with it, no draft model needed"
    assert notes["cache-target"].startswith("The target is hybrid: rollback by llama.cpp's state snapshots")
    assert "mtp" not in {f.code for f in check_pair(files["no_head"], files["no_head"]).findings}


def test_the_memory_meter_leaves_the_mtp_block_out_of_the_targets_caches(files):
    """Qwen3.5-style: 3 delta-net layers (a recurrent state each), 1 full-attention layer (KV), then the NextN
    block, whose cache lives in the MTP context, not the target's."""
    from app.models.cache_kind import SNAPSHOT_TOKENS, state_layout
    from app.models.gguf_meta import read_gguf

    layout = state_layout(read_gguf(files["random"]))
    assert layout.attention == (False, False, False, True, False)
    assert layout.recurrent == (True, True, True, False, False)
    assert layout.snapshots == SNAPSHOT_TOKENS


def test_auto_picks_the_mtp_head_on_a_gpu_build_only():
    from app.engine.drafters import auto_mode

    assert auto_mode(has_draft=True, gpu_offload=True, has_mtp=True) == "mtp"
    assert auto_mode(has_draft=True, gpu_offload=True, has_mtp=False) == "hybrid"
    assert auto_mode(has_draft=True, gpu_offload=False, has_mtp=True) == "lookup"  # the CPU: free lookup


def test_doctor_describes_a_hybrid_mtp_model_and_names_a_missing_file(files, tmp_path):
    import json

    from tests.test_cli import specchat

    out = specchat("doctor", "--json", "-m", files["agreeing"], "-m", files["no_head"], home=tmp_path)
    assert out.returncode == 0, out.stderr
    first, second = json.loads(out.stdout)["models"]
    assert (first["architecture"], first["cache"], first["mtp_layers"], first["state_snapshots"]) == \
        ("qwen35", "hybrid", 1, True)
    assert first["rollback"].startswith("rollback by llama.cpp's state snapshots")
    assert (second["architecture"], second["cache"], second["mtp_layers"]) == ("lfm2", "hybrid", 0)
    text = specchat("doctor", "-m", files["agreeing"], "-m", tmp_path / "missing.gguf", home=tmp_path)
    assert text.returncode == 1
    assert "(qwen35): hybrid: rollback by llama.cpp's state snapshots" in text.stdout
    assert "MTP head: --mode mtp drafts with it" in text.stdout and "missing.gguf" in text.stdout


def test_the_memory_meter_counts_the_mtp_heads_cache(files):
    """The MTP context (mode mtp) holds a KV cache of the target's size for the NextN block: counted beside the
    target's own KV (1 attention layer here) and recurrent state."""
    from app.memory.predict import ModelSettings, predict_model
    from app.models.gguf_meta import read_gguf

    def cache(path: Path) -> dict[str, int]:
        prediction = predict_model(read_gguf(path), ModelSettings(n_ctx=256, type_k="f16", type_v="f16"))
        return {b.label: b.bytes for b in prediction.buffers if b.kind == "kv"}

    with_head = cache(files["random"])
    per_layer = 2 * 256 * 2 * 16 * 2  # (K, V) x cells x (2 KV heads x 16) x f16
    assert with_head["CPU KV"] == per_layer and with_head["CPU KV (MTP head)"] == per_layer
    assert "CPU KV (MTP head)" not in cache(files["no_head"])
