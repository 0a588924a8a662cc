"""Going back to a chat gets its kept KV cache back (app/engine/prompt_cache) instead of processing its history
again, and the reply is the one the uncut cache would have given."""

from __future__ import annotations

import ctypes

from app.engine.events import FinishEvent, PrefillEvent
from app.engine.pair_config import PairConfig
from app.engine.prompt_cache import MIN_TOKENS, PromptCache
from app.engine.session import GenParams, SpecSession
from app.llama_backend import CacheSnapshot

RIVERS = [{"role": "user", "content": "Tell me about rivers. " + "Rivers run down to the sea. " * 20}]
MOUNTAINS = [{"role": "user", "content": "Tell me about mountains. " + "Mountains are tall and cold. " * 20}]


def _run(session, prompt, n=16):
    events = list(session.generate(prompt, GenParams("lookup", n)))
    finish = events[-1]
    assert isinstance(finish, FinishEvent)
    prefilled = sum(e.total for e in events
                    if isinstance(e, PrefillEvent) and e.model == "target" and e.done == e.total)
    return finish, prefilled


def _follow_up(session, reply):
    messages = [*RIVERS, {"role": "assistant", "content": reply.text}, {"role": "user", "content": "Go on."}]
    return session.chat_prompt(messages, reuse_replies=True)


def test_going_back_to_a_chat_gets_its_cache_and_the_same_reply(smol_session, smol_path):
    session = smol_session
    session.clear_caches()
    first, _ = _run(session, session.chat_prompt(RIVERS, reuse_replies=True))
    straight, straight_prefilled = _run(session, _follow_up(session, first))  # the cache never left

    session.clear_caches()
    assert len(session.prompt_cache) == 0
    again, _ = _run(session, session.chat_prompt(RIVERS, reuse_replies=True))
    assert again.tokens == first.tokens
    _run(session, session.chat_prompt(MOUNTAINS))  # another chat: the rivers chat's cache is kept
    assert len(session.prompt_cache) == 1
    restored = session.prompt_cache.restored
    back, back_prefilled = _run(session, _follow_up(session, again))
    assert session.prompt_cache.restored == restored + 1
    assert back_prefilled == straight_prefilled < MIN_TOKENS  # only the new turn
    assert back.tokens == straight.tokens  # the same bytes in the cache: the same reply
    assert len(session.prompt_cache) == 2  # the mountains chat's, kept when it was cut, and the rivers one, used

    # Without kept caches, going back processes the chat's history again.
    with SpecSession(PairConfig(smol_path, None, n_ctx=512, n_threads=2, prompt_cache_mb=0)) as bare:
        assert bare.prompt_cache is None
        first, _ = _run(bare, bare.chat_prompt(RIVERS, reuse_replies=True))
        _run(bare, bare.chat_prompt(MOUNTAINS))
        _reply, prefilled = _run(bare, _follow_up(bare, first))
        assert prefilled > straight_prefilled + 2 * MIN_TOKENS


