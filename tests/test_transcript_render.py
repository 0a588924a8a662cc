"""The token document without a model: Markdown keeps every token's fate, ghosts sit before their
correction, the overlay toggles, and the worker's batching keeps events in order."""

from __future__ import annotations

from typing import Any

import pytest
from PySide6.QtGui import QTextCursor

from app.chat.conversations import Message
from app.engine.events import FinishEvent, GenerationStats, StepEvent, TokenEvent, TokenFate
from app.engine.live_stats import LiveStats
from tests.gui_support import fragments
from ui.base.token_style import PROP_FATE, PROP_GHOST, PROP_INDEX
from ui.base.worker import GenerationWorker
from ui.chat.markdown_runs import parse
from ui.chat.transcript_view import TranscriptView

SOURCE = ["# Sl", "icing", "\n\n", "Use", " `", "xs", "[1:]`", " to", " **drop**", " the", " first", ".\n\n",
          "```", "python", "\n", "xs", " =", " [1,", " 2]", "\n", "print", "(xs", "[1:])", "\n", "```", "\n\n",
          "- one", "\n", "- two", " &amp;", " three"]
CODES = "acbtacbtacbtacbtacbtacbtacbtacb"
TOKENS = [[text, code, i // 3] for i, (text, code) in enumerate(zip(SOURCE, CODES, strict=True))]
GHOSTS = [[2, "GHOST-A"], [9, "GHOST-B"], [17, "GHOST\nC"]]


def test_every_visible_character_maps_back_to_its_source() -> None:
    source = "".join(SOURCE)
    for block in parse(source):
        for run in block.runs:
            for ch, offset in zip(run.text, run.offsets, strict=True):
                assert offset == -1 or source[offset] == ch


@pytest.fixture
def view(qtbot: Any) -> TranscriptView:
    v = TranscriptView()
    qtbot.addWidget(v)
    v.resize(700, 500)
    return v


def _reply() -> Message:
    return Message("assistant", "".join(SOURCE), tokens=[list(t) for t in TOKENS], ghosts=[list(g) for g in GHOSTS])


def _check_tokens(view: TranscriptView, msg: int) -> None:
    cursor = QTextCursor(view.document())
    placed = 0
    for index, record in enumerate(TOKENS):
        pos = view.token_position(msg, index)
        if not record[0].strip():
            continue  # a newline becomes a block break: no character of its own to look at
        if pos is None:
            assert not any(c.isalnum() for c in record[0].replace("python", "")), record  # markup only
            continue
        placed += 1
        cursor.setPosition(pos + 1)
        fmt = cursor.charFormat()
        assert (fmt.intProperty(PROP_INDEX), fmt.property(PROP_FATE)) == (index, record[1])
    assert placed >= sum(any(c.isalnum() for c in t[0]) for t in TOKENS) - 1  # all but the fence's "python"


def test_markdown_keeps_token_fates_and_ghost_places(view: TranscriptView, qtbot: Any) -> None:
    view.set_messages([Message("user", "hi"), _reply()])
    text = view.toPlainText()
    assert "# Sl" not in text and "Slicing" in text and "**" not in text and "```" not in text  # rendered
    _check_tokens(view, 1)
    ghosts = [(t, pos) for t, fmt, pos in fragments(view) if fmt.boolProperty(PROP_GHOST)]
    assert [t for t, _ in ghosts] == ["GHOST-A", "GHOST-B", "GHOST⏎C"]
    for (_, pos), (position, _) in zip(ghosts, GHOSTS, strict=True):
        after = [p for i in range(position, len(TOKENS)) if (p := view.token_position(1, i)) is not None]
        before = [p for i in range(position) if (p := view.token_position(1, i)) is not None]
        assert max(before) < pos < after[0]  # right before the (first visible) corrected token
    assert all(fmt.fontStrikeOut() for _, fmt, _ in fragments(view) if fmt.boolProperty(PROP_GHOST))


def test_streaming_then_finishing_gives_the_same_document(view: TranscriptView, qtbot: Any) -> None:
    reply = Message("assistant", "", tokens=[], ghosts=[])
    view.begin_reply(reply)
    for start in range(0, len(TOKENS), 4):  # batches, ghosts arriving with their step
        batch = [list(t) for t in TOKENS[start:start + 4]]
        ghosts = [list(g) for g in GHOSTS if start <= g[0] < start + 4]
        reply.append_tokens(start, batch, ghosts)
        view.append_records(batch, ghosts)
    raw = view.fates_in_document(0)
    # every character, raw (a newline becomes a block break, not a character)
    assert raw == {c: sum(len(t[0].replace("\n", "")) for t in TOKENS if t[1] == c) for c in "acbt"}
    with qtbot.waitSignal(view.rendered, timeout=5000, raising=False):
        view.finish_reply()
    _check_tokens(view, 0)
    reference = TranscriptView()
    qtbot.addWidget(reference)
    reference.set_messages([reply])
    assert reference.toPlainText() == view.toPlainText()


def test_overlay_toggles(view: TranscriptView) -> None:
    view.set_messages([_reply()])
    tinted = [fmt for _, fmt, _ in fragments(view) if fmt.property(PROP_FATE) is not None]
    assert tinted and all(fmt.hasProperty(fmt.Property.BackgroundBrush) for fmt in tinted)
    view.set_overlay(colours=False, ghosts=False)
    plain = [fmt for _, fmt, _ in fragments(view) if fmt.property(PROP_FATE) is not None]
    assert plain and not any(fmt.hasProperty(fmt.Property.BackgroundBrush) for fmt in plain)
    assert not any(fmt.boolProperty(PROP_GHOST) for _, fmt, _ in fragments(view))
    assert "GHOST" not in view.toPlainText()


def _stats(n: int) -> GenerationStats:
    return GenerationStats("draft", 5, n, 10.0, 100.0, 1.0, 100.0, 40.0, 60.0, 0.0, 2, 4, 3, 0.75, 1.5, 2.0,
                           (1.0, 0.5), (0, 1, 1), (), "stop", 4, True)


def test_worker_batches_keep_order_and_runs_apart(qtbot: Any) -> None:
    worker = GenerationWorker()
    got: list[tuple[str, str, Any]] = []
    worker.events.connect(lambda run, events: got.append(("events", run, list(events))))
    worker.finished.connect(lambda run, finish: got.append(("finish", run, finish)))
    worker.jobDone.connect(lambda ok: got.append(("done", "", ok)))
    step = StepEvent(0, 0, 2, (5, 6), 1, (6,), "x", 2, 1.0, 2.0)
    tokens = [TokenEvent(0, 5, "a", TokenFate.ACCEPTED, 0), TokenEvent(1, 7, "b", TokenFate.CORRECTED, 0)]
    finish = FinishEvent("ab", (1,), (5, 7), _stats(2))
    for kind, run, payload in [("event", "plain", step), *[("event", "plain", t) for t in tokens],
                               ("finish", "plain", finish), ("event", "spec", step), ("done", "", True)]:
        worker._outbox.put(kind, run, payload)
    worker._drain()
    assert [(k, r) for k, r, _ in got] == [("events", "plain"), ("finish", "plain"), ("events", "spec"), ("done", "")]
    assert got[0][2] == [step, *tokens]
    live = LiveStats()
    for event in got[0][2]:
        live.apply(event)
    assert (live.tokens, live.drafted, live.accepted, live.histogram) == (2, 2, 1, [0, 1])
    worker.shutdown()
