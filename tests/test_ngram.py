"""The n-gram drafter: its incremental index, its choice of continuation, its per-step cost, and lookup and
hybrid drafting on the real demo pair (greedy output identical to plain decoding, most tokens from drafts)."""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Iterator

import numpy as np
import pytest

from app.engine.draft_policy import AUTO_COPY_MAX, SURE_COPY_MIN
from app.engine.drafters import HybridDrafter, LookupDrafter, ModelDrafter
from app.engine.events import FinishEvent, StepEvent
from app.engine.ngram import SURE_LOCAL_RUN, NgramIndex, NgramParams, PromptLookup
from app.engine.proposal import Proposal, Proposer
from app.engine.sampling import Dist, SamplingParams
from app.engine.session import GenParams
from app.engine.speculative import SpecEngine, SpecParams

GREEDY = SamplingParams()
SAMPLED = SamplingParams(temperature=0.8, seed=1)
RNG = np.random.default_rng(0)


def _snapshot(index: NgramIndex) -> list[dict[int, list[int]]]:
    return [{key: [v] if isinstance(v, int) else list(v) for key, v in m.items()} for m in index.maps]


def _rebuilt(tokens: list[int], sizes: tuple[int, ...]) -> NgramIndex:
    index = NgramIndex(sizes)
    index.extend(tokens)
    return index


def _oracle(drafter: Proposer, prompt: list[int], reply: list[int], k: int = 6) -> tuple[int, int, int]:
    """Greedy verification by a target that writes `reply`: (steps, drafted, accepted)."""
    drafter.prepare(list(prompt))
    context, i, steps, drafted, accepted = list(prompt), 0, 0, 0, 0
    while i < len(reply):
        tokens = drafter.propose(context, min(k, len(reply) - i - 1), GREEDY, RNG).tokens
        a = 0
        while a < len(tokens) and tokens[a] == reply[i + a]:
            a += 1
        context.extend(reply[i : i + a + 1])
        i, steps, drafted, accepted = i + a + 1, steps + 1, drafted + len(tokens), accepted + a
    return steps, drafted, accepted


# The index


def test_incremental_index_equals_a_rebuild() -> None:
    rng = random.Random(3)
    tokens = [rng.randrange(12) for _ in range(600)]  # a small vocabulary: keys repeat at every length
    sizes = (1, 2, 3, 5)
    index = NgramIndex(sizes)
    at = 0
    while at < len(tokens):
        step = rng.randint(1, 7)
        index.extend(tokens[at : at + step])
        at += step
    assert _snapshot(index) == _snapshot(_rebuilt(tokens, sizes))
    index.truncate(250)  # a rollback drops exactly what a rebuild of the prefix would not hold
    assert _snapshot(index) == _snapshot(_rebuilt(tokens[:250], sizes))
    assert index.positions(0, tokens[249]) == sorted(index.positions(0, tokens[249]))


def test_prepare_keeps_the_common_prefix_and_rebuilds_another_conversation() -> None:
    rng = random.Random(4)
    first = [rng.randrange(30) for _ in range(300)]
    lookup = PromptLookup()
    lookup.prepare(first)
    follow_up = first[:280] + [rng.randrange(30) for _ in range(50)]  # the next turn re-tokenised its tail
    lookup.prepare(follow_up)
    assert lookup.index.tokens == follow_up
    assert _snapshot(lookup.index) == _snapshot(_rebuilt(follow_up, lookup.index.sizes))
    other = [rng.randrange(30) for _ in range(120)]
    lookup.propose(other, 4)  # no prepare: a context that does not continue the index is re-indexed
    assert _snapshot(lookup.index) == _snapshot(_rebuilt(other, lookup.index.sizes))


def test_within_a_reply_only_the_new_tail_is_indexed(monkeypatch: pytest.MonkeyPatch) -> None:
    drafter = LookupDrafter()
    context = list(range(100)) * 3
    drafter.prepare(context)
    added: list[int] = []
    original = NgramIndex.extend
    monkeypatch.setattr(NgramIndex, "extend", lambda self, new: (added.append(len(new)), original(self, new))[1])
    for _ in range(5):
        context.extend([7, 8, 9])
        drafter.propose(context, 4, GREEDY, RNG)
    assert added == [3] * 5


# Choosing the continuation


