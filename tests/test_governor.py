"""The governor's decisions, fed with measured-looking step costs (deterministic, no timing)."""

from __future__ import annotations

from app.governor import Governor


def _feed(gov: Governor, plain_ms: float, draft_ms_per_token: float, verify_ms_per_row: float,
          accept_rate: float, steps: int = 6) -> None:
    gov.observe(0, 1, plain_ms, 0, 0, 0.0, True)  # the probe step
    for step in range(1, steps + 1):
        k = gov.current_k()
        if k == 0:
            gov.observe(step, 1, plain_ms, 0, 0, 0.0, True)
            continue
        accepted = round(k * accept_rate)
        gov.observe(step, k + 1, plain_ms + verify_ms_per_row * k, k, accepted, draft_ms_per_token * k, True)


def test_first_step_is_a_plain_probe():
    gov = Governor(k_max=6, k_start=4)
    assert gov.current_k() == 0
    gov.observe(0, 1, 50.0, 0, 0, 0.0, True)
    assert gov.current_k() == 4


def test_turns_drafting_off_when_the_draft_costs_too_much():
    # The CPU case from MODELS.md: a draft token costs almost half a target step.
    gov = Governor(k_max=6, k_start=4)
    _feed(gov, plain_ms=70, draft_ms_per_token=34, verify_ms_per_row=20, accept_rate=0.6)
    assert not gov.enabled and gov.current_k() == 0
    assert gov.events[-1].action == "disable"
    assert "slower than plain decoding" in gov.events[-1].reason


def test_keeps_speculating_when_it_pays():
    # The GPU case: verify of several rows costs about one token and the draft is cheap.
    gov = Governor(k_max=6, k_start=4)
    _feed(gov, plain_ms=20, draft_ms_per_token=2, verify_ms_per_row=0.5, accept_rate=0.8)
    assert gov.enabled and gov.current_k() >= 3


def test_shrinks_k_when_long_drafts_are_wasted():
    gov = Governor(k_max=6, k_start=6)
    _feed(gov, plain_ms=20, draft_ms_per_token=3, verify_ms_per_row=3, accept_rate=0.5)
    assert gov.enabled
    assert gov.current_k() < 6
    assert any(e.action == "shrink" for e in gov.events)


def test_fixed_k_when_not_adaptive():
    gov = Governor(k_max=5, k_start=2, adaptive=False)
    assert gov.current_k() == 5
    _feed(gov, plain_ms=70, draft_ms_per_token=34, verify_ms_per_row=20, accept_rate=0.1)
    assert gov.current_k() == 5 and gov.events == []
