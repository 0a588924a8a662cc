"""A comparison that parts from plain decoding: the worker replays the speculative run's own batches, and
the compare view says whose choice the token was (and stores it with the reply) instead of judging by a
fixed margin. Real runs on SmolLM2; plain decoding is made to part at an accepted draft's row, as a near-tie
flipped by the batch shape would (a real one cannot be made on demand, see tests/test_parting.py)."""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Any

import pytest

from app.chat.conversations import Message
from app.engine.events import Divergence, Event, FinishEvent, StepEvent
from app.engine.parting import NotReplayed, PartingReplay
from app.engine.session import GenParams
from tests.gui_support import require_working_pyside

pytestmark = pytest.mark.gui
_PROMPT = [{"role": "user", "content": "Repeat this line three times: the quick brown fox jumps over the lazy dog "
                                       "and runs into the old green forest."}]


def _run(session: Any, prompt: list[int], params: GenParams) -> tuple[FinishEvent, list[Event]]:
    events = list(session.generate(prompt, params))
    finish = events[-1]
    assert isinstance(finish, FinishEvent)
    return finish, events[:-1]


@pytest.fixture(scope="module")
def parted(smol_session: Any) -> dict[str, Any]:
    smol_session.clear_caches()
    prompt = list(smol_session.chat_prompt(_PROMPT))
    plain, plain_events = _run(smol_session, prompt, GenParams("none", 40, track_margins=True))
    spec, spec_events = _run(smol_session, prompt, GenParams("lookup", 40))
    steps = [e for e in spec_events if isinstance(e, StepEvent)]
    b = next(s for s in steps if s.accepted > 1)
    position = b.position + 1  # an accepted draft's row, computed inside a verify batch
    other = (spec.tokens[position] + 1) % smol_session.target_model.n_vocab
    plain = replace(plain, tokens=(*spec.tokens[:position], other, *spec.tokens[position + 1:]))
    return {"prompt": prompt, "plain": plain, "plain_events": plain_events, "spec": spec,
            "spec_events": spec_events, "steps": steps, "position": position, "other": other}


def test_the_worker_replays_a_greedy_comparisons_parting(qapp: Any, smol_session: Any, parted: dict) -> None:
    from ui.base.worker import Item, PartingCheck, _Outbox, _Runner

    require_working_pyside()
    runner = _Runner(_Outbox())
    runner._session = smol_session
    finishes = {"plain": parted["plain"], "spec": parted["spec"]}
    runner._check_parting(parted["prompt"], finishes, parted["steps"], threading.Event())
    items = runner._out.take()
    assert [(kind, payload is None) for kind, _run, payload in items] == [(Item.PARTING, True), (Item.PARTING, False)]
    check = items[1][2]
    assert isinstance(check, PartingCheck) and isinstance(check.replay, PartingReplay)
    assert check.divergence.position == parted["position"] and check.divergence.plain_token == parted["other"]
    assert check.replay.reproduced and check.replay.gap < 0
    # Stop before the replay: the view is told it was not replayed, and why.
    stop = threading.Event()
    stop.set()
    runner._check_parting(parted["prompt"], finishes, parted["steps"], stop)
    last = runner._out.take()[-1][2]
    assert last.replay == NotReplayed("stopped before the replay finished")
    # Identical replies: nothing to check.
    runner._check_parting(parted["prompt"], {"plain": parted["spec"], "spec": parted["spec"]}, parted["steps"],
                          threading.Event())
    assert runner._out.take() == []
    runner._session = None


def _compared_view(parted: dict) -> Any:
    from ui.chat.compare_view import CompareView

    view = CompareView()
    view.begin("lookup", True)
    for name in ("plain", "spec"):
        view.start_run(name)
        view.append(name, parted[f"{name}_events"])
        view.finish_run(name, parted[name])
    return view


def test_the_compare_view_says_whose_choice_the_parting_was(qapp: Any, parted: dict) -> None:
    from ui.base.worker import PartingCheck

    require_working_pyside()
    view = _compared_view(parted)
    position = parted["position"]
    assert f"Parted at token {position}" in view.badge.text()
    view.parting_checking()
    assert view.badge.text().startswith(f"… Parted at token {position}") and "Replaying" in view.badge.text()
    div = Divergence(position, parted["other"], parted["spec"].tokens[position], 0.13, False)
    view.parting_checked(PartingCheck(div, PartingReplay(-0.02, True)))
    own = view.badge.text()
    assert own.startswith(f"≈ Parted at token {position}: the target's own choice") and "by 0.020" in own
    stored = view.result()
    assert stored is not None and stored["divergence"]["replay"] == {"gap": -0.02, "reproduced": True, "note": ""}
    # The stored comparison shows the same verdict after switching chats.
    reply = Message("assistant", parted["spec"].text, tokens=view._runs["spec"].message.tokens, ghosts=[],
                    mode="lookup", stats=view._runs["spec"].message.stats, compare=stored)
    view.begin("draft", True)
    view.show_saved(reply)
    assert view.badge.text() == own
    # Not the target's choice: an engine fault, said plainly.
    view = _compared_view(parted)
    view.parting_checked(PartingCheck(div, PartingReplay(0.3, False)))
    assert view.badge.text().startswith(f"✗ Parted at token {position}, not by rounding") and "engine fault" in \
        view.badge.text()
    # Not replayed: the margin's verdict, with the reason.
    view = _compared_view(parted)
    view.parting_checked(PartingCheck(div, NotReplayed("stopped before the replay finished")))
    assert "Not replayed: stopped before the replay finished." in view.badge.text()
