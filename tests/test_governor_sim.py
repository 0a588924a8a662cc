"""The governor driven through simulated replies, exactly as SpecEngine.generate drives it (deterministic).

A reply is simulated step by step: the engine asks current_k(), the drafter proposes (a draft model always
gives K tokens, a lookup-like drafter a match of random length), each draft position is accepted iid
with probability a (so a step accepts the longest accepted prefix), costs come from a table (plain ms,
verify ms per row count, draft ms per token) with 5% noise and a context that slowly gets dearer, and
observe() gets what the engine passes. While drafting is off, a free drafter's proposal goes through
free_probe() first, as the engine is to do. Speedup = plain-only time / governed time for the same tokens.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pytest

from app.engine.cost_model import RowCosts
from app.engine.governor import MAX_EVENTS, Governor, GovernorTuning

K_MAX, K_START, TOKENS, SEEDS = 6, 3, 256, 200
# A 256-token reply is too short a sample for the 1.3x bar: even always drafting the best fixed K gets 1.3x in
# only 95% of them on the GPU tables (acceptance luck), leaving the governor no room. 512 tokens halve that noise.
PAYING_TOKENS = 512

# Verify pass cost by row count (rows 1..9), in plain steps.
VERIFY_CPU = (1.0, 1.15, 1.5, 2.0, 2.6, 3.2, 3.9, 5.0, 5.6)  # kernels change with rows: 4 rows 2x, 8 rows 5x
VERIFY_GPU = tuple(1.0 + 0.03 * r for r in range(9))  # 8 rows cost about one
VERIFY_SERIAL = tuple(float(r) for r in range(1, 10))  # every row a full pass: no K can pay


@dataclass(frozen=True)
class Phase:
    until: int  # reply position where the phase ends
    accept: float  # P(draft token accepted | the earlier ones were)
    match: tuple[int, int] | None = None  # lookup: proposal length range (inclusive); None: a model gives K


@dataclass(frozen=True)
class Scenario:
    verify: tuple[float, ...]  # in plain steps, index rows - 1
    draft: float  # ms per drafted token, in plain steps
    phases: tuple[Phase, ...]
    costs_time: bool = True
    plain_ms: float = 40.0
    noise: float = 0.05
    growth: float = 0.0004  # every step costs this much more per reply token: the context grows

    def phase(self, pos: int) -> Phase:
        return next((p for p in self.phases if pos < p.until), self.phases[-1])


@dataclass
class Reply:
    ms: float = 0.0
    plain_ms: float = 0.0  # what plain decoding would have spent on the same tokens
    late_ms: float = 0.0  # the same two, for steps starting at or after `late_from`
    late_plain_ms: float = 0.0
    drafting_steps_before_off: int | None = None  # None: drafting never turned off
    actions: list[str] = field(default_factory=list)
    gov: Governor | None = None

    @property
    def speedup(self) -> float:
        return self.plain_ms / self.ms

    @property
    def late_speedup(self) -> float:
        return self.late_plain_ms / self.late_ms

    @property
    def early_speedup(self) -> float:
        return (self.plain_ms - self.late_plain_ms) / (self.ms - self.late_ms)


def tokens_per_step(a: float, k: int) -> float:
    return sum(a**i for i in range(k + 1))


def fixed_k_speedups(verify: tuple[float, ...], draft: float, a: float, k_max: int = K_MAX) -> list[float]:
    """Expected speedup over plain of always drafting K (index K - 1), from the cost tables alone."""
    return [tokens_per_step(a, k) / (k * draft + verify[k]) for k in range(1, k_max + 1)]


def calibrated_draft(verify: tuple[float, ...], a: float, target: float) -> float:
    """The draft cost per token (in plain steps) at which the best fixed K gives exactly `target`."""
    lo, hi = 0.0, 2.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if max(fixed_k_speedups(verify, mid, a)) > target else (lo, mid)
    return lo


def simulate(sc: Scenario, seed: int, n_tokens: int = TOKENS, late_from: int = 0,
             make: Callable[[], Governor] = lambda: Governor(K_MAX, K_START)) -> Reply:
    rng = np.random.default_rng(seed)
    gov = make()
    reply = Reply(gov=gov)
    pos = step = drafting_steps = 0
    while pos < n_tokens:
        phase = sc.phase(pos)
        k = min(gov.current_k(), n_tokens - pos - 1)
        offer = k if phase.match is None else int(rng.integers(phase.match[0], phase.match[1] + 1))
        if k > 0:
            d = min(k, offer)
        elif not sc.costs_time and not gov.enabled and offer > 0 and gov.free_probe(offer):
            d = min(offer, K_MAX, n_tokens - pos - 1)
        else:
            d = 0
        accepted = int(np.argmin(np.append(rng.random(d) < phase.accept, False)))
        scale = sc.plain_ms * (1.0 + sc.growth * pos)
        noise = rng.lognormal(-sc.noise**2 / 2, sc.noise, 2)
        verify_ms = scale * sc.verify[d] * noise[0]
        draft_ms = scale * sc.draft * d * noise[1] if sc.costs_time else 0.0
        event = gov.observe(step, d + 1, verify_ms, d, accepted, draft_ms, sc.costs_time)
        emitted = min(accepted + 1, n_tokens - pos)
        plain = sc.plain_ms * (emitted + sc.growth * (pos * emitted + emitted * (emitted - 1) / 2))
        reply.ms += verify_ms + draft_ms
        reply.plain_ms += plain
        if pos >= late_from:
            reply.late_ms += verify_ms + draft_ms
            reply.late_plain_ms += plain
        drafting_steps += d > 0
        if event is not None:
            reply.actions.append(event.action)
            if event.action == "disable" and reply.drafting_steps_before_off is None:
                reply.drafting_steps_before_off = drafting_steps
        pos += emitted
        step += 1
    return reply


def describe(values: Sequence[float]) -> str:
    q = np.percentile(values, [0, 5, 25, 50, 75, 95, 100])
    return " ".join(f"{name} {v:.2f}" for name, v in zip(("min", "p5", "p25", "median", "p75", "p95", "max"), q,
                                                           strict=True))


# --- drafting pays 1.39x at its best fixed K: the governor must get >= 1.3x in >= 95% of replies ----------

PAYING = {
    "cpu-0.8": (VERIFY_CPU, 0.8),
    "cpu-0.7": (VERIFY_CPU, 0.7),
    "gpu-0.8": (VERIFY_GPU, 0.8),
    "gpu-0.7": (VERIFY_GPU, 0.7),
}


def paying_scenario(name: str) -> Scenario:
    verify, a = PAYING[name]
    return Scenario(verify, calibrated_draft(verify, a, 1.39), (Phase(TOKENS, a),))


@pytest.mark.parametrize("name", sorted(PAYING))
def test_constructed_costs_pay_139x_at_the_best_fixed_k(name: str) -> None:
    sc = paying_scenario(name)
    speedups = fixed_k_speedups(sc.verify, sc.draft, sc.phases[0].accept)
    best = int(np.argmax(speedups)) + 1
    print(f"{name}: draft {sc.draft:.3f} plain steps/token, fixed-K speedups "
          + " ".join(f"K{k}={s:.3f}" for k, s in enumerate(speedups, 1)) + f", best K {best}")
    assert max(speedups) == pytest.approx(1.39, abs=1e-3)


@pytest.mark.parametrize("name", sorted(PAYING))
def test_governor_keeps_most_of_a_139x_speedup(name: str) -> None:
    sc = paying_scenario(name)
    replies = [simulate(sc, seed, n_tokens=PAYING_TOKENS) for seed in range(SEEDS)]
    speedups = [r.speedup for r in replies]
    off = sum(r.drafting_steps_before_off is not None for r in replies)
    best = int(np.argmax(fixed_k_speedups(sc.verify, sc.draft, sc.phases[0].accept))) + 1
    oracle = [simulate(sc, seed, n_tokens=PAYING_TOKENS, make=lambda: Governor(best, best, adaptive=False)).speedup
              for seed in range(SEEDS // 4)]
    print(f"{name}: governor {describe(speedups)}; turned off (for a while) in {off}/{SEEDS} replies; "
          f"always K {best}: {describe(oracle)}")
    assert np.mean(np.array(speedups) >= 1.3) >= 0.95


# --- drafting loses: off within 8 drafting steps in >= 95% of replies, and >= 0.95x plain overall ---------

LOSING = {
    "cpu-a0.2-draft0.4": Scenario(VERIFY_CPU, 0.4, (Phase(TOKENS, 0.2),)),
    "serial-verify-a0.8": Scenario(VERIFY_SERIAL, 0.05, (Phase(TOKENS, 0.8),)),
}
# Losing by less, with a break-even acceptance (0.43 at K = 1) close to the true one: telling them apart takes
# more drafting steps (each losing only ~10-15% of a plain step), so only the overall speed is held to the bar.
MARGINAL = {
    "gpu-a0.2-draft0.4": Scenario(VERIFY_GPU, 0.4, (Phase(TOKENS, 0.2),)),
    "gpu-a0.3-draft0.4": Scenario(VERIFY_GPU, 0.4, (Phase(TOKENS, 0.3),)),
}


@pytest.mark.parametrize("name", sorted(LOSING))
def test_losing_drafts_are_turned_off_quickly(name: str) -> None:
    sc = LOSING[name]
    assert max(fixed_k_speedups(sc.verify, sc.draft, sc.phases[0].accept)) < 0.95  # the scenario does lose
    replies = [simulate(sc, seed) for seed in range(SEEDS)]
    steps = [r.drafting_steps_before_off if r.drafting_steps_before_off is not None else 999 for r in replies]
    speedups = [r.speedup for r in replies]
    print(f"{name}: drafting steps before off {describe(steps)}; speedup {describe(speedups)}")
    assert np.mean(np.array(steps) <= 8) >= 0.95
    assert np.mean(np.array(speedups) >= 0.95) >= 0.95


@pytest.mark.parametrize("name", sorted(MARGINAL))
def test_marginal_losers_cost_little(name: str) -> None:
    sc = MARGINAL[name]
    assert max(fixed_k_speedups(sc.verify, sc.draft, sc.phases[0].accept)) < 0.95
    replies = [simulate(sc, seed) for seed in range(SEEDS)]
    steps = [r.drafting_steps_before_off if r.drafting_steps_before_off is not None else 999 for r in replies]
    speedups = [r.speedup for r in replies]
    print(f"{name}: drafting steps before off {describe(steps)}; speedup {describe(speedups)}")
    assert np.mean(np.array(steps) < 999) >= 0.95
    assert np.mean(np.array(speedups) >= 0.95) >= 0.95


# --- a free drafter turned off early comes back when long matches appear -------------------------------

LOOKUP_SWITCH = 100
LOOKUP_VERIFY = tuple(1.0 + 0.55 * r for r in range(9))  # phase two pays 1.41x at its best fixed K


def test_lookup_phase_two_costs_pay() -> None:
    best = max(fixed_k_speedups(LOOKUP_VERIFY, 0.0, 0.95))
    print(f"lookup phase two: best fixed K speedup {best:.3f}")
    assert 1.35 < best < 1.5


def test_free_drafter_is_reenabled_by_free_probes_after_a_phase_change() -> None:
    sc = Scenario(LOOKUP_VERIFY, 0.0, (Phase(LOOKUP_SWITCH, 0.1, (0, 3)), Phase(TOKENS, 0.95, (4, 8))),
                  costs_time=False)
    replies = [simulate(sc, seed, late_from=LOOKUP_SWITCH) for seed in range(SEEDS)]
    late = [r.late_speedup for r in replies]
    off_then_on = [r for r in replies if "disable" in r.actions and "enable" in r.actions]
    print(f"lookup: phase-two speedup {describe(late)}; off then back on in {len(off_then_on)}/{SEEDS}; "
          f"whole reply {describe([r.speedup for r in replies])}")
    assert len(off_then_on) >= 0.9 * SEEDS
    assert np.mean(np.array(late) >= 1.2) >= 0.9


# --- a long reply can change its mind, both ways, with a drafter that costs time ---------------------------

def test_costly_drafter_is_reprobed_and_comes_back() -> None:
    draft = calibrated_draft(VERIFY_GPU, 0.85, 1.6)
    sc = Scenario(VERIFY_GPU, draft, (Phase(150, 0.1), Phase(1000, 0.85)))
    replies = [simulate(sc, seed, n_tokens=1000, late_from=500) for seed in range(SEEDS // 4)]
    late = [r.late_speedup for r in replies]
    print(f"draft model 0.1 then 0.85: last 500 tokens {describe(late)}")
    assert all("disable" in r.actions for r in replies)
    assert np.mean(np.array(late) >= 1.4) >= 0.9


def test_drafting_turns_off_when_the_text_stops_being_predictable() -> None:
    sc = Scenario(VERIFY_CPU, 0.3, (Phase(200, 0.9), Phase(600, 0.15)))
    replies = [simulate(sc, seed, n_tokens=600, late_from=200) for seed in range(SEEDS // 4)]
    late = [r.late_speedup for r in replies]
    early = [r.early_speedup for r in replies]
    print(f"draft model 0.9 then 0.15: first 200 tokens {describe(early)}; last 400 {describe(late)}")
    assert max(fixed_k_speedups(sc.verify, sc.draft, 0.9)) == pytest.approx(1.31, abs=0.01)
    assert np.mean(np.array(early) >= 1.2) >= 0.9  # it drafted while that paid
    assert np.mean(np.array(late) >= 0.95) >= 0.9  # and stopped soon after it no longer did
    assert sum(r.gov is not None and not r.gov.enabled for r in replies) >= 0.9 * len(replies)


# --- the estimates ------------------------------------------------------------------------------------------

def test_acceptance_is_the_conditional_rate_not_accepted_over_drafted() -> None:
    sc = Scenario(VERIFY_GPU, 0.1, (Phase(10_000, 0.8),))
    fixed = GovernorTuning(half_life_tokens=1e9)  # no forgetting: the estimator alone
    estimates, naive = [], []
    for seed in range(20):
        reply = simulate(sc, seed, n_tokens=1200, make=lambda: Governor(6, 6, adaptive=False, tuning=fixed))
        assert reply.gov is not None
        estimates.append(reply.gov.acceptance())
    decayed = [simulate(sc, seed, n_tokens=1200, make=lambda: Governor(6, 6, adaptive=False)).gov
               for seed in range(20)]
    for g in decayed:
        assert g is not None
        naive.append(g._accepted / g._drafted)  # the old estimate, for contrast
    windowed = [g.acceptance() for g in decayed if g is not None]
    print(f"true 0.8 at K=6: conditional {describe(estimates)}; windowed {describe(windowed)}; "
          f"accepted/drafted {describe(naive)}")
    assert all(abs(e - 0.8) < 0.05 for e in estimates)
    assert abs(float(np.median(windowed)) - 0.8) < 0.02
    assert np.mean(np.abs(np.array(windowed) - 0.8) < 0.05) >= 0.8
    assert float(np.median(naive)) < 0.55  # what the old estimator would have used


def test_short_drafts_are_counted_honestly() -> None:
    gov = Governor(6, 6, adaptive=False)
    gov.observe(0, 1, 20.0, 0, 0, 0.0, True)
    for step in range(1, 40):  # the drafter always stops after 2 tokens (a confidence cut), both accepted
        gov.observe(step, 3, 30.0, 2, 2, 10.0, True)
    assert gov.acceptance() > 0.95  # no rejection was ever seen
    c = gov.continuation()
    assert c[1] > 0.95 and c[2] > 0.95 and c[3] < 0.05  # but the drafter never gets past position 2
    rates = gov.expected_rates()
    assert rates is not None
    assert rates[6] == pytest.approx(3.0 / 40.0, rel=0.05)  # 3 tokens per 10 ms drafting + 30 ms verify
    assert rates[3] == pytest.approx(rates[6], rel=0.01)  # asking for more than 2 buys nothing
    assert rates[2] > rates[6] * 1.05  # and asking for exactly 2 saves the position the cut paid for


def test_the_engine_can_say_how_many_tokens_it_asked_for() -> None:
    gov = Governor(6, 6, adaptive=False)
    gov.observe(0, 3, 30.0, 2, 2, 10.0, True, k_asked=2)  # cut to 2 by the context room, not by the drafter
    assert gov.continuation()[3] == 1.0


def test_governor_state_stays_bounded() -> None:
    sc = Scenario(VERIFY_CPU, 0.12, tuple(Phase(200 * (i + 1), 0.9 if i % 2 else 0.2) for i in range(40)))
    reply = simulate(sc, 1, n_tokens=8000)
    assert reply.actions.count("enable") >= 10 and reply.actions.count("disable") >= 10  # it followed the text
    assert len(reply.actions) > MAX_EVENTS
    assert reply.gov is not None and len(reply.gov.events) == MAX_EVENTS


# --- the verify cost model ----------------------------------------------------------------------------------

def test_row_costs_interpolate_between_measured_row_counts() -> None:
    costs = RowCosts(8)
    assert costs.table() is None
    costs.add(1, 10.0)
    costs.add(5, 30.0)
    table = costs.table()
    assert table is not None
    assert table[1:6] == pytest.approx([10.0, 15.0, 20.0, 25.0, 30.0])


def test_row_costs_extrapolate_at_the_largest_measured_per_row_price() -> None:
    costs = RowCosts(8)
    costs.add(1, 10.0)
    costs.add(4, 12.0)  # GPU-like: 4 rows barely dearer than 1
    table = costs.table()
    assert table is not None
    assert table[8] == pytest.approx(12.0 * 8 / 4)  # not 12 ms: an unmeasured batch is not assumed cheap
    assert all(b >= a for a, b in zip(table[1:], table[2:], strict=False))


def test_row_costs_are_monotone_despite_noise() -> None:
    costs = RowCosts(6)
    costs.add(1, 10.0)
    costs.add(3, 9.0)  # a noisy low reading for a larger batch
    costs.add(5, 20.0)
    table = costs.table()
    assert table is not None
    assert table[3] == pytest.approx(10.0)
    assert all(b >= a for a, b in zip(table[1:], table[2:], strict=False))


def test_row_costs_below_the_smallest_measured_take_its_cost() -> None:
    costs = RowCosts(4)
    costs.add(3, 21.0)
    table = costs.table()
    assert table is not None and table[1] == table[2] == 21.0 and table[4] == pytest.approx(28.0)


def test_row_costs_optimistic_table_is_the_monotone_lower_bound() -> None:
    costs = RowCosts(6)
    costs.add(1, 10.0)
    costs.add(4, 20.0)
    assert costs.optimistic_table() == [0.0, 10.0, 10.0, 10.0, 20.0, 20.0, 20.0]


def test_row_costs_follow_recent_measurements() -> None:
    costs = RowCosts(2, alpha=0.3)
    for _ in range(30):
        costs.add(1, 10.0)
    for _ in range(10):
        costs.add(1, 20.0)  # the context grew
    table = costs.table()
    assert table is not None and table[1] > 19.0
    costs.add(3, 50.0)  # outside the table: ignored
    costs.add(2, -1.0)  # a clock glitch: ignored
    assert not costs.measured(2)
