"""SpecChat's own lookup policy replayed on a recorded greedy reply, with a machine's measured row costs.

Why: a wall-time bench on these 2-core machines swings by 10-20% between rounds, which hides policy changes of a
few percent. Greedy output does not depend on what is drafted, so the reply recorded from a plain run is what
any speculative run writes. The real SpecEngine with the real drafter and governors is driven by a stand-in
target that answers each verify row with the recorded token and advances the engine's clock by the measured
cost of a pass of that many rows (copy_bound.measure_row_costs). The result, in plain steps, is noise-free and
comparable with the clairvoyant copy bound on the same costs (`python -m tools.bench bench --copy-bound` prints
both). The engine sees the stand-in through its public interfaces only: a TargetContext, and the `clock` it
takes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence

import numpy as np

from app.engine.drafters import LookupDrafter, NoDrafter
from app.engine.events import FinishEvent
from app.engine.ngram import PromptLookup, common_prefix
from app.engine.speculative import SpecEngine, SpecParams
from tools.bench.copy_bound import row_cost

MODES = ("none", "lookup", "clairvoyant")


class ReplayClock:
    """The engine's clock in a replay: it moves only when the stand-in target charges a pass."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def __call__(self) -> float:
        return self.seconds


class _StandInModel:
    """What the engine asks of a model: its end-of-generation tokens, pieces for display (none needed here)."""

    def __init__(self, eog: int, is_eog: Callable[[int], bool] | None = None) -> None:
        self.eog = eog
        self._is_eog = is_eog

    def is_eog(self, token: int) -> bool:
        return token == self.eog or (self._is_eog is not None and self._is_eog(token))

    def piece(self, token: int) -> bytes:
        return b""

    def detokenize(self, tokens: Sequence[int]) -> str:
        return ""


class StandInTarget:
    """A target context whose row after position j picks sequence[j + 1] (the recorded reply), and whose passes
    with logits for every row (the verifies) advance `clock` by costs[rows] plain steps of 1 ms."""

    def __init__(self, sequence: Sequence[int], eog: int, costs: Mapping[int, float], clock: ReplayClock,
                 n_ctx: int = 1 << 20, is_eog: Callable[[int], bool] | None = None) -> None:
        self.sequence = list(sequence)
        self.model = _StandInModel(eog, is_eog)
        self.costs = costs
        self.clock = clock
        self.n_ctx = n_ctx
        self.n_batch = self.max_rows = 512
        self.native_ms = 0.0
        self.tokens: list[int] = []
        self._vocab = max(self.sequence) + 1
        self._rows: list[int] = []  # the cache positions whose logits the last decode returned
        self._kept: tuple[int, np.ndarray] | None = None

    @property
    def n_past(self) -> int:
        return len(self.tokens)

    def decode(self, tokens: Sequence[int], logits_for: str = "last") -> None:
        start = len(self.tokens)
        self.tokens.extend(tokens)
        positions = range(start, len(self.tokens))
        self._rows = list(positions) if logits_for == "all" else [positions[-1]] if logits_for == "last" else []
        if logits_for == "all":
            self.clock.seconds += row_cost(self.costs, len(tokens)) / 1000.0

    def decode_batches(self, tokens: Sequence[int], logits_for: str = "last") -> Iterator[int]:
        """`decode` in n_batch chunks, yielding tokens done after each, as LlamaContext's (the prefills)."""
        for start in range(0, len(tokens), self.n_batch):
            end = min(start + self.n_batch, len(tokens))
            self.decode(tokens[start:end], logits_for if end == len(tokens) else "none")
            yield end

    def logits(self, row: int = -1) -> np.ndarray:
        out = np.zeros(self._vocab, dtype=np.float32)
        j = self._rows[row] + 1
        if j < len(self.sequence):
            out[self.sequence[j]] = 1.0
        return out

    def keep_last_logits(self) -> None:
        self._kept = (self.n_past, self.logits(-1))

    def kept_logits(self, n: int) -> np.ndarray | None:
        kept = self._kept
        return kept[1] if kept is not None and kept[0] == n <= self.n_past else None

    def truncate(self, n_keep: int) -> None:
        del self.tokens[n_keep:]
        if self._kept is not None and n_keep < self._kept[0]:
            self._kept = None

    def keep_common_prefix(self, tokens: Sequence[int], known: int = 0) -> int:
        common = 0
        limit = min(len(tokens), len(self.tokens))
        while common < limit and self.tokens[common] == tokens[common]:
            common += 1
        self.truncate(common)
        return common


