"""The prompt-lookup drafter's settings (PromptLookup and its pieces: ngram_index, copy_tracker, edit_memory,
draft_feedback). A module of its own so that each piece reads them without importing the facade."""

from __future__ import annotations

from dataclasses import dataclass


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
    # The additions to llama.cpp's n-gram drafting (ngram.py's docstring), each of which can be switched off to
    # measure what it is worth (docs/BENCHMARKS.md, run 43's ablation). Defaults: what lookup runs with.
    running_copy: bool = True  # a copy whose source keeps agreeing goes on past any key length
    resync: bool = True  # after an edit, keys are first looked up next to where the copy broke off
    substitutions: bool = True  # a copy writes a replacement the reply made where it resumed after an edit
    slot_cuts: bool = True  # copies stop before reply positions where an earlier copy broke off (EditMemory.slots)
    edit_cuts: bool = True  # a sure copy stops before a source token a copy of this reply broke off at
    unconfirmed_cuts: bool = True  # a sure copy stops before a substitution the reply made only once
    sure_after_resync: bool = True  # a copy that resumed at an edit is sure after SURE_LOCAL_RUN tokens
    key_caps: bool = True  # a key that drafted wrong tokens drafts what was accepted then plus one
    accident_guard: bool = True  # a key match wrong from its first token marks no edit and no slot
    trust_opening: bool = True  # a reply's first TRUST_OPENING tokens are trusted before any draft is scored
