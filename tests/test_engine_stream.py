"""Stream behaviour on a tiny real model: cancellation, stops, UTF-8 assembly, context limits."""

from __future__ import annotations

import threading
from dataclasses import replace

import numpy as np
import pytest

from app.engine.events import FinishEvent, TokenEvent
from app.engine.session import GenParams
from app.llama_backend import ContextFullError


def _collect(session, prompt, params, cancel=None):
    return list(session.generate(prompt, params, cancel))


def test_cancel_returns_the_partial_reply_and_its_stats(smol_session):
    prompt = smol_session.chat_prompt([{"role": "user", "content": "Count from one to one hundred in words."}])
    cancel = threading.Event()
    events = []
    for event in smol_session.generate(prompt, GenParams("lookup", 200), cancel):
        events.append(event)
        if isinstance(event, TokenEvent) and event.index == 5:
            cancel.set()
    finish = events[-1]
    assert isinstance(finish, FinishEvent)
    assert finish.stats.finish_reason == "cancelled"
    tokens = [e for e in events if isinstance(e, TokenEvent)]
    assert 6 <= len(finish.tokens) <= 6 + 8  # at most the rest of the step that was running
    assert "".join(t.text for t in tokens) == finish.text
    assert finish.stats.n_tokens == len(finish.tokens)


def test_multibyte_characters_assemble_across_tokens(smol_session):
    prompt = smol_session.target_model.tokenize("Snow: 雪, 雪, 雪. Heart: ❤️❤️. Again: 雪", add_special=False)
    events = _collect(smol_session, prompt, GenParams("lookup", 24))
    finish = events[-1]
    tokens = [e for e in events if isinstance(e, TokenEvent)]
    joined = "".join(t.text for t in tokens)
    assert joined == finish.text
    assert "\ufffd" not in joined or "\ufffd" in smol_session.target_model.detokenize(finish.tokens)


def test_stops_at_end_of_generation(smol_session):
    prompt = smol_session.chat_prompt([{"role": "user", "content": "Say OK."}])
    finish = _collect(smol_session, prompt, GenParams("none", 200))[-1]
    assert finish.stats.finish_reason == "stop"
    assert not any(smol_session.target_model.is_eog(t) for t in finish.tokens)


def test_prompt_longer_than_context_is_refused_before_decoding(smol_session):
    prompt = smol_session.target_model.tokenize("word " * 600)
    with pytest.raises(ContextFullError, match="context holds 512"):
        _collect(smol_session, prompt, GenParams("none", 8))


def test_reply_stops_cleanly_when_the_context_fills(smol_session):
    prompt = smol_session.target_model.tokenize("one two three " * 160)
    assert 480 < len(prompt) < 510
    finish = _collect(smol_session, prompt, GenParams("lookup", 100))[-1]
    assert finish.stats.finish_reason in ("context", "stop")
    assert len(prompt) + len(finish.tokens) <= 512


def test_prompt_processing_reports_progress_and_stop_ends_it_between_batches(smol_path):
    """A long prompt is processed a batch at a time: PrefillEvents count up to the new tokens, and a
    Stop during processing ends the reply before any token, leaving a cache the next turn reuses."""
    import threading

    from app.engine.events import FinishEvent, PrefillEvent, TokenEvent
    from app.engine.pair_config import PairConfig
    from app.engine.session import GenParams, SpecSession

    with SpecSession(PairConfig(smol_path, None, n_ctx=1024, n_batch=64, n_threads=2)) as session:
        prompt = session.target_model.tokenize("one two three four " * 60)  # ~240 tokens: 4 batches
        events = list(session.generate(prompt, GenParams("none", 2)))
        progress = [e for e in events if isinstance(e, PrefillEvent)]
        assert [p.total for p in progress] == [len(prompt)] * len(progress) and len(progress) >= 3
        assert [p.done for p in progress] == sorted(p.done for p in progress)
        assert progress[-1].done == len(prompt)
        assert events.index(progress[-1]) < min(i for i, e in enumerate(events) if isinstance(e, TokenEvent))

        other = session.target_model.tokenize(", ".join(str(i) for i in range(1, 100)) + ",")  # ~290 tokens
        cancel = threading.Event()
        seen = []
        for event in session.generate(other, GenParams("none", 8), cancel):
            seen.append(event)
            if isinstance(event, PrefillEvent):
                cancel.set()  # Stop, pressed while the prompt is processed
        finish = seen[-1]
        assert isinstance(finish, FinishEvent) and finish.stats.finish_reason == "cancelled"
        assert finish.tokens == () and sum(isinstance(e, PrefillEvent) for e in seen) == 1
        again = list(session.generate(other, GenParams("none", 2)))[-1]  # the partial cache is reused
        assert again.stats.finish_reason in ("length", "stop") and again.tokens


