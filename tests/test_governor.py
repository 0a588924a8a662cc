"""The governor's decisions, fed with measured-looking step costs (deterministic, no timing).

tests/test_governor_sim.py drives it through whole simulated replies; these are the single decisions.
"""

from __future__ import annotations

import pytest

from app.engine.cost_model import RowCosts
from app.engine.draft_policy import (
    CHEAP_ROW_PRICE,
    SURE_COPY_MIN,
    SURE_COPY_MIN_CHEAP,
    SURE_COPY_RUN,
    SURE_COPY_RUN_CHEAP,
    sure_copy_rule,
)
from app.engine.governor import Governor, GovernorTuning


def _feed(gov: Governor, plain_ms: float, draft_ms_per_token: float, verify_ms_per_row: float,
          accept_rate: float, steps: int = 6, start: int = 1) -> None:
    """Steps as the engine would report them; a K-token draft accepts round(K * accept_rate) tokens."""
    if start == 1:
        gov.observe(0, 1, plain_ms, 0, 0, 0.0, True)  # the probe step
    for step in range(start, start + steps):
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
    assert not gov.enabled and gov.current_k() == 0 and gov.active_k == 0
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
    _feed(gov, plain_ms=70, draft_ms_per_token=34, verify_ms_per_row=20, accept_rate=0.1, steps=40)
    assert gov.current_k() == 5 and gov.events == [] and gov.enabled
    assert not gov.free_probe(5)


def test_nothing_to_govern_without_drafts():
    gov = Governor(k_max=0, k_start=3)
    assert gov.current_k() == 0 and not gov.enabled
    assert gov.observe(0, 1, 20.0, 0, 0, 0.0, False) is None
    assert gov.current_k() == 0 and not gov.free_probe(4)


def test_one_unlucky_step_does_not_turn_drafting_off():
    # Drafting pays ~1.4x here at 80% acceptance; the first draft happens to be rejected outright. The old
    # governor decided on that one step (and never came back); this one waits for evidence.
    gov = Governor(k_max=6, k_start=3)
    gov.observe(0, 1, 40.0, 0, 0, 0.0, True)
    gov.observe(1, 4, 80.0, 3, 0, 6.0, True)
    assert gov.enabled and gov.current_k() > 0


def test_acceptance_is_conditional_on_the_earlier_positions():
    gov = Governor(k_max=6, k_start=6, adaptive=False)
    gov.observe(0, 7, 30.0, 6, 2, 6.0, True)  # accepted 2, rejected the 3rd: 2 successes, 1 failure
    gov.observe(1, 7, 30.0, 6, 6, 6.0, True)  # all 6 accepted: no failure (K cut it, not the target)
    # (8 + 1) / (8 + 1 + 2) with the Beta(1, 1) prior, not 8 / 12 accepted / drafted (with the decay, about).
    assert abs(gov.acceptance() - 9 / 11) < 0.02


def _costly_step(gov: Governor, step: int, accept_all: bool) -> int:
    """One step with a draft model: 40 ms plain, 10 ms per extra verify row, 4 ms per drafted token."""
    k = gov.current_k()
    gov.observe(step, k + 1, 40.0 + 10.0 * k, k, k if accept_all else 0, 4.0 * k, True)
    return k


def test_a_costly_drafter_is_reprobed_with_growing_waits_and_comes_back():
    gov = Governor(k_max=6, k_start=3, tuning=GovernorTuning(probe_wait=4))
    step = 0
    while gov.enabled or not gov.events:  # every draft rejected: off
        _costly_step(gov, step, accept_all=False)
        step += 1
    probes = []
    for _ in range(400):  # still rejected: probes come after ever longer waits
        if _costly_step(gov, step, accept_all=False):
            probes.append(step)
        step += 1
    # The first waits for the evidence that turned drafting off to fade (run 35), the others for the backoff.
    gaps = [b - a for a, b in zip(probes, probes[1:], strict=False)]
    assert len(probes) >= 4 and gaps == sorted(gaps) and gaps[-1] > 2 * gaps[0], probes
    assert not gov.enabled
    # The text turns predictable: the next probes bring drafting back (after the longest wait, at worst).
    for _ in range(300):
        _costly_step(gov, step, accept_all=True)
        step += 1
        if gov.enabled:
            break
    assert gov.enabled and gov.events[-1].action == "enable"
    assert gov.events[-1].k_before == 0 and gov.events[-1].k_after >= 1 and gov.current_k() >= 1


