"""app.engine.parting: a greedy comparison's parting, checked by replaying the speculative run's own verify
batches on the cache it ran on. In a chat that cache holds earlier turns decoded in their replies' own
batches, which a fresh prefill would not repeat, so the replay keeps the cached prompt and redoes only the
reply's batches. A real parting cannot be made on demand (it needs a near-tie that this CPU's kernels
flip), so the verdict tests name a parting at a row the replay computes and check both outcomes."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from app.engine.events import Divergence, FinishEvent, StepEvent
from app.engine.exact_replay import first_mismatch, replayed_rows
from app.engine.parting import NotReplayed, PartingReplay, first_divergence, layout, replay_parting, replay_row
from app.engine.session import GenParams

_TURN1 = [{"role": "user", "content": "Repeat this line three times: the quick brown fox jumps over the lazy dog "
                                      "and runs into the old green forest."}]
_TURN2 = "Now write that line twice more, then once in capitals."


def _run(session, prompt, params) -> tuple[FinishEvent, list[StepEvent]]:
    steps: list[StepEvent] = []
    finish = None
    for event in session.generate(prompt, params):
        if isinstance(event, StepEvent):
            steps.append(event)
        elif isinstance(event, FinishEvent):
            finish = event
    assert finish is not None
    return finish, steps


@pytest.fixture(scope="module")
def compared(smol_session):
    """A second turn compared as the GUI does: plain, then lookup, on the cache the first turn left."""
    smol_session.clear_caches()
    first, _ = _run(smol_session, smol_session.chat_prompt(_TURN1), GenParams("lookup", 48))
    messages = [*_TURN1, {"role": "assistant", "content": first.text}, {"role": "user", "content": _TURN2}]
    prompt = smol_session.chat_prompt(messages)
    cached = smol_session.target_ctx.keep_common_prefix(prompt)
    assert cached > len(smol_session.chat_prompt(_TURN1)), "the second turn must reuse the first turn's cache"
    plain, _ = _run(smol_session, prompt, GenParams("none", 48, track_margins=True))
    spec, steps = _run(smol_session, prompt, GenParams("lookup", 48))
    assert any(s.accepted > 0 for s in steps), "the copy prompt must give verify batches of several rows"
    return prompt, plain, spec, layout(steps)


def test_replaying_on_the_cached_prompt_gives_the_runs_own_choice_at_every_row(smol_session, compared):
    """Every row of the second turn, replayed on the cached prompt, chooses the run's token (exact_replay's one
    pass); replay_row, the compare view's replay up to one position, gives the very same bits at a row of the
    prompt's pass, of a verify's drafts, of the step after it, and at the reply's end."""
    prompt, _plain, spec, steps = compared
    ctx, n = smol_session.target_ctx, len(prompt)
    assert ctx.tokens[:n] == list(prompt)
    reply = [*prompt, *spec.tokens]
    assert first_mismatch(ctx, prompt, spec.tokens, steps) is None
    rows = {position: np.array(row) for position, _step, row in replayed_rows(ctx, prompt, spec.tokens, steps)}
    drafted = _drafted_row(spec, steps)
    after = next(b.position for b in steps if b.position > drafted)
    for position in sorted({0, drafted, after, len(spec.tokens) - 1}):
        ctx.truncate(n)
        assert np.array_equal(replay_row(ctx, n, reply, steps, position), rows[position]), position


def _drafted_row(spec: FinishEvent, steps) -> int:
    b = next(b for b in steps if b.accepted > 1 and not b.from_prompt)
    return b.position + 1  # an accepted draft's row, computed inside a verify batch


def test_a_parting_is_the_targets_own_choice_only_where_its_batches_pick_that_token(smol_session, compared):
    prompt, _plain, spec, steps = compared
    position = _drafted_row(spec, steps)
    own, other = spec.tokens[position], (spec.tokens[position] + 1) % smol_session.target_model.n_vocab
    as_run = replay_parting(smol_session.target_ctx, prompt, spec.tokens, steps,
                            Divergence(position, other, own, 0.5, False))
    assert isinstance(as_run, PartingReplay) and as_run.reproduced and as_run.gap < 0
    # Had the run emitted `other` there, its own batches would not compute it: an engine fault.
    reply = list(spec.tokens)
    reply[position] = other
    fault = replay_parting(smol_session.target_ctx, prompt, reply, steps, Divergence(position, own, other, 0.5, False))
    assert isinstance(fault, PartingReplay) and not fault.reproduced and fault.gap == pytest.approx(-as_run.gap)


def test_no_replay_without_the_prompts_cache_or_after_stop(smol_session, compared):
    prompt, _plain, spec, steps = compared
    position = _drafted_row(spec, steps)
    div = Divergence(position, 0, spec.tokens[position], 0.5, False)
    stop = threading.Event()
    stop.set()
    stopped = replay_parting(smol_session.target_ctx, prompt, spec.tokens, steps, div, stop)
    assert stopped == NotReplayed("stopped before the replay finished")
    ended = replay_parting(smol_session.target_ctx, prompt, spec.tokens, steps,
                           Divergence(len(spec.tokens), spec.tokens[-1], -1, 0.5, False))
    assert ended == NotReplayed("one reply ended there")
    smol_session.clear_caches()
    gone = replay_parting(smol_session.target_ctx, prompt, spec.tokens, steps, div)
    assert gone == NotReplayed("the cache no longer holds the prompt")


def test_first_divergence_reports_the_plain_runs_margin() -> None:
    from app.engine.events import GenerationStats

    stats = GenerationStats("none", 3, 3, 1.0, 1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 3, 0, 0, 0.0, 0.0, 1.0, (), (), (),
                            "stop", 0, False)
    plain = FinishEvent("abc", (1,), (5, 6, 7), stats, margins=(2.0, 0.05, 1.0))
    assert first_divergence(plain, FinishEvent("abc", (1,), (5, 6, 7), stats)) is None
    assert first_divergence(plain, FinishEvent("abd", (1,), (5, 9, 7), stats)) == Divergence(1, 6, 9, 0.05, True)
    assert first_divergence(plain, FinishEvent("ab", (1,), (5, 6), stats)) == Divergence(2, 7, -1, 1.0, False)


def test_padded_verifies_are_replayed_with_their_padding(smol_session):
    from app.engine.speculative import SpecParams

    smol_session.clear_caches()
    prompt = smol_session.chat_prompt(_TURN1)
    spec, steps = _run(smol_session, prompt, GenParams("lookup", 48, spec=SpecParams(steady_shapes=True, adaptive=False,
                                                                             draft_max=8)))
    batches = layout(steps)
    assert any(b.padded for b in batches), "steady shapes must pad some short draft here"
    assert [b.padded for b in batches] == [s.padded for s in steps]
    ctx, n = smol_session.target_ctx, len(prompt)
    assert first_mismatch(ctx, prompt, spec.tokens, batches) is None
    last = next(b for b in reversed(batches) if b.padded)
    rows = {position: np.array(row) for position, _step, row in replayed_rows(ctx, prompt, spec.tokens, batches)}
    ctx.truncate(n)
    assert np.array_equal(replay_row(ctx, n, [*prompt, *spec.tokens], batches, last.position), rows[last.position])
    smol_session.clear_caches()