def test_most_frequent_continuation_wins() -> None:
    # (1, 2) is followed by 10 twice and by 20 once, most recently; no longer key matches the end.
    context = [1, 2, 10, 50, 1, 2, 10, 51, 1, 2, 20, 52, 60, 1, 2]
    proposal = PromptLookup(NgramParams(sizes=(1, 2))).propose(context, 3)
    assert proposal is not None
    assert proposal.tokens[0] == 10
    assert proposal.source == 6  # the most recent occurrence of the winning continuation
    # Without a majority (10 once, 20 once) the tie goes to the most recent continuation.
    tie = [1, 2, 10, 50, 1, 2, 20, 52, 60, 1, 2]
    proposal = PromptLookup(NgramParams(sizes=(1, 2))).propose(tie, 3)
    assert proposal is not None and proposal.tokens[0] == 20


def test_a_short_key_without_support_drafts_nothing() -> None:
    # The 1-gram 5 is followed by four different tokens: no continuation has the share ngram-cache asks for.
    context = [5, 1, 5, 2, 5, 3, 5, 4, 9, 5]
    assert PromptLookup(NgramParams(sizes=(1,))).propose(context, 4) is None


def test_longer_keys_are_preferred() -> None:
    # (2, 3) was last followed by 9, but the longer (1, 2, 3) that ends the context was followed by 7.
    context = [1, 2, 3, 7, 40, 41, 42, 2, 3, 9, 43, 44, 1, 2, 3]
    proposal = PromptLookup(NgramParams(sizes=(1, 2, 3))).propose(context, 4)
    assert proposal is not None
    assert proposal.tokens[0] == 7
    assert proposal.key is not None and proposal.key[0] == 3


def test_draft_is_capped_by_k_the_match_and_the_known_tokens() -> None:
    body = list(range(100, 140))
    context = body + [0] + body[:10]  # the end matches body[:10]: a long match, a long known continuation
    lookup = PromptLookup()
    proposal = lookup.propose(context, 5)
    assert proposal is not None and proposal.tokens == tuple(body[10:15])  # k
    # A one-token match supports two draft tokens only.
    short = [3, 5, 6, 7, 8, 9] + [3]
    proposal = PromptLookup(NgramParams(min_hits=(1,))).propose(short, 6)
    assert proposal is not None and proposal.tokens == (5, 6)
    # The draft cannot run past the context's end.
    proposal = PromptLookup().propose([1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3], 6)
    assert proposal is not None and proposal.tokens == (4, 1, 2, 3)


def test_a_key_that_drafted_wrong_tokens_drafts_less_until_it_is_right() -> None:
    # The cap alone: with slot cuts the second draft would also stop before 99, where the first one broke.
    lookup = PromptLookup(NgramParams(sizes=(2,), min_hits=(1, 1), slot_cuts=False))
    context = [1, 2, 3, 4, 5, 6, 7, 8, 9, 1, 2]
    first = lookup.propose(context, 6)
    assert first is not None and first.tokens == (3, 4, 5, 6)  # a 2-token match: 4 tokens
    lookup.commit(first)
    context += [3, 99]  # the target accepted one token, then wrote its own
    context += [1, 2]
    second = lookup.propose(context, 6)
    assert second is not None and len(second.tokens) == 2  # what was accepted last time, plus one
    lookup.commit(second)
    context += list(second.tokens) + [5]  # all accepted, and the bonus token follows the source too
    context += [50, 1, 2]
    third = lookup.propose(context, 6)
    assert third is not None and len(third.tokens) == 4  # the cap is lifted


def test_an_offer_followed_by_plain_steps_is_judged_by_all_its_tokens() -> None:
    # While drafting is off, the engine shows the governor a free offer and, when it is not verified, takes a
    # plain step: the context then grows one token at a time. The offer was right only if all its tokens come;
    # judging it by the first token alone counted a right offer as 1 of 4, capped its key at 2 and made the
    # reply look untrusted.
    lookup = PromptLookup(NgramParams(sizes=(2,), min_hits=(1, 1)))
    context = [1, 2, 3, 4, 5, 6, 7, 8, 9, 1, 2]
    offer = lookup.propose(context, 4)
    assert offer is not None and offer.tokens == (3, 4, 5, 6)
    lookup.commit(offer)
    for token in offer.tokens:  # four plain steps, each writing what the offer said
        context.append(token)
        lookup.propose(context, 0)
    # Scored once, 4 right of 4, on the decayed prior of 1 right of 2.
    assert lookup.trusted and (lookup.feedback.hits, lookup.feedback.tries) == pytest.approx((0.8 + 4, 1.6 + 4))
    context += [60, 61, 62, 1, 2]
    again = lookup.propose(context, 4)
    assert again is not None and again.key is not None and len(again.tokens) == 4  # its key is not capped
    lookup.commit(again)
    context += [3, 70]  # one right plain token, then the target wrote its own
    lookup.propose(context, 0)
    # A wrong token decides it at once: 1 right of 4.
    assert (lookup.feedback.hits, lookup.feedback.tries) == pytest.approx((4.8 * 0.8 + 1, 5.6 * 0.8 + 4))