def _after_a_costly_first_draft(plain_ms: float = 66.0, verify_ms: float = 110.0, draft_ms: float = 120.0,
                                costs: RowCosts | None = None, tuning: GovernorTuning | None = None) -> Governor:
    """A plain step, then a first draft of 3 (4-row verify) with only its first token accepted: drafting turns off.
    The defaults are the costs run 33 traced on the CPU: a plain step 66 ms, the draft model 40 ms a position, a
    4-row verify 110 ms."""
    gov = Governor(k_max=6, k_start=3, costs=costs, tuning=tuning)
    gov.observe(0, 1, plain_ms, 0, 0, 0.0, True)
    gov.observe(1, 4, verify_ms, 3, 1, draft_ms, True)
    assert not gov.enabled
    return gov


def _probes(gov: Governor, probe_ms: float, steps: int = 400, plain_ms: float = 66.0,
            catch_up_ms: float = 0.0) -> list[int]:
    """Plain steps, and the probes the governor asks for, each giving up at once after `probe_ms` plus the
    catch-up of the tokens it skipped at `catch_up_ms` a token, reported as ModelDrafter does (Draft.catch_up)."""
    probes, last = [], 1
    for step in range(2, steps):
        k = gov.current_k()
        skipped = step - last - 1 if k else 0
        if k:
            probes.append(step)
            last = step
        gov.observe(step, 1, plain_ms, 0, 0, probe_ms + skipped * catch_up_ms if k else 0.0, True, k_asked=k,
                    catch_up=skipped, catch_up_ms=skipped * catch_up_ms)
    return probes


def test_no_probe_until_the_evidence_that_turned_drafting_off_fades():
    # Plain 70 ms, the draft model 24 ms a position, a 4-row verify 150 ms: drafting pays from an acceptance of
    # about 0.75. A first draft with one of three tokens accepted turns it off. A probe after the first 16-step
    # wait would meet the evidence that ruled drafting out: it waits until that has faded enough for drafting
    # to possibly pay (run 35: on the CPU such probes paid a 17-90 token catch-up and gave up at once).
    probes = _probes(_after_a_costly_first_draft(plain_ms=70.0, verify_ms=150.0, draft_ms=72.0), probe_ms=24.0,
                     plain_ms=70.0)
    assert probes and probes[0] > 100, probes


def test_a_probes_catch_up_is_priced_per_token_not_per_draft_position():
    # The same costs; each probe also decodes the tokens the draft model skipped, at 7 ms a token (run 35's CPU).
    gov = _after_a_costly_first_draft(plain_ms=70.0, verify_ms=150.0, draft_ms=72.0)
    probes = _probes(gov, probe_ms=24.0, steps=600, plain_ms=70.0, catch_up_ms=7.0)
    # Kept apart, the catch-up does not price the model at hundreds of ms a position ...
    assert gov.draft_ms_per_token() == pytest.approx(24.0, rel=0.01)
    assert gov.catch_up_ms_per_token() == pytest.approx(7.0)
    # ... and is charged to every token drafting would emit: after the first probe no other could repay it, where
    # without a catch-up probes go on (after growing waits).
    free = _probes(_after_a_costly_first_draft(plain_ms=70.0, verify_ms=150.0, draft_ms=72.0), probe_ms=24.0,
                   steps=600, plain_ms=70.0)
    assert len(probes) == 1 and len(free) >= 2, (probes, free)


