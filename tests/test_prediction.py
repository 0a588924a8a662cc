"""A request's predicted output as a proposer (app/engine/prediction.py): the alignment's resync on plain token
lists, then real replies: with a right, an edited or a wrong prediction, greedy and seeded, in lookup and none, the
reply is the one without a prediction, and a right one is mostly accepted from the prediction."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from app.engine.draft_policy import DraftPolicy
from app.engine.drafters import NoDrafter
from app.engine.events import FinishEvent, StepEvent, TokenEvent, TokenFate
from app.engine.exact_replay import check_run
from app.engine.prediction import PredictionAlignment, PredictionProposer
from app.engine.sampling import SampleNoise, SamplingParams
from app.engine.session import GenParams
from app.engine.speculative import SpecParams
from tests.test_cli import assert_clean_error, specchat

# --- the alignment, on token lists ---------------------------------------------------------------------------------

RNG = random.Random(5)
NOISE = SampleNoise(0)
PRED = [RNG.randrange(1000) for _ in range(400)]  # distinct-ish tokens: keys are rarely ambiguous


def _follow(prediction: list[int], reply: list[int]) -> tuple[PredictionAlignment, list[int]]:
    """Feed the reply token by token; the reply positions after which the alignment was lost."""
    a = PredictionAlignment(prediction)
    lost = []
    for i, token in enumerate(reply):
        a.follow(token)
        if not a.aligned:
            lost.append(i)
    return a, lost


def test_a_reply_that_repeats_the_prediction_is_followed_to_its_end() -> None:
    a, lost = _follow(PRED, PRED)
    assert lost == [] and a.ptr == len(PRED) and a.run == len(PRED) and a.departures == 0


@pytest.mark.parametrize("edit", ["replace", "insert", "delete"])
def test_the_alignment_resumes_right_after_an_edit(edit: str) -> None:
    """A renamed name (3 tokens for 2), an inserted line (6 tokens), a deleted one (10 tokens): lost for the edit's own
    tokens at most, then aligned where the reply resumes the prediction."""
    at = 150
    new = [2001, 2002, 2003, 2004, 2005, 2006]
    reply = {"replace": PRED[:at] + new[:3] + PRED[at + 2:],
             "insert": PRED[:at] + new + PRED[at:],
             "delete": PRED[:at] + PRED[at + 10:]}[edit]
    a, lost = _follow(PRED, reply)
    assert len(lost) <= {"replace": 3, "insert": 6, "delete": 1}[edit], lost
    assert all(at <= i <= at + 6 for i in lost), lost
    assert a.departures == 1 and a.ptr == len(PRED) and a.run > 200


def test_a_deleted_block_far_longer_than_the_local_window_is_found_by_a_long_key() -> None:
    reply = PRED[:100] + PRED[300:]
    a, lost = _follow(PRED, reply)
    assert a.ptr == len(PRED) and len(lost) <= 4, lost


def test_the_replies_first_tokens_may_differ_from_the_predictions_start() -> None:
    """A preamble ("Here is the file:\\n```python\\n") before the prediction, and a first token that merges the
    fence's newline with the prediction's first token (another token than the prediction's): the alignment finds
    the prediction's start from the reply's next tokens."""
    preamble = [3001, 3002, 3003, 3004]
    a, lost = _follow(PRED, preamble + PRED)
    assert lost == [0, 1, 2, 3] and a.ptr == len(PRED)
    merged = [3005] + PRED[1:]  # the first token written as another one
    a, lost = _follow(PRED, merged)
    assert lost == [0] and a.ptr == len(PRED)
    a, lost = _follow(PRED, preamble + merged)
    assert len(lost) == 5 and a.ptr == len(PRED)


def test_a_rename_is_learned_where_the_reply_resumes_and_written_in_later_copies() -> None:
    """The prediction holds name X (2 tokens) three times; the reply renames it to Y (1 token). After the first
    rename every copy writes Y in place of X, sure ones too; the reply's second rename is followed, not departed from.
    A sure copy stops before a prediction token at which the reply departed without a rename it learned (X's first
    token alone, elsewhere)."""
    x, y = [4001, 4002], [4003]
    prediction = PRED[:50] + x + PRED[50:100] + x + PRED[100:150] + x[:1] + PRED[150:200]
    reply = PRED[:50] + y + PRED[50:100] + y + PRED[100:200]
    a, _ = _follow(prediction, reply[:60])
    assert a.aligned
    assert list(a.continuation(60)) == reply[60:120], "the rename was not written in the continuation"
    assert list(a.continuation(60, sure=True)) == reply[60:120], "a sure copy stopped at the learned rename"
    a, lost = _follow(prediction, reply[:110])
    assert a.departures == 1 and len(lost) == 1  # the second rename is followed, not departed from
    assert list(a.continuation(60, sure=True)) == reply[110:152], "a sure copy ran through an edited token"
    assert list(a.continuation(60)) == prediction[112:172]


def test_a_copy_asked_in_the_middle_of_a_learned_rename_goes_on_with_its_rest() -> None:
    x, y = [4001, 4002], [4003, 4004, 4005]
    prediction = PRED[:50] + x + PRED[50:100] + x + PRED[100:150]
    reply = PRED[:50] + y + PRED[50:100] + y + PRED[100:150]
    a, _ = _follow(prediction, reply[:105])  # two of the second rename's three tokens written
    assert a.j == 2 and list(a.continuation(5)) == reply[105:110]


def test_a_prediction_that_is_wrong_everywhere_never_aligns_for_long() -> None:
    other = [RNG.randrange(1000) for _ in range(400)]
    a, lost = _follow(PRED, other)
    assert len(lost) > 390 and a.run < 2


def test_the_prediction_proposer_drafts_in_mode_none_and_reports_that_mode() -> None:
    """Mode none proposes nothing, so its policy drafts nothing; wrapped with a prediction the policy drafts
    (Proposer.drafts), and the stats' mode stays "none"."""
    none = NoDrafter()
    wrapped = PredictionProposer(none, PRED)
    assert wrapped.mode == "none" and wrapped.drafts and not none.drafts
    assert DraftPolicy(none, SpecParams(), 6, None, lambda t: False).longest == 0
    assert DraftPolicy(wrapped, SpecParams(), 6, None, lambda t: False).longest == 6
    list(wrapped.prepare([1, 2, 3]))
    proposal = wrapped.propose([1, 2, 3, *PRED[:5]], 6, SamplingParams(), NOISE)
    assert proposal.tokens == tuple(PRED[5:11]) and proposal.predicted and proposal.free
    sampled = wrapped.propose([1, 2, 3, *PRED[:6]], 6, SamplingParams(temperature=0.8, seed=1), NOISE)
    assert sampled.q is not None and all(q.prob(t) == 1.0 for q, t in zip(sampled.q, sampled.tokens, strict=True))
    assert wrapped.propose([1, 2, 3, *PRED[:6], 9999], 6, SamplingParams(), None).tokens == ()  # type: ignore[arg-type]


# --- real replies --------------------------------------------------------------------------------------------------

SOURCE = '''def area(width, height):
    return width * height


def perimeter(width, height):
    return 2 * (width + height)


def describe(width, height):
    kind = "square" if width == height else "rectangle"
    return f"{kind} {width}x{height}: area {area(width, height)}, perimeter {perimeter(width, height)}"
'''
REQUEST = ("Rename the parameter `width` to `w` everywhere in this code and return all of it, unchanged otherwise:"
           f"\n\n```python\n{SOURCE}```")
WRONG = ("The committee met on a rainy Tuesday to review the harbour's plans for the coming season. Ferries will run "
         "every forty minutes, the fish market moves to the north quay, and the lighthouse museum opens on weekends.")
N = 160
LOOKUP = SpecParams(copy_max=-1)  # the app's default: sure copies on the CPU
# The counts of accepted and rejected prediction tokens judge the proposers, not the governor: with K fixed no
# timing decides what is drafted (the adaptive governor turned drafting off early on a loaded machine, and the
# edited prediction's count fell to 16 of 80 in one CI run).
FIXED = SpecParams(adaptive=False)


def _run(session, prompt: list[int], params: GenParams, prediction: list[int] | None = None):
    events = list(session.generate(prompt, params, prediction=prediction))
    finish = events[-1]
    assert isinstance(finish, FinishEvent)
    return events, finish


def _check_predicted_counts(events, finish: FinishEvent, prediction: list[int]) -> None:
    steps = [e for e in events if isinstance(e, StepEvent)]
    tokens = [e for e in events if isinstance(e, TokenEvent)]
    s = finish.stats
    assert s.prediction_tokens == len(prediction)
    assert s.accepted_prediction_tokens == sum(t.predicted for t in tokens)
    assert all(t.fate is TokenFate.ACCEPTED and steps[t.step].predicted for t in tokens if t.predicted)
    assert s.rejected_prediction_tokens == sum(len(st.rejected) for st in steps if st.predicted)


@pytest.fixture(scope="module")
def strict_target(target_path: Path):
    """The target alone, strict (no repacking, verifies within the one-token kernels' 7 rows): its rows are
    one-token decoding's bits, so every run's reply is plain decoding's, token for token."""
    from app.engine.pair_config import PairConfig
    from app.engine.session import SpecSession

    session = SpecSession(PairConfig(target_path, None, n_ctx=1024, n_threads=2, repack=False))
    yield session
    session.close()


@pytest.fixture(scope="module")
def plain_reply(strict_target) -> tuple[list[int], list[int]]:
    prompt = strict_target.chat_prompt([{"role": "user", "content": REQUEST}])
    _events, finish = _run(strict_target, prompt, GenParams("none", N))
    assert finish.stats.finish_reason == "stop", "the reply did not end within N tokens: raise N"
    return prompt, list(finish.tokens)


def _edited(session, reply: list[int]) -> list[int]:
    """The true reply's text with a line changed, one inserted and one deleted."""
    lines = session.target_model.detokenize(reply).splitlines(keepends=True)
    assert len(lines) >= 10
    lines[3] = "    # a changed line\n"
    lines.insert(6, "# an inserted comment line\n")
    del lines[9]
    return session.prediction_tokens("".join(lines))


@pytest.mark.parametrize("mode", ["lookup", "none"])
def test_greedy_replies_with_a_prediction_are_the_reply_without(strict_target, plain_reply, mode):
    """Right (the plain reply's own text), edited and wrong predictions: each reply is plain decoding's. The right
    one is mostly accepted from the prediction; the edited one resyncs after its edits (tokens accepted from it past
    them); the wrong one drafts little from it."""
    session = strict_target
    prompt, reference = plain_reply
    params = GenParams(mode, N, spec=FIXED)
    right = session.prediction_tokens(session.target_model.detokenize(reference))
    events, finish = _run(session, prompt, params, right)
    assert list(finish.tokens) == reference, f"{mode} with the right prediction is not plain decoding's reply"
    _check_predicted_counts(events, finish, right)
    assert finish.stats.mode == mode
    # Strict verifies hold 6 drafted tokens at most, and each step's own token is the target's: 6 in 7 at best.
    assert finish.stats.accepted_prediction_tokens >= 0.5 * len(reference), finish.stats
    assert finish.stats.rejected_prediction_tokens <= 0.1 * len(reference), finish.stats

    edited = _edited(session, reference)
    events, finish = _run(session, prompt, params, edited)
    assert list(finish.tokens) == reference, f"{mode} with an edited prediction is not plain decoding's reply"
    _check_predicted_counts(events, finish, edited)
    accepted_at = [t.index for t in events if isinstance(t, TokenEvent) and t.predicted]
    assert finish.stats.accepted_prediction_tokens >= 0.3 * len(reference), finish.stats
    assert max(accepted_at) > 0.8 * len(reference), "no token was accepted from the prediction after its edits"

    wrong = session.prediction_tokens(WRONG)
    events, finish = _run(session, prompt, params, wrong)
    assert list(finish.tokens) == reference, f"{mode} with a wrong prediction is not plain decoding's reply"
    _check_predicted_counts(events, finish, wrong)
    assert finish.stats.rejected_prediction_tokens <= 6, finish.stats


def test_a_seeded_reply_is_the_same_with_a_prediction(strict_target, plain_reply):
    """Sampled with a seed: the prediction's tokens are drafted as point masses, and the coupled sample decides,
    so the reply is the one sampled without a prediction, and the prediction was drafted and accepted."""
    session = strict_target
    prompt, reference = plain_reply
    sampling = SamplingParams(temperature=0.7, seed=7)
    params = GenParams("lookup", N, sampling=sampling, spec=LOOKUP)
    _events, without = _run(session, prompt, params)
    prediction = session.prediction_tokens(session.target_model.detokenize(reference))
    events, with_prediction = _run(session, prompt, params, prediction)
    assert with_prediction.tokens == without.tokens
    _check_predicted_counts(events, with_prediction, prediction)
    assert with_prediction.stats.accepted_prediction_tokens > 0


def test_long_copies_from_a_prediction_replay_as_the_targets_choice(demo_session, plain_reply):
    """Repacked weights (the default), where the policy verifies sure copies up to 47 tokens long: each emitted
    token is the target's argmax on its row in the run's own batches (app/engine/exact_replay.py), and long copies
    from the prediction were verified."""
    session = demo_session
    prompt, reference = plain_reply
    prediction = session.prediction_tokens(session.target_model.detokenize(reference))
    session.clear_caches()
    events, finish = _run(session, prompt, GenParams("none", N, spec=LOOKUP), prediction)
    mismatch = check_run(session.target_ctx, events, None, session.target_model.is_eog)
    assert mismatch is None, f"reply position {mismatch.position}: the run emitted {mismatch.emitted}, its row " \
                             f"chooses {mismatch.replayed}"
    steps = [e for e in events if isinstance(e, StepEvent)]
    assert any(s.predicted and s.copy and len(s.drafted) >= 12 for s in steps), "no long copy from the prediction"
    assert finish.stats.accepted_prediction_tokens >= 0.7 * len(finish.tokens), finish.stats
    session.clear_caches()


def test_generate_takes_a_prediction_file(smol_path, tmp_path):
    """`specchat generate --prediction FILE`: the file's text drafts the reply (greedy and strict, so the reply is
    plain decoding's either way) and the JSON's stats count its tokens; a file that cannot be read is a clean error.
    Fixed K (--no-adapt): the governor judges drafting by measured step times, and on a loaded CI machine it once
    turned drafting off after a few slow verifies (5 of 48 tokens from the prediction); this test is about the flag
    and the counts, not about the governor."""
    common = ("generate", "-p", "Write a Python function that returns the sum of a list.", "-m", smol_path,
              "--mode", "none", "-n", 48, "--json", "-c", 512, "--strict", "--temp", 0, "--no-adapt")
    plain = specchat(*common, home=tmp_path)
    assert plain.returncode == 0, plain.stderr
    reply = json.loads(plain.stdout)
    prediction = tmp_path / "prediction.txt"
    prediction.write_text(reply["text"], encoding="utf-8")
    result = specchat(*common, "--prediction", prediction, home=tmp_path)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["tokens"] == reply["tokens"] and data["mode"] == "none"
    stats = data["stats"]
    assert stats["prediction_tokens"] > 0 and stats["accepted_prediction_tokens"] > 0.4 * len(data["tokens"]), stats
    assert stats["rejected_prediction_tokens"] == stats["drafted"] - stats["accepted"]  # mode none: all its drafts
    assert_clean_error(specchat(*common, "--prediction", tmp_path / "missing.txt", home=tmp_path),
                       "prediction file")