def test_an_offer_replaced_before_it_was_judged_counts_its_judged_tokens() -> None:
    # While off, the engine asks for a new offer at every plain step: the one before it is scored on the tokens
    # the context has shown so far (all right), not charged for the ones it never got to show.
    lookup = PromptLookup(NgramParams(sizes=(2,), min_hits=(1, 1)))
    context = [1, 2, 3, 4, 5, 6, 7, 8, 9, 1, 2]
    for _ in range(3):
        offer = lookup.propose(context, 4)
        assert offer is not None and offer.tokens == tuple(context[len(context) - 9 : len(context) - 5])
        lookup.commit(offer)
        context.append(offer.tokens[0])  # a plain step: one token, the offer's first
    lookup.commit(lookup.propose(context, 4))  # settles the third offer
    f = lookup.feedback
    assert (f.hits, f.tries) == pytest.approx((0.8**3 + 0.8**2 + 0.8 + 1, 2 * 0.8**3 + 0.8**2 + 0.8 + 1))


def test_a_running_copy_resumes_right_after_an_edit() -> None:
    # Lines (7, name, 300): after the renamed name, the key (300,) occurs on every line, always followed by 7;
    # only the spot where the copy broke off says which line the reply is on.
    prompt = [t for i in range(1, 30) for t in (7, 100 + i, 300)]
    reply = list(prompt)
    edit = reply.index(115)
    reply[edit] = 999
    drafter = LookupDrafter(min_match=0, resync_min_match=0, cold_min_match=0)  # the index's resync, unfiltered
    base = prompt + [0]
    drafter.prepare(base)
    context, i, drafts = base + reply[:3], 3, {}
    while i < edit + 6:
        drafts[i] = drafter.propose(context, 6, GREEDY, RNG).tokens
        a = 0
        while a < len(drafts[i]) and drafts[i][a] == reply[i + a]:
            a += 1
        context += reply[i : i + a + 1]
        i += a + 1
    # (7, 116): the next line, not the last; 2 tokens per matched one, as any key match (a full K draft for a resumed
    # copy paid nothing on the held-out prompts: docs/BENCHMARKS.md, run 43).
    assert drafts[edit + 2] == tuple(reply[edit + 2 : edit + 4])


class _ScanDrafter:
    """The previous LookupDrafter: the most recent earlier match of the last 3..1 tokens, rescanned each step."""

    def prepare(self, context: list[int]) -> Iterator[tuple[int, int]]:
        return iter(())

    def propose(self, context: list[int], k: int, sampling: SamplingParams, rng: np.random.Generator) -> Proposal:
        for n in (3, 2, 1):
            pattern = context[-n:]
            for start in range(len(context) - n - 1, -1, -1):
                if context[start : start + n] == pattern:
                    return Proposal(tuple(context[start + n : start + n + k]), None, 0.0)
        return Proposal((), None, 0.0)


def test_a_copy_with_edits_beats_the_previous_scan() -> None:
    rng = random.Random(7)
    lines = [[rng.randrange(50, 80) for _ in range(rng.randint(4, 9))] + [1] for _ in range(40)]  # 1 = newline
    prompt = [t for line in lines for t in line] + [2]
    reply: list[int] = []
    for n, line in enumerate(lines):
        edited = list(line)
        if n % 4 == 0:
            edited[1] = 999  # rename
        if n % 7 == 0:
            edited[2:2] = [998, 997]  # insert an annotation
        reply += edited
    steps, drafted, accepted = _oracle(LookupDrafter(min_match=0, resync_min_match=0, cold_min_match=0), prompt, reply)
    old_steps, old_drafted, old_accepted = _oracle(_ScanDrafter(), prompt, reply)  # type: ignore[arg-type]
    print(f"\ncopy with edits, {len(reply)} tokens: lookup {accepted}/{drafted} accepted in {steps} steps, "
          f"previous scan {old_accepted}/{old_drafted} in {old_steps}")
    assert accepted >= 0.7 * len(reply)
    assert steps <= old_steps
    assert drafted - accepted <= 0.6 * (old_drafted - old_accepted)  # far fewer wasted verify rows


