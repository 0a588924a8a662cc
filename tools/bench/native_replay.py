"""llama.cpp's own n-gram drafters, replayed on a recorded greedy reply with a machine's row costs.

Why: SpecChat's lookup must be at least as fast as llama.cpp's best n-gram mode on every copy prompt, and a timed
bench on these 2-core machines cannot tell a 5% difference on one prompt (docs/BENCHMARKS.md, runs 19-22). Greedy
output does not depend on the drafts, so what `llama-speculative-simple --spec-type T` drafts and accepts on a
reply follows from the reply alone. This module re-implements each type's drafting as the vendored source does it
(common/ngram-map.cpp, common/ngram-mod.cpp, common/speculative.cpp) and runs the example's draft/verify loop
(examples/speculative-simple), pricing each verify of r rows with the same measured costs as SpecChat's replay
(tools/bench/policy_replay.py). Its drafted/accepted counts are checked against llama.cpp's real runs
(tests/test_native_replay.py).

The hash indexes use llama.cpp's own hash functions and slot counts, so even their collisions are replayed. Left
out: ngram-cache (lookup decoding's n-gram statistics; the slowest type in run 25).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tools.bench.copy_bound import row_cost

MASK64 = (1 << 64) - 1
MASK32 = (1 << 32) - 1


class NgramSimple:
    """common_ngram_simple_draft: the latest earlier spot of the last `n` tokens; its next `m` tokens, if at
    least `n` of them exist."""

    def __init__(self, n: int = 12, m: int = 48) -> None:
        self.n, self.m = n, m

    def begin(self, prompt: Sequence[int]) -> None:
        pass

    def draft(self, tokens: Sequence[int], sampled: int) -> list[int]:
        n, m, cur = self.n, self.m, len(tokens)
        if cur <= n + m + 1:
            return []
        pattern = [*tokens[cur - n + 1:], sampled]
        for j in range(cur - n - 1, 0, -1):
            if list(tokens[j:j + n]) == pattern:
                copy = min(m, cur - (j + n))
                return list(tokens[j + n:j + n + copy]) if copy >= n else []
        return []

    def accept(self, n_accepted: int) -> None:
        pass


@dataclass
class _Value:
    idx: int = 0  # where the value m-gram starts (0: unused slot)
    num: int = 0  # how often it followed the key
    n_accepted: int = -1  # accepted at its last draft: the next draft is at most this long


@dataclass
class _Key:
    idx: int
    values: list[_Value]
    stat_idx: int = 0
    num: int = 0


class NgramMap:
    """common_ngram_map (ngram-map-k with key_only, ngram-map-k4v without): a 12-token key's earlier spot found
    through a hash index; key_only drafts the 48 tokens after it, cut to what the key's last draft had accepted;
    k4v counts up to 4 different values after the key and drafts the most frequent one when it dominates."""

    HASH_SLOTS = 262144  # COMMON_NGRAM_HASH_MAP_SIZE
    MAX_VALUES = 4
    MAX_COUNT = 16380

    def __init__(self, key_only: bool, n: int = 12, m: int = 48, min_hits: int = 1) -> None:
        self.key_only, self.n, self.m, self.min_hits = key_only, n, m, min_hits
        self.keys: list[_Key] = []
        self.key_map: dict[int, int] = {}
        self.key_map_last_idx = 0
        self.size_last_begin = 0
        self.last: tuple[int, int] | None = None  # (key offset, value slot) of the last draft

    def begin(self, prompt: Sequence[int]) -> None:
        self.size_last_begin = len(prompt)  # a fresh map: nothing to clean up

    def _hash(self, tokens: Sequence[int], start: int) -> int:
        h = 0
        for t in tokens[start:start + self.n]:
            h = (h * 2654435761 + t) & MASK32
        return h % self.HASH_SLOTS

    def _matches(self, tokens: Sequence[int], at: int, key: Sequence[int]) -> bool:
        return list(tokens[at:at + self.n]) == list(key)

    def draft(self, inp: Sequence[int], sampled: int) -> list[int]:
        self.last = None
        n, m, cur = self.n, self.m, len(inp)
        if cur < 2 * n + m:
            return []
        key = [*inp[cur - n + 1:], sampled]
        match = 0
        at = self.key_map.get(self._hash(key, 0), 0)
        if at != 0 and at < cur - n - m - 1 and self._matches(inp, at, key):
            match = at
        top = self.size_last_begin - n - m - 1
        if match == 0 and self.size_last_begin > n + m + 1:
            match = next((j for j in range(top, self.key_map_last_idx, -1) if self._matches(inp, j, key)), 0)
        if match == 0:
            match = next((j for j in range(cur - n - m - 1, max(self.size_last_begin, self.key_map_last_idx), -1)
                          if self._matches(inp, j, key)), 0)
        # Index the n-grams that now have m tokens after them; an occupied slot keeps its older spot.
        if self.size_last_begin > n + m + 1:
            for j in range(top, self.key_map_last_idx, -1):
                self.key_map.setdefault(self._hash(inp, j), j)
        for j in range(cur - n - m - 1, max(self.size_last_begin, self.key_map_last_idx), -1):
            self.key_map.setdefault(self._hash(inp, j), j)
        self.key_map_last_idx = max(cur - n - m - 1, self.key_map_last_idx)
        if match == 0:
            return []
        offset = next((i for i, k in enumerate(self.keys) if self._matches(inp, k.idx, key)), len(self.keys))
        if offset == len(self.keys):
            self.keys.append(_Key(match, [_Value(n_accepted=m) for _ in range(self.MAX_VALUES)]))
        k = self.keys[offset]
        k.num = min(k.num + 1, self.MAX_COUNT)
        if self.key_only:
            self.last = (offset, 0)
            return list(inp[match + n:match + n + min(m, k.values[0].n_accepted)])
        if k.num < self.min_hits:
            return []
        for i in range(k.stat_idx, match + 1):
            if not self._matches(inp, i, key):
                continue
            start, slot = i + n, -1
            for v, value in enumerate(k.values):
                if value.idx == 0:
                    k.values[v] = _Value(start, 0, m)
                    slot = v
                    break
                if list(inp[start:start + m]) == list(inp[value.idx:value.idx + m]):
                    slot = v
                    break
            if slot >= 0:
                k.values[slot].num = min(k.values[slot].num + 1, self.MAX_COUNT)
        k.stat_idx = match
        best, most = 0, 0
        for v, value in enumerate(k.values):
            if value.num > most:
                best, most = v, value.num
        others = sum(value.num for v, value in enumerate(k.values) if v != best)
        if others > 0 and most < 2 * others:
            return []
        self.last = (offset, best)
        return list(inp[match + n:match + n + min(m, k.values[best].n_accepted)])

    def accept(self, n_accepted: int) -> None:
        if self.last is not None:
            offset, slot = self.last
            self.keys[offset].values[slot].n_accepted = n_accepted


class NgramMod:
    """common_ngram_mod (ngram-mod, llama.cpp's --spec-default): a hash table from each 24-token n-gram to the token
    after it (the latest write wins); a draft follows the table from the last 24 tokens for up to 64 tokens and is
    dropped if it breaks off before 48. Five drafts in a row with under a quarter accepted reset the table."""

    SLOTS = 4 * 1024 * 1024

    def __init__(self, n_match: int = 24, n_min: int = 48, n_max: int = 64) -> None:
        self.n, self.n_min, self.n_max = n_match, n_min, n_max
        self.entries: dict[int, int] = {}
        self.i_last = 0
        self.n_draft_last = 0
        self.n_low = 0

    def _idx(self, tokens: Sequence[int], start: int) -> int:
        h = 0
        for t in tokens[start:start + self.n]:
            h = (h * 6364136223846793005 + t) & MASK64
        return h % self.SLOTS

    def _add(self, tokens: Sequence[int], start: int) -> None:
        self.entries[self._idx(tokens, start)] = tokens[start + self.n]

    def begin(self, prompt: Sequence[int]) -> None:
        self.i_last, self.n_draft_last = 0, 0
        if len(prompt) < self.n:
            return
        for i in range(len(prompt) - self.n):
            self._add(prompt, i)
        self.i_last = len(prompt) - self.n

    def draft(self, tokens: Sequence[int], sampled: int) -> list[int]:
        self.n_draft_last = 0
        n, cur = self.n, len(tokens)
        if cur < n:
            return []
        if self.i_last + 32 < cur:  # new n-grams are indexed in chunks
            for i in range(self.i_last, cur - n):
                self._add(tokens, i)
            self.i_last = cur - n
        window = [*tokens[cur - n + 1:], sampled]
        out: list[int] = []
        for i in range(self.n_max):
            token = self.entries.get(self._idx(window, i))
            if token is None:
                if i < self.n_min:
                    return []
                break
            window.append(token)
            out.append(token)
        self.n_draft_last = len(out)
        return out

    def accept(self, n_accepted: int) -> None:
        if self.n_draft_last > 0:
            if n_accepted / self.n_draft_last < 0.25:
                self.n_low += 1
                if self.n_low >= 5:
                    self.entries.clear()
                    self.n_low, self.i_last = 0, 0
            else:
                self.n_low = 0


Drafter = NgramSimple | NgramMap | NgramMod

REPLAYED = ("ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod")


def drafter(mode: str) -> Drafter:
    """A fresh drafter of llama.cpp's spec type `mode`, with llama.cpp's default sizes."""
    if mode == "ngram-simple":
        return NgramSimple()
    if mode == "ngram-map-k":
        return NgramMap(key_only=True)
    if mode == "ngram-map-k4v":
        return NgramMap(key_only=False)
    if mode == "ngram-mod":
        return NgramMod()
    raise ValueError(f"no replay of llama.cpp's {mode!r}: use one of {', '.join(REPLAYED)}")


@dataclass(frozen=True)
class NativeReplay:
    """What llama-speculative-simple's loop did on one reply. The drafts do not depend on the machine, so one walk
    is priced on any number of cost tables."""

    tokens: int  # tokens the loop produced (speculative-simple's "decoded N tokens")
    drafted: int
    accepted: int
    rows: tuple[int, ...]  # each verify's row count (the sampled token and its draft)

    @property
    def steps(self) -> int:
        return len(self.rows)

    def cost(self, costs: Mapping[int, float]) -> float:
        """In one-row passes, with `costs` in plain steps by row count."""
        return sum(row_cost(costs, r) for r in self.rows)

    def speedup(self, costs: Mapping[int, float]) -> float:
        """Against plain decoding of the same tokens, one pass each."""
        spent = self.cost(costs)
        return self.tokens / spent if spent > 0 else 1.0


def replay(mode: str, prompt: Sequence[int], reply: Sequence[int], stopped: bool, n_predict: int,
           eog: int = -1) -> NativeReplay:
    """llama-speculative-simple's loop with `mode`'s drafter writing `reply` (greedy) after `prompt`.

    `stopped`: the reply ended with the end-of-generation token `eog` (one more, not in `reply`; a copy of an
    earlier message's end of turn is accepted as in real runs when `eog` is the template's). The prompt's last token
    goes into the first verify batch; a draft is cut to the budget left (the tool writes n_predict + 1 tokens).
    Draft tokens past a reply that ran out of budget count as rejected (the real target's next token is unknown,
    and the loop ends there anyway)."""
    if not prompt:
        raise ValueError("an empty prompt")
    want = [*reply, eog] if stopped else list(reply)
    d = drafter(mode)
    context = list(prompt[:-1])
    last = prompt[-1]
    d.begin(context)
    done = drafted = accepted = 0
    rows: list[int] = []
    while True:
        left = max(n_predict - done - 1, 0)
        draft = d.draft(context, last)
        if left > 0:
            draft = draft[:left]
        n_ok = 0
        while n_ok < len(draft) and done + n_ok < len(want) and draft[n_ok] == want[done + n_ok]:
            if want[done + n_ok] == eog and n_ok + 1 < len(draft):
                break  # common_sampler_sample_and_accept_n: an end of turn mid-draft is the target's, not accepted
            n_ok += 1
        ids = want[done:done + n_ok + 1]
        rows.append(1 + len(draft))
        d.accept(n_ok)
        drafted += len(draft)
        accepted += n_ok
        for t in ids:
            context.append(last)
            last = t
            if t == eog:
                break
        done += len(ids)
        if done > n_predict or done >= len(want) or not ids:
            break
    return NativeReplay(done, drafted, accepted, tuple(rows))
