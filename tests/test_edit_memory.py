"""EditMemory: substitutions, edited tokens and slots, and where they cut a copy. Pure Python."""

from __future__ import annotations

from app.engine.edit_memory import Applied, EditMemory
from app.engine.ngram_params import NgramParams


def test_a_learned_substitution_is_written_wherever_the_source_has_it() -> None:
    edits = EditMemory(NgramParams())
    context = [1, 77, 78, 2, 3, 77, 78, 4, 5, 88, 6]
    edits.learn(context, 1, 3, 9, 10)  # the source's (77, 78) was written as (88,)
    applied: Applied = []
    tokens, origins = edits.stream(context, 4, 0, 4, applied)
    assert tokens == (3, 88, 4, 5)
    assert origins == [4, None, 7, 8]
    assert applied == [(1, (77, 78))]
    assert edits.stream(context, 5, 0, 2) == ((88, 4), [None, 7])


def test_only_short_replacements_are_learned() -> None:
    edits = EditMemory(NgramParams())
    context = [1, *range(10, 16), 2, 3]
    edits.learn(context, 1, 7, 7, 8)  # 6 source tokens: an insertion or a rewrite, not a rename
    edits.learn(context, 1, 1, 7, 8)  # nothing replaced: an insertion
    assert edits.subs == {}
    EditMemory(NgramParams(substitutions=False)).learn(context, 1, 3, 7, 8)


def test_a_substitution_not_made_is_forgotten() -> None:
    edits = EditMemory(NgramParams())
    context = [5, 6, 9]
    edits.learn(context, 0, 1, 2, 3)
    sub = edits.sub_at(context, 0, 3)
    assert sub == ((5,), (9,))
    edits.forget(sub)
    assert edits.sub_at(context, 0, 3) is None


def test_slots_cut_every_copy_and_are_only_noted_with_slot_cuts() -> None:
    edits = EditMemory(NgramParams())
    context = [1, 2, 3, 4, 5, 6, 7]
    edits.note_break(context, 2, 6, reply_start=4)  # the copy from 2 broke at reply position 6
    assert edits.edited == {3} and edits.slots == {6}  # source 2 is in the prompt: not a slot
    assert edits.cut([0, 1, 6, 2]) == 2
    edits.note_break(context, 5, 6, reply_start=4)
    assert edits.slots == {5, 6}
    off = EditMemory(NgramParams(slot_cuts=False))
    off.note_break(context, 2, 6, reply_start=4)
    assert off.edited == {3} and off.slots == set() and off.cut([0, 6]) == 2


def test_a_sure_copy_stops_before_an_edited_token_and_an_unconfirmed_substitution() -> None:
    context = [10, 11, 12, 13, 14, 15]
    edits = EditMemory(NgramParams())
    edits.edited.add(13)
    assert edits.sure_cut(context, [0, 1, 2, 3, 4], []) == 3
    applied: Applied = [(1, (11,))]
    assert edits.sure_cut(context, [0, None, 2, 3], applied) == 1  # made once: stop before it
    edits.confirm((11,))
    assert edits.sure_cut(context, [0, None, 2, 3], applied) == 3
    off = EditMemory(NgramParams(edit_cuts=False, unconfirmed_cuts=False))
    off.edited.add(13)
    assert off.sure_cut(context, [0, None, 2, 3, 4], [(1, (11,))]) == 5
