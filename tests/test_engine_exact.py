"""Exactness on the real demo pair: the product's promise, judged by replay (app/engine/exact_replay.py).

Every token a run emits must be the target's own choice on the row the run decoded it from: the run's verify
batches are replayed once, in their own shapes, and at every emitted position the token must equal the
replayed row's argmax (greedy) or its coupled sample with the run's seed (sampled), after penalties recounted
from scratch. No margin: the replay gives the run's own bits, so any engine fault that changes a token fails,
kernel rounding never does, and the verdict cannot depend on the batch shapes that timing gave the governor.

Strict mode (no weight repacking, verify batches within the one-token kernels' rows) is held to more: its rows
are bit-identical to one-token decoding's, so its replies, greedy and seeded, are plain decoding's.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import numpy as np
import pytest
from scipy import stats as scipy_stats

from app.cli.bench import load_prompts
from app.engine.events import Event, FinishEvent, GovernorEvent, StepEvent, TokenEvent, TokenFate
from app.engine.exact_replay import check_run, prefill, recount_penalties, replayed_rows
from app.engine.parting import layout
from app.engine.sampling import SampleNoise, SamplingParams, distribution
from app.engine.session import GenParams
from app.engine.speculative import SpecParams

PROMPTS = {item.id: item for item in load_prompts(None)}  # the shipped suite: code, edits, JSON, prose, copies
COPY_MAX_AUTO = -1  # SpecParams.copy_max "auto": the app's default (sure copies on the CPU, up to 47 tokens)

# Each mode as it exercises the engine most: lookup as the app runs it (adaptive K, long sure copies: verify
# batches of up to 48 rows, shapes chosen by timing), draft at a fixed K with no confidence cut (so drafts are
# rejected and rolled back), hybrid padding short drafts to steady shapes.
MODES = {
    "none": SpecParams(),
    "lookup": SpecParams(copy_max=COPY_MAX_AUTO),
    "draft": SpecParams(draft_max=6, adaptive=False, p_min=0.0),
    "hybrid": SpecParams(draft_max=6, adaptive=False, steady_shapes=True),
}
# A copy (long accepted runs, sure copies) and fresh prose (the draft model's rejections).
REPLAY_PROMPTS = ("code-refactor", "prose-explain")
N_TOKENS = 48


def _prompt(session, item_id: str) -> list[int]:
    return session.chat_prompt(PROMPTS[item_id].chat())


def _run(session, prompt: list[int], params: GenParams) -> tuple[list[Event], FinishEvent]:
    events = list(session.generate(prompt, params))
    finish = events[-1]
    assert isinstance(finish, FinishEvent)
    return events, finish


def _assert_replays(session, events: list[Event], sampling: SamplingParams | None, what: str) -> None:
    mismatch = check_run(session.target_ctx, events, sampling, session.target_model.is_eog)
    assert mismatch is None, (
        f"{what}: at reply position {mismatch.position} (step {mismatch.step}) the run emitted {mismatch.emitted}, "
        f"but the target's row, replayed in the run's own batches, chooses {mismatch.replayed}: an engine fault"
    )


def _assert_drafted(finish: FinishEvent, what: str) -> None:
    assert finish.stats.drafted > 0 and finish.stats.accepted > 0, f"{what} never drafted or never had a draft " \
                                                                   "accepted: the check would not exercise verification"


@pytest.mark.parametrize("mode", list(MODES))
def test_greedy_replies_are_the_targets_choice_in_their_own_batches(demo_session, mode):
    """Greedy, repacked weights (the default): each emitted token is the argmax of its row in the run's batches.
    Lookup drafts on the copy only; the draft model's drafts are rejected and rolled back on both prompts."""
    drafted = accepted = rejected = 0
    for item_id in REPLAY_PROMPTS:
        prompt = _prompt(demo_session, item_id)
        events, finish = _run(demo_session, prompt, GenParams(mode, N_TOKENS, spec=MODES[mode]))
        _assert_replays(demo_session, events, None, f"{mode} on {item_id!r}")
        drafted += finish.stats.drafted
        accepted += finish.stats.accepted
        rejected += sum(bool(e.rejected) for e in events if isinstance(e, StepEvent))
    if mode != "none":
        assert drafted > 0 and accepted > 0, f"{mode} never drafted or never had a draft accepted"
    if mode in ("draft", "hybrid"):
        assert rejected > 0, f"{mode} never had a draft rejected: no rollback was checked"


