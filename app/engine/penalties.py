"""Repetition, frequency and presence penalties: llama.cpp's `penalties` sampler (llama-sampler.cpp).

Each token's count among the last `repeat_last_n` tokens of the context (prompt included, as
llama-server feeds it) lowers its logit: a positive logit is divided by the repeat penalty, a
negative one multiplied by it, and count * frequency + presence is subtracted, in float32 as
llama.cpp does. The counts are kept one token at a time, so a step costs the same at any context
length. Verification judges row i of a batch with the context that row saw (the reply so far plus
the drafts accepted before it): the engine pushes each accepted draft token before the next row and
rolls the pushes back after the step, so every row is penalised exactly as plain decoding would.

Only the window's ids change, from id and count arrays that are rebuilt only after the counts changed. The engine
uses `penalise`, which changes those few entries of the row itself and `restore`s them after the row is judged: a
copy of the row cost a pass over the vocabulary (~0.25 ms right after a decode, with the caches cold). `apply`
returns a penalised copy, in one buffer the window keeps (for tools, tests and rows that are not float32).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from app.engine.sampling import SamplingParams


class PenaltyWindow:
    """How often each token occurs among the last `last_n` tokens of a growing sequence."""

    def __init__(self, params: SamplingParams, context: Sequence[int] = ()) -> None:
        self.last_n = params.repeat_last_n
        self._repeat = np.float32(params.repeat_penalty)
        self._frequency = np.float32(params.frequency_penalty)
        self._presence = np.float32(params.presence_penalty)
        # The sequence's tail, enough to slide the window back as well as forward (at least the window
        # itself plus everything pushed since); `length` is the whole sequence's length.
        self._tail: list[int] = []
        self._counts: dict[int, int] = {}
        self._out: np.ndarray | None = None  # apply's result, reused (see apply)
        self._saved: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None  # penalise's row, ids, their logits
        self._ids: np.ndarray | None = None  # the window's ids and counts as arrays; None: the counts changed since
        self._count = np.empty(0, dtype=np.float32)
        self.length = max(0, len(context) - self.last_n)
        self.sync(context)

    def sync(self, context: Sequence[int]) -> None:
        """Take in what `context` (the sequence this window follows, only ever grown) added since."""
        for token in context[self.length :]:
            self.push(token)

    def push(self, token: int) -> None:
        self.length += 1
        if self.last_n <= 0:
            return
        tail, counts = self._tail, self._counts
        self._ids = None
        tail.append(token)
        counts[token] = counts.get(token, 0) + 1
        if len(tail) > self.last_n:
            self._drop(tail[-self.last_n - 1])

    def pop(self) -> None:
        """Undo the last push (the oldest token that slid out comes back)."""
        self.length -= 1
        if self.last_n <= 0:
            return
        tail = self._tail
        self._ids = None
        self._drop(tail.pop())
        if len(tail) >= self.last_n:
            back = tail[-self.last_n]
            self._counts[back] = self._counts.get(back, 0) + 1

    def truncate(self, length: int) -> None:
        while self.length > length:
            self.pop()

    def _drop(self, token: int) -> None:
        left = self._counts[token] - 1
        if left:
            self._counts[token] = left
        else:
            del self._counts[token]

    def counts(self) -> dict[int, int]:
        """A copy of the counts (token id -> occurrences in the window); for tests and tools."""
        return dict(self._counts)

    def apply(self, logits: np.ndarray) -> np.ndarray:
        """The penalised logits (`logits`, maybe llama.cpp's own output buffer, is left as it is).

        The result is the window's own buffer, valid until the next `apply`: read it (argmax, distribution) before
        penalising the next row, or copy it."""
        out = self._out
        if out is None or out.shape != logits.shape:
            out = self._out = np.empty(logits.shape, dtype=np.float32)
        np.copyto(out, logits, casting="unsafe")  # what np.array(logits, dtype=np.float32) gave
        if self._counts:
            ids = self._id_arrays()
            out[ids] = self._penalised(out[ids])
        return out

    def penalise(self, logits: np.ndarray) -> np.ndarray:
        """`apply` without the copy: the row itself, penalised at the window's ids, whose values are saved first.
        Call `restore` before the row is read by anything else (the same bits come back). A row that is not a
        writable float32 array gets `apply`'s copy instead (and `restore` has nothing to do)."""
        self.restore()
        if logits.dtype != np.float32 or not logits.flags.writeable:
            return self.apply(logits)
        if self._counts:
            ids = self._id_arrays()
            x = logits[ids]  # a copy: what restore puts back
            self._saved = (logits, ids, x)
            logits[ids] = self._penalised(x)
        return logits

    def restore(self) -> None:
        """Undo the last `penalise`: the row's logits as they were, bit for bit."""
        if self._saved is not None:
            row, ids, x = self._saved
            self._saved = None
            row[ids] = x

    def _id_arrays(self) -> np.ndarray:
        if self._ids is None:
            n = len(self._counts)
            self._ids = np.fromiter(self._counts.keys(), dtype=np.intp, count=n)
            self._count = np.fromiter(self._counts.values(), dtype=np.float32, count=n)
        return self._ids

    def _penalised(self, x: np.ndarray) -> np.ndarray:
        """llama.cpp's rule on the window's float32 logits `x` (in the order of its ids)."""
        x = np.where(x <= 0, x * self._repeat, x / self._repeat)
        return x - (self._count * self._frequency + self._presence)
