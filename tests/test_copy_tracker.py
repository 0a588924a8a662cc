"""CopyTracker: the running copy followed token by token, its breaks and resync spot. Pure Python."""

from __future__ import annotations

from app.engine.copy_tracker import CopyTracker
from app.engine.edit_memory import EditMemory
from app.engine.ngram_params import NgramParams

PASSAGE = list(range(100, 130))


def _tracker(**params: bool) -> CopyTracker:
    p = NgramParams(**params)
    return CopyTracker(p, EditMemory(p))


def test_a_copy_that_agrees_runs_on() -> None:
    t = _tracker()
    context = [*PASSAGE, 1, *PASSAGE[:3]]
    assert t.start(3, 3, False)  # the key match: copy from PASSAGE[3]
    new = PASSAGE[3:8]
    t.follow([*context, *new], new, reply_start=31)
    assert (t.src, t.run, t.copied) == (8, 8, 5)
    assert not t.start(8, 8, False)  # the same copy goes on


def test_a_break_after_copied_tokens_sets_the_resync_spot_and_notes_the_edit() -> None:
    t = _tracker()
    context = [*PASSAGE, 1, *PASSAGE[:3]]
    t.start(3, 3, False)
    new = [*PASSAGE[3:8], 99]  # 99 where the source has PASSAGE[8]
    context += new
    t.follow(context, new, reply_start=31)
    assert t.src is None and (t.anchor, t.broke_at) == (8, len(context) - 1)
    assert t.edits.edited == {PASSAGE[8]} and len(context) - 1 in t.edits.slots
    assert t.take_break() == (8, len(context) - 1)
    assert t.take_break() is None  # one break teaches one substitution


def test_an_accidental_match_wrong_from_its_first_token_notes_nothing() -> None:
    t = _tracker()
    context = [*PASSAGE, 1, 2]
    t.start(5, 3, False)
    context.append(99)
    t.follow(context, [99], reply_start=31)
    assert t.src is None and t.anchor is None and t.edits.edited == set() and t.edits.slots == set()
    off = _tracker(accident_guard=False)
    off.start(5, 3, False)
    off.follow(context, [99], reply_start=31)
    assert off.edits.edited == {PASSAGE[5]}


def test_a_copy_writes_and_confirms_a_learned_substitution() -> None:
    t = _tracker()
    source = [1, 77, 78, 2, 3]
    t.edits.subs[77] = [((77, 78), (88,))]
    context = [*source, 9, 1]
    t.start(1, 1, False)
    new = [88, 2]
    context += new
    t.follow(context, new, reply_start=5)
    assert t.src == 4 and (77, 78) in t.edits.confirmed


def test_a_break_inside_a_substitution_forgets_it_and_sets_no_resync_spot() -> None:
    t = _tracker()
    t.edits.subs[77] = [((77,), (88, 89))]
    source = [*PASSAGE[:5], 77, 2, 3]
    context = [*source, 0, *PASSAGE[:3]]
    t.start(3, 3, False)
    new = [PASSAGE[3], PASSAGE[4], 88, 7]  # the reply writes 88 but not 89: not the substitution here
    context += new
    t.follow(context, new, reply_start=len(source))
    assert t.src is None and t.edits.subs == {77: []}
    assert t.anchor is None  # the break is inside the replacement, not at a source token
