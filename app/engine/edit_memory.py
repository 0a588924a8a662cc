"""What a reply's copies learned about how the reply edits its source: substitutions, edited tokens and slots.

A copy-with-edits reply (a rename, fixed typos, a list of records) edits its source the same way again and
again; what one break of a copy teaches is used by the copies after it (PromptLookup, ngram.py).
"""

from __future__ import annotations

from collections.abc import Sequence

from app.engine.ngram_params import NgramParams

# A substitution is learned only where both sides are this short (in tokens): a renamed name or a fixed word.
# Renames need 2 source tokens (' OrderBook' is ' Order', 'Book'); 4 and 8 replayed the same as 2 and 4 (run 18).
SUB_MAX_SOURCE = 4
SUB_MAX_REPLY = 8

Substitution = tuple[tuple[int, ...], tuple[int, ...]]  # (source tokens, reply tokens)
Applied = list[tuple[int, tuple[int, ...]]]  # (index of its first token in a copy, source side) per substitution


class EditMemory:
    """One reply's edits of its source, as its copies found them."""

    def __init__(self, params: NgramParams) -> None:
        self.params = params
        # Substitutions this reply made where it resumed its copy (source tokens -> reply tokens), by first
        # source token: a rename writes every later occurrence of the old name the same way.
        self.subs: dict[int, list[Substitution]] = {}
        self.confirmed: set[tuple[int, ...]] = set()  # source sides of substitutions a copy has made since
        # Source tokens at which this reply's copies broke off: where the reply edited its source once (a renamed
        # name, a changed separator), it will likely edit the same token again (see sure_cut). Only copies that
        # were right at first or resumed at an edit count (CopyTracker.follow).
        self.edited: set[int] = set()
        # Reply positions where a copy that had been right broke off, both the token the reply wrote and, when it
        # is in the reply, the source token it replaced: a field a list of records varies (an id, a name, a
        # price). A later copy of that record stops before them: its tokens up to there are likely right, and a
        # long draft through the field was wrong from there on (json-record drafted 6 tokens after `"age` and 2
        # were right; held-out lists of JSON users, CSV rows and tables gained 2-9 % in the replay, run 19).
        self.slots: set[int] = set()

    def note_break(self, context: Sequence[int], s: int, here: int, reply_start: int) -> None:
        """A copy that had been right broke off at source position s, reply position `here`."""
        self.edited.add(context[s])
        if self.params.slot_cuts:
            self.slots.add(here)
            if s >= reply_start:
                self.slots.add(s)

    def learn(self, context: Sequence[int], anchor: int, source_back: int, broke_at: int, reply_back: int) -> None:
        """A copy that broke off at source `anchor` / reply `broke_at` resumed at source_back / reply_back: what
        the reply wrote in between replaced what the source had there. Kept when both sides are short and
        non-empty (a renamed name, a fixed word), not for insertions or deletions."""
        self.learn_sides(tuple(context[anchor:source_back]), tuple(context[broke_at:reply_back]))

    def learn_sides(self, x: tuple[int, ...], y: tuple[int, ...]) -> None:
        """The reply wrote y where its source had x (learn's rule, for a source that is not the context: a
        request's predicted output, app/engine/prediction.py)."""
        if not self.params.substitutions:
            return
        if 1 <= len(x) <= SUB_MAX_SOURCE and 1 <= len(y) <= SUB_MAX_REPLY and x != y:
            subs = self.subs.setdefault(x[0], [])
            subs[:] = [(x, y)] + [(ox, oy) for ox, oy in subs if ox != x]

    def forget(self, sub: Substitution) -> None:
        """The reply did not make this substitution where a copy offered it."""
        self.subs[sub[0][0]].remove(sub)

    def confirm(self, source_side: tuple[int, ...]) -> None:
        self.confirmed.add(source_side)

    def sub_at(self, context: Sequence[int], s: int, end: int) -> Substitution | None:
        """The learned substitution whose source tokens start at s (and end before `end`), if any."""
        for x, y in self.subs.get(context[s], ()):
            if s + len(x) <= end and tuple(context[s : s + len(x)]) == x:
                return x, y
        return None

    def stream(self, context: Sequence[int], s: int, j: int, n: int,
               applied: Applied | None = None) -> tuple[tuple[int, ...], list[int | None]]:
        """Up to n tokens a copy from source position s predicts, learned substitutions applied (j: tokens of
        the one at s already written), with each token's source position (None inside a substitution).
        applied: filled with (index of its first token, source side) for each substitution written."""
        end = len(context)
        tokens: list[int] = []
        origins: list[int | None] = []
        while len(tokens) < n and s < end:
            sub = self.sub_at(context, s, end) if self.subs else None
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

    def cut(self, origins: list[int | None]) -> int:
        """How many of a copy's tokens come before the first one taken from a slot (all of them: none is)."""
        slots = self.slots
        if not slots:
            return len(origins)
        return next((i for i, o in enumerate(origins) if o is not None and o in slots), len(origins))

    def sure_cut(self, context: Sequence[int], origins: list[int | None], applied: Applied) -> int:
        """How many of a copy's tokens a sure copy keeps before an edit the reply will likely make again."""
        n = len(origins)
        if self.params.edit_cuts:
            # Stop before the next source token at which one of this reply's copies broke off before.
            edited = self.edited
            n = next((i for i, o in enumerate(origins) if o is not None and context[o] in edited), n)
        if self.params.unconfirmed_cuts:
            # Stop before a substitution the reply has not made a second time: one break can look like a rename
            # when the reply skipped or rewrote a passage (edit-rename-class's reply drops a class, so `OrderLine`
            # looked renamed to `Basket`).
            n = next((i for i, x in applied if i < n and x not in self.confirmed), n)
        return n