N_BUGGY = 32


def test_replay_catches_a_rollback_that_keeps_one_rejected_row(demo_session, monkeypatch):
    """The check fails on a one-position cache bug: the target's rollback keeps one rejected draft row, so each
    later row sees a stale token. The run is real (draft mode on prose, as in the greedy test above, where the
    same run without the bug replays clean); only LlamaContext.truncate is wrapped, and only while it runs.
    Measured on the development machine: the replay parted from the buggy run at reply position 17 (its step 4),
    the rollbacks of the steps before it having each left a rejected row behind."""
    ctx = demo_session.target_ctx
    prompt = _prompt(demo_session, "prose-explain")
    demo_session.clear_caches()
    rollback = ctx.truncate
    kept_stale = 0

    def keeps_one_rejected_row(n_keep: int) -> None:
        nonlocal kept_stale
        if len(prompt) < n_keep < ctx.n_past:  # a rollback within the reply that drops rows
            kept_stale += 1
            n_keep += 1
        rollback(n_keep)

    monkeypatch.setattr(ctx, "truncate", keeps_one_rejected_row)
    events, _finish = _run(demo_session, prompt, GenParams("draft", N_BUGGY, spec=MODES["draft"]))
    monkeypatch.undo()
    assert kept_stale > 0, "no draft was rejected, so the bug was never injected"
    mismatch = check_run(ctx, events, None, demo_session.target_model.is_eog)
    assert mismatch is not None, "a rollback that keeps a rejected row went unnoticed"
    demo_session.clear_caches()


# Strong penalties, so that a row penalised with the wrong context moves its logits by about a unit: with the
# drafts accepted before a row left out of its counts, speculation parted from plain decoding on each of these
# prompts at margins of 1.3 to 5.6 (measured).
PENALTIES = SamplingParams(repeat_penalty=1.3, repeat_last_n=64, frequency_penalty=0.5, presence_penalty=0.5)
# Temperature alone: the target's and the draft's whole vocabularies race (sampling.SampleNoise's pruned race).
UNTRUNCATED = SamplingParams(top_k=0, top_p=1.0, min_p=0.0)


@pytest.mark.parametrize("mode", list(MODES))
def test_penalised_greedy_replies_are_the_targets_choice(demo_session, mode):
    """Each row is penalised with its own context (the drafts accepted before it included), as a recount from
    scratch at that position gives: the engine's incremental counts are right along the whole reply, in every
    mode. For plain decoding this is schedule-free: the replay decodes the run's own rows, whatever the cache
    held before (the check that this replaced compared with a fresh prefill and failed under load)."""
    prompt = _prompt(demo_session, "mt-rename-file")
    events, finish = _run(demo_session, prompt, GenParams(mode, N_TOKENS, sampling=PENALTIES, spec=MODES[mode]))
    _assert_replays(demo_session, events, PENALTIES, f"{mode} with penalties")
    if mode == "none":
        # The check sees the penalties: judged without them, the same reply is not the target's choice.
        assert check_run(demo_session.target_ctx, events, None, demo_session.target_model.is_eog) is not None, \
            "the penalties changed nothing here: the check would be empty"
    else:
        _assert_drafted(finish, f"{mode} with penalties")


# Seeded sampling, each as a variant of drafter and K. Penalties and the untruncated race are combined in one.
SEEDED = {
    "top-k": SamplingParams(temperature=0.8, seed=1234),
    "penalised-untruncated": replace(PENALTIES, temperature=0.8, seed=1234, top_k=0, top_p=1.0, min_p=0.0),
}
VARIANTS = {
    "draft K=6": ("draft", SpecParams(draft_max=6, adaptive=False)),
    "draft K=1": ("draft", SpecParams(draft_max=1, adaptive=False)),
    "draft adaptive": ("draft", SpecParams()),
    "lookup": ("lookup", SpecParams(adaptive=False)),
    "hybrid": ("hybrid", SpecParams(adaptive=False)),
}
N_SEEDED = 40