def test_the_draft_models_prompt_processing_reports_progress_and_stop_ends_it_between_batches(smol_path):
    """In a mode that drafts with a model, the draft model processes the prompt after the target, a batch at a
    time too: its PrefillEvents follow the target's, and a Stop during them ends the reply before any token,
    leaving a draft cache that the next reply brings up to date (on the CPU the draft's share of a long
    prompt was a third of the wait, with no progress shown and Stop ignored until it ended)."""
    import threading

    from app.cli.render import format_stats
    from app.engine.events import FinishEvent, PrefillEvent
    from app.engine.pair_config import PairConfig
    from app.engine.session import GenParams, SpecSession
    from app.engine.speculative import SpecParams

    # SmolLM2 drafting for itself: a real second model context, and every greedy draft token is accepted.
    with SpecSession(PairConfig(smol_path, smol_path, n_ctx=1024, n_batch=64, n_threads=2)) as session:
        assert session.draft_ctx is not None
        prompt = session.target_model.tokenize("one two three four " * 60)  # ~240 tokens: 4 batches
        events = list(session.generate(prompt, GenParams("draft", 2)))
        progress = [e for e in events if isinstance(e, PrefillEvent)]
        target = [e for e in progress if e.model == "target"]
        draft = [e for e in progress if e.model == "draft"]
        assert progress == target + draft and len(draft) >= 3
        assert [e.total for e in draft] == [len(prompt)] * len(draft) and draft[-1].done == len(prompt)
        assert [e.done for e in draft] == sorted(e.done for e in draft)
        stats = events[-1].stats  # the draft model's share of the prompt's processing, reported apart
        assert 0.0 < stats.draft_prefill_ms < stats.prefill_ms
        assert "the draft model's pass" in format_stats(stats)
        lookup = list(session.generate(prompt[:-5], GenParams("lookup", 2)))[-1].stats
        assert lookup.draft_prefill_ms == 0.0 and "draft model" not in format_stats(lookup)

        other = session.target_model.tokenize(", ".join(str(i) for i in range(1, 100)) + ",")  # ~290 tokens
        cancel = threading.Event()
        seen = []
        for event in session.generate(other, GenParams("draft", 8), cancel):
            seen.append(event)
            if isinstance(event, PrefillEvent) and event.model == "draft":
                cancel.set()  # Stop, pressed while the draft model processes the prompt
        finish = seen[-1]
        assert isinstance(finish, FinishEvent) and finish.stats.finish_reason == "cancelled" and finish.tokens == ()
        assert [e.model for e in seen if isinstance(e, PrefillEvent)].count("draft") == 1
        stopped = session.draft_ctx.tokens
        assert len(stopped) < len(other) and stopped == other[:len(stopped)]  # stopped part-way
        fixed_k = GenParams("draft", 8, spec=SpecParams(adaptive=False, p_min=0.0))  # draft K = 6 every step
        again = list(session.generate(other, fixed_k))[-1]
        assert again.stats.finish_reason in ("length", "stop") and again.text.startswith(" 100,")
        assert session.draft_ctx.tokens[:len(other)] == other
        # The model drafting for itself from a cache that holds the whole prompt: its drafts are the target's.
        assert again.stats.drafted >= 6 and again.stats.accepted >= again.stats.drafted - 1


