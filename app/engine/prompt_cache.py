"""KV caches of earlier prompts, kept in host memory, so that going back to a chat does not process it again.

The target's context holds one sequence: the prompt and reply of the last chat that ran. A prompt from another
chat (or an edit far back in this one) cuts it to their common prefix, and going back used to process the whole
history again: on a 2-core CPU about 20 ms a token, a minute for a 3,000-token chat. Before such a cut the cache is
copied out (about 28 KiB a token for the 1.5B demo target, a few milliseconds), and a later prompt that shares
more with a kept copy than with the live cache gets that copy back. The copy holds the very bytes the cache held,
so the reply is the one the uncut cache would have given. llama.cpp's server does this only on request
(`--slot-save-path`); llama-cpp-python's `LlamaRAMCache` is the same idea for its high-level API.

No copy is made when the cut keeps the whole new prompt, so that what it loses is only what followed it: a regenerate
or a comparison drops the last reply of this very prompt, and copying the whole cache to keep a reply about to be
replaced cost a snapshot of the prompt and reply each time. Over the budget the least recently used copy goes first:
one that came back, or that was the best match for a prompt, counts as used.
"""

from __future__ import annotations

from collections.abc import Sequence

import psutil

from app.engine.ngram import common_prefix
from app.llama_backend import CacheSnapshot, LlamaContext

# A cut or a gain under this many tokens is processed again in well under a second: no copy is worth it.
MIN_TOKENS = 64


class PromptCache:
    """Snapshots of one context's cache, the most recently used last, at most `budget_bytes` in all."""

    def __init__(self, budget_bytes: int) -> None:
        self.budget_bytes = budget_bytes
        self._snaps: list[CacheSnapshot] = []
        self.restored = 0  # how many times a kept cache came back (for tests and the log)

    @property
    def nbytes(self) -> int:
        return sum(s.nbytes for s in self._snaps)

    def __len__(self) -> int:
        return len(self._snaps)

    def clear(self) -> None:
        self._snaps.clear()

    def swap_in(self, ctx: LlamaContext, prompt: Sequence[int]) -> None:
        """Before `ctx` is cut to its common prefix with `prompt`: keep its cache when that would lose much of it,
        and put back the kept cache that shares the most with `prompt` when that beats what `ctx` holds."""
        held = common_prefix(ctx.tokens, prompt)
        best, best_common = None, held
        for snap in self._snaps:
            if not ctx.can_restore(snap):  # taken while no MTP head followed the cache: the head would miss it
                continue
            common = common_prefix(snap.tokens, prompt)
            if common > best_common:
                best, best_common = snap, common
        back = best if best is not None and best_common - held >= MIN_TOKENS else None
        if best is not None:
            self._touch(best)  # kept while it lives again: a short cut later loses nothing (a longer one replaces it)
        if ctx.n_past - held >= MIN_TOKENS and held < len(prompt):
            self._keep(ctx)
        if back is not None:
            ctx.restore(back)
            self.restored += 1

    def _touch(self, snap: CacheSnapshot) -> None:
        self._snaps.remove(snap)
        self._snaps.append(snap)

    def _keep(self, ctx: LlamaContext) -> None:
        tokens = tuple(ctx.tokens)
        # A kept cache that the live one extends (an earlier turn of the same chat) says nothing new.
        self._snaps = [s for s in self._snaps if tokens[:len(s.tokens)] != s.tokens]
        size = ctx.snapshot_bytes()
        # On a CPU the models live in the same RAM: a copy never leaves less than an eighth of it free.
        ram = psutil.virtual_memory()
        if size > self.budget_bytes or ram.available - size < ram.total // 8:
            return
        self._snaps.append(ctx.snapshot())
        while self.nbytes > self.budget_bytes:
            self._snaps.pop(0)  # the least recently used goes first
