"""How a reply's drafts fared, read from the context itself: its trust and each key's draft cap.

llama.cpp's ngram-map caps a key's draft at what the target accepted the last time it drafted (`n_accepted`,
`common_ngram_map_accept`); here the tokens appended after a draft say how much of it was right, so the engine
need not report back.
"""

from __future__ import annotations

from collections.abc import Sequence

from app.engine.ngram_index import common_prefix
from app.engine.ngram_params import NgramParams

TRUST_RATE = 0.8  # DraftFeedback.trusted: the share of recently drafted tokens that were right
TRUST_DECAY = 0.8  # per scored draft: the last five or so count
# A reply that reproduces earlier text (a refactor, an edit) starts doing so at once, with a code fence or the
# first line; a short match later in fresh text is mostly accidental. So the reply's first tokens are trusted
# until a draft is scored.
TRUST_OPENING = 8

Key = tuple[int, int]  # (length, packed key), KeyMatch.key


class DraftFeedback:
    def __init__(self, params: NgramParams) -> None:
        self.params = params
        self.pending: tuple[tuple[int, ...], Key | None] | None = None  # the last committed draft and its key
        self.judged = 0  # its first tokens the context has already shown right (a plain step shows one)
        self.caps: dict[Key, int] = {}  # a key's draft cap after it drafted wrong tokens
        # How this reply's drafts have fared, per drafted token, decayed per draft (see `trusted`). The prior
        # (1 of 2) is below TRUST_RATE: past its opening, a reply must earn trust with a right draft.
        self.hits, self.tries = 1.0, 2.0
        self.scored = 0  # drafts scored in this reply

    def commit(self, tokens: tuple[int, ...], key: Key | None) -> None:
        self.settle()
        self.pending = (tokens, key)

    def trusted(self, reply_tokens: int) -> bool:
        """Were most of this reply's recently drafted tokens right, or is it still in its opening (its first
        `reply_tokens`) with no draft scored?"""
        if self.params.trust_opening and self.scored == 0 and reply_tokens < TRUST_OPENING:
            return True
        return self.hits >= TRUST_RATE * self.tries

    def cap(self, key: Key, n: int) -> int:
        """A draft of up to n tokens for `key`, capped at what it had accepted plus one if it drafted wrong."""
        return min(n, self.caps.get(key, n)) if self.params.key_caps else n

    def score(self, new: Sequence[int]) -> None:
        """llama.cpp's common_ngram_map_accept, from the context itself: how much of the last draft was right.

        A draft that was verified is judged at once (the new tokens hold its accepted part and the target's
        own next token). An offer the governor did not verify is followed by one plain token: while that
        token agrees, the offer stays pending and later tokens judge the rest. (Scored on that one token, a
        right 4-token offer counted as 1 right of 4: it made the reply look untrusted and capped its key at 2.)"""
        pending = self.pending
        if pending is None:
            return
        tokens, key = pending
        rest = tokens[self.judged :]
        right = common_prefix(rest, new)
        if right == len(new) < len(rest):
            self.judged += right
            return
        accepted = self.judged + right
        self.pending, self.judged = None, 0
        self._tally(accepted, len(tokens))
        if key is None:
            return
        if accepted < len(tokens):
            self.caps[key] = accepted + 1
        else:
            self.caps.pop(key, None)

    def settle(self) -> None:
        """A new draft replaces one still pending: score the old one on the tokens judged so far, all right."""
        pending, judged = self.pending, self.judged
        self.pending, self.judged = None, 0
        if pending is not None and judged > 0:
            self._tally(judged, judged)

    def _tally(self, right: int, tried: int) -> None:
        """One scored draft in the reply's decayed trust tally (see `trusted`)."""
        self.scored += 1
        self.hits = self.hits * TRUST_DECAY + right
        self.tries = self.tries * TRUST_DECAY + tried
