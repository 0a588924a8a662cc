"""The draft-length governor: keep speculation only while it beats plain decoding.

Each step it picks the K in 0..k_max with the most expected tokens per millisecond: a step that drafts
K tokens emits (1 - a^(K+1)) / (1 - a) tokens for K * draft_ms + verify_ms(K + 1), against one token
per plain_ms. What it measures, all from the reply in progress and all kept recent:

- a: the chance a draft token is accepted given the ones before it were, accepted / (accepted +
  drafting steps that ended in a rejection). accepted / drafted would count the positions a rejection
  cut off as failures too (0.49 instead of 0.8 at K = 6). Counts decay with every emitted token, and a
  short window that clearly disagrees (the text changed) replaces the long one, so a reply can change
  its mind.
- how far the drafter gets when asked for K (a confidence cut, a short n-gram match), as the chance of
  proposing position j given it proposed j - 1: a draft cut short saves verify rows but emits fewer tokens.
- verify_ms per row count (app/engine/cost_model.py), the plain step included (row count 1), re-timed
  every so often while drafting; row counts never timed are estimated conservatively, and K +- 1 is
  tried once when it might pay.
- draft_ms per drafted position (a confidence cut pays for the position it gave up on), for drafters
  whose drafting costs time.

Decisions wait for evidence and keep a margin: drafting stops only when even an optimistic acceptance
(the estimate plus z standard deviations) would lose, with a larger z until ~24 tokens were drafted; it
comes back only when a pessimistic one wins by a margin. While off, a drafter that costs time is
re-probed after exponentially growing waits, and only while drafting could win by that margin at the acceptance
the off decision ruled out (the estimate plus z sd: the evidence fades as the reply moves on, so the bar falls),
with the catch-up of the steps the model sat out charged to every token. A free drafter (prompt lookup) is
re-probed with its own proposals through `free_probe`, which costs only the verify rows. A probe that looks
promising but not yet sure is followed by another at once.

Every call is O(k_max) and nothing grows with the reply (events are capped). What several estimates of one step
share is built once: the verify tables (RowCosts, until its next timing) and the drafter's reach (until the next
evidence).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from app.engine.cost_model import RowCosts
from app.engine.events import GovernorEvent

MAX_EVENTS = 64  # a flapping reply must not grow the stats without bound


@dataclass(frozen=True, slots=True)
class GovernorTuning:
    half_life_tokens: float = 64.0  # acceptance and draft-cost evidence halves every this many reply tokens
    recent_half_life_tokens: float = 16.0  # a short window that notices when the text changes
    z_change: float = 3.0  # the short window disagreeing by this many of its sd: forget the long one
    min_evidence: float = 24.0  # drafted tokens (decayed) before an ordinary on/off decision
    z_off: float = 0.5  # with evidence: off when acceptance + z_off sd still loses
    z_early: float = 1.0  # before it: off only when acceptance + z_early sd loses (clear losers)
    z_on: float = 1.0  # back on when acceptance - z_on sd wins ...
    on_margin: float = 0.03  # ... by this fraction, so noise in the measured costs does not flap on and off
    k_switch_evidence: float = 6.0  # drafted tokens (decayed) before K may move
    k_switch_gain: float = 0.02  # a new K must beat the current one by this fraction
    plain_refresh_steps: int = 48  # drafting steps before the plain step is timed again (the context grew)
    probe_wait: int = 16  # plain steps before a costly drafter is re-probed; doubles after each failed probe
    probe_wait_max: int = 256
    free_probe_wait: int = 2  # the same for free proposals: a failed one costs only its verify rows
    free_probe_wait_max: int = 16
    min_free_probe: int = 2  # a shorter free proposal tells too little to be worth verifying while off
    explore_tries: int = 2  # tries of an untimed row count (a drafter's cut may keep it from being timed)
    # Also try k_max while its row count is untimed: CPU batch costs are not convex (8 rows cost 5.8 plain
    # steps on the run-4 CPU, 16 rows 6.7), so K +- 1 steps never get past the dear middle to a cheap top.
    explore_top: bool = False


# Long running copies (the copy governor): it never asks for plain steps of its own (the draft governor
# re-times those), and may jump to its top K.
COPY_TUNING = GovernorTuning(plain_refresh_steps=1 << 30, explore_top=True)


@dataclass(frozen=True, slots=True)
class _Costs:
    """One step's snapshot of what the governor knows about costs, shared by all the rates it computes."""

    verify: list[float]  # ms by row count (index = rows)
    draft: float  # ms per drafted position
    reach: list[float]  # index j: P(the drafter proposes position j | it proposed j - 1)


