"""The draft model's drafter on the real demo pair: what it reports of its own cost."""

from __future__ import annotations

from app.engine.drafters import STEP_SYNC, ModelDrafter
from app.engine.sampling import SampleNoise, SamplingParams

GREEDY = SamplingParams()


def test_a_catch_up_after_skipped_steps_is_reported_apart(demo_session) -> None:  # type: ignore[no-untyped-def]
    prompt = demo_session.chat_prompt([{"role": "user", "content": "Count from one to fifty in words."}])
    reply = demo_session.target_model.tokenize(" one, two, three, four, five, six, seven, eight, nine, ten,",
                                               add_special=False)
    assert len(reply) > STEP_SYNC + 4
    drafter = ModelDrafter(demo_session.draft_ctx, p_min=0.0)
    progress = list(drafter.prepare(prompt))  # the prompt's uncached tail (other tests cached its template)
    assert len(progress) == 1 and progress[0][0] == progress[0][1] <= len(prompt)
    assert demo_session.draft_ctx.tokens == prompt
    # The target decoded the whole reply so far without the draft model (drafting was off).
    skipped = drafter.propose([*prompt, *reply], 2, GREEDY, SampleNoise(1))
    assert skipped.catch_up == len(reply) - STEP_SYNC
    assert 0.0 < skipped.catch_up_ms < skipped.ms
    # The next step drafts on from there: its sync is a drafting step's own, not a catch-up.
    accepted = [*prompt, *reply, skipped.tokens[0], 11]
    step = drafter.propose(accepted, 2, GREEDY, SampleNoise(1))
    assert len(step.tokens) == 2 and step.catch_up == 0 and step.catch_up_ms == 0.0
