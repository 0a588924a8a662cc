"""The running copy: the source a reply is copying from, followed token by token, and the spot of its last break.

A copy that agrees with the reply goes on from the same source while the target keeps agreeing, so its match
outgrows any key. Where the target departs from it (an edit), the break is noted: in the copy's EditMemory
(edited tokens, slots, a substitution learned when the copy resumes) and as the resync spot, next to which
later keys are looked up first (KeyFinder.find's `anchor`).
"""

from __future__ import annotations

from collections.abc import Sequence

from app.engine.edit_memory import EditMemory
from app.engine.ngram_params import NgramParams


class CopyTracker:
    def __init__(self, params: NgramParams, edits: EditMemory) -> None:
        self.params = params
        self.edits = edits
        self.src: int | None = None  # position of the token the running copy predicts next
        self.run = 0  # context tokens the running copy agrees with
        self.copied = 0  # tokens the running copy has supplied since it started
        self.local = False  # the running copy resumed next to where the last one broke off (Proposal.local)
        self.j = 0  # tokens of the substitution at `src` the running copy has already written
        self.anchor: int | None = None  # source position where the last copy broke off (an edit starts there)
        self.broke_at: int | None = None  # the context position where that copy broke off

    def start(self, source: int, match: int, local: bool) -> bool:
        """Copy from `source`, which agrees with the context's last `match` tokens. True: a new copy."""
        fresh = source != self.src
        if fresh:
            self.copied, self.local, self.j = 0, local, 0
        self.src, self.run = source, match
        return fresh

    def take_break(self) -> tuple[int, int] | None:
        """(anchor, broke_at) of the last break, once: one break teaches at most one substitution."""
        a, b = self.anchor, self.broke_at
        self.broke_at = None
        return None if a is None or b is None else (a, b)

    def follow(self, context: Sequence[int], new: Sequence[int], reply_start: int) -> None:
        """Advance the copy over the new tokens (the end of `context`); where the target departs from it, note
        the spot. reply_start: where the reply starts in the context."""
        s = self.src
        if s is None:
            return
        edits = self.edits
        j = self.j
        base = len(context) - len(new)
        for i, token in enumerate(new):
            here = base + i
            sub = edits.sub_at(context, s, here) if edits.subs else None
            expected = sub[1][j] if sub is not None else context[s]
            if token != expected:
                if sub is not None:  # the reply did not make this substitution here: forget it
                    edits.forget(sub)
                # A key match found elsewhere that is wrong from its first token is an accident, and says
                # nothing about its source token: noting it cut later copies before common tokens (' return'
                # in mt-add-types, after a failed match elsewhere), which cost it 2-3% in the replay (run 17).
                if self.copied or self.local or not self.params.accident_guard:
                    edits.note_break(context, s, here, reply_start)
                # A short accidental match elsewhere must not move the spot the reply was copying from.
                if self.copied >= self.params.resync_min_copy and j == 0:
                    self.anchor, self.broke_at = s, here
                self.src, self.run, self.j = None, 0, 0
                return
            if sub is not None and j + 1 < len(sub[1]):
                j += 1
            else:
                if sub is not None:
                    edits.confirm(sub[0])
                s, j = s + (len(sub[0]) if sub is not None else 1), 0
            self.copied += 1
            if s >= here + 1:  # the copy caught up with the reply itself
                self.src, self.run, self.j = None, 0, 0
                return
        self.src, self.j = s, j
        self.run += len(new)