def clairvoyant_lookup(sequence: Sequence[int]) -> PromptLookup:
    """SpecChat's lookup, except that a sure copy stops exactly where the recorded reply parts from it, and nowhere
    else (no cut before an edited token or an unconfirmed substitution). Everything else
    (when a copy is sure, its length cap, the governors) is unchanged, so its replay shows what a perfect rule for
    where a sure copy stops would give on that reply (docs/BENCHMARKS.md, run 28). Not a strict bound: a copy cut
    below SURE_COPY_MIN tokens is not taken, where a longer one that breaks late still pays.
    `sequence`: the prompt, the reply and its end of turn."""

    def cut_where_the_reply_parts(context: Sequence[int], tokens: tuple[int, ...]) -> int:
        end = len(context)
        return common_prefix(tokens, sequence[end:end + len(tokens)])

    return PromptLookup(sure_cut=cut_where_the_reply_parts)


def template_end(prompt: Sequence[int], is_eog: Callable[[int], bool], default: int = -1) -> int:
    """The chat template's end-of-turn token: the last end-of-generation token in the prompt (what a reply that
    stopped ended with), or `default` when the prompt has none."""
    return next((t for t in reversed(prompt) if is_eog(t)), default)


def replay_ms(prompt: Sequence[int], reply: Sequence[int], stopped: bool, costs: Mapping[int, float], mode: str,
              spec: SpecParams, n_predict: int | None = None, is_eog: Callable[[int], bool] | None = None) -> float:
    """The decode time of `mode` ("none", "lookup" or "clairvoyant", see clairvoyant_lookup) writing `reply` after
    `prompt`, in plain-step ms. `stopped`: the reply ended with an end-of-generation token (one more step), rather
    than at its token budget.
    `n_predict`: the budget the recorded run had. The engine never drafts past the budget, so a replay given
    only the reply's own length would never pay for drafts that run past the reply's end, as real runs do.
    `is_eog`: the real model's end-of-generation test. The reply then ends with the template's end-of-turn token
    (the last one in the prompt), as the real one did, and a copy of an earlier message that runs into its end
    of turn is cut there as in real runs; without it, a token of no vocabulary ends the reply."""
    eog = max(max(prompt, default=0), max(reply, default=0)) + 1
    if is_eog is not None:
        eog = template_end(prompt, is_eog, eog)
    clock = ReplayClock()
    target = StandInTarget([*prompt, *reply, eog], eog, costs, clock, is_eog=is_eog)
    if mode not in MODES:
        raise ValueError(f"no replay mode {mode!r}: use one of {', '.join(MODES)}")
    drafter: LookupDrafter | NoDrafter = NoDrafter()
    if mode != "none":
        drafter = LookupDrafter()
        if mode == "clairvoyant":
            drafter.lookup = clairvoyant_lookup(target.sequence)
    engine = SpecEngine(target, drafter, clock=clock)
    least = len(reply) + 1 if stopped else len(reply)
    n_predict = least if n_predict is None or not stopped else max(n_predict, least)
    finish = [e for e in engine.generate(prompt, n_predict, spec=spec) if isinstance(e, FinishEvent)]
    if not finish or list(finish[0].tokens) != list(reply):
        raise AssertionError(f"the {mode} replay did not reproduce the recorded reply")
    return finish[0].stats.decode_ms


def replayed_speedups(prompt: Sequence[int], reply: Sequence[int], stopped: bool, costs: Mapping[int, float],
                      spec: SpecParams, n_predict: int | None = None, is_eog: Callable[[int], bool] | None = None,
                      modes: Sequence[str] = ("lookup",)) -> dict[str, float]:
    """Each of `modes` against plain decoding (replayed once) on the same reply and costs, in plain steps (1.0: no
    gain)."""
    plain = replay_ms(prompt, reply, stopped, costs, "none", spec, n_predict, is_eog)
    spent = {mode: replay_ms(prompt, reply, stopped, costs, mode, spec, n_predict, is_eog) for mode in modes}
    return {mode: plain / ms if ms > 0 else 1.0 for mode, ms in spent.items()}


def replayed_speedup(prompt: Sequence[int], reply: Sequence[int], stopped: bool, costs: Mapping[int, float],
                     spec: SpecParams, n_predict: int | None = None,
                     is_eog: Callable[[int], bool] | None = None) -> float:
    """SpecChat's lookup against plain decoding on the same reply and costs, in plain steps (1.0: no gain)."""
    return replayed_speedups(prompt, reply, stopped, costs, spec, n_predict, is_eog)["lookup"]