@pytest.mark.parametrize("sampling_id", list(SEEDED))
def test_seeded_replies_are_the_targets_coupled_samples(demo_session, sampling_id):
    """Sampled, repacked weights: each emitted token is the coupled sample (the run's seed, its sequence position)
    of its row in the run's batches, whichever drafter proposed and whatever K; and each fixed-K variant drafted
    (the adaptive one is checked for exactness only: whether it drafts follows the machine's timings)."""
    sampling = SEEDED[sampling_id]
    prompt = _prompt(demo_session, "code-refactor")
    for name, (mode, spec) in VARIANTS.items():
        events, finish = _run(demo_session, prompt, GenParams(mode, N_SEEDED, sampling=sampling, spec=spec))
        _assert_replays(demo_session, events, sampling, f"{name}, {sampling_id}")
        if not spec.adaptive:  # the adaptive governor may rightly turn drafting off on a loaded CPU: timing decides
            _assert_drafted(finish, f"{name}, {sampling_id}")


def _one_token_rows(session, prompt: list[int], n: int, sampling: SamplingParams) -> tuple[list[int], list[np.ndarray]]:
    """One-token decoding, by hand: the prompt prefilled as the engine does (its last row chooses the first
    token), then one decode per token, each row's choice (argmax, or the coupled sample, after penalties recounted)
    fed back. The reference reply and its rows, independent of the engine."""
    ctx, model = session.target_ctx, session.target_model
    session.clear_caches()
    prefill(ctx, prompt)
    noise = SampleNoise(sampling.seed) if sampling.seed is not None else None
    reply: list[int] = []
    rows: list[np.ndarray] = []
    row = np.array(ctx.kept_logits(len(prompt)))
    while True:
        rows.append(row)
        context = [*prompt, *reply]
        logits = recount_penalties(row, context, sampling)
        token = int(np.argmax(logits)) if noise is None else noise.sample(distribution(logits, sampling), len(context))
        if model.is_eog(token) or len(reply) == n:
            break
        reply.append(token)
        ctx.decode([token], logits_for="last")
        row = np.array(ctx.logits(-1))
    session.clear_caches()
    return reply, rows


# Per prompt, the modes that draft on it: lookup and hybrid copy code; the draft model's drafts on prose are
# rejected, or cut short by p_min and then padded to steady shapes (K + 1 = 7 rows, within the bound).
N_STRICT = 32
STRICT_CASES = {
    "code-refactor": {"lookup": ("lookup", SpecParams(copy_max=COPY_MAX_AUTO)),
                      "hybrid": ("hybrid", SpecParams(draft_max=6, adaptive=False))},
    "prose-explain": {"draft": ("draft", SpecParams(draft_max=6, adaptive=False, p_min=0.0)),
                      "draft, steady shapes": ("draft", SpecParams(draft_max=6, adaptive=False, steady_shapes=True))},
}


@pytest.mark.parametrize("item_id", list(STRICT_CASES))
def test_strict_rows_are_one_token_decodings_bits(strict_session, item_id):
    """Strict (no repacking, verifies within the rows the session measured to give one-token bits: 7 on the CPUs
    seen, so K <= 6; app/engine/one_token_bound.py): every row a speculative run decoded is bit-identical to
    one-token decoding's at the same position, in every mode, and so the reply is plain decoding's, token for
    token. Steady shapes pad short drafts to K + 1 rows and catch the draft model up a row at a time: the same.
    The run's rows are read back by replaying its batches."""
    prompt = _prompt(strict_session, item_id)
    reference, rows = _one_token_rows(strict_session, prompt, N_STRICT, SamplingParams())
    for name, (mode, spec) in STRICT_CASES[item_id].items():
        events, finish = _run(strict_session, prompt, GenParams(mode, N_STRICT, spec=spec))
        steps = [e for e in events if isinstance(e, StepEvent)]
        what = f"strict {name} on {item_id!r}"
        _assert_drafted(finish, what)
        most = strict_session.one_token.rows
        assert max(len(s.drafted) + s.padded + 1 for s in steps) <= most, f"{what} verified more than {most} rows"
        if spec.steady_shapes:
            assert any(s.padded for s in steps), f"{what}: no verify was padded, steady shapes went unchecked"
        for position, _step, row in replayed_rows(strict_session.target_ctx, prompt, finish.tokens, layout(steps)):
            assert np.array_equal(row, rows[position]), \
                f"{what}: the row for reply position {position} is not one-token decoding's"
        assert list(finish.tokens) == reference, f"{what} is not plain decoding's reply"