def test_a_probe_is_not_bought_with_the_least_an_untimed_verify_could_cost():
    # Run 34's CPU, sampled: plain 70 ms, the draft 45 ms a position, a 4-row verify 150 ms. No K up to 3 pays;
    # K = 6 would, if its 7 rows cost no more than 4 do (the least they can cost), and K = 1 if its 2 rows cost
    # what one does. A probe drafts at the K the acceptance favours, so it never times those rows, and that
    # bound held for the whole reply: a probe every 16-64 steps, each paying the draft model's catch-up.
    gov = _after_a_costly_first_draft(plain_ms=70.0, verify_ms=150.0, draft_ms=135.0)
    assert _probes(gov, probe_ms=45.0, plain_ms=70.0) == []


def test_no_probe_that_could_not_turn_drafting_back_on():
    # Plain 70 ms, a 4-row verify 120 ms, 36 ms a draft position: at the acceptance the governor cannot yet rule
    # out, drafting would beat plain decoding by less than the margin that turning it back on asks for, so even a
    # probe whose every token is accepted would leave it off: no probe. Without the margin there would be some.
    def probes(tuning: GovernorTuning | None) -> list[int]:
        gov = _after_a_costly_first_draft(plain_ms=70.0, verify_ms=120.0, draft_ms=108.0, tuning=tuning)
        return _probes(gov, probe_ms=36.0, plain_ms=70.0)

    assert probes(None) == []
    assert probes(GovernorTuning(on_margin=0.0))


def test_free_copies_do_not_talk_down_the_draft_models_cost():
    # Hybrid: the draft model costs 40 ms a position; its n-gram copies cost nothing and are right. Counted as
    # draft positions they would price the model at a few ms (and on the CPU, probe a model that cannot pay).
    gov = Governor(k_max=6, k_start=3)
    gov.observe(0, 1, 66.0, 0, 0, 0.0, True)
    gov.observe(1, 4, 108.0, 3, 3, 120.0, True)
    for step in range(2, 12):
        gov.observe(step, 7, 180.0, 6, 6, 0.05, True, free_draft=True)
    assert gov.draft_ms_per_token() == pytest.approx(40.0)
    mixed = Governor(k_max=6, k_start=3)
    mixed.observe(0, 1, 66.0, 0, 0, 0.0, True)
    mixed.observe(1, 4, 108.0, 3, 3, 120.0, True)
    for step in range(2, 12):
        mixed.observe(step, 7, 180.0, 6, 6, 0.05, True)
    assert (mixed.draft_ms_per_token() or 0.0) < 10.0  # what the flag is for
    # Before the model has drafted, the free copies are all there is to price drafting with (not "unknown", which
    # would leave the governor unable to decide).
    copies_only = Governor(k_max=6, k_start=3)
    copies_only.observe(0, 1, 66.0, 0, 0, 0.0, True)
    copies_only.observe(1, 7, 180.0, 6, 6, 0.3, True, free_draft=True)
    assert copies_only.draft_ms_per_token() == pytest.approx(0.05)


def _plain_until_free_probe(gov: Governor, step: int, n_tokens: int) -> int:
    """Plain steps until the governor takes a free proposal of n_tokens; returns how many."""
    for wait in range(100):
        if gov.free_probe(n_tokens):
            return wait
        gov.observe(step + wait, 1, 40.0, 0, 0, 0.0, False)
    raise AssertionError("no free probe in 100 steps")