def test_sampled_lookup_drafts_carry_point_masses() -> None:
    body = list(range(100, 140))
    draft = LookupDrafter().propose(body + [0] + body[:10], 4, SAMPLED, RNG)
    assert draft.q is not None and len(draft.q) == len(draft.tokens) == 4
    assert [int(q.ids[0]) for q in draft.q] == list(draft.tokens)
    assert all(q.probs.tolist() == [1.0] for q in draft.q)


# Per-step cost


def _word(rng: random.Random) -> int:
    return min(int(rng.paretovariate(1.1)), 5000)  # Zipf-like: a few ids occur thousands of times at 32k


def _synthetic_text(n: int, rng: random.Random) -> list[int]:
    """Text-like tokens: Zipf-like words and copied stretches, so keys repeat at every length as in code."""
    tokens: list[int] = []
    while len(tokens) < n:
        if tokens and rng.random() < 0.6:
            start = rng.randrange(len(tokens))
            tokens += tokens[start : start + rng.randint(4, 40)]
        else:
            tokens += [_word(rng) for _ in range(rng.randint(1, 10))]
    return tokens[:n]


def _median_step_ms(n_ctx: int, steps: int = 300) -> float:
    rng = random.Random(n_ctx)
    context = _synthetic_text(n_ctx, rng)
    drafter = LookupDrafter()
    drafter.prepare(context)
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        draft = drafter.propose(context, 6, GREEDY, RNG)
        times.append(time.perf_counter() - start)
        context += list(draft.tokens[: rng.randint(0, len(draft.tokens))]) + [_word(rng)]
    return statistics.median(times) * 1000.0


def test_per_step_cost_does_not_grow_with_the_context() -> None:
    small = min(_median_step_ms(1024) for _ in range(3))
    large = min(_median_step_ms(32768) for _ in range(3))
    print(f"\nlookup propose, median per step: {small:.4f} ms at 1k tokens, {large:.4f} ms at 32k tokens")
    assert large <= 3.0 * small + 0.01  # the slack absorbs timer noise on a step of microseconds


# Hybrid


class _StubModel:
    """A ModelDrafter stand-in: always proposes the same tokens with made-up distributions."""

    native_ms = 0.0

    def __init__(self) -> None:
        self.calls = 0
        self.prepared: list[int] | None = None

    def prepare(self, context: list[int]) -> Iterator[tuple[int, int]]:
        self.prepared = list(context)
        return iter(())

    def propose(self, context: list[int], k: int, sampling: SamplingParams, rng: np.random.Generator) -> Proposal:
        self.calls += 1
        tokens = tuple(range(900, 900 + k))
        q = tuple(Dist(np.array([t, 1]), np.array([0.6, 0.4])) for t in tokens) if not sampling.greedy else None
        return Proposal(tokens, q, 1.0)


def test_hybrid_copies_long_matches_and_asks_the_model_otherwise() -> None:
    model = _StubModel()
    hybrid = HybridDrafter(model)  # type: ignore[arg-type]
    assert (hybrid.mode, hybrid.costs_time) == ("hybrid", True)
    body = list(range(100, 140))
    context = body + [0, 5]
    hybrid.prepare(context)
    assert model.prepared == context
    draft = hybrid.propose(context, 4, SAMPLED, RNG)  # nothing to copy: the model drafts, with its q
    assert model.calls == 1 and draft.tokens == (900, 901, 902, 903)
    assert draft.q is not None and draft.q[0].probs.tolist() == [0.6, 0.4]
    context += [6] + body[:8]  # now the end matches the body over 8 tokens
    draft = hybrid.propose(context, 4, SAMPLED, RNG)
    assert model.calls == 1 and draft.tokens == tuple(body[8:12])
    assert draft.q is not None and all(q.probs.tolist() == [1.0] for q in draft.q)
    context += [7, 100]  # a one-token match is not enough to skip the model
    hybrid.propose(context, 4, GREEDY, RNG)
    assert model.calls == 2


# The real demo pair

CODE = '''from dataclasses import dataclass, field


@dataclass
class Item:
    name: str
    price: float
    quantity: int = 0


@dataclass
class Inventory:
    items: dict = field(default_factory=dict)

    def add(self, item):
        if item.name in self.items:
            self.items[item.name].quantity += item.quantity
        else:
            self.items[item.name] = item

    def remove(self, name, quantity=1):
        item = self.items[name]
        item.quantity -= quantity
        if item.quantity <= 0:
            del self.items[name]

    def total_value(self):
        return sum(i.price * i.quantity for i in self.items.values())


def merge(a, b):
    result = Inventory()
    for inv in (a, b):
        for item in inv.items.values():
            result.add(Item(item.name, item.price, item.quantity))
    return result
'''
EDIT_PROMPT = f"Rename the class Inventory to Stock everywhere and return the whole code:\n\n```python\n{CODE}```"
N_PREDICT = 80


