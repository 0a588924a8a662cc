"""The prompt sent while the models load (ui.shell.prompt_queue), without a window: one waits, visibly; a second
stays in the box; the waiting one goes back into the box on demand or when the load fails; it is on disk from the
moment it is queued until it is in a chat, and whatever is in the box at closing comes back at the next start."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Any

from app.chat.conversations import ChatStore
from ui.shell.prompt_queue import PromptQueue, QueueChoice


class Box:
    def __init__(self, text: str = "") -> None:
        self.text = text

    def toPlainText(self) -> str:  # noqa: N802 - Qt's name
        return self.text

    def setPlainText(self, text: str) -> None:  # noqa: N802 - Qt's name
        self.text = text

    def clear_after_send(self) -> None:
        self.text = ""


class Bar:
    def __init__(self) -> None:
        self.level, self.shown, self.message = "info", False, ""
        self.choice: Enum | None = None

    def show_message(self, text: str, level: str = "info", action: Any = None) -> None:
        self.message, self.level, self.shown = text, level, True
        self.choice = action[1] if action else None

    def hide(self) -> None:
        self.shown = False

    def isVisible(self) -> bool:  # noqa: N802 - Qt's name
        return self.shown


def _queue(folder: Path, typed: str = "") -> tuple[PromptQueue, ChatStore, Box, Bar]:
    store, box, bar = ChatStore(folder), Box(typed), Bar()
    return PromptQueue(store, box, bar), store, box, bar


def test_one_prompt_waits_visibly_and_a_second_stays_in_the_box(tmp_path: Path) -> None:
    queue, store, box, bar = _queue(tmp_path)
    assert queue.waiting is None
    assert queue.offer("first question")
    assert queue.waiting == "first question" and box.text == ""  # out of the box, into the queue
    assert "first question" in bar.message and bar.choice is QueueChoice.UNQUEUE
    assert store.unsent() == "first question"  # a crash before the models are in must not lose it
    box.text = "second question"
    assert not queue.offer("second question")
    assert queue.waiting == "first question" and box.text == "second question"
    assert "already waiting" in bar.message and bar.choice is QueueChoice.UNQUEUE


def test_a_long_prompt_is_shortened_in_the_note_only(tmp_path: Path) -> None:
    queue, _store, _box, bar = _queue(tmp_path)
    queue.offer("x" * 100, from_box=False)
    assert "x" * 59 + "…" in bar.message and "x" * 60 not in bar.message
    assert queue.waiting == "x" * 100


def test_unqueue_puts_it_back_before_what_was_typed_since(tmp_path: Path) -> None:
    queue, _store, box, _bar = _queue(tmp_path)
    queue.offer("first question")
    box.text = "second question"
    queue.unqueue()
    assert queue.waiting is None and box.text == "first question\n\nsecond question"
    queue.offer("again")
    box.text = "   "
    queue.unqueue()  # nothing typed since: the prompt alone
    assert box.text == "again"
    queue.unqueue()  # nothing waiting: the box is left alone
    assert box.text == "again"


def test_the_models_in_take_it_and_its_note(tmp_path: Path) -> None:
    queue, store, _box, bar = _queue(tmp_path)
    assert queue.take() is None
    queue.offer("first question")
    assert queue.take() == "first question" and queue.waiting is None and not bar.shown
    assert store.unsent() == "first question"  # until it is in a chat
    queue.sent()
    assert store.unsent() == ""


def test_an_error_shown_meanwhile_stays_when_the_prompt_is_taken(tmp_path: Path) -> None:
    queue, _store, _box, bar = _queue(tmp_path)
    queue.offer("first question")
    bar.show_message("Something went wrong.", "error")
    assert queue.take() == "first question" and bar.shown


def test_a_waiting_prompt_survives_closing_and_reopening(tmp_path: Path) -> None:
    queue, store, box, _bar = _queue(tmp_path)
    queue.offer("Name a mountain.")
    box.text = "and a river"
    queue.close()  # the waiting one goes back into the box, and the box is kept
    store.close()
    again, store2, box2, _bar2 = _queue(tmp_path)
    assert box2.text == "Name a mountain.\n\nand a river" and again.waiting is None
    again.sent()  # sent after the restart: the copy on disk is done with
    assert store2.unsent() == ""


def test_an_empty_box_at_closing_leaves_nothing_for_the_next_start(tmp_path: Path) -> None:
    queue, store, _box, _bar = _queue(tmp_path, typed="")
    queue.close()
    store.close()
    _again, _store2, box2, _bar2 = _queue(tmp_path, typed="untouched")
    assert box2.text == "untouched"