def test_free_probes_only_while_off_and_with_back_off():
    gov = Governor(k_max=6, k_start=3)
    assert not gov.free_probe(6)  # drafting is on: the engine drafts anyway
    gov.observe(0, 1, 40.0, 0, 0, 0.0, False)
    for step in range(1, 40):  # prompt lookup, every guess wrong, verify dear: off
        k = gov.current_k()
        gov.observe(step, k + 1, 40.0 + 20.0 * k, k, 0, 0.0, False)
        if not gov.enabled:
            break
    assert not gov.enabled and gov.current_k() == 0  # no costly probes for a free drafter
    assert not gov.free_probe(1)  # too short to tell anything
    waits = []
    step += 1
    for _ in range(3):  # failed probes: the wait grows
        wait = _plain_until_free_probe(gov, step, 4)
        step += wait
        gov.observe(step, 5, 120.0, 4, 0, 0.0, False)
        step += 1
        waits.append(wait)
    assert waits == sorted(waits) and waits[-1] > waits[0]
    step += _plain_until_free_probe(gov, step, 6)
    for _ in range(6):  # long matches, all accepted
        if gov.enabled:
            break
        if gov.free_probe(6):
            gov.observe(step, 7, 160.0, 6, 6, 0.0, False)
        else:
            gov.observe(step, 1, 40.0, 0, 0, 0.0, False)
        step += 1
    assert gov.enabled and gov.events[-1].action == "enable"


def test_no_free_probe_where_even_a_perfect_draft_loses():
    gov = Governor(k_max=6, k_start=3)
    gov.observe(0, 1, 10.0, 0, 0, 0.0, False)
    gov.observe(1, 4, 50.0, 3, 0, 0.0, False)  # 4 rows cost 5 plain steps: 4 tokens can never pay
    gov.observe(2, 4, 50.0, 3, 0, 0.0, False)
    assert not gov.enabled
    for step in range(3, 40):
        assert not gov.free_probe(3)
        gov.observe(step, 1, 10.0, 0, 0, 0.0, False)


def test_plain_cost_is_remeasured_while_drafting():
    gov = Governor(k_max=6, k_start=3, tuning=GovernorTuning(plain_refresh_steps=10))
    _feed(gov, plain_ms=20, draft_ms_per_token=2, verify_ms_per_row=0.5, accept_rate=0.8, steps=10)
    assert gov.current_k() == 0  # 10 drafting steps after the probe, plain decoding is timed again
    gov.observe(10, 1, 20.0, 0, 0, 0.0, True)
    assert gov.current_k() > 0


def test_grows_k_by_measuring_larger_batches():
    # GPU-like: 7 rows cost what 4 do, the draft is nearly right and cheap. Unmeasured batches are assumed to
    # cost the largest measured one's per-row price, so only trying K + 1 can show that they are cheaper.
    gov = Governor(k_max=6, k_start=3)
    _feed(gov, plain_ms=20, draft_ms_per_token=0.5, verify_ms_per_row=0.2, accept_rate=1.0, steps=30)
    assert gov.enabled and gov.active_k == 6
    assert any(e.action == "grow" for e in gov.events)


def test_events_say_why():
    gov = Governor(k_max=6, k_start=6)
    _feed(gov, plain_ms=20, draft_ms_per_token=3, verify_ms_per_row=3, accept_rate=0.5)
    event = next(e for e in gov.events if e.action == "shrink")
    assert "acceptance" in event.reason and "verify(" in event.reason and "plain" in event.reason


def test_a_free_drafter_that_proposes_nothing_stays_on():
    # Prompt lookup with no n-gram yet: its steps propose nothing and run plain, which costs nothing, so that is
    # no evidence against drafting. (It used to be: drafting went off on the first empty step, with only the
    # plain row count timed, and the reply's first copies then waited for probes.)
    gov = Governor(k_max=6, k_start=3)
    gov.observe(0, 1, 10.0, 0, 0, 0.0, False)
    for step in range(1, 40):
        gov.observe(step, 1, 10.0, 0, 0, 0.0, False, k_asked=gov.current_k())
    assert gov.enabled and gov.current_k() == 3 and not gov.events
    # A costly drafter that gives up at once paid for it: that does count.
    costly = Governor(k_max=6, k_start=3)
    costly.observe(0, 1, 10.0, 0, 0, 0.0, True)
    for step in range(1, 40):
        costly.observe(step, 1, 10.0, 0, 0, 8.0, True, k_asked=costly.current_k())
    assert not costly.enabled