def test_clear_caches_makes_the_next_reply_prefill_the_whole_prompt(smol_session):
    """What the bench does before each reference run and in each fresh process after its warm-up: no prefix
    of an earlier prompt is reused, so the first token's logits come from one pass over the whole prompt."""
    from app.engine.events import PrefillEvent

    earlier = smol_session.chat_prompt([{"role": "user", "content": "Say hello."}])
    prompt = smol_session.chat_prompt([{"role": "user", "content": "Name three colours."}])
    _collect(smol_session, earlier, GenParams("none", 4))
    reused = _collect(smol_session, prompt, GenParams("none", 2))
    assert [e.done for e in reused if isinstance(e, PrefillEvent)][-1] < len(prompt)  # the template's prefix
    smol_session.clear_caches()
    assert smol_session.target_ctx.n_past == 0 and smol_session.target_ctx.kept_logits(len(prompt)) is None
    whole = _collect(smol_session, prompt, GenParams("none", 2))
    assert [e.done for e in whole if isinstance(e, PrefillEvent)] == [len(prompt)]


def test_first_token_comes_from_the_prompt_pass_and_a_rerun_reuses_it(smol_session):
    """The prefill keeps the prompt's last logits: the first token needs no decode step, and the same prompt
    again (a regenerate, a bench round) reuses them instead of decoding the last token alone, which rounds
    differently from the batch and could pick another token at a near-tie."""
    from app.engine.events import FinishEvent, PrefillEvent, StepEvent

    prompt = smol_session.chat_prompt([{"role": "user", "content": "Name three colours."}])
    ctx = smol_session.target_ctx
    ctx.clear()
    first = _collect(smol_session, prompt, GenParams("none", 12))
    steps = [e for e in first if isinstance(e, StepEvent)]
    assert steps[0].from_prompt and steps[0].verify_ms == 0.0 and not any(s.from_prompt for s in steps[1:])
    finish = first[-1]
    assert isinstance(finish, FinishEvent) and finish.stats.finish_reason == "length"
    # 12 tokens: the first from the prompt's pass, 11 from decode steps, which the rate counts.
    assert finish.stats.tokens_per_second * finish.stats.decode_ms / 1000 == pytest.approx(11)
    kept = ctx.kept_logits(len(prompt))
    assert kept is not None and int(np.argmax(kept)) == finish.tokens[0]

    again = _collect(smol_session, prompt, GenParams("none", 12))
    assert not any(isinstance(e, PrefillEvent) for e in again) and again[-1].tokens == finish.tokens
    # Cut below the prompt's end, the kept logits are gone and the prompt's tail is decoded again.
    ctx.truncate(len(prompt) - 3)
    assert ctx.kept_logits(len(prompt)) is None
    third = _collect(smol_session, prompt, GenParams("none", 12))
    assert [e.done for e in third if isinstance(e, PrefillEvent)] == [3]


def test_long_copies_are_governed_on_a_gpu_and_sure_on_the_cpu(smol_session, monkeypatch):
    """copy_max "auto" (the settings' default) is K up to 31 for long copies; where the target runs on a GPU
    the copy governor judges them, on the CPU only sure copies are taken, which may run to 47 after a clean one;
    explicit values stand."""
    import app.engine.session as session_mod
    from app.engine.draft_policy import AUTO_COPY_MAX, COPY_MAX_AUTO, SURE_COPY_LONG
    from app.engine.speculative import SpecParams
    from app.llama_backend import supports_gpu_offload

    auto = SpecParams(copy_max=COPY_MAX_AUTO)
    on_gpu = supports_gpu_offload() and smol_session.config.n_gpu_layers != 0
    on_cpu = SpecParams(copy_max=AUTO_COPY_MAX, sure_copies=True, sure_copy_long=SURE_COPY_LONG)
    assert smol_session.resolve_spec(auto) == (SpecParams(copy_max=AUTO_COPY_MAX) if on_gpu else on_cpu)
    # An explicit K stands, and bounds every sure copy: none runs longer after a clean one.
    assert smol_session.resolve_spec(SpecParams(copy_max=15)) == SpecParams(copy_max=15, sure_copies=not on_gpu)
    monkeypatch.setattr(session_mod, "supports_gpu_offload", lambda: True)
    assert smol_session.resolve_spec(auto) == SpecParams(copy_max=AUTO_COPY_MAX)
    monkeypatch.setattr(smol_session, "config", replace(smol_session.config, n_gpu_layers=0))
    assert smol_session.resolve_spec(auto) == on_cpu  # target on the CPU