class Governor:
    def __init__(self, k_max: int, k_start: int, adaptive: bool = True, tuning: GovernorTuning | None = None, *,
                 costs: RowCosts | None = None, scope: str = "draft", plain_first: bool = True) -> None:
        """costs: a row-cost table shared with another governor of the same target (it must cover k_max + 1
        rows); scope: what its events are about (GovernorEvent.scope); plain_first: time a plain step before
        the first draft (off where the shared table gets it from the other governor)."""
        self.k_max = max(0, k_max)
        self.adaptive = adaptive
        self.tuning = tuning or GovernorTuning()
        self.scope = scope
        self.enabled = self.k_max > 0
        # Without adaptation K is fixed at its maximum: what --no-adapt and the exactness tests ask for.
        self.k = min(self.k_max, max(1, k_start)) if adaptive else self.k_max
        self.events: list[GovernorEvent] = []
        self._decay = 0.5 ** (1.0 / self.tuning.half_life_tokens)
        self._recent_decay = 0.5 ** (1.0 / self.tuning.recent_half_life_tokens)
        if costs is not None and costs.max_rows < self.k_max + 1:
            raise ValueError(f"a shared row-cost table of {costs.max_rows} rows cannot price K = {self.k_max}")
        self._costs = costs if costs is not None else RowCosts(self.k_max + 1)
        # Decayed evidence: accepted tokens, drafting steps that ended in a rejection, drafted tokens (how
        # much evidence there is), the same two for the short window, per draft position j the steps that
        # proposed it / stopped just before it, and draft ms with the positions they paid for.
        self._accepted = self._rejections = self._drafted = 0.0
        self._recent_accepted = self._recent_rejections = 0.0
        self._reached = [0.0] * (self.k_max + 1)
        self._stopped = [0.0] * (self.k_max + 1)
        self._draft_ms = self._draft_positions = 0.0
        self._continuation: list[float] | None = None  # continuation(), None: the evidence changed since
        self._free_ms = self._free_positions = 0.0  # the same for drafts made without a model pass
        self._catch_up_ms = self._catch_up_tokens = 0.0  # a draft model's catch-ups after steps it sat out
        self._costs_time = True  # until the engine says otherwise
        self._since_plain = 0  # steps since the plain cost was last timed
        self._explored = [0] * (self.k_max + 2)  # tries per row count
        self._backoff = self._wait = 0  # while off: the current wait between probes, and steps left of it
        # The first step runs plain, so the cost of one target token is measured, not guessed.
        self._next_k = (0 if plain_first else self.k) if adaptive else self.k_max

    # --- what the engine calls -------------------------------------------------------------------------

    def current_k(self) -> int:
        """Draft length for the next step; 0 means a plain step (a probe, a re-timing, or drafting off)."""
        return self._next_k if self.k_max > 0 else 0

    @property
    def active_k(self) -> int:
        """The K drafting runs at, 0 while it is off: what the final statistics should report."""
        return self.k if self.enabled else 0

    def observe(self, step: int, rows: int, verify_ms: float, drafted: int, accepted: int, draft_ms: float,
                draft_costs_time: bool, *, k_asked: int | None = None, free_draft: bool = False,
                catch_up: int = 0, catch_up_ms: float = 0.0) -> GovernorEvent | None:
        """Learn from one verified step; returns an event when K or the on/off state changed.

        k_asked: the K the drafter was asked for, where the engine cut current_k() (context room, n_predict),
        so that the cut is not blamed on the drafter. free_draft: this step's draft came without a model pass
        (hybrid's n-gram copies): it counts for acceptance, not for the draft model's cost per position, which
        near-free copies would otherwise talk down (on the CPU, into probing a model that could not pay).
        catch_up, catch_up_ms: the tokens the draft model decoded for steps it sat out, and their share of
        draft_ms (Draft.catch_up). A probe's is what it pays for drafting having been off: kept out of the cost
        per position (one probe's 90-token catch-up priced the draft model at 450 ms a position) and priced by
        _probe_k instead. While drafting is on, the catch-ups after hybrid's copies stay in the cost per
        position, as in the hybrid timings of docs/BENCHMARKS.md runs 33-34.
        """
        asked = self._next_k if k_asked is None else k_asked
        self._costs_time = draft_costs_time
        if draft_costs_time and catch_up > 0 and not self.enabled:
            self._catch_up_ms += catch_up_ms
            self._catch_up_tokens += catch_up
            draft_ms = max(0.0, draft_ms - catch_up_ms)
        self._record(rows, verify_ms, asked, drafted, accepted, draft_ms, draft_costs_time, free_draft)
        if not (self.adaptive and self.k_max > 0):
            return None
        if self.enabled:
            event = self._decide_on(step)
        else:
            event = self._decide_off(step, probed=asked > 0 or drafted > 0)
        if event is not None:
            self.events.append(event)
            del self.events[:-MAX_EVENTS]
        return event

    def idle(self, emitted: int) -> None:
        """A step another governor judged (the reply moved on by `emitted` tokens): evidence ages as for any
        stretch of the reply, and a wait between probes counts the step."""
        self._decay_evidence(emitted)
        if not self.enabled and self._wait > 0:
            self._wait -= 1

    def free_probe(self, n_tokens: int) -> bool:
        """While drafting is off: should this step verify a free proposal of n_tokens (a prompt-lookup match)?

        It costs only the verify rows, so the waits between probes stay short; the outcome comes back
        through observe as usual (drafted = the tokens verified).
        """
        if self.enabled or not self.adaptive or self.k_max == 0 or self._wait > 0:
            return False
        n = min(n_tokens, self.k_max)
        if n < self.tuning.min_free_probe:
            return False
        verify = self._costs.table()
        # Even fully accepted, n tokens must beat n + 1 plain steps, or the probe could never pay. An
        # untimed row count is priced at the largest timed one's per-row cost, which never beats plain:
        # the probe is the only way to time it, so it goes ahead (drafting turned off after a first
        # step that proposed nothing stayed off for the whole reply otherwise).
        return (verify is None or not self._costs.measured(n + 1)
                or (n + 1) / verify[n + 1] > 1.0 / verify[1])

    def probe_k(self) -> int:
        """The longest free proposal worth verifying as a probe now: the K the rate model finds best at the
        current acceptance estimate (never below min_free_probe), or k_max before anything was timed.

        A probe at k_max where the estimate says a short K wins wastes the dear rows: on a CPU where 7 rows
        cost 5.6 plain steps, lookup probed json-record with 6-token proposals that were right for 2-3 tokens
        and never turned back on, where 3-token drafts are mostly accepted (docs/BENCHMARKS.md, run 8). Row
        counts never timed are priced at the least they can cost, so a probe still times them once."""
        costs = self._snapshot(self._costs.optimistic_table())
        if costs is None or self.k_max == 0:
            return self.k_max
        return min(self.k_max, max(self.tuning.min_free_probe, self._best(self._rates(self.acceptance(), costs))))

    def copy_pays(self, n: int) -> bool:
        """Would a copy of n tokens, fully accepted, emit more tokens per ms than this governor expects of its
        own K (of plain decoding while drafting is off)? A row count never timed is priced at the least it can
        cost, so each is timed once: a long verify's price is not guessed from short ones (CPU kernels change
        with the row count: 8 rows cost 5.4 plain steps on one CI CPU, 12 rows 6.1)."""
        verify = self._costs.table()
        if verify is None or not 1 <= n + 1 <= self._costs.max_rows or not self._costs.measured(1):
            return False
        rates = self.expected_rates() if self.enabled else None
        here = max(rates[1:]) if rates is not None and len(rates) > 1 else 1.0 / verify[1]
        if not self._costs.measured(n + 1):
            verify = self._costs.optimistic_table() or verify  # never None once table() is not
        return (n + 1) / verify[n + 1] > here

    # --- estimates ---------------------------------------------------------------------------------------

    def acceptance(self) -> float:
        """P(a draft token is accepted | the earlier ones were), with a Beta(1, 1) prior."""
        return (self._accepted + 1.0) / (self._accepted + self._rejections + 2.0)

    def acceptance_sd(self) -> float:
        a = self.acceptance()
        return math.sqrt(a * (1.0 - a) / (self._accepted + self._rejections + 3.0))

    def continuation(self) -> list[float]:
        """Index j: P(the drafter proposes position j | it proposed j - 1 and was asked for j or more).

        Positions never asked for are assumed reached (one pseudo-count): the cost model charges for them. The list
        is shared until the evidence changes: read it, never change it.
        """
        if self._continuation is None:
            self._continuation = [1.0] + [(r + 1.0) / (r + s + 1.0)
                                          for r, s in zip(self._reached[1:], self._stopped[1:], strict=True)]
        return self._continuation

    def draft_ms_per_token(self) -> float | None:
        """ms per drafted position (0 for a free drafter); None before anything was drafted. The draft model's
        own positions when it has drafted, else what the free copies cost (hybrid before its model drafted)."""
        if not self._costs_time:
            return 0.0
        if self._draft_positions > 0:
            return self._draft_ms / self._draft_positions
        return self._free_ms / self._free_positions if self._free_positions > 0 else None

    def catch_up_ms_per_token(self) -> float:
        """What the draft model paid per token it caught up with after sitting steps out (0 before it did)."""
        return self._catch_up_ms / self._catch_up_tokens if self._catch_up_tokens > 0 else 0.0

    def verify_ms(self, rows: int) -> float | None:
        verify = self._costs.table()
        return None if verify is None or not 1 <= rows <= self.k_max + 1 else verify[rows]

    def expected_rates(self, a: float | None = None) -> list[float] | None:
        """Expected tokens per ms for K = 0..k_max (index K); None until a plain step and a draft were timed."""
        costs = self._snapshot()
        return None if costs is None else self._rates(self.acceptance() if a is None else a, costs)

    # --- bookkeeping ---------------------------------------------------------------------------------

    def _record(self, rows: int, verify_ms: float, asked: int, drafted: int, accepted: int, draft_ms: float,
                costs_time: bool, free_draft: bool) -> None:
        self._costs.add(rows, verify_ms)
        self._since_plain = 0 if rows == 1 else self._since_plain + 1
        self._decay_evidence(accepted + 1)
        asked = min(asked, self.k_max)
        self._continuation = None
        for j in range(1, min(drafted, asked) + 1):
            self._reached[j] += 1.0
        cut = drafted < asked
        if cut:
            self._stopped[drafted + 1] += 1.0
        if costs_time and free_draft:
            self._free_ms += draft_ms
            self._free_positions += drafted
        elif costs_time and (asked > 0 or drafted > 0):
            self._draft_ms += draft_ms
            self._draft_positions += drafted + cut  # a cut draft model evaluated the position it gave up on
        if drafted > 0:
            rejected = float(accepted < drafted)  # a fully accepted draft was cut by K, not by the target
            self._accepted += accepted
            self._rejections += rejected
            self._drafted += drafted
            self._recent_accepted += accepted
            self._recent_rejections += rejected
            self._forget_on_change()

    def _decay_evidence(self, emitted: int) -> None:
        """Per token emitted: the window is a stretch of the reply, whether it was drafted or not."""
        decay = self._decay**emitted
        self._continuation = None
        self._accepted *= decay
        self._rejections *= decay
        self._drafted *= decay
        self._draft_ms *= decay
        self._draft_positions *= decay
        self._free_ms *= decay
        self._free_positions *= decay
        for j in range(1, self.k_max + 1):
            self._reached[j] *= decay
            self._stopped[j] *= decay
        recent = self._recent_decay**emitted
        self._recent_accepted *= recent
        self._recent_rejections *= recent

    def _forget_on_change(self) -> None:
        """When the last few dozen tokens clearly disagree with the long window, the text changed (code to
        prose, a copied passage began or ended): keep only the recent evidence, so the decision follows fast."""
        n = self._recent_accepted + self._recent_rejections
        recent = (self._recent_accepted + 1.0) / (n + 2.0)
        sd = math.sqrt(recent * (1.0 - recent) / (n + 3.0))
        if abs(recent - self.acceptance()) <= self.tuning.z_change * sd:
            return
        self._drafted *= n / (self._accepted + self._rejections)
        self._accepted, self._rejections = self._recent_accepted, self._recent_rejections

    # --- the rate model ------------------------------------------------------------------------------

    def _snapshot(self, verify: list[float] | None = None) -> _Costs | None:
        verify = verify or self._costs.table()
        draft = self.draft_ms_per_token()
        if verify is None or draft is None or not self._costs.measured(1):
            return None
        return _Costs(verify, draft, self.continuation())

    def _rates(self, a: float, costs: _Costs) -> list[float]:
        """Tokens per ms for K = 0..k_max, in one O(k_max) pass.

        The drafter stops short of K as measured (P(d = j) = c_1...c_j (1 - c_{j+1}) for j < K, c_1...c_K for
        d = K); tokens and ms are averaged over d separately, which is the long-run rate.
        """
        a = min(1.0, max(0.0, a))
        verify, draft, c = costs.verify, costs.draft, costs.reach
        rates = [1.0 / verify[1]]
        tokens_short = ms_short = 0.0  # sum over j < K of P(d = j) * tokens(j), * ms(j)
        reach = 1.0  # P(d >= j)
        tokens_j, a_pow = 1.0, 1.0  # tokens(j) = 1 + a + ... + a^j
        for k in range(1, self.k_max + 1):
            stop = reach * (1.0 - c[k])  # P(d = k - 1): k - 1 tokens drafted, k positions paid for
            tokens_short += stop * tokens_j
            ms_short += stop * (k * draft + verify[k])
            reach *= c[k]
            a_pow *= a
            tokens_j += a_pow
            rates.append((tokens_short + reach * tokens_j) / (ms_short + reach * (k * draft + verify[k + 1])))
        return rates

    def _best(self, rates: list[float]) -> int:
        return max(range(1, self.k_max + 1), key=lambda k: rates[k])

    def _z(self) -> float:
        return self.tuning.z_off if self._drafted >= self.tuning.min_evidence else self.tuning.z_early

    # --- decisions while drafting is on ------------------------------------------------------------------

    def _decide_on(self, step: int) -> GovernorEvent | None:
        costs = self._snapshot()
        # Nothing to judge before a draft was verified; a free drafter that proposed nothing cost nothing (the
        # step ran plain), where a costly one that gave up at once paid for that.
        tried = self._reached[1] + (self._stopped[1] if self._costs_time else 0.0)
        if costs is None or tried == 0:
            self._next_k = self._plan(None, None)
            return None
        rates = self._rates(self.acceptance(), costs)
        optimistic = self._rates(self.acceptance() + self._z() * self.acceptance_sd(), self._early_costs(costs))
        if max(optimistic[1:]) < rates[0]:
            return self._disable(step, rates, optimistic)
        event = None
        best = self._best(rates)
        t = self.tuning
        gain = rates[best] / rates[self.k] - 1.0
        if self._drafted >= t.k_switch_evidence and best != self.k and gain > t.k_switch_gain:
            before, self.k = self.k, best
            event = GovernorEvent(step, "shrink" if best < before else "grow", before, best,
                                  f"K {before} -> {best}: {self._summary(rates, best)}", self.scope)
        self._next_k = self._plan(rates, costs)
        return event

    def _early_costs(self, costs: _Costs) -> _Costs:
        """The costs the off decision judges by. A free drafter's first drafts are often cut short (a key that
        failed once drafts one token), so the row count of a full draft at the current K is not timed yet, and
        pricing it at the timed ones' per-row cost (a 2-row verify costs 1.7 plain steps on a repacked CPU, a
        4-row one only 2.2) turned lookup off after three drafted tokens on copy prompts. Until there is
        evidence, untimed row counts above the timed ones and up to K + 1 are priced at the least they can
        cost, so they get timed: more drafting steps cost a free drafter only their verify rows. Larger K stay
        priced as before."""
        if self._costs_time or self._drafted >= self.tuning.min_evidence:
            return costs
        # The least a row count above the largest timed one can cost is that one's cost (monotonicity); between
        # timed ones the table's interpolation holds.
        top = self._costs.largest_measured()
        verify = [costs.verify[top] if top < r <= self.k + 1 else ms for r, ms in enumerate(costs.verify)]
        return _Costs(verify, costs.draft, costs.reach)

    def _plan(self, rates: list[float] | None, costs: _Costs | None) -> int:
        """The next step's K while drafting is on: K, a plain step to re-time, or a try of an untimed K +- 1."""
        if self._since_plain >= self.tuning.plain_refresh_steps:
            return 0
        if rates is None or costs is None:
            return self.k
        explore = self._exploration(rates, costs)
        if explore:
            self._explored[explore + 1] += 1
            return explore
        return self.k

    def _exploration(self, rates: list[float], costs: _Costs) -> int:
        """K +- 1 whose verify rows were never timed, if at the least cost monotonicity allows it would beat K."""
        tries = (self.k + 1, self.k - 1, self.k_max) if self.tuning.explore_top else (self.k + 1, self.k - 1)
        candidates = [k for k in tries if 1 <= k <= self.k_max
                      and not self._costs.measured(k + 1) and self._explored[k + 1] < self.tuning.explore_tries]
        if not candidates:
            return 0
        cheapest = self._snapshot(self._costs.optimistic_table())
        assert cheapest is not None  # the same costs, with the verify table at its lower bound
        optimistic = self._rates(self.acceptance(), cheapest)
        best = max(candidates, key=lambda k: optimistic[k])
        return best if optimistic[best] > rates[self.k] else 0

    def _disable(self, step: int, rates: list[float], optimistic: list[float]) -> GovernorEvent:
        before = self.k
        self.enabled = False
        self._backoff = self.tuning.probe_wait if self._costs_time else self.tuning.free_probe_wait
        self._wait = self._backoff
        self._next_k = 0
        best = self._best(optimistic)
        probes = (f"probes (the first after {self._wait} plain steps or more, once this evidence has faded, then ever "
                  "less often)" if self._costs_time
                  else "probes with the drafter's free proposals")
        return GovernorEvent(
            step, "disable", before, 0,
            f"speculation would be slower than plain decoding ({optimistic[best] * 1000:.1f} vs "
            f"{rates[0] * 1000:.1f} tokens/s expected even at acceptance "
            f"{min(1.0, self.acceptance() + self._z() * self.acceptance_sd()):.0%}; "
            f"{self._summary(rates, best)}); {self._what()} off until {probes} say it pays",
            self.scope,
        )

    # --- decisions while drafting is off -----------------------------------------------------------------

    def _decide_off(self, step: int, probed: bool) -> GovernorEvent | None:
        self._wait -= 1
        self._next_k = 0
        costs = self._snapshot() if probed or (self._costs_time and self._wait <= 0) else None
        if costs is None:  # a plain step between probes: nothing to decide (and O(1))
            return None
        rates = self._rates(self.acceptance(), costs)
        if probed:
            pessimistic = self._rates(self.acceptance() - self.tuning.z_on * self.acceptance_sd(), costs)
            if max(pessimistic[1:]) > rates[0] * (1.0 + self.tuning.on_margin):
                return self._enable(step, rates, costs)
            if max(rates[1:]) > rates[0]:
                self._wait = 0  # promising but not yet sure: probe again at once rather than back off
            else:
                limit = self.tuning.probe_wait_max if self._costs_time else self.tuning.free_probe_wait_max
                self._backoff = min(limit, 2 * self._backoff)
                self._wait = self._backoff
        # A free drafter is probed through free_probe, with proposals it already has. A costly one only where
        # _probe_k finds a K worth it: on the 2-core CPU a draft model costs 0.6 of a target step and each probe
        # also pays the catch-up of the tokens it skipped, and draft mode ran at 0.91x of plain decoding there,
        # off after its first step and probing after 16, 32 and 64 more (docs/BENCHMARKS.md, run 33).
        self._next_k = 0
        if self._costs_time and self._wait <= 0:
            self._next_k = self._probe_k(costs, rates)
        return None

    def _probe_k(self, costs: _Costs, rates: list[float]) -> int:
        """The K to probe a costly drafter at, 0 for none: of the K that could turn drafting back on, the one the
        current acceptance favours.

        Could: at the acceptance the off decision ruled out (the estimate plus z sd, z as _disable used), with
        the verify rows priced as estimated and the catch-up of the steps the model sat out charged to every
        token, K beats plain decoding by the margin that turning drafting back on needs. Past that a probe is a
        loss whatever it finds. The evidence fades as the reply moves on, so the optimistic acceptance rises
        and a reply whose text turns predictable is probed again. The catch-up is charged per token because the
        waits double: drafting that a probe turns on has about as long a stretch to win it back as the one it
        caught up. Not at acceptance 1, nor at the least an untimed row count could cost: on the 2-core CPU
        sampled draft mode probed every 16-64 steps and ran at 0.94x of llama.cpp's plain decoding with the
        latter (docs/BENCHMARKS.md, run 34), and at 0.97x with the former, each probe paying a 17-90 token
        catch-up at 5-7 ms a token and giving up at once (run 35)."""
        a = min(1.0, self.acceptance() + self._z() * self.acceptance_sd())
        hopeful = self._rates(a, costs)
        catch_up = self.catch_up_ms_per_token()
        bar = hopeful[0] * (1.0 + self.tuning.on_margin)
        could = [k for k in range(1, self.k_max + 1) if 1.0 / (1.0 / hopeful[k] + catch_up) > bar]
        return max(could, key=lambda k: rates[k]) if could else 0

    def _enable(self, step: int, rates: list[float], costs: _Costs) -> GovernorEvent:
        self.enabled = True
        self.k = self._best(rates)
        self._next_k = self._plan(rates, costs)
        return GovernorEvent(step, "enable", 0, self.k,
                             f"a probe says {self._what()} pays again: {self._summary(rates, self.k)}", self.scope)

    def _what(self) -> str:
        return "drafting long copies" if self.scope == "copy" else "drafting"

    def _summary(self, rates: list[float], k: int) -> str:
        verify = self.verify_ms(k + 1) or 0.0
        return (f"expected {rates[k] * 1000:.1f} tokens/s at K {k} vs {rates[0] * 1000:.1f} plain; acceptance "
                f"{self.acceptance():.0%} (conditional, {self._drafted:.0f} drafted tokens of evidence), draft "
                f"{self.draft_ms_per_token() or 0.0:.1f} ms/token, verify({k + 1}) {verify:.1f} ms, "
                f"plain {1.0 / rates[0]:.1f} ms/token")
