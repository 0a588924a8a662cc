"""Prompt-lookup drafting: an n-gram index over the context, updated incrementally, and the copy logic.

What this mirrors from llama.cpp (vendor/llama.cpp/common, the `--spec-type ngram-*` modes):

- ngram-map-k (`common_ngram_map_draft`, key_only; defaults size_n=12, size_m=48, min_hits=1): the n-gram at
  the context's end is looked up in a map that only the new positions are added to each step (`key_map`,
  `idx_last_check`), and the draft is the run of tokens that followed the match, no longer than what the
  target accepted the last time that key drafted (`n_accepted`, set by `common_ngram_map_accept`).
- ngram-map-k4v (the same map with counted values, COMMON_NGRAM_MAX_VALUES=4): the key's most frequent
  continuation is drafted, and only when it dominates the others.
- ngram-cache (`common_ngram_cache_draft`, LLAMA_NGRAM_MIN..MAX = 1..4 with the "lax" context thresholds):
  keys of several lengths, the longest first, each with a minimum sample size {2, 2, 1, 1} and a minimum
  share of the most frequent continuation {66, 50, 50, 50} %.

Here (`NgramParams`): keys of 1, 2, 3, 4 and 6 tokens, the longest first (ngram-map-k's 12-token key added
nothing in our copy-with-edits simulation, since the running copy below outgrows any key); ngram-cache's
thresholds for lengths 1..4 (one hit and 50 % beyond); the most frequent continuation over the key's last 64
occurrences, copied from its most recent occurrence; a draft bounded by K, by the tokens known after the
source, by the match (2 draft tokens per matched token, except where a copy resumes after an edit) and, for
a key that drafted before, by what the target accepted then plus one (ngram-map's `n_accepted`, plus one so
that a key which failed once recovers). The feedback needs no call from the engine: the tokens appended
after a draft say how much of it was right.

Five additions for copy-with-edits replies and lists of records, which llama.cpp's modes lack:

- a running copy: once a draft's source agrees with the reply, the next draft continues from the same
  source while the target keeps agreeing, so the match outgrows any key length;
- a resync: where the target departed from the copy (an edit), later keys are first looked up right around
  that spot, so the copy resumes after a renamed identifier or an inserted annotation even when the short
  key that re-finds it is ambiguous elsewhere in the context;
- substitutions: where the copy resumes after an edit that replaced a few source tokens with a few others (a
  rename, a fixed typo), later copies write the same replacement wherever the source has those tokens, until
  the reply once does not;
- slots: where a copy that was right breaks off, the reply varied a field (a record's id, name or price); a
  later copy stops before that position, so a draft through the next record's copy of it is not wasted;
- sure-copy cuts: a copy the CPU verifies long stops before a substitution learned from one edit only (a
  skipped passage looks like a rename) and where its source parts from another spot that matches the context
  as well (two classes with the same fields): past either point, which continuation the reply takes is a guess.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass

_BITS = 32  # a packed key holds one token id per 32 bits
_MASK = (1 << _BITS) - 1


@dataclass(frozen=True, slots=True)
class NgramParams:
    sizes: tuple[int, ...] = (1, 2, 3, 4, 6)  # key lengths; the longest one found wins
    min_hits: tuple[int, ...] = (2, 2, 1, 1)  # occurrences a key of length 1, 2, 3, 4 needs (longer: 1)
    min_share: tuple[float, ...] = (0.66, 0.5, 0.5, 0.5)  # the top continuation's share (longer: 0.5)
    recent: int = 64  # occurrences counted per key (the latest ones): keeps a step's cost bounded
    tokens_per_match: int = 2  # a match of n tokens supports a draft of up to this many times n
    resync_ahead: int = 64  # after an edit, the copy may resume up to this far after where it broke off ...
    resync_back: int = 4  # ... or this far before it
    resync_min_copy: int = 3  # a copy that broke off sets the resync spot only if it had copied this many tokens
    max_extend: int = 32  # a fresh key match is measured backwards up to this many tokens
    slot_cuts: bool = True  # copies stop before reply positions where an earlier copy broke off (see _slots)


@dataclass(frozen=True, slots=True)
class Proposal:
    tokens: tuple[int, ...]
    source: int  # context position the tokens are copied from
    match: int  # context tokens before `source` that agree with the context's end
    key: tuple[int, int] | None  # (length, packed key) of the lookup that found it; None: a running copy
    local: bool = False  # found next to where the last copy broke off


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


# A substitution is learned only where both sides are this short (in tokens): a renamed name or a fixed word.
# Renames need 2 source tokens (' OrderBook' is ' Order', 'Book'); 4 and 8 replayed the same as 2 and 4 (run 18).
SUB_MAX_SOURCE = 4
SUB_MAX_REPLY = 8
# A sure copy (running_copy with cut_at_edits) needs a long agreeing run, except a copy that resumed right where
# the last one broke off at an edit: it re-found its place, and after SURE_LOCAL_RUN tokens it is as sure as any.
# Replayed on five CPU cost tables, 8 beat 4, 6, 10, 12 and no exception (docs/BENCHMARKS.md, run 24).
SURE_LOCAL_RUN = 8
AMBIGUITY_SPOTS = 16  # the latest other spots of the longest key a sure copy is compared with (bounds the cost)
TRUST_RATE = 0.8  # PromptLookup.trusted: the share of recently drafted tokens that were right
TRUST_DECAY = 0.8  # per scored draft: the last five or so count
# A reply that reproduces earlier text (a refactor, an edit) starts doing so at once, with a code fence or the
# first line; a short match later in fresh text is mostly accidental. So the reply's first tokens are trusted
# until a draft is scored.
TRUST_OPENING = 8


# (context, a sure copy's tokens after it, already cut before any slot) -> how many of them the copy keeps.
SureCut = Callable[[Sequence[int], tuple[int, ...]], int]


class PromptLookup:
    """The n-gram proposer behind LookupDrafter and HybridDrafter.

    `propose(context, k)` indexes the tokens appended since the last call (and scores the last committed
    draft against them), then returns a Proposal or None; `commit(proposal)` tells it the proposal was
    drafted, so its key's draft length follows what the target accepts. `prepare(context)` starts a reply.

    `sure_cut`: replaces the rule for where a sure copy stops (see running_copy); the app never passes one. A
    policy replay does (tools/bench's clairvoyant lookup cuts each copy where the recorded reply parts from it),
    to measure what a perfect rule would give with everything else unchanged.
    """

    def __init__(self, params: NgramParams | None = None, sure_cut: SureCut | None = None) -> None:
        self.params = params or NgramParams()
        self.sure_cut = sure_cut
        self.index = NgramIndex(self.params.sizes)
        self._reset()

    def _reset(self) -> None:
        self._src: int | None = None  # position of the token the running copy predicts next
        self._run = 0  # context tokens the running copy agrees with
        self._copied = 0  # tokens the running copy has supplied since it started
        self._local = False  # the running copy resumed next to where the last one broke off (Proposal.local)
        self._anchor: int | None = None  # source position where the last copy broke off (an edit starts there)
        self._broke_at: int | None = None  # the context position where that copy broke off
        self._j = 0  # tokens of the substitution at _src the running copy has already written
        # Substitutions this reply made where it resumed its copy (source tokens -> reply tokens), by first
        # source token: a rename writes every later occurrence of the old name the same way.
        self._subs: dict[int, list[tuple[tuple[int, ...], tuple[int, ...]]]] = {}
        self._confirmed: set[tuple[int, ...]] = set()  # source sides of substitutions a copy has made since
        # Source tokens at which this reply's copies broke off: where the reply edited its source once (a renamed
        # name, a changed separator), it will likely edit the same token again (see running_copy's cut). Only
        # copies that were right at first or resumed at an edit count (see _follow).
        self._edited: set[int] = set()
        # Reply positions where a copy that had been right broke off, both the token the reply wrote and, when it
        # is in the reply, the source token it replaced: a field a list of records varies (an id, a name, a
        # price). A later copy of that record stops before them: its tokens up to there are likely right, and a
        # long draft through the field was wrong from there on (json-record drafted 6 tokens after `"age` and 2
        # were right; held-out lists of JSON users, CSV rows and tables gained 2-9 % in the replay, run 19).
        self._slots: set[int] = set()
        self._pending: Proposal | None = None  # the last committed draft, scored when the context grows
        self._judged = 0  # its first tokens the context has already shown right (a plain step shows one)
        self._caps: dict[tuple[int, int], int] = {}  # a key's draft cap after it drafted wrong tokens
        # How this reply's drafts have fared, per drafted token, decayed per draft (see `trusted`). The prior
        # (1 of 2) is below TRUST_RATE: past its opening, a reply must earn trust with a right draft.
        self._hits, self._tries = 1.0, 2.0
        self._scored = 0  # drafts scored in this reply
        self._start = len(self.index.tokens)  # where the reply starts (prepare indexes the prompt first)

    def prepare(self, context: Sequence[int]) -> None:
        self.index.sync(context)
        self._reset()

    def propose(self, context: Sequence[int], k: int) -> Proposal | None:
        self._advance(context)
        if k <= 0:
            return None
        return self._select(context, k)

    def commit(self, proposal: Proposal) -> None:
        self._settle()
        self._pending = proposal

    @property
    def trusted(self) -> bool:
        """Were most of the tokens of this reply's recent drafts right, or is it still in its opening with no
        draft scored? (As of the last propose.) "Drafts" are committed proposals: those verified, and the free
        offers the governor was shown while drafting was off, verified or not, since each is scored from the
        context the target went on to write, which is what a verify would have found (greedy)."""
        if self._scored == 0 and len(self.index.tokens) - self._start < TRUST_OPENING:
            return True
        return self._hits >= TRUST_RATE * self._tries

    def running_copy(self, context: Sequence[int], k: int, min_run: int, cut_at_edits: bool = False) -> Proposal | None:
        """The running copy's next tokens, where it agrees with at least the last `min_run` context tokens.

        cut_at_edits (a sure copy, verified long on the CPU, where a long verify that fails early costs up to 15
        plain steps): stop before the next source token at which one of this reply's copies broke off before (a
        rename edits every occurrence of the old name): the copy's tokens up to there are likely right, the ones
        after it likely wrong; before a substitution the reply has not made twice yet; and where the source parts
        from another spot the context's end matches as well. And after a copy resumed at an edit, SURE_LOCAL_RUN
        agreeing tokens stand for `min_run`. Like every copy, it also stops before a slot (see `_slots`).
        Only looks: a following `propose` selects as it would have (a copy needs no commit, since `_follow`
        scores it from the context alone).
        """
        self._advance(context)
        s = self._src
        if cut_at_edits and self._local and self._copied >= SURE_LOCAL_RUN:
            min_run = min(min_run, SURE_LOCAL_RUN)
        if s is None or self._run < min_run or k <= 0:
            return None
        applied: list[tuple[int, tuple[int, ...]]] = []
        tokens, origins = self._stream(context, s, self._j, min(k, self.params.tokens_per_match * self._run), applied)
        n = self._cut(origins)
        if cut_at_edits and n > 0:
            n = (self._sure_cut(context, s, tokens[:n], origins[:n], applied) if self.sure_cut is None
                 else self.sure_cut(context, tokens[:n]))
        return Proposal(tokens[:n], s, self._run, None) if n > 0 else None

    def _sure_cut(self, context: Sequence[int], s: int, tokens: tuple[int, ...], origins: list[int | None],
                  applied: list[tuple[int, tuple[int, ...]]]) -> int:
        """How many of a copy's tokens (already cut before any slot) a sure copy keeps: see running_copy.
        (A `sure_cut` given to the constructor replaces it.)"""
        # Stop before the next source token at which one of this reply's copies broke off before.
        edited = self._edited
        n = next((i for i, o in enumerate(origins) if o is not None and context[o] in edited), len(origins))
        # Stop before a substitution the reply has not made a second time: one break can look like a rename when
        # the reply skipped or rewrote a passage (edit-rename-class's reply drops a class, so `OrderLine` looked
        # renamed to `Basket`).
        n = next((i for i, x in applied if i < n and x not in self._confirmed), n)
        return self._unambiguous(context, s, origins, n) if n > 0 else 0

    def _unambiguous(self, context: Sequence[int], s: int, origins: list[int | None], n: int) -> int:
        """How many of a copy's n tokens come before its source parts from another spot that the context's
        last tokens (the longest key) also match: past there, which of the two the reply copies is a guess."""
        i = len(self.index.sizes) - 1
        keys = self.index.keys(len(context))
        if len(keys) <= i:
            return n
        end = len(context)
        last = next((o for o in reversed(origins[:n]) if o is not None), s)
        reach = last - s + 1  # source tokens the copy spans
        agree = reach
        for p in self.index.positions(i, keys[i])[-AMBIGUITY_SPOTS:]:
            if p == s or p >= end:
                continue
            d = 0
            while d < agree and p + d < end and context[p + d] == context[s + d]:
                d += 1
            if p + d < end:
                agree = d
        if agree >= reach:
            return n
        return next((j for j, o in enumerate(origins[:n]) if o is not None and o >= s + agree), n)

    def _cut(self, origins: list[int | None]) -> int:
        """How many of a copy's tokens come before the first one taken from a slot (all of them: none is)."""
        slots = self._slots
        if not slots:
            return len(origins)
        return next((i for i, o in enumerate(origins) if o is not None and o in slots), len(origins))

    def _sub_at(self, context: Sequence[int], s: int, end: int) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
        """The learned substitution whose source tokens start at s (and end before `end`), if any."""
        for x, y in self._subs.get(context[s], ()):
            if s + len(x) <= end and tuple(context[s : s + len(x)]) == x:
                return x, y
        return None

    def _stream(self, context: Sequence[int], s: int, j: int, n: int,
                applied: list[tuple[int, tuple[int, ...]]] | None = None) -> tuple[tuple[int, ...], list[int | None]]:
        """Up to n tokens a copy from source position s predicts, learned substitutions applied (j: tokens of
        the one at s already written), with each token's source position (None inside a substitution).
        applied: filled with (index of its first token, source side) for each substitution written."""
        end = len(context)
        tokens: list[int] = []
        origins: list[int | None] = []
        while len(tokens) < n and s < end:
            sub = self._sub_at(context, s, end) if self._subs else None
            if sub is None:
                tokens.append(context[s])
                origins.append(s)
                s, j = s + 1, 0
                continue
            x, y = sub
            take = y[j : j + n - len(tokens)]
            if applied is not None:
                applied.append((len(tokens), x))
            tokens.extend(take)
            origins.extend([None] * len(take))
            s, j = s + len(x), 0
        return tuple(tokens), origins

    def _advance(self, context: Sequence[int]) -> None:
        old = self.index.tokens
        n_old = len(old)
        if len(context) < n_old or (n_old and context[n_old - 1] != old[-1]):
            self.prepare(context)  # not a continuation of what was indexed
            return
        if len(context) == n_old:
            return
        new = context[n_old:]
        self._score(new)
        self._follow(context, new)
        self.index.extend(new)

    def _score(self, new: Sequence[int]) -> None:
        """llama.cpp's common_ngram_map_accept, from the context itself: how much of the last draft was right.

        A draft that was verified is judged at once (the new tokens hold its accepted part and the target's
        own next token). An offer the governor did not verify is followed by one plain token: while that
        token agrees, the offer stays pending and later tokens judge the rest. (Scored on that one token, a
        right 4-token offer counted as 1 right of 4: it made the reply look untrusted and capped its key at 2.)"""
        pending = self._pending
        if pending is None:
            return
        rest = pending.tokens[self._judged :]
        right = common_prefix(rest, new)
        if right == len(new) < len(rest):
            self._judged += right
            return
        accepted = self._judged + right
        self._pending, self._judged = None, 0
        self._trust(accepted, len(pending.tokens))
        if pending.key is None:
            return
        if accepted < len(pending.tokens):
            self._caps[pending.key] = accepted + 1
        else:
            self._caps.pop(pending.key, None)

    def _settle(self) -> None:
        """A new draft replaces one still pending: score the old one on the tokens judged so far, all right."""
        pending, judged = self._pending, self._judged
        self._pending, self._judged = None, 0
        if pending is not None and judged > 0:
            self._trust(judged, judged)

    def _trust(self, right: int, tried: int) -> None:
        """One scored draft in the reply's decayed trust tally (see `trusted`)."""
        self._scored += 1
        self._hits = self._hits * TRUST_DECAY + right
        self._tries = self._tries * TRUST_DECAY + tried

    def _follow(self, context: Sequence[int], new: Sequence[int]) -> None:
        """Advance the running copy over the new tokens; where the target departs from it, note the spot."""
        s = self._src
        if s is None:
            return
        j = self._j
        base = len(context) - len(new)
        for i, token in enumerate(new):
            here = base + i
            sub = self._sub_at(context, s, here) if self._subs else None
            expected = sub[1][j] if sub is not None else context[s]
            if token != expected:
                if sub is not None:  # the reply did not make this substitution here: forget it
                    self._subs[sub[0][0]].remove(sub)
                # A key match found elsewhere that is wrong from its first token is an accident, and says
                # nothing about its source token: noting it cut later copies before common tokens (' return'
                # in mt-add-types, after a failed match elsewhere), which cost it 2-3% in the replay (run 17).
                if self._copied or self._local:
                    self._edited.add(context[s])
                    if self.params.slot_cuts:
                        self._slots.add(here)
                        if s >= self._start:
                            self._slots.add(s)
                # A short accidental match elsewhere must not move the spot the reply was copying from.
                if self._copied >= self.params.resync_min_copy and j == 0:
                    self._anchor, self._broke_at = s, here
                self._src, self._run, self._j = None, 0, 0
                return
            if sub is not None and j + 1 < len(sub[1]):
                j += 1
            else:
                if sub is not None:
                    self._confirmed.add(sub[0])
                s, j = s + (len(sub[0]) if sub is not None else 1), 0
            self._copied += 1
            if s >= here + 1:  # the copy caught up with the reply itself
                self._src, self._run, self._j = None, 0, 0
                return
        self._src, self._j = s, j
        self._run += len(new)

    def _select(self, context: Sequence[int], k: int) -> Proposal | None:
        found: tuple[int, int, tuple[int, int] | None, bool] | None = None
        if self._src is not None:
            found = (self._src, self._run, None, False)
        if found is None or found[1] < self.index.sizes[-1]:
            found = self._lookup(context, found[1] if found else 0) or found
        if found is None:
            return None
        source, match, key, local = found
        if source != self._src:
            self._copied = 0
            self._local = local
            self._j = 0
            if local:
                self._learn(context, source - match, len(context) - match)
        self._src, self._run = source, match
        # A match right where the copy broke off is the copy resuming: it gets a full draft.
        n = k if local else min(k, self.params.tokens_per_match * match)
        if key is not None:
            n = min(n, self._caps.get(key, n))
        tokens, origins = self._stream(context, source, self._j, n)
        n = self._cut(origins)
        if n == 0:
            return None  # the copy starts at a slot; it goes on running, so its next tokens may still draft
        return Proposal(tokens[:n], source, match, key, local)

    def _learn(self, context: Sequence[int], source_back: int, reply_back: int) -> None:
        """The copy resumed at source_back / reply_back after breaking off at the anchor: what the reply wrote
        in between replaced what the source had there. Kept when both sides are short and non-empty (a renamed
        name, a fixed word), not for insertions or deletions."""
        a, b = self._anchor, self._broke_at
        self._broke_at = None  # one break teaches at most one substitution
        if a is None or b is None:
            return
        x, y = tuple(context[a:source_back]), tuple(context[b:reply_back])
        if 1 <= len(x) <= SUB_MAX_SOURCE and 1 <= len(y) <= SUB_MAX_REPLY and x != y:
            subs = self._subs.setdefault(x[0], [])
            subs[:] = [(x, y)] + [(ox, oy) for ox, oy in subs if ox != x]

    def _lookup(self, context: Sequence[int], floor: int) -> tuple[int, int, tuple[int, int], bool] | None:
        """The longest key longer than `floor` with a usable continuation: (source, match, key, local)."""
        keys = self.index.keys(len(context))
        for i in range(len(keys) - 1, -1, -1):
            n = self.index.sizes[i]
            if n <= floor:
                break
            positions = self.index.positions(i, keys[i])
            if not positions:
                continue
            source = self._near(positions)
            local = source is not None
            if source is None:
                source = self._frequent(positions, n)
            if source is not None:
                return source, self._extend(context, source, n), (n, keys[i]), local
        return None

    def _near(self, positions: list[int]) -> int | None:
        """The first occurrence after the spot where the last copy broke off, if close to it."""
        if self._anchor is None:
            return None
        # Strictly after: the token at the break is the one the edit replaced (or comes after an insertion).
        a = self._anchor
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