def test_free_probe_times_a_row_count_never_timed():
    # Drafting went off after short drafts failed, with only 3 rows timed. Untimed row counts used to be priced
    # at the largest timed one's per-row cost, which never beats plain here, so no free probe ever ran.
    gov = Governor(k_max=6, k_start=3)
    gov.observe(0, 1, 10.0, 0, 0, 0.0, False)
    step = 1
    while gov.enabled and step < 40:
        gov.observe(step, 3, 30.0, 2, 0, 0.0, False, k_asked=gov.current_k())
        step += 1
    assert not gov.enabled
    for _ in range(20):  # long matches, all accepted, 7 rows for about the price of one
        if gov.enabled:
            break
        if gov.free_probe(6):
            gov.observe(step, 7, 12.0, 6, 6, 0.0, False)
        else:
            gov.observe(step, 1, 10.0, 0, 0, 0.0, False)
        step += 1
    assert gov.enabled and gov.events[-1].action == "enable"


def test_free_probes_are_as_long_as_the_estimate_says_pays():
    # json-record on a CPU where 7 rows cost 5.6 plain steps (docs/BENCHMARKS.md, run 8): lookup's drafts were
    # right for 2-3 tokens, drafting went off, and the free probes then verified 6-token proposals, which lose
    # at that acceptance where 2-3 token ones win, so drafting never came back.
    costs = [0.0, 10.0, 15.9, 21.2, 27.9, 33.4, 44.5, 55.5]  # ms by rows
    gov = Governor(k_max=6, k_start=3)
    assert gov.probe_k() == 6  # nothing timed: no estimate to cut by
    gov.observe(0, 1, costs[1], 0, 0, 0.0, False)
    step = 1
    while gov.enabled and step < 40:
        gov.observe(step, 4, costs[4], 3, 0, 0.0, False, k_asked=gov.current_k())
        step += 1
    assert not gov.enabled
    lengths = []
    for _ in range(40):  # the text turns repetitive: the first 3 tokens of any proposal are right
        if gov.enabled:
            break
        if gov.free_probe(gov.probe_k()):
            n = gov.probe_k()
            lengths.append(n)
            gov.observe(step, n + 1, costs[n + 1], n, min(n, 3), 0.0, False)
        else:
            gov.observe(step, 1, costs[1], 0, 0, 0.0, False)
        step += 1
    # (Probing with 6-token proposals took 10 probes to turn drafting back on here.)
    assert gov.enabled and max(lengths) <= 3 and len(lengths) <= 4


def test_a_free_drafters_first_short_drafts_do_not_price_full_ones():
    # edit-fix-typos on a repacked CPU (docs/BENCHMARKS.md run 4): lookup's first drafts were cut to one token
    # (2 rows, 1.7 plain steps), and a 4-row verify, never timed, was priced at that per-row cost, so drafting
    # went off after three drafted tokens although 4 rows cost only 2.2 plain steps there.
    def first_steps(costs_time: bool) -> Governor:
        gov = Governor(k_max=6, k_start=3)
        gov.observe(0, 1, 72.5, 0, 0, 0.0, costs_time)
        gov.observe(1, 2, 126.7, 1, 1, 0.0, costs_time, k_asked=3)
        gov.observe(2, 2, 126.7, 1, 0, 0.0, costs_time, k_asked=3)
        return gov

    gov = first_steps(costs_time=False)
    assert gov.enabled and gov.current_k() >= 3  # the next draft times 4 rows or more
    gov.observe(3, 4, 160.0, 3, 3, 0.0, False)
    assert gov.enabled
    assert gov.verify_ms(4) == 160.0
    # A drafter that costs time is judged by the timed costs, as before: no optimism bought with its time.
    assert not first_steps(costs_time=True).enabled