def _finish(events) -> FinishEvent:  # type: ignore[no-untyped-def]
    last = list(events)[-1]
    assert isinstance(last, FinishEvent)
    return last


def test_lookup_and_hybrid_reproduce_plain_decoding_on_an_edit_prompt(demo_session) -> None:  # type: ignore[no-untyped-def]
    prompt = demo_session.chat_prompt([{"role": "user", "content": EDIT_PROMPT}])
    spec = SpecParams(adaptive=False)  # fixed K: drafting happens on every step it can
    plain = _finish(demo_session.generate(prompt, GenParams("none", N_PREDICT)))
    lookup = _finish(demo_session.generate(prompt, GenParams("lookup", N_PREDICT, spec=spec)))
    hybrid_engine = SpecEngine(demo_session.target_ctx, HybridDrafter(ModelDrafter(demo_session.draft_ctx)))
    hybrid = _finish(hybrid_engine.generate(prompt, N_PREDICT, GREEDY, spec))
    for name, run in (("lookup", lookup), ("hybrid", hybrid)):
        s = run.stats
        print(f"\n{name}: {s.accepted}/{s.drafted} drafts accepted, {s.accepted}/{s.n_tokens} tokens from drafts, "
              f"{s.steps} steps, {s.tokens_per_second:.1f} tok/s (plain {plain.stats.tokens_per_second:.1f})")
        assert run.tokens == plain.tokens, f"{name} parted from plain decoding"
        assert s.accepted >= 0.5 * s.n_tokens, f"{name}: too few tokens came from accepted drafts"
    assert lookup.stats.acceptance_rate >= 0.7


@pytest.mark.parametrize(("mode", "sure"), [("lookup", False), ("hybrid", False), ("lookup", True)])
def test_adaptive_lookup_drafts_long_copies_and_reproduces_plain_decoding(demo_session, mode, sure) -> None:  # type: ignore[no-untyped-def]
    from app.cli.bench import run_once
    from app.engine.parting import first_divergence

    prompt = demo_session.chat_prompt([{"role": "user", "content": EDIT_PROMPT}])
    plain = run_once(demo_session, prompt, GenParams("none", N_PREDICT, track_margins=True))
    # Adaptive, with long copies as "auto" runs them: K up to 31, under their own governor (a GPU; hybrid is
    # "auto" there) or as sure copies (the CPU).
    spec = SpecParams(draft_max=6, copy_max=AUTO_COPY_MAX, sure_copies=sure)
    events = list(demo_session.generate(prompt, GenParams(mode, N_PREDICT, spec=spec)))
    run = _finish(events)
    steps = [e for e in events if isinstance(e, StepEvent)]
    assert max(len(e.drafted) for e in steps) > spec.draft_max, "no long copy was drafted beyond draft_max"
    assert all(e.copy for e in steps if len(e.drafted) > spec.draft_max)
    if sure:  # a sure copy is at least SURE_COPY_MIN tokens long
        assert all(len(e.drafted) >= SURE_COPY_MIN for e in steps if e.copy)
    divergence = first_divergence(plain, run)
    # Repacked kernels may round a 16-row batch differently from one-token steps, so a parting is allowed
    # only where the plain run's two best logits were that close (test_engine_exact's bound).
    assert divergence is None or divergence.margin < 0.5, divergence
    if divergence is None:
        assert run.tokens == plain.tokens


def _copy_past_an_edit(passage: list[int], reply: list[int], prompt: list[int]) -> tuple[PromptLookup, list[int]]:
    """Copy `reply` from `passage` (in `prompt`) up to the first edit, then on until the copy has resumed after it
    and agreed for 16 tokens again: the lookup and the context there."""
    lookup = PromptLookup()
    lookup.prepare(prompt)
    context = [*prompt, *reply[:3]]
    assert lookup.propose(context, 4) is not None  # the key match starts the copy
    context += reply[3:18]
    copy = lookup.running_copy(context, 31, min_run=16, cut_at_edits=True)
    assert copy is not None and copy.tokens == tuple(passage[18:49])  # nothing edited yet: no cut
    context += reply[18:21]  # the edit is at 20: the copy breaks there ...
    assert lookup.running_copy(context, 31, min_run=1) is None
    for _ in range(20):  # ... and resumes after it, at the next lookup that finds its spot again
        if lookup.propose(context, 6) is not None and lookup.running_copy(context, 31, min_run=16) is not None:
            break
        context.append(reply[len(context) - len(prompt)])
    return lookup, context