def test_kept_caches_stay_within_their_budget(smol_session):
    session = smol_session
    session.clear_caches()
    ctx = session.target_ctx
    rivers, mountains = session.chat_prompt(RIVERS), session.chat_prompt(MOUNTAINS)
    ctx.decode(rivers)
    one = ctx.snapshot_bytes()
    cache = PromptCache(budget_bytes=one * 3 // 2)  # room for one snapshot of this size, not two
    cache.swap_in(ctx, mountains)  # the rivers cache would be cut: kept
    assert len(cache) == 1 and cache.nbytes <= cache.budget_bytes
    ctx.keep_common_prefix(mountains)
    ctx.decode(mountains[ctx.n_past:])
    cache.swap_in(ctx, rivers)  # the mountains cache is kept, the rivers one comes back (and goes over the budget)
    assert ctx.tokens == rivers and cache.restored == 1 and len(cache) == 1
    cache.swap_in(ctx, rivers + [1, 2, 3])  # the live cache serves: nothing kept, nothing restored
    assert cache.restored == 1 and len(cache) == 1
    tiny = PromptCache(budget_bytes=one // 2)  # a cache larger than the budget is never kept
    tiny.swap_in(ctx, mountains)
    assert len(tiny) == 0
    session.clear_caches()


def test_the_draft_models_cache_comes_back_too(smol_path):
    """In the modes that draft with a model, its context is cut the same way and kept the same way."""
    with SpecSession(PairConfig(smol_path, smol_path, n_ctx=512, n_threads=2, n_threads_draft=1)) as session:
        def run(prompt):
            events = list(session.generate(prompt, GenParams("draft", 12)))
            drafted = [e for e in events if isinstance(e, PrefillEvent) and e.model == "draft"]
            return events[-1], drafted[-1].total if drafted else 0

        first, _ = run(session.chat_prompt(RIVERS, reuse_replies=True))
        straight, straight_draft = run(_follow_up(session, first))
        session.clear_caches()
        again, _ = run(session.chat_prompt(RIVERS, reuse_replies=True))
        run(session.chat_prompt(MOUNTAINS))
        assert session.draft_prompt_cache is not None and len(session.draft_prompt_cache) == 1
        back, back_draft = run(_follow_up(session, again))
        assert session.draft_prompt_cache.restored == 1 and back_draft == straight_draft < MIN_TOKENS
        assert back.tokens == straight.tokens


class _Context:
    """What PromptCache uses of a LlamaContext, with a snapshot of 1,000 bytes, counting the copies it makes."""

    def __init__(self, tokens: list[int]) -> None:
        self.tokens = list(tokens)
        self.copies = 0

    @property
    def n_past(self) -> int:
        return len(self.tokens)

    def snapshot_bytes(self) -> int:
        return 1000

    def snapshot(self) -> CacheSnapshot:
        self.copies += 1
        return CacheSnapshot(tuple(self.tokens), (ctypes.c_uint8 * 1000)())

    def can_restore(self, snap: CacheSnapshot) -> bool:
        return True  # nothing follows this cache

    def restore(self, snap: CacheSnapshot) -> None:
        self.tokens = list(snap.tokens)

    def cut(self, prompt: list[int], reply: int = 9000) -> None:
        """What the engine does after swap_in: keep the common prefix, then decode the prompt and a reply."""
        common = 0
        while common < min(len(self.tokens), len(prompt)) and self.tokens[common] == prompt[common]:
            common += 1
        self.tokens = [*self.tokens[:common], *prompt[common:], *range(reply, reply + 2 * MIN_TOKENS)]


def _chat(n: int) -> list[int]:
    return [1, 2, 3, *range(100 * n + 10, 100 * n + 10 + 2 * MIN_TOKENS)]  # a shared system prefix, then the chat's


def test_a_regenerate_drops_the_last_reply_without_a_copy():
    prompt = _chat(1)
    ctx = _Context(prompt)
    ctx.cut(prompt)  # the prompt and its reply: 2 * MIN_TOKENS more tokens
    cache = PromptCache(budget_bytes=10_000)
    cache.swap_in(ctx, prompt)  # regenerate (or a comparison's next mode): only the reply is lost
    assert ctx.copies == 0 and len(cache) == 0
    cache.swap_in(ctx, [*prompt[:-MIN_TOKENS], 77])  # an edit of the prompt itself: its cache is kept
    assert ctx.copies == 1 and len(cache) == 1


def test_over_the_budget_the_least_recently_used_goes_first():
    cache = PromptCache(budget_bytes=2_500)  # room for two snapshots
    a, b, c, d = (_chat(n) for n in range(4))
    ctx = _Context(a)
    ctx.cut(a)
    cache.swap_in(ctx, b)  # a kept
    ctx.cut(b)
    cache.swap_in(ctx, c)  # b kept: [a, b]
    ctx.cut(c)
    cache.swap_in(ctx, a)  # c kept, a comes back and is used: b is the least recently used
    assert cache.restored == 1 and ctx.tokens[:len(a)] == a
    assert [s.tokens[:len(c)] for s in cache._snaps] == [tuple(a), tuple(c)]  # oldest-first would have kept b, c
    copies = ctx.copies
    cache.swap_in(ctx, a)  # a regenerate in a: its first reply is dropped without a copy
    ctx.cut(a, reply=20_000)
    assert ctx.copies == copies and len(cache) == 2
    cache.swap_in(ctx, d)  # a's cache with the new reply is kept; c and the old a came before it: a goes
    assert [s.tokens[len(a)] for s in cache._snaps] == [9000, 20_000] and cache._snaps[0].tokens[:len(c)] == tuple(c)
