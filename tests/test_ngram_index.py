"""NgramIndex (incremental n-gram -> positions) and KeyFinder (which continuation a key offers): pure Python."""

from __future__ import annotations

import pytest

from app.engine.ngram_index import KeyFinder, NgramIndex, common_prefix
from app.engine.ngram_params import NgramParams


def _finder(tokens: list[int], **params: object) -> KeyFinder:
    p = NgramParams(**params)  # type: ignore[arg-type]
    index = NgramIndex(p.sizes)
    index.extend(tokens)
    return KeyFinder(index, p)


def test_common_prefix_of_lists_tuples_and_mixed() -> None:
    assert common_prefix([1, 2, 3], [1, 2, 4]) == 2
    assert common_prefix((1, 2), [1, 2, 3]) == 2
    assert common_prefix([], [1]) == 0


def test_positions_are_the_tokens_after_each_occurrence() -> None:
    index = NgramIndex((1, 2))
    index.extend([5, 6, 5, 6, 7])
    assert index.positions(0, 5) == [1, 3]  # the 1-gram 5 was followed at positions 1 and 3
    assert index.keys(5)[0] == 7  # keys of the n-grams ending at the end, shortest first
    assert index.positions(1, index.keys(2)[1]) == [2, 4]  # the 2-gram (5, 6)


def test_sync_keeps_the_common_prefix_and_rebuilds_another_context() -> None:
    index = NgramIndex((1, 2))
    index.extend(list(range(20)))
    index.sync([*range(15), 99])
    assert index.tokens == [*range(15), 99] and index.positions(0, 14) == [15]
    index.sync([42, 43])  # less than half in common: rebuilt
    assert index.tokens == [42, 43] and index.positions(0, 0) == []


def test_sizes_must_be_positive() -> None:
    with pytest.raises(ValueError):
        NgramIndex((0, 2))


def test_find_takes_the_longest_key_and_measures_the_match_back() -> None:
    body = list(range(100, 120))
    finder = _finder([*body, 1, *body[:8]])
    found = finder.find(finder.index.tokens, 0, None)
    assert found is not None
    assert (found.source, found.key[0], found.match, found.local) == (8, 6, 8, False)  # 6-token key, 8 agree


def test_find_skips_keys_no_longer_than_the_floor() -> None:
    finder = _finder([1, 2, 3, 9, 1, 2, 3])
    assert finder.find(finder.index.tokens, 3, None) is None
    found = finder.find(finder.index.tokens, 2, None)
    assert found is not None and found.source == 3


def test_a_short_key_needs_its_support_and_share() -> None:
    # The 1-gram 5 needs 2 hits and a 66% share: followed by 1, 2, 1 it has 67% for 1.
    finder = _finder([5, 1, 5, 2, 5, 1, 8, 5], sizes=(1,))
    found = finder.find(finder.index.tokens, 0, None)
    assert found is not None and finder.index.tokens[found.source] == 1 and found.source == 5  # most recent
    spread = _finder([5, 1, 5, 2, 5, 3, 8, 5], sizes=(1,))
    assert spread.find(spread.index.tokens, 0, None) is None


def test_a_key_next_to_the_resync_spot_wins_over_the_frequent_one() -> None:
    # (7, 8) occurs three times; the resync spot (a copy broke off at 10) picks the occurrence right after it.
    tokens = [7, 8, 1, 10, 11, 7, 8, 2, 40, 7, 8, 1, 50, 7, 8]
    finder = _finder(tokens, sizes=(2,))
    frequent = finder.find(tokens, 0, None)
    assert frequent is not None and (frequent.source, frequent.local) == (11, False)  # 1 follows twice of three
    near = finder.find(tokens, 0, 3)
    assert near is not None and near.source == 7 and near.local
    off = KeyFinder(finder.index, NgramParams(sizes=(2,), resync=False))
    assert off.find(tokens, 0, 3) == finder.find(tokens, 0, None)