def test_a_sure_copy_stops_before_a_token_the_reply_edited_before() -> None:
    # An insertion: the reply puts 99 before the token 77, wherever it occurs. The copy breaks at 77 and
    # resumes at the same 77, so there is nothing to substitute: a sure copy stops before the next 77.
    passage = [*range(100, 120), 77, *range(120, 160), 77, *range(160, 170)]
    prompt = [1, 2, *passage, 3, 4]
    reply = [u for t in passage for u in ((99, 77) if t == 77 else (t,))]
    lookup, context = _copy_past_an_edit(passage, reply, prompt)
    cut = lookup.running_copy(context, 31, min_run=16, cut_at_edits=True)
    whole = lookup.running_copy(context, 31, min_run=16)
    assert whole is not None and 77 in whole.tokens  # the copy itself runs on past the next 77 ...
    at = whole.source - 2  # where the copy stands in the passage
    assert cut is not None and cut.tokens == tuple(passage[at : passage.index(77, at)])  # ... a sure one stops


def test_a_copy_writes_a_rename_it_has_seen_wherever_the_source_has_the_old_name() -> None:
    # A rename: the reply copies the passage with its name (77, 78) replaced by 88, wherever it occurs. Where the
    # copy resumes after the first one it learns the substitution, and copies the next one renamed; a sure copy
    # stops before it until the reply has made it a second time (one edit may be a skipped passage, not a
    # rename), then writes it too. Where the reply then keeps the old name, the substitution is forgotten.
    passage = [*range(100, 120), 77, 78, *range(120, 160), 77, 78, *range(160, 170), 77, 78, *range(170, 180)]
    prompt = [1, 2, *passage, 3, 4]
    reply: list[int] = []
    for t in passage:
        reply += [88] if t == 77 else [] if t == 78 else [t]
    lookup, context = _copy_past_an_edit(passage, reply, prompt)
    done = len(context) - len(prompt)
    second = reply.index(88, 21)
    whole = lookup.running_copy(context, 31, min_run=16)
    assert whole is not None and whole.tokens == tuple(reply[done : done + 31]) and 88 in whole.tokens
    cut = lookup.running_copy(context, 31, min_run=16, cut_at_edits=True)
    assert cut is not None and cut.tokens == tuple(reply[done:second])
    context = [*prompt, *reply[: second + 1]]  # the reply renames the second one too
    done = len(context) - len(prompt)
    cut = lookup.running_copy(context, 31, min_run=16, cut_at_edits=True)
    assert cut is not None and cut.tokens[: len(reply) - done] == tuple(reply[done:]) and 88 in cut.tokens
    context = [*prompt, *reply[: reply.index(88, second + 1)], 77]  # the third time the reply keeps the old name
    assert lookup.propose(context, 4) is not None
    assert lookup.edits.subs == {77: []}


def test_a_key_match_wrong_from_its_first_token_marks_no_edit() -> None:
    # A 3-token key (7, 8, 9) seen once before 50: the reply writes 60 after it, an accident of fresh text,
    # not an edit of the source. Then it copies a passage holding 50: a sure copy must run past that 50 (a
    # cut there, before a token as common as ' return', cost mt-add-types 2-3% in the replay: run 17).
    passage = [*range(100, 130), 50, *range(130, 160)]
    prompt = [1, 7, 8, 9, 50, 2, *passage, 3]
    reply = [7, 8, 9, 60, *passage]
    lookup = PromptLookup()
    lookup.prepare(prompt)
    context = [*prompt, *reply[:3]]
    assert lookup.propose(context, 4) is not None  # the key match proposes 50 ...
    context += reply[3:7]  # ... the reply writes 60, then the passage's first tokens
    assert lookup.propose(context, 4) is not None  # the key match starts the copy
    context += reply[7:22]
    copy = lookup.running_copy(context, 31, min_run=16, cut_at_edits=True)
    assert copy is not None and copy.tokens == tuple(passage[18:49]) and 50 in copy.tokens


