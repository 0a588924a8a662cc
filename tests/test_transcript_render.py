"""The token document without a model: Markdown keeps every token's fate, ghosts sit before their
correction, a streaming reply's blocks render as they finish and stay put, the overlay toggles,
and the worker's batching keeps events in order."""

from __future__ import annotations

import random
from typing import Any

import pytest
from PySide6.QtGui import QTextCursor

from app.chat.conversations import Message
from app.engine.events import FinishEvent, GenerationStats, StepEvent, TokenEvent, TokenFate
from app.engine.live_stats import LiveStats
from tests.gui_support import fragments
from ui.base.token_style import PROP_FATE, PROP_GHOST, PROP_INDEX
from ui.base.worker import GenerationWorker, Item
from ui.chat.markdown_render import CODE_BG
from ui.chat.markdown_runs import finished_prefix, parse
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


def _stream(view: TranscriptView, reply: Message, tokens: list[list], ghosts: list[list], upto: int,
            start: int = 0, size: int = 4) -> None:
    """Feed records in batches, as the controller does, ghosts arriving with their step."""
    for at in range(start, upto, size):
        batch = [list(t) for t in tokens[at:min(at + size, upto)]]
        fresh = [list(g) for g in ghosts if at <= g[0] < at + len(batch)]
        reply.append_tokens(at, batch, fresh)
        view.append_records(batch, fresh)


def test_streaming_then_finishing_gives_the_same_document(view: TranscriptView, qtbot: Any) -> None:
    reply = Message("assistant", "", tokens=[], ghosts=[])
    view.begin_reply(reply)
    _stream(view, reply, TOKENS, GHOSTS, len(TOKENS))
    qtbot.waitUntil(lambda: not view.render_pending(), timeout=5000)
    text = view.toPlainText()
    # The finished blocks are Markdown already; the list, still open, is raw (its last line unended).
    assert "# Sl" not in text and "```" not in text and "**" not in text and "Slicing" in text
    assert "- one" in text and "&amp;" in text
    with qtbot.waitSignal(view.rendered, timeout=5000, raising=False):
        view.finish_reply()
    assert "- one" not in view.toPlainText() and "•  one" in view.toPlainText()
    _check_tokens(view, 0)
    reference = TranscriptView()
    qtbot.addWidget(reference)
    reference.set_messages([reply])
    assert reference.toPlainText() == view.toPlainText()


# A reply with a heading, a paragraph, a fenced code block and a closing paragraph.
CODE_REPLY = ["# Sl", "icing", "\n\n", "Use", " `xs[1:]`", " to", " **drop**", " the", " first", ".\n\n",
              "```", "python", "\n", "xs", " =", " [1,", " 2]", "\n", "print", "(xs", "[1:])", "\n", "```",
              "\n\n", "That", " prints", " [2]", "."]
FENCE_CLOSED = CODE_REPLY.index("\n\n", 12) + 1  # tokens up to the line break after the closing fence


def _snapshot(view: TranscriptView, end: int) -> list[tuple[int, str, Any, Any, bool]]:
    return [(pos, text, fmt.property(PROP_INDEX), fmt.property(PROP_FATE), fmt.fontFixedPitch())
            for text, fmt, pos in fragments(view) if pos < end]