# --- the copy governor: long running copies judged on their own, sharing the row costs -------------------

# The run-4 CPU (docs/BENCHMARKS.md): ms by row count, dear in the middle and cheap again at 16 rows.
_CPU_ROWS = {1: 75.0, 2: 126.0, 3: 155.0, 4: 167.0, 5: 212.0, 6: 245.0, 7: 287.0, 8: 433.0, 16: 506.0}


def _cpu_ms(rows: int) -> float:
    known = sorted(_CPU_ROWS)
    return _CPU_ROWS[rows] if rows in _CPU_ROWS else _CPU_ROWS[min(r for r in known if r >= rows)]


def test_a_copy_governor_reaches_a_cheap_top_k_past_dear_middle_rows():
    from app.engine.cost_model import RowCosts
    from app.engine.governor import COPY_TUNING

    costs = RowCosts(16)
    drafts = Governor(k_max=6, k_start=3, costs=costs)
    copies = Governor(k_max=15, k_start=3, tuning=COPY_TUNING, costs=costs, scope="copy", plain_first=False)
    drafts.observe(0, 1, _cpu_ms(1), 0, 0, 0.0, False)  # the draft governor's plain step times row 1 for both
    assert copies.current_k() == 3  # no plain step of its own
    ks = []
    for step in range(1, 40):  # perfect copies
        k = copies.current_k()
        ks.append(k)
        copies.observe(step, k + 1, _cpu_ms(k + 1), k, k, 0.0, False)
        drafts.idle(k + 1)
    assert 15 in ks[:6], ks  # the top was tried early, although 8 rows cost 5.8 plain steps
    assert copies.active_k == 15 and ks[-5:] == [15] * 5
    grow = next(e for e in copies.events if e.action == "grow")
    assert grow.scope == "copy" and all(e.scope == "draft" for e in drafts.events)


def test_a_copy_governor_drops_long_copies_that_fail():
    from app.engine.cost_model import RowCosts
    from app.engine.governor import COPY_TUNING

    costs = RowCosts(16)
    costs.add(1, _cpu_ms(1))
    copies = Governor(k_max=15, k_start=3, tuning=COPY_TUNING, costs=costs, scope="copy", plain_first=False)
    for step in range(40):  # copies that break off at once
        k = copies.current_k()
        if k == 0:
            break
        copies.observe(step, k + 1, _cpu_ms(k + 1), k, 0, 0.0, False)
    assert not copies.enabled and copies.events[-1].action == "disable"
    assert "drafting long copies off" in copies.events[-1].reason


def test_idle_steps_count_down_the_wait_for_a_free_probe():
    gov = Governor(k_max=6, k_start=3)
    gov.observe(0, 1, 40.0, 0, 0, 0.0, False)
    step = 1
    while gov.enabled:  # free drafts that all fail
        k = gov.current_k()
        gov.observe(step, k + 1, 40.0 + 20.0 * k, k, 0, 0.0, False)
        step += 1
    assert not gov.free_probe(4)  # a wait first
    for _ in range(GovernorTuning().free_probe_wait):
        gov.idle(8)  # steps the other governor judged
    assert gov.free_probe(4)


def test_a_shared_row_cost_table_must_cover_k():
    import pytest

    from app.engine.cost_model import RowCosts

    with pytest.raises(ValueError, match="cannot price K = 15"):
        Governor(k_max=15, k_start=3, costs=RowCosts(7))


def _costs(per_rows: dict[int, float]) -> RowCosts:
    costs = RowCosts(32)
    for rows, ms in per_rows.items():
        costs.add(rows, ms)
    return costs