def test_a_copy_that_resumed_at_an_edit_and_breaks_at_once_marks_an_edit() -> None:
    # A two-token rename (77 78 79 -> 88 78 99): the copy breaks at 77, resumes right after it (a local match)
    # and breaks again at 79 before copying a token. That second break is an edit too: the next 79 is cut.
    passage = [*range(100, 120), 77, 78, 79, *range(120, 160), 79, *range(160, 170)]
    prompt = [1, 2, *passage, 3, 4]
    reply = [{77: 88, 79: 99}.get(t, t) for t in passage]
    lookup = PromptLookup()
    lookup.prepare(prompt)
    context = [*prompt, *reply[:3]]
    assert lookup.propose(context, 4) is not None
    context += reply[3:21]  # 88 where the source has 77: the copy breaks there
    context.append(reply[21])  # 78: found right after the break, the copy resumes there ...
    resumed = lookup.propose(context, 4)
    assert resumed is not None and resumed.local and resumed.tokens[0] == 79
    context.append(reply[22])  # ... and breaks at once: 99 for 79
    for _ in range(25):
        context.append(reply[len(context) - len(prompt)])
        if lookup.propose(context, 6) is not None and lookup.running_copy(context, 31, min_run=16) is not None:
            break
    at = len(context) - len(prompt)
    cut = lookup.running_copy(context, 31, min_run=16, cut_at_edits=True)
    assert cut is not None and cut.tokens == tuple(passage[at : passage.index(79, at)])


def test_running_copy_only_looks() -> None:
    passage = list(range(100, 130))
    prompt = [1, 2, *passage, 3, 4]
    lookup = PromptLookup()
    lookup.prepare(prompt)
    context = [*prompt, *passage[:3]]
    assert lookup.propose(context, 4) is not None  # the key match starts the copy
    context += passage[3:6]
    assert lookup.running_copy(context, 15, min_run=8) is None  # agrees with 6 tokens so far
    assert lookup.running_copy(context, 15, min_run=6).tokens == tuple(passage[6:18])  # 2 tokens per matched one
    context += passage[6:10]
    copy = lookup.running_copy(context, 15, min_run=8)
    assert copy is not None and copy.tokens == tuple(passage[10:25]) and copy.key is None
    # Looking changed nothing: propose drafts what a lookup that never looked drafts.
    fresh = PromptLookup()
    fresh.prepare(prompt)
    fresh.propose([*prompt, *passage[:3]], 4)
    assert lookup.propose(context, 6) == fresh.propose(context, 6)


def test_lookup_drafts_only_long_matches() -> None:
    # A one- or two-token match in fresh text mostly fails, and a failed draft costs its verify rows (2.2 plain
    # steps for 4 rows on a repacked CPU): the drafter waits for 3 agreeing context tokens (2 right after an
    # edit, where a copy resumes: test_a_running_copy_resumes_right_after_an_edit's index feature).
    twice = [1, 8, 9, 10, 2, 3, 8, 9, 10, 4, 40, 8, 9]  # (8, 9) seen twice, always before 10: a 2-token match
    assert LookupDrafter().propose(twice, 4, GREEDY, RNG).tokens == ()
    assert LookupDrafter(min_match=0, cold_min_match=0).propose(twice, 4, GREEDY, RNG).tokens[:1] == (10,)
    history = [5, 6, 7, 8, 9, 10, 11, 12]
    # (A reply starts untrusted, which asks for longer matches: the next test.)
    assert LookupDrafter(cold_min_match=0).propose(history + [40, 7, 8, 9], 4, GREEDY, RNG).tokens[:3] == (10, 11, 12)


def test_short_matches_wait_until_a_draft_of_the_reply_is_right() -> None:
    # The 3- and 4-token matches of prose and fresh code mostly fail (runs 7 and 8 in docs/BENCHMARKS.md): a
    # reply starts untrusted, and until most of its recent drafted tokens were right only 5-token matches are
    # drafted; after a right draft 3 tokens do, and after a wrong one they wait again.
    def fill(start: int) -> list[int]:  # unique tokens, and far enough apart that no copy resumes across them
        return list(range(start, start + 80))

    a, b = [500, 501, 502, 503, 504, 505], [600, 601, 602, 603, 604, 605, 606, 607, 608]
    c, d = [700, 701, 702, 703, 704], [800, 801, 802, 803, 804, 805, 806, 807]
    context = a + fill(1000) + b + fill(2000) + c + fill(3000) + d + fill(6000)
    drafter = LookupDrafter()
    assert drafter.propose(context + [500, 501, 502, 503], 4, GREEDY, RNG).tokens == ()  # untrusted at the start
    context += [600, 601, 602, 603, 604]
    long_match = drafter.propose(context, 3, GREEDY, RNG).tokens
    assert long_match == (605, 606, 607)  # a 5-token match is drafted
    context += [*long_match, 99] + fill(4000)[:10]  # and was right
    assert drafter.propose(context + [700, 701, 702], 4, GREEDY, RNG).tokens[:1] == (703,)  # now 3 tokens do
    context += [800, 801, 802, 803, 804]
    assert drafter.propose(context, 3, GREEDY, RNG).tokens == (805, 806, 807)
    context += [805, 42] + fill(5000)[:10]  # the target wrote something else after one token
    assert drafter.propose(context + [700, 701, 702], 4, GREEDY, RNG).tokens == ()  # 3 tokens wait again