def _strict_rows_parting(session, prompt: list[int], events: list[Event], rows: list[np.ndarray]) -> list[int]:
    """The reply positions whose row, replayed in the run's batches, is not one-token decoding's, bit for bit."""
    finish = events[-1]
    assert isinstance(finish, FinishEvent)
    steps = [e for e in events if isinstance(e, StepEvent)]
    replayed = replayed_rows(session.target_ctx, prompt, finish.tokens, layout(steps))
    return [position for position, _step, row in replayed if not np.array_equal(row, rows[position])]


def test_strict_replies_keep_one_token_bits_past_the_measured_span(strict_session):
    """A strict reply that runs past the span where this context's verify batches give one-token bits (256 cached
    positions on the CPUs measured: beyond it llama.cpp's one-token attention splits the cache across threads,
    app/engine/one_token_bound.py): it drafts below the span, stops drafting at it with a "disable" decision
    that says why, and every row stays one-token decoding's, so the reply is plain decoding's. Where a span was
    measured, the same run with the span ignored (the bound assumed, as it was before it was measured) must part
    from one-token bits past it: what this test exists to catch."""
    bound = strict_session.one_token
    prompt = _prompt(strict_session, "mt-refactor")  # 228 tokens, a multi-turn refactor with code to copy
    n = 64
    reference, rows = _one_token_rows(strict_session, prompt, n, SamplingParams())
    assert len(prompt) + len(reference) > 256
    spec = SpecParams(draft_max=6, adaptive=False)
    engine = strict_session._engine("lookup", strict_session.resolve_spec(spec))
    strict_session.clear_caches()
    events, finish = _run(strict_session, prompt, GenParams("lookup", n, spec=spec))
    steps = [e for e in events if isinstance(e, StepEvent)]
    _assert_drafted(finish, "strict lookup on 'mt-refactor'")
    assert _strict_rows_parting(strict_session, prompt, events, rows) == []
    assert list(finish.tokens) == reference
    if bound.span is None:
        pytest.skip(f"this CPU's batches kept one-token bits as far as probed ({bound.describe()})")
    notes = [e for e in events if isinstance(e, GovernorEvent) and e.action == "disable" and "strict" in e.reason]
    assert len(notes) == 1 and f"position {bound.span}" in notes[0].reason, notes
    last_rows = [len(prompt) + s.position - 1 + len(s.drafted) for s in steps if s.drafted]  # verifies' last rows
    assert max(last_rows) < bound.span, "a strict verify reached past the measured span"
    # The mutation: the span dropped, the rows bound kept.
    engine.one_token = replace(bound, span=None)
    try:
        strict_session.clear_caches()
        events, _finish = _run(strict_session, prompt, GenParams("lookup", n, spec=spec))
        parted = _strict_rows_parting(strict_session, prompt, events, rows)
    finally:
        engine.one_token = bound
    assert parted and min(parted) + len(prompt) - 1 >= bound.span, \
        f"with the span ignored no row past it parted from one-token bits ({parted}): the span was not needed"


@pytest.mark.parametrize("sampling_id", list(SEEDED))
def test_strict_seeded_reply_is_the_same_whatever_k_and_drafter(strict_session, sampling_id):
    """Coupled sampling on one-token bits: a seeded reply is the reply that one-token decoding samples with that
    seed, whichever drafter proposed and whatever K (the governor's included), with no exception to measure."""
    sampling = SEEDED[sampling_id]
    prompt = _prompt(strict_session, "code-refactor")
    reference, _rows = _one_token_rows(strict_session, prompt, N_SEEDED, sampling)
    for name, (mode, spec) in {"none": ("none", SpecParams()), **VARIANTS}.items():
        _events, finish = _run(strict_session, prompt, GenParams(mode, N_SEEDED, sampling=sampling, spec=spec))
        assert list(finish.tokens) == reference, f"strict {name}, {sampling_id}: not one-token decoding's reply"
        if mode != "none" and not spec.adaptive:  # whether the adaptive variant drafts follows the timings
            _assert_drafted(finish, f"strict {name}, {sampling_id}")


def _fresh_logits(ctx, tokens: list[int], n_prompt: int, last: int) -> np.ndarray:
    """`last`'s logits after `tokens`, evaluated afresh: the prompt in n_batch chunks, the rest a token at a time."""
    ctx.truncate(0)
    for _ in ctx.decode_batches(tokens[:n_prompt], logits_for="none"):
        pass
    for token in [*tokens[n_prompt:], last]:
        ctx.decode([token], logits_for="last")
    return np.array(ctx.logits(-1))