def test_long_row_price_needs_a_long_verify_and_a_plain_step():
    assert _costs({}).long_row_price(16) is None
    assert _costs({1: 70.0, 7: 160.0}).long_row_price(16) is None  # no verify of 16 rows or more yet
    assert _costs({17: 240.0}).long_row_price(16) is None  # no plain step to price it against
    # The largest measured verify decides: 32 rows at 427 ms against a 70 ms plain step.
    assert _costs({1: 70.0, 17: 240.0, 32: 427.0}).long_row_price(16) == pytest.approx(427.0 / 32 / 70.0)


def test_sure_copies_take_shorter_runs_only_where_long_verifies_were_timed_cheap():
    default = (SURE_COPY_RUN, SURE_COPY_MIN)
    cheap = (SURE_COPY_RUN_CHEAP, SURE_COPY_MIN_CHEAP)
    assert cheap < default
    assert sure_copy_rule(_costs({1: 70.0, 4: 109.0, 7: 180.0})) == default  # nothing long timed yet
    # Measured tables, in plain steps: a Xeon with AVX512-VNNI (17 rows 3.6, 32 rows 6.1) and the AMD EPYC of
    # run 9 (17 rows 7.75, 32 rows 11.66).
    assert sure_copy_rule(_costs({1: 1.0, 4: 1.56, 17: 3.6})) == cheap
    assert sure_copy_rule(_costs({1: 1.0, 4: 1.56, 32: 6.1})) == cheap
    assert sure_copy_rule(_costs({1: 1.0, 4: 2.4, 17: 7.75})) == default
    assert sure_copy_rule(_costs({1: 1.0, 4: 2.4, 32: 11.66})) == default
    assert sure_copy_rule(_costs({1: 1.0, 32: 32 * CHEAP_ROW_PRICE})) == default  # the bound itself is not cheap


def _fresh(costs: RowCosts) -> RowCosts:
    """The same timings in a table that never built anything (what the cached tables must equal)."""
    twin = RowCosts(costs.max_rows, costs.alpha)
    twin._ms, twin._seen = list(costs._ms), list(costs._seen)
    twin._largest = costs.largest_measured()
    return twin


def test_cached_cost_tables_equal_fresh_ones_after_every_add():
    """The tables are built once per timing (the governors ask several times a step): after every add, noisy and
    out of order, what a table that was asked before returns equals one built from scratch."""
    import random

    rng = random.Random(4)
    costs = RowCosts(12)
    assert costs.table() is None and costs.optimistic_table() is None and costs.largest_measured() == 0
    for _ in range(200):
        costs.table()  # built, and then kept until the next add
        costs.optimistic_table()
        rows = rng.choice([1, 1, 2, 3, 4, 5, 7, 8, 12, 13, 0])  # 0 and 13 fall outside: nothing changes
        costs.add(rows, rng.uniform(40.0, 200.0) if rng.random() > 0.05 else 0.0)
        fresh = _fresh(costs)
        assert costs.table() == fresh.table() and costs.optimistic_table() == fresh.optimistic_table()
        assert costs.largest_measured() == max((r for r in range(1, 13) if costs.measured(r)), default=0)
        assert costs.table() is costs.table()  # shared until the next timing


def test_continuation_is_cached_until_the_evidence_changes():
    gov = Governor(k_max=6, k_start=3)
    gov.observe(0, 1, 60.0, 0, 0, 0.0, True)
    for step, (drafted, accepted) in enumerate([(3, 3), (1, 0), (2, 1), (0, 0), (3, 2)], start=1):
        first = gov.continuation()
        assert gov.continuation() is first
        gov.observe(step, drafted + 1, 90.0, drafted, accepted, 30.0, True)
        want = [1.0] + [(r + 1.0) / (r + s + 1.0) for r, s in zip(gov._reached[1:], gov._stopped[1:], strict=True)]
        assert gov.continuation() == want
    before = gov.continuation()
    gov.idle(3)  # evidence ages: the reach is built again
    assert gov.continuation() is not before