def test_a_reply_that_copies_from_its_opening_is_trusted() -> None:
    # A refactor or an edit reproduces the prompt's text from the reply's first tokens (a code fence, the first
    # line), so a 3-token match there is drafted; the same match later in fresh text waits for a longer one.
    prompt = [500, 501, 502, 503, 504, 505] + list(range(1000, 1080))
    opening = LookupDrafter()
    opening.prepare(prompt)
    assert opening.propose(prompt + [7, 500, 501, 502], 3, GREEDY, RNG).tokens == (503, 504, 505)
    later = LookupDrafter()
    later.prepare(prompt)
    fresh = list(range(2000, 2010))  # ten tokens of fresh text first: past the opening
    assert later.propose(prompt + fresh + [500, 501, 502], 3, GREEDY, RNG).tokens == ()


@pytest.mark.parametrize("slot_cuts", [True, False])
def test_a_copy_of_a_record_stops_before_the_fields_the_reply_varies(slot_cuts: bool) -> None:
    # A list of records with the same keys (20..29) and other values (v, w). The second record's copy of the
    # first breaks at each value after copying right tokens, so both values are slots; the third record's copies
    # stop before them instead of drafting the second record's values (json-record drafted 6 tokens after
    # `"age`, of which 2 were right).
    def record(v: int, w: int) -> list[int]:
        return [20, 21, 22, 23, v, 24, 25, 26, 27, w, 28, 29]

    prompt = [1, 2, 3]
    reply = record(30, 40) + record(31, 41) + record(32, 42)
    lookup = PromptLookup(NgramParams(slot_cuts=slot_cuts))
    lookup.prepare(prompt)
    third = 2 * len(record(0, 0))
    proposals = {}
    for n in range(len(reply)):  # a plain step per token, each shown a proposal (as drafting-off steps are)
        proposals[n - third] = lookup.propose([*prompt, *reply[:n]], 6)
    at_v, at_w = proposals[1], proposals[7]  # the third record after "20" and after "32 24 25"
    assert at_v is not None and at_w is not None
    if slot_cuts:
        assert (at_v.tokens, at_w.tokens) == ((21, 22, 23), (26, 27))
    else:
        assert (at_v.tokens, at_w.tokens) == ((21, 22, 23, 31, 24, 25), (26, 27, 41, 28))


def test_a_copy_that_resumed_after_an_edit_is_sure_after_eight_tokens() -> None:
    # An insertion of 99 before 77: the copy breaks there and resumes at 77. A sure copy usually needs 16 agreeing
    # tokens; one that resumed right at the edit has found its place again, and is sure after SURE_LOCAL_RUN.
    passage = [*range(100, 120), 77, *range(120, 170)]
    prompt = [1, 2, *passage, 3, 4]
    reply = [u for t in passage for u in ((99, 77) if t == 77 else (t,))]
    lookup = PromptLookup()
    lookup.prepare(prompt)
    context = [*prompt, *reply[:3]]
    assert lookup.propose(context, 4) is not None
    context += reply[3:22]  # ... 119, 99, 77: the copy broke at the inserted 99
    resumed = lookup.propose(context, 6)
    assert resumed is not None and resumed.local and resumed.tokens[0] == 120
    context += reply[22 : 22 + SURE_LOCAL_RUN - 1]
    assert lookup.running_copy(context, 31, min_run=16, cut_at_edits=True) is None  # 7 tokens copied: not yet
    context.append(reply[22 + SURE_LOCAL_RUN - 1])
    sure = lookup.running_copy(context, 31, min_run=16, cut_at_edits=True)
    assert sure is not None and sure.tokens[0] == reply[22 + SURE_LOCAL_RUN]
    assert lookup.running_copy(context, 31, min_run=16) is None  # other copies still need 16
