"""The n-gram index behind prompt lookup, updated incrementally, and the choice of a key's continuation.

`NgramIndex` maps every n-gram of the context to the positions that followed it; `KeyFinder` picks, for the
context's end, the longest key with a usable continuation (llama.cpp's ngram-cache thresholds, ngram.py's
docstring) or, after an edit, the occurrence next to where the running copy broke off.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from typing import NamedTuple

from app.engine.ngram_params import NgramParams

_BITS = 32  # a packed key holds one token id per 32 bits
_MASK = (1 << _BITS) - 1


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    if type(a) is type(b) and a[:n] == b[:n]:  # C speed for the usual case, a whole prefix in common
        return n
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class NgramIndex:
    """Every n-gram of the given lengths in `tokens` -> positions of the token that followed it, ascending.

    A key seen once maps to its int position (most long keys occur once), a repeated key to a list. Appending
    and truncating touch only the positions they add or drop, so a step costs O(new tokens), not O(context).
    """

    def __init__(self, sizes: Sequence[int]) -> None:
        self.sizes = tuple(sorted(set(sizes)))
        if not self.sizes or self.sizes[0] < 1:
            raise ValueError(f"n-gram sizes must be >= 1, got {sizes}")
        self.tokens: list[int] = []
        self.maps: list[dict[int, int | list[int]]] = [{} for _ in self.sizes]

    def clear(self) -> None:
        self.tokens = []
        for m in self.maps:
            m.clear()

    def sync(self, context: Sequence[int]) -> None:
        """Make the index hold `context`: keep the common prefix, drop the rest, add what is new."""
        common = common_prefix(self.tokens, context)
        if common < len(self.tokens) // 2:
            self.clear()  # another conversation: rebuilding beats unindexing most of it
            common = 0
        self.truncate(common)
        self.extend(context[common:])

    def extend(self, new: Sequence[int]) -> None:
        toks = self.tokens
        for token in new:
            toks.append(token)
            self._add(len(toks) - 1)

    def truncate(self, n: int) -> None:
        for p in range(len(self.tokens) - 1, n - 1, -1):
            self._remove(p)
        del self.tokens[n:]

    def keys(self, end: int) -> list[int]:
        """Packed keys of the n-grams ending just before `end`, one per size that fits, shortest first."""
        toks = self.tokens
        keys: list[int] = []
        key = j = 0
        for n in self.sizes:
            if n > end:
                break
            while j < n:
                j += 1
                key |= (toks[end - j] & _MASK) << (_BITS * (j - 1))
            keys.append(key)
        return keys

    def positions(self, size_index: int, key: int) -> list[int]:
        found = self.maps[size_index].get(key)
        if found is None:
            return []
        return [found] if isinstance(found, int) else found

    def _add(self, p: int) -> None:
        for m, key in zip(self.maps, self.keys(p), strict=False):
            found = m.get(key)
            if found is None:
                m[key] = p
            elif isinstance(found, int):
                m[key] = [found, p]
            else:
                found.append(p)

    def _remove(self, p: int) -> None:
        # p is the newest position, so it is the last one stored under each of its keys.
        for m, key in zip(self.maps, self.keys(p), strict=False):
            found = m[key]
            if isinstance(found, int):
                del m[key]
            else:
                found.pop()
                if len(found) == 1:
                    m[key] = found[0]


class KeyMatch(NamedTuple):
    source: int  # context position of the continuation's first token
    match: int  # context tokens before `source` that agree with the context's end
    key: tuple[int, int]  # (length, packed key)
    local: bool  # found next to where the last copy broke off (the resync spot)


class KeyFinder:
    """The continuation of the context's end that an index holding the context offers, under `params`."""

    def __init__(self, index: NgramIndex, params: NgramParams) -> None:
        self.index = index
        self.params = params

    def find(self, context: Sequence[int], floor: int, anchor: int | None) -> KeyMatch | None:
        """The longest key longer than `floor` with a usable continuation: the occurrence right after `anchor`
        (the source position where the last copy broke off) if one is close, else the most frequent one."""
        index = self.index
        keys = index.keys(len(context))
        for i in range(len(keys) - 1, -1, -1):
            n = index.sizes[i]
            if n <= floor:
                break
            positions = index.positions(i, keys[i])
            if not positions:
                continue
            source = self._near(positions, anchor) if anchor is not None and self.params.resync else None
            local = source is not None
            if source is None:
                source = self._frequent(positions, n)
            if source is not None:
                return KeyMatch(source, self._extend(context, source, n), (n, keys[i]), local)
        return None

    def _near(self, positions: list[int], a: int) -> int | None:
        """The first occurrence after the spot `a` where the last copy broke off, if close to it."""
        # Strictly after: the token at the break is the one the edit replaced (or comes after an insertion).
        i = bisect_right(positions, a)
        if i < len(positions) and positions[i] <= a + self.params.resync_ahead:
            return positions[i]
        if i > 0 and positions[i - 1] >= a - self.params.resync_back:
            return positions[i - 1]
        return None

    def _frequent(self, positions: list[int], n: int) -> int | None:
        """Most recent occurrence of the key's most frequent continuation, if it has the support and share."""
        p = self.params
        i = n - 1
        min_hits = p.min_hits[i] if i < len(p.min_hits) else 1
        min_share = p.min_share[i] if i < len(p.min_share) else 0.5
        recent = positions[-p.recent :]
        if len(recent) < min_hits:
            return None
        toks = self.index.tokens
        counts: dict[int, int] = {}
        for pos in reversed(recent):  # newest first, so a tie goes to the most recent continuation
            counts[toks[pos]] = counts.get(toks[pos], 0) + 1
        best = max(counts, key=counts.__getitem__)
        if counts[best] < min_share * len(recent):
            return None
        return next(pos for pos in reversed(recent) if toks[pos] == best)

    def _extend(self, context: Sequence[int], source: int, n: int) -> int:
        """How far the match reaches back beyond the key: a longer match supports a longer draft."""
        end = len(context)
        m = n
        while m < self.params.max_extend and source - m > 0 and context[source - m - 1] == context[end - m - 1]:
            m += 1
        return m