def test_caches_after_rejections_hold_exactly_their_tokens(strict_session):
    """After a draft-mode run with rejections, the target's and the draft model's caches each hold exactly the
    tokens they claim (`ctx.tokens`), with no stale row: the logits after one more token equal, bit for bit, a
    fresh evaluation of those tokens. Strict, so both models' batches (verifies of at most 7 rows; the draft's
    catch-ups of 1-3 rows and one-row drafts) run the one-token kernels, and a fresh evaluation a token at a time
    rebuilds the same rows; the prompt is prefilled in the same n_batch chunks as the run's prefill."""
    session = strict_session
    prompt = _prompt(session, "prose-explain")
    session.clear_caches()
    events, finish = _run(session, prompt, GenParams("draft", 40, spec=SpecParams(draft_max=6, adaptive=False,
                                                                                    p_min=0.0)))
    assert any(isinstance(e, StepEvent) and e.rejected for e in events), "no draft was rejected: no rollback ran"
    last = finish.tokens[-1]
    for ctx, name in ((session.target_ctx, "target"), (session.draft_ctx, "draft")):
        held = list(ctx.tokens)
        assert held[:len(prompt)] == prompt and len(held) > len(prompt) + 8, f"the {name} cache lost the reply"
        ctx.decode([last], logits_for="last")
        after_run = np.array(ctx.logits(-1))
        fresh = _fresh_logits(ctx, held, len(prompt), last)
        assert np.array_equal(after_run, fresh), f"the {name} cache holds rows that are not its tokens'"
        # The check can fail: one stale row left before the last token moves its logits.
        ctx.truncate(len(held) - 1)
        ctx.decode([held[-2], held[-1], last], logits_for="last")
        assert not np.array_equal(np.array(ctx.logits(-1)), fresh)
    session.clear_caches()


def test_token_events_reassemble_the_reply(demo_session):
    prompt = _prompt(demo_session, "code-prime")
    events = list(demo_session.generate(prompt, GenParams("draft", 48, spec=SpecParams(adaptive=False))))
    tokens = [e for e in events if isinstance(e, TokenEvent)]
    steps = [e for e in events if isinstance(e, StepEvent)]
    finish = events[-1]
    assert isinstance(finish, FinishEvent)
    assert [t.token_id for t in tokens] == list(finish.tokens)
    assert "".join(t.text for t in tokens) == finish.text
    assert [t.index for t in tokens] == list(range(len(tokens)))
    # Every step's tokens: its accepted drafts in order, then one correction or bonus (unless cut).
    for step in steps:
        mine = [t for t in tokens if t.step == step.step]
        assert len(mine) == step.emitted
        assert [t.token_id for t in mine[: step.accepted]] == list(step.drafted[: step.accepted])[: len(mine)]
        assert all(t.fate is TokenFate.ACCEPTED for t in mine[: step.accepted])
        if len(mine) > step.accepted:
            last = mine[step.accepted]
            expected = TokenFate.CORRECTED if step.accepted < len(step.drafted) else (
                TokenFate.BONUS if step.drafted else TokenFate.TARGET)
            assert last.fate is expected
        assert step.rejected == step.drafted[step.accepted:]
    s = finish.stats
    assert s.drafted == sum(len(st.drafted) for st in steps)
    assert s.accepted == sum(st.accepted for st in steps)
    assert s.acceptance_rate == pytest.approx(s.accepted / s.drafted)


# The reply's first token comes from the prompt's own pass, undrafted; its second is the first one judged
# against a draft. So the questions ask for two-digit numbers: Qwen writes digits as single tokens, and the
# second digit stays random given the first. The draft favours other digits than the target (after "4": the
# target's top is "7" at 0.41, the draft's "5"), so a sampler that followed q would fail.
RANDOM_NUMBER = "Write a random two-digit number. Answer with the number only."
EOG = -1  # any end-of-generation token
# The penalised case: the list puts the candidates in the window, so the penalties move the second digit's
# distribution, and a sampler that ignored them would fail.
PICK_FROM_LIST = ("Pick one number from this list at random and answer with that number only:\n"
                  "47\n47\n47\n41\n42\n45")