def test_blocks_render_as_they_finish_and_stay_put(view: TranscriptView, qtbot: Any) -> None:
    """Streamed Markdown does not jump at the end: a fenced code block is formatted as soon as its
    closing fence's line ends, and what is rendered then is exactly what stays after the reply ends."""
    tokens = [[text, "acbt"[i % 4], i // 2] for i, text in enumerate(CODE_REPLY)]
    ghosts = [[5, "GHOST-A"], [14, "GHOST-B"]]
    view.set_messages([Message("user", "How do I drop the first item?")])
    reply = Message("assistant", "", tokens=[], ghosts=[])
    view.begin_reply(reply)
    _stream(view, reply, tokens, ghosts, FENCE_CLOSED - 1, size=3)
    qtbot.waitUntil(lambda: not view.render_pending(), timeout=5000)
    assert "```" in view.toPlainText()  # the fence is open: its block is still raw

    _stream(view, reply, tokens, ghosts, FENCE_CLOSED, start=FENCE_CLOSED - 1)
    qtbot.waitUntil(lambda: "```" not in view.toPlainText(), timeout=5000)  # in the event loop, not at the end
    doc = view.document()
    code = doc.find("print(xs[1:])")
    heading = doc.find("Slicing")
    assert not code.isNull() and not heading.isNull()
    assert code.block().blockFormat().background().color().name() == CODE_BG[view.is_dark()].lower()
    assert code.charFormat().fontFixedPitch()
    assert heading.block().blockFormat().headingLevel() == 1 and "# Sl" not in view.toPlainText()
    assert "**" not in view.toPlainText() and "GHOST-A" in view.toPlainText()
    rendered_end = code.block().position() + code.block().length()
    before = _snapshot(view, rendered_end)
    positions = {t: p for t in range(FENCE_CLOSED) if (p := view.token_position(1, t)) is not None
                 and p < rendered_end}
    assert any(fixed for *_, fixed in before) and len(positions) > 10

    _stream(view, reply, tokens, ghosts, len(tokens), start=FENCE_CLOSED)
    with qtbot.waitSignal(view.rendered, timeout=5000):
        view.finish_reply()
    assert _snapshot(view, rendered_end) == before  # same characters, formats and positions
    assert {t: view.token_position(1, t) for t in positions} == positions
    assert "That prints [2]." in view.toPlainText()
    reference = TranscriptView()
    qtbot.addWidget(reference)
    reference.set_messages([Message("user", "How do I drop the first item?"), reply])
    assert reference.toPlainText() == view.toPlainText()


SAMPLES = [
    "Intro line\nsecond line\n\n1. a\n2. b\n3. c\n\nAfter.\n\n1. x\n1. y\n1. z\n\n> quote\n> more\n\n---\n\n"
    "T\n===\n\ntext 😀 emoji 🎉 here\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\nend",
    "- a\n  - nested\n  - nested2\n- b\n\n  continued para\n\n- c\n\n```\nunclosed fence\n",
    "Para\n# heading\ntext\n***\n\n    indented code\n\n    more code\n\nfin\n\n",
    "```js\nlet x = 1;\n```\n```py\ny = 2\n\nz = 3\n```\nplain after\n\n\n\n",
    "[ref]: http://x.org\n\nSee [ref] and [link](http://a.b).\n\n* star\n+ plus\n- dash\n\n"
    "3. three\n4. four\n\n5. five",
]


def _blocks(view: TranscriptView) -> list[tuple[Any, ...]]:
    out, block = [], view.document().begin()
    while block.isValid():
        bf = block.blockFormat()
        out.append((block.text(), bf.headingLevel(), bf.indent(), bf.background().color().name(), bf.topMargin()))
        block = block.next()
    return out


def _formats(view: TranscriptView) -> list[tuple[Any, ...]]:
    return [(text, pos, fmt.fontFixedPitch(), fmt.fontPointSize(), fmt.fontWeight(), fmt.property(PROP_INDEX),
             fmt.property(PROP_FATE), fmt.anchorHref(), fmt.fontStrikeOut()) for text, fmt, pos in fragments(view)]


@pytest.mark.parametrize("sample", range(len(SAMPLES)))
def test_streamed_rendering_equals_rendering_the_whole_reply(qtbot: Any, sample: int) -> None:
    """Lists, numbering, quotes, rules, setext headings, tables, indented code, emoji (two document
    positions each) and ghosts: rendered block by block in random batches, the document is the
    one a reload shows, and every token position points at that token while it streams."""
    rng = random.Random(sample)
    source = SAMPLES[sample]
    for _trial in range(3):
        pieces, at = [], 0
        while at < len(source):
            size = rng.randint(1, 6)
            pieces.append(source[at:at + size])
            at += size
        tokens = [[piece, "acbt"[i % 4], i // 3] for i, piece in enumerate(pieces)]
        ghosts = [[i, f"G{i}"] for i in range(0, len(tokens), 7)]
        view = TranscriptView()
        qtbot.addWidget(view)
        view.set_messages([Message("user", "q")])
        reply = Message("assistant", "", tokens=[], ghosts=[])
        view.begin_reply(reply)
        done = 0
        while done < len(tokens):
            step = rng.randint(1, 5)
            _stream(view, reply, tokens, ghosts, min(done + step, len(tokens)), start=done, size=step)
            done = min(done + step, len(tokens))
            view.complete_render()
            cursor = QTextCursor(view.document())
            for token in range(done):
                pos = view.token_position(1, token)
                if pos is not None and view.document().characterAt(pos) != "\u2029":
                    cursor.setPosition(pos + 1)
                    assert cursor.charFormat().intProperty(PROP_INDEX) == token
        view.finish_reply()
        view.complete_render()
        reference = TranscriptView()
        qtbot.addWidget(reference)
        reference.set_messages([Message("user", "q"), reply])
        assert view.toPlainText() == reference.toPlainText()
        assert _blocks(view) == _blocks(reference)
        assert _formats(view) == _formats(reference)
        assert view._positions[1] == reference._positions[1]


@pytest.mark.parametrize(("source", "final"), [
    ("para", ""), ("para\n", ""), ("para\n\n", "para\n\n"), ("para\n\n \n\nx", "para\n\n \n\n"),
    ("para\n#", ""),  # a lone `#` line could still become paragraph text
    ("para\n# H\n", "para\n# H\n"), ("```py\na\n```", ""), ("```py\na\n```\n", "```py\na\n```\n"),
    ("```py\na\n```x\n", ""),  # not a closing fence
    ("- a\n- b\n", "- a\n"), ("- a\n\nx\n", "- a\n\n"), ("1. a\n2. b\n3. c\n", "1. a\n2. b\n"),
    ("1. a\n1. b\n", ""),  # numbered from the first item: the list must go whole
    ("T\n---\n", "T\n---\n"), ("    code\n\n", ""), ("> q\n\n", "> q\n\n"), ("para\n- x\n", "para\n"),
])
def test_finished_prefix(source: str, final: str) -> None:
    assert source[:finished_prefix(source)] == final


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
    for kind, run, payload in [(Item.EVENT, "plain", step), *[(Item.EVENT, "plain", t) for t in tokens],
                               (Item.FINISH, "plain", finish), (Item.EVENT, "spec", step), (Item.DONE, "", True)]:
        worker._outbox.put(kind, run, payload)
    worker._drain()
    assert [(k, r) for k, r, _ in got] == [("events", "plain"), ("finish", "plain"), ("events", "spec"), ("done", "")]
    assert got[0][2] == [step, *tokens]
    live = LiveStats()
    for event in got[0][2]:
        live.apply(event)
    assert (live.tokens, live.drafted, live.accepted, live.histogram) == (2, 2, 1, [0, 1])
    worker.shutdown()
