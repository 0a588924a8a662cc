"""A chat's follow-up turn reuses the ids of the reply before it (app/engine/turn_memory), so the KV cache's
prefix still matches where the reply's text would tokenize to other ids."""

from __future__ import annotations

from dataclasses import replace

from app.engine.events import FinishEvent, PrefillEvent
from app.engine.ngram import common_prefix
from app.engine.sampling import SamplingParams
from app.engine.session import GenParams
from app.engine.turn_memory import TurnMemory

QUESTION = [{"role": "user", "content": "Write a short poem about rivers."}]
# Hot sampling over the whole vocabulary writes token sequences the tokenizer would spell otherwise.
HOT = SamplingParams(temperature=1.6, top_k=0, top_p=1.0, min_p=0.0)


def _finish(events) -> FinishEvent:
    finish = events[-1]
    assert isinstance(finish, FinishEvent)
    return finish


def _reply_that_retokenizes_otherwise(session):
    """A seeded sampled reply whose text, templated into the next turn, tokenizes to other ids."""
    for seed in range(12):
        session.clear_caches()
        first = session.chat_prompt(QUESTION, reuse_replies=True)
        finish = _finish(list(session.generate(first, GenParams("none", 48, sampling=replace(HOT, seed=seed)))))
        follow = [*QUESTION, {"role": "assistant", "content": finish.text}, {"role": "user", "content": "Shorter."}]
        canonical = session.chat_prompt(follow)
        if common_prefix([*first, *finish.tokens], canonical) < len(first) + len(finish.tokens):
            return first, finish, follow, canonical
    raise AssertionError("no seed wrote a reply that re-tokenizes to other ids")


def test_a_follow_up_prefills_only_its_new_tokens_when_the_reply_would_tokenize_otherwise(smol_session):
    session = smol_session
    first, finish, follow, canonical = _reply_that_retokenizes_otherwise(session)
    held = [*first, *finish.tokens]
    prompt = session.chat_prompt(follow, reuse_replies=True)
    assert prompt[:len(held)] == held and prompt != canonical
    model = session.target_model
    assert model.detokenize(prompt) == model.detokenize(canonical)  # the same text, as the model wrote it
    assert prompt[len(held):] == canonical[len(canonical) - (len(prompt) - len(held)):]  # the new turn's own ids

    events = list(session.generate(prompt, GenParams("none", 4)))
    prefilled = [e for e in events if isinstance(e, PrefillEvent) and e.model == "target"]
    # The cache held the reply's ids (all but a last one that was never decoded): none prefilled again.
    new = len(prompt) - len(held)
    assert new <= prefilled[-1].total <= new + 1
    assert len(canonical) - common_prefix(held, canonical) > new + 1  # the whole text tokenized parts earlier
    assert _finish(events).stats.n_prompt_tokens == len(prompt)

    # Without reuse (or after clear_caches) the text is tokenized whole, and that prompt parts from the cache.
    session.clear_caches()
    assert session.chat_prompt(follow, reuse_replies=True) == canonical == session.chat_prompt(follow)


def test_only_a_reply_whose_ids_spell_its_text_is_remembered(smol_session):
    """A reply cut off inside a character (its text drops the bytes) must not lend its ids to a prompt whose
    text they do not spell; nor is a prompt rendered without reuse_replies (the bench's) remembered from."""
    session = smol_session
    session.clear_caches()
    first = session.chat_prompt(QUESTION, reuse_replies=True)
    finish = _finish(list(session.generate(first, GenParams("none", 16))))
    assert session.target_model.detokenize(finish.tokens) == finish.text and len(session._turns) == 1

    session.clear_caches()
    first = session.chat_prompt(QUESTION, reuse_replies=True)
    cut = replace(finish, text=finish.text[:-1])  # what a reply ending inside a character hands over
    assert list(session._remembering((e for e in [cut]), first, "")) == [cut] and len(session._turns) == 0

    session.clear_caches()
    plain = session.chat_prompt(QUESTION)
    list(session.generate(plain, GenParams("none", 16)))
    assert len(session._turns) == 0


def _chars(text: str, first: bool) -> list[int]:
    return ([0] if first else []) + [ord(c) for c in text]  # 0 stands for BOS


def test_the_longest_remembered_turn_that_starts_the_text_wins():
    memory = TurnMemory(size=2)
    assert memory.prompt("abc", _chars) == [0, 97, 98, 99]
    memory.remember("ab", [0, 1000])
    memory.remember("abcd", [0, 1000, 2000])
    assert memory.prompt("abcdef", _chars) == [0, 1000, 2000, 101, 102]
    assert memory.prompt("abx", _chars) == [0, 1000, 120]
    assert memory.prompt("abcd", _chars) == [0, 1000, 2000]  # nothing left to tokenize: no stray BOS
    assert memory.prompt("xyz", _chars) == [0, 120, 121, 122]
    memory.remember("q", [7])  # size 2: the oldest ("ab") goes
    assert memory.prompt("abx", _chars) == [0, 97, 98, 120]
    memory.clear()
    assert memory.prompt("abcdef", _chars) == _chars("abcdef", True)