@pytest.mark.parametrize("question,penalties", [
    (RANDOM_NUMBER, SamplingParams()),
    (PICK_FROM_LIST, PENALTIES),
], ids=["plain", "penalised"])
def test_speculative_sampling_follows_the_target_distribution(demo_session, question, penalties):
    """Chi-square goodness of fit of the first drafted token (the reply's second) against the target's own
    distribution given the first (with penalties: the distribution of the penalised logits), pooled over
    the first tokens seen: given its first token, each reply's second is an independent draw."""
    sampling = dict(temperature=1.0, top_k=8, top_p=1.0, min_p=0.0, repeat_penalty=penalties.repeat_penalty,
                    repeat_last_n=penalties.repeat_last_n, frequency_penalty=penalties.frequency_penalty,
                    presence_penalty=penalties.presence_penalty)
    params = SamplingParams(**sampling)
    prompt = demo_session.chat_prompt([{"role": "user", "content": question}])
    n = 360
    pairs: Counter[tuple[int, int]] = Counter()
    rejections = 0
    for seed in range(n):
        gen = GenParams("draft", 3, sampling=SamplingParams(seed=seed, **sampling),
                        spec=SpecParams(draft_max=1, adaptive=False, p_min=0.0))
        events = list(demo_session.generate(prompt, gen))
        tokens = [e for e in events if isinstance(e, TokenEvent)]
        second = [e for e in events if isinstance(e, StepEvent)][1]
        assert tokens and len(second.drafted) == 1, "the second token was not judged against a draft"
        rejections += second.accepted == 0
        # An end of turn ends the reply without a token event: it is one more outcome, EOG.
        pairs[tokens[0].token_id, tokens[1].token_id if len(tokens) > 1 else EOG] += 1
    assert rejections > 0, "the draft was never rejected: the test would not exercise the residual"

    # The target's distribution of the second token, computed as the engine does: the prompt in one batch,
    # then a two-row verify batch [first token, draft] whose first row judges the draft.
    ctx = demo_session.target_ctx
    firsts = Counter(first for first, _ in pairs.elements())
    observed: list[int] = []
    expected: list[float] = []
    groups = 0
    moved = 0.0
    for first, count in firsts.most_common():
        ctx.clear()
        ctx.decode(prompt, logits_for="none")
        ctx.decode([first, first], logits_for="all")
        logits = np.array(ctx.logits(0))
        p = distribution(recount_penalties(logits, [*prompt, first], params), params)
        probs: dict[int, float] = {}
        for t, prob in zip((int(t) for t in p.ids), p.probs, strict=True):
            key = EOG if demo_session.target_model.is_eog(t) else t
            probs[key] = probs.get(key, 0.0) + float(prob)
        seen = {second: c for (f, second), c in pairs.items() if f == first}
        assert set(seen) <= set(probs), "sampled a token the target's distribution excludes"
        if first == firsts.most_common(1)[0][0]:
            plain = distribution(logits, SamplingParams(temperature=1.0, top_k=8, top_p=1.0, min_p=0.0))
            moved = sum(abs(p.prob(t) - plain.prob(t)) for t in set(p.ids.tolist()) | set(plain.ids.tolist())) / 2
        if count < 10:
            continue  # too few replies began with this token to test their second
        # Merge each group's tail into one bin so every expected count is at least 5.
        bins = [t for t in sorted(probs, key=probs.get, reverse=True) if probs[t] * count >= 5]
        tail = [t for t in probs if t not in bins]
        if len(bins) + bool(tail) < 2:
            continue  # a certain second token says nothing about the sampler
        groups += 1
        observed += [seen.get(t, 0) for t in bins] + ([sum(seen.get(t, 0) for t in tail)] if tail else [])
        expected += [probs[t] * count for t in bins] + ([sum(probs[t] for t in tail) * count] if tail else [])
    ctx.clear()
    if params.penalized:
        assert moved > 0.3, "the penalties hardly move this distribution: the test could not tell"
    if groups == 0:
        pytest.fail("no first token led to a random second one often enough; pick another prompt")
    # Each group's counts are fixed by its first token: len(observed) - groups degrees of freedom.
    result = scipy_stats.chisquare(observed, f_exp=expected, ddof=groups - 1)
    # alpha = 0.001: a correct sampler fails 1 run in 1000; one that follows the draft's q fails at once.
    assert result.pvalue > 0.001, (observed, expected, firsts)
