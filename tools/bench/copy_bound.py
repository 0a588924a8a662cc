"""The most any copy drafter could gain on one reply, with this machine's cost of a verify by its row count.

Why: on a CPU a verify of r rows costs far more than one plain step (on the 2-core AMD of runs 4-11, 8 rows cost
5.8 steps and 32 rows 13), so how much n-gram drafting can win depends on the machine as much as on the drafter.
This bound is what a clairvoyant copy drafter would reach: one that knows the reply in advance, drafts only text
that is already in the context (a verbatim continuation of an earlier spot whose KEY tokens before it match the
reply's), and sizes every verify optimally for the measured row costs. Dynamic programming over the reply:
at each position either a plain step (cost 1, one token) or a verify of L copied tokens (cost c(L + 1), L + 1
tokens). Any real copy drafter's speedup in plain steps is at most this; the research bench prints it per prompt
(`python -m tools.bench bench --copy-bound`) so a target such as "1.5x on long edits" can be judged against what
the hardware allows.
"""

from __future__ import annotations

import statistics
import time
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import replace

from app.engine.session import SpecSession
from app.llama_backend.core import LlamaContext

# The row counts timed; others are interpolated. 48 and 64: llama.cpp's ngram-map-k verifies 49 rows and ngram-mod
# 49-65 (tools/bench/native_replay.py prices them).
ROWS = (1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 24, 32, 48, 64)
KEY = 2  # context tokens that must match before a copy: SpecChat's lookup resumes a copy on 2 next to an edit
REPEATS = 5


def measure_row_costs(session: SpecSession, context: Sequence[int], rows: Sequence[int] = ROWS,
                      repeats: int = REPEATS) -> dict[int, float]:
    """The target's time for a pass of r rows (all with logits, as a verify) over `context`, in one-row passes:
    medians of `repeats` rounds, the row counts interleaved within each round. Leaves the caches empty.

    Row counts beyond what the session's context may ask logits for (48: SpecChat never verifies more) are timed
    in a second, temporary context of the same model that may: llama.cpp's n-gram types verify 49-65 rows, and
    their replay (native_replay.py) must not guess those prices from the 32-row one."""
    ctx = session.target_ctx
    wide = max(rows)
    if wide > ctx.max_rows and ctx.config.n_batch >= wide:
        ctx = LlamaContext(session.target_model, replace(ctx.config, n_outputs_max=wide))
    counts = [r for r in rows if r <= ctx.max_rows]
    filler = (list(context[-max(counts):]) * max(counts))[: max(counts)]
    times: dict[int, list[float]] = {r: [] for r in counts}
    try:
        session.clear_caches()
        ctx.decode(list(context), logits_for="last")
        base = ctx.n_past
        for _ in range(repeats):
            for r in counts:
                t0 = time.perf_counter()
                ctx.decode(filler[:r], logits_for="all")
                times[r].append(time.perf_counter() - t0)
                ctx.truncate(base)
    finally:
        if ctx is session.target_ctx:
            session.clear_caches()
        else:
            ctx.close()
    one = statistics.median(times[1])
    return {r: statistics.median(times[r]) / one for r in counts}


def row_cost(costs: Mapping[int, float], rows: int) -> float:
    """Linear between measured row counts; beyond the largest, per row at its price."""
    if rows in costs:
        return costs[rows]
    below = max((r for r in costs if r < rows), default=None)
    above = min((r for r in costs if r > rows), default=None)
    if below is None or above is None:
        top = max(costs)
        return costs[top] * rows / top
    return costs[below] + (costs[above] - costs[below]) * (rows - below) / (above - below)


def copyable(prompt: Sequence[int], reply: Sequence[int], key: int = KEY, longest: int = 31) -> list[int]:
    """For each reply index i: how many tokens from reply[i] on continue, verbatim, some earlier spot of the
    context (prompt + reply[:i]) whose `key` tokens before it equal those before reply[i] (at most `longest`)."""
    tokens = list(prompt) + list(reply)
    spots: dict[tuple[int, ...], list[int]] = defaultdict(list)  # key -> context positions right after it
    indexed = key  # spots j < indexed are in `spots`
    out: list[int] = []
    for i in range(len(prompt), len(tokens)):
        for j in range(indexed, i):  # the context grows with the reply: copies may come from its own text
            spots[tuple(tokens[j - key:j])].append(j)
        indexed = max(indexed, i)
        best = 0
        for j in spots.get(tuple(tokens[i - key:i]), ()):
            n = 0
            while n < longest and j + n < i and i + n < len(tokens) and tokens[j + n] == tokens[i + n]:
                n += 1
            best = max(best, n)
        out.append(best)
    return out


def bound(prompt: Sequence[int], reply: Sequence[int], costs: Mapping[int, float], key: int = KEY) -> float:
    """The clairvoyant copy drafter's speedup over plain decoding, in plain steps. The reply's first token comes
    from the prompt's pass on both sides, so plain decoding takes len(reply) - 1 steps."""
    n = len(reply)
    if n < 2:
        return 1.0
    longest = max(costs) - 1
    avail = copyable(prompt, reply, key, longest)
    price = [row_cost(costs, rows) for rows in range(longest + 2)]  # price[r]: a pass of r rows (index 0 unused)
    best = [0.0] * (n + 1)
    for i in range(n - 1, 0, -1):
        b = 1.0 + best[i + 1]
        for length in range(1, min(avail[i], n - i - 1) + 1):
            b = min(b, price[length + 1] + best[i + length + 1])
        best[i] = b
    return (n - 1) / best[1]
