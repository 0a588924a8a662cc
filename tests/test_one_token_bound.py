"""Strict mode's bound (app/engine/one_token_bound.py): how the draft policy keeps proposals within it and says
when drafting stops, and the probe's verdict on a context whose batches are known to round differently."""

from __future__ import annotations

import random

from app.engine.draft_policy import DraftPolicy
from app.engine.drafters import NoDrafter
from app.engine.events import GovernorEvent
from app.engine.one_token_bound import OneTokenBound, probe, probe_tokens
from app.engine.prediction import PredictionProposer
from app.engine.proposal import Outcome
from app.engine.sampling import SampleNoise, SamplingParams
from app.engine.spec_params import SpecParams

RNG = random.Random(7)
PRED = [RNG.randrange(1000, 5000) for _ in range(600)]
NOISE = SampleNoise(1)


def test_room_keeps_every_row_below_the_span() -> None:
    bound = OneTokenBound(rows=7, span=256, probed=256)
    # A context of n tokens puts the verify's rows at positions n - 1 onwards.
    assert [bound.room(n) for n in (100, 250, 251, 254, 255, 256, 300)] == [6, 6, 5, 2, 1, 0, 0]
    assert OneTokenBound(7, None, 520).room(5000) == 6
    assert OneTokenBound(1, None, 17).room(20) == 0


def _policy(bound: OneTokenBound | None) -> tuple[DraftPolicy, PredictionProposer]:
    proposer = PredictionProposer(NoDrafter(), PRED)
    list(proposer.prepare(PRED[:10]))
    most = 6 if bound is None else bound.rows - 1
    return DraftPolicy(proposer, SpecParams(draft_max=6, adaptive=False), most, bound, lambda t: False), proposer


def _step(policy: DraftPolicy, n: int, step: int) -> tuple[int, list[GovernorEvent]]:
    """Propose after PRED[:n] (the prediction's own text: it proposes all it may), accept it all; (drafted, events)."""
    proposal = policy.propose(PRED[:n], 100, SamplingParams(), NOISE)
    events = policy.learn(Outcome(step, proposal, len(proposal.tokens), 1.0))
    return len(proposal.tokens), events


def test_strict_proposals_stop_at_the_span_and_the_reply_is_told_once() -> None:
    policy, _ = _policy(OneTokenBound(7, 256, 256))
    drafted, events = _step(policy, 200, 0)
    assert drafted == 6 and events == []
    assert _step(policy, 254, 1) == (2, [])  # rows at 253, 254, 255
    drafted, events = _step(policy, 256, 2)
    assert drafted == 0
    assert len(events) == 1 and events[0].action == "disable" and "past position 256" in events[0].reason
    assert _step(policy, 257, 3) == (0, [])  # told once
    assert events[0] in policy.events and not policy.drafting  # the reply's stats say so too


def test_no_bound_no_limit_and_no_note() -> None:
    policy, _ = _policy(None)
    assert _step(policy, 300, 0) == (6, [])


def test_where_no_batch_keeps_the_bits_strict_drafts_nothing_and_says_why() -> None:
    policy, _ = _policy(OneTokenBound(1, None, 17))
    drafted, events = _step(policy, 50, 0)
    assert drafted == 0
    assert len(events) == 1 and "no verify batch" in events[0].reason


def test_the_probe_finds_repacked_batches_apart_from_one_token_decoding(demo_session) -> None:
    """With repacked weights (the demo session, llama.cpp's default) batches run a gemm of 4-row groups that
    rounds differently from one-token decoding: the probe must not report them as keeping its bits. It leaves
    the cache empty."""
    ctx = demo_session.target_ctx
    demo_session.clear_caches()
    tokens = probe_tokens(lambda text: demo_session.target_model.tokenize(text, add_special=False))
    bound = probe(ctx, tokens)
    assert bound.rows < 4, bound
    assert ctx.n_past == 0


def test_the_banner_says_strict_stopped_drafting_not_that_the_governor_will_probe() -> None:
    """The window's banner on the policy's own note: strict exactness stopped drafting, which no probe undoes, so
    it must not read as the governor's timing decision ("it probes now and then")."""
    from ui.shell.spec_banner import SpecState, banner_message

    policy, _ = _policy(OneTokenBound(7, 256, 256))
    _step(policy, 250, 0)
    _drafted, events = _step(policy, 256, 1)
    message = banner_message(SpecState("lookup", True, governor=events[0]))
    assert message is not None
    text, level, _action = message
    assert text.startswith("<b>Strict exactness stopped drafting</b> at step 1") and "probes" not in text
    assert "past position 256" in text and level == "warning"


def test_a_probe_answer_is_remembered_per_key_and_a_bad_store_is_rewritten(tmp_path, monkeypatch) -> None:
    """The probe costs seconds on a large model: its answer is kept per key (model file, build, CPU, threads ...)
    in a JSON file, used again for the same key, never for another, and an unreadable file is replaced."""
    import json

    import app.engine.one_token_bound as otb

    answers = iter([OneTokenBound(7, 256, 256), OneTokenBound(3, None, 520), OneTokenBound(5, 256, 256)])
    calls: list[str] = []

    def fake_probe(_ctx, _tokens):
        calls.append("probe")
        return next(answers)

    monkeypatch.setattr(otb, "probe", fake_probe)
    store = tmp_path / "cache" / "bounds.json"
    assert otb.remembered(None, [], "model-a|threads=2", store) == OneTokenBound(7, 256, 256)
    assert otb.remembered(None, [], "model-a|threads=2", store) == OneTokenBound(7, 256, 256)
    assert calls == ["probe"]
    assert otb.remembered(None, [], "model-a|threads=1", store) == OneTokenBound(3, None, 520)
    assert len(json.loads(store.read_text())) == 2 and calls == ["probe", "probe"]
    store.write_text("{not json", encoding="utf-8")
    assert otb.remembered(None, [], "model-a|threads=2", store) == OneTokenBound(5, 256, 256)
    assert len(calls) == 3 and json.loads(store.read_text())  # rewritten whole
