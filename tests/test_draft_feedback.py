"""DraftFeedback: a draft scored from the tokens that follow it; trust and key caps. Pure Python."""

from __future__ import annotations

import pytest

from app.engine.draft_feedback import TRUST_OPENING, DraftFeedback
from app.engine.ngram_params import NgramParams

KEY = (2, 12345)


def test_a_wrong_draft_caps_its_key_until_it_is_right() -> None:
    f = DraftFeedback(NgramParams())
    f.commit((1, 2, 3, 4), KEY)
    f.score([1, 9])  # one accepted, then the target's own token
    assert f.cap(KEY, 6) == 2
    f.commit((1, 2), KEY)
    f.score([1, 2, 5])
    assert f.cap(KEY, 6) == 6
    off = DraftFeedback(NgramParams(key_caps=False))
    off.commit((1, 2, 3, 4), KEY)
    off.score([1, 9])
    assert off.cap(KEY, 6) == 6


def test_trust_follows_recent_drafts_and_the_opening() -> None:
    f = DraftFeedback(NgramParams())
    assert f.trusted(TRUST_OPENING - 1) and not f.trusted(TRUST_OPENING)  # the prior, 1 of 2, is below 0.8
    f.commit((1, 2, 3, 4), None)
    f.score([1, 2, 3, 4, 5])
    assert f.trusted(100) and (f.hits, f.tries) == pytest.approx((0.8 + 4, 1.6 + 4))
    assert not DraftFeedback(NgramParams(trust_opening=False)).trusted(0)


def test_an_offer_shown_one_token_at_a_time_stays_pending() -> None:
    f = DraftFeedback(NgramParams())
    f.commit((1, 2, 3), None)
    f.score([1])
    f.score([2])
    assert f.pending is not None and f.judged == 2
    f.commit((7,), None)  # replaced before its last token: scored 2 of 2
    assert f.scored == 1 and f.hits == pytest.approx(0.8 + 2)
