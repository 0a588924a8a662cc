"""Which verify batches give every row one-token decoding's bits on this context: measured, not assumed.

Strict mode (SpecParams.one_token_kernels) promises the reply plain, one-token decoding gives, bit for bit. A
verify batch keeps that promise only where the backend runs each of its rows through the kernels a one-token pass
uses, and llama.cpp's CPU backend picks kernels by shape. Two switches were found in the vendored source: from 8
rows on, K-quant matmuls take the tiled kernels (ggml-cpu/tiled, ggml_tiled_min_batch); and once the cache holds
more than 256 positions (llama.cpp pads the cache's view to 256), a one-token pass splits its attention over the
cache across threads (ggml-cpu/ops.cpp, use_split_kv_path) and sums the parts in another order, which no batch of
two rows or more does. On a Zen 4 EPYC, 2 threads, flash attention on: a 2-row batch matched one-token decoding at
every position below 256 and parted from it (logits up to 0.4-1.6 apart) at every position probed above. Which
shapes match follows the CPU's backend module, the build, the thread count and the model, so the session measures
it on the context that will run the replies, and the engine keeps strict verifies within what was measured.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from app.atomic import atomic_write_text
from app.engine.target_context import TargetContext

PROBE_ROWS = 8  # the most rows tried: a verify of K = 7
# Where llama.cpp's kernels change shape with the cache's length (its view of the cache is padded to 256): each is
# probed just below and just above, as far as the context reaches.
BOUNDARIES = (256, 512)
START = 16  # the short probe's prefix: a few positions in, as a reply's first verify is
PROBE_TOKENS = BOUNDARIES[-1] + PROBE_ROWS + 1  # what the probe decodes at most
PROBE_TEXT = ("The committee met on Tuesday to review the budget. Each department presented its figures, and the "
              "chair asked for a summary of the changes since last year. def total(items):\n    return sum(i.price "
              "for i in items)\n")


@dataclass(frozen=True, slots=True)
class OneTokenBound:
    """Where this context's verify batches compute one-token decoding's bits."""

    rows: int  # the most rows a batch may hold (1: no batch of two or more does)
    span: int | None  # ... with every row at a position below this; None: no limit found up to `probed`
    probed: int  # the cache length the probe reached

    def room(self, n_context: int) -> int:
        """The most draft tokens a verify may carry when the context (cached, plus its last token) is this long:
        its rows sit at positions n_context - 1 onwards."""
        k = self.rows - 1
        return k if self.span is None else max(0, min(k, self.span - n_context))

    def describe(self) -> str:
        where = f"below position {self.span}" if self.span is not None else f"up to position {self.probed} (probed)"
        return f"verify batches of up to {self.rows} rows give one-token decoding's bits {where}"


def probe_tokens(tokenize: Callable[[str], list[int]], needed: int = PROBE_TOKENS) -> list[int]:
    """`needed` tokens of plain text through the model's tokenizer."""
    ids: list[int] = []
    while len(ids) < needed:
        ids += list(tokenize(PROBE_TEXT))
    return ids[:needed]


def remembered(ctx: TargetContext, tokens: Sequence[int], key: str, store: Path) -> OneTokenBound:
    """`probe`'s answer for `key` (everything it depends on: the model file, the build and CPU, threads, attention
    and cache types), from `store`, a JSON file of earlier answers, or probed now and added to it: the probe costs
    seconds on a large model (a prefill of BOUNDARIES[-1] tokens without repacking, then 30-odd decodes)."""
    digest = hashlib.sha256(key.encode()).hexdigest()[:24]
    try:
        known = json.loads(store.read_text(encoding="utf-8"))
        if not isinstance(known, dict):
            known = {}
    except (OSError, ValueError):
        known = {}  # none yet, or unreadable: probe, and write a good file
    entry = known.get(digest)
    if isinstance(entry, dict):
        try:
            bound = OneTokenBound(int(entry["rows"]), None if entry["span"] is None else int(entry["span"]),
                                  int(entry["probed"]))
            if bound.rows >= 1:
                return bound
        except (KeyError, TypeError, ValueError):
            pass  # written by something else: probe again
    bound = probe(ctx, tokens)
    known[digest] = asdict(bound)
    try:
        store.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(store, json.dumps(known, indent=1, sort_keys=True))
    except OSError:
        pass  # a read-only profile: probe again next time
    return bound


def probe(ctx: TargetContext, tokens: Sequence[int]) -> OneTokenBound:
    """Measure the bound on `ctx` (its cache is emptied, and left empty): at a short prefix, the most rows whose
    batch gives each row the bits of one-token decoding at the same position; then, with that many rows and with
    two, just below and just above each boundary the context reaches. `tokens`: PROBE_TOKENS of them (fewer
    probe fewer boundaries)."""
    ctx.truncate(0)
    try:
        _extend(ctx, tokens, START)
        rows = 1
        for r in range(2, PROBE_ROWS + 1):
            if not _window_matches(ctx, tokens, START, r):
                break
            rows = r
        probed = START + rows
        if rows == 1:
            return OneTokenBound(1, None, probed)
        for boundary in BOUNDARIES:
            if boundary + PROBE_ROWS >= min(ctx.n_ctx, len(tokens)):
                break
            for start in (boundary - rows, boundary):
                _extend(ctx, tokens, start)
                if not all(_window_matches(ctx, tokens, start, r) for r in sorted({2, rows})):
                    # Just above a boundary: rows below it were just seen to match. Just below: only as far as
                    # the last window that matched.
                    return OneTokenBound(rows, boundary if start == boundary else probed, probed)
                probed = start + rows
        return OneTokenBound(rows, None, probed)
    finally:
        ctx.truncate(0)


def _extend(ctx: TargetContext, tokens: Sequence[int], n: int) -> None:
    """Make the cache hold tokens[:n] (it holds a prefix of them)."""
    if ctx.n_past >= n:
        return
    for _ in ctx.decode_batches(tokens[ctx.n_past:n], logits_for="none"):
        pass


def _window_matches(ctx: TargetContext, tokens: Sequence[int], start: int, rows: int) -> bool:
    """Do `rows` tokens from `start` decoded as one batch give the logits, bit for bit, that decoding them one at a
    time does? The cache holds tokens[:start] before and after."""
    window = tokens[start:start + rows]
    singles = []
    for token in window:
        ctx.decode([token], logits_for="last")
        singles.append(np.array(ctx.logits(-1)))
    ctx.truncate(start)
    ctx.decode(window, logits_for="all")
    batch = [ctx.logits(i) for i in range(rows)]
    same = all(np.array_equal(a, b) for a, b in zip(singles, batch, strict=True))
    ctx.truncate(start)
    return same
