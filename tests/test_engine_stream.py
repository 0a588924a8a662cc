"""Stream behaviour on a tiny real model: cancellation, stops, UTF-8 assembly, context limits."""

from __future__ import annotations

import threading

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
