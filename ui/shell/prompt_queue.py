"""The prompt sent while the models load: one waits, visibly, and goes out once they are in; nothing typed is lost.

It is kept on disk from the moment it is queued (a crash before the models are in must not lose it) until it is
in a chat, goes back into the prompt box when the load fails or the user wants to edit it, and whatever is in the
box when the window closes comes back at the next start. No Qt: the box, the bar and the store are duck-typed
(MainWindow hands over its PromptBox, MessageBar and ChatStore; tests hand over plain objects).
"""

from __future__ import annotations

from enum import Enum, auto
from typing import Any, Protocol


class QueueChoice(Enum):
    """The queue note's button in the message bar."""

    UNQUEUE = auto()  # "Edit", "Edit the waiting one": the waiting prompt goes back into the box


class UnsentStore(Protocol):
    def keep_unsent(self, text: str) -> None: ...
    def unsent(self) -> str: ...


class TextBox(Protocol):
    def toPlainText(self) -> str: ...  # noqa: N802 - Qt's name
    def setPlainText(self, text: str) -> None: ...  # noqa: N802 - Qt's name
    def clear_after_send(self) -> None: ...


class Bar(Protocol):
    level: str

    def show_message(self, text: str, level: str = ..., action: Any = ...) -> None: ...
    def hide(self) -> None: ...
    def isVisible(self) -> bool: ...  # noqa: N802 - Qt's name


class PromptQueue:
    def __init__(self, store: UnsentStore, box: TextBox, bar: Bar) -> None:
        self._store, self._box, self._bar = store, box, bar
        self._waiting: str | None = None
        unsent = store.unsent()
        self._on_disk = bool(unsent)  # cleared once a send puts it in the chat: no file read per send
        if unsent:
            box.setPlainText(unsent)  # queued or typed when the window last closed

    @property
    def waiting(self) -> str | None:
        return self._waiting

    def offer(self, text: str, from_box: bool = True) -> bool:
        """Queue `text` until the models are in; False (the text stays where it was) when one already waits.
        `from_box`: the text came from the prompt box, which is cleared once it is queued."""
        if self._waiting is not None:
            self._bar.show_message("A prompt is already waiting for the models; this one stays in the box until "
                                   "that one has its reply.", "info", ("Edit the waiting one", QueueChoice.UNQUEUE))
            return False
        self._waiting = text
        self._store.keep_unsent(text)
        self._on_disk = True
        if from_box:
            self._box.clear_after_send()
        shown = text if len(text) <= 60 else text[:59] + "…"
        self._bar.show_message(f"Waiting for the models to load, then sending: “{shown}”", "info",
                               ("Edit", QueueChoice.UNQUEUE))
        return True

    def take(self) -> str | None:
        """The waiting prompt, to send now that the models are in (its note goes away)."""
        text, self._waiting = self._waiting, None
        if text is not None and self._bar.level == "info" and self._bar.isVisible():
            self._bar.hide()  # the "queued" note
        return text

    def sent(self) -> None:
        """A prompt is in the chat now: the copy on disk is done with."""
        if self._on_disk:
            self._store.keep_unsent("")
            self._on_disk = False

    def unqueue(self) -> None:
        """Take the waiting prompt back into the box (before anything typed since)."""
        text, self._waiting = self._waiting, None
        if text:
            typed = self._box.toPlainText()
            self._box.setPlainText(text + ("\n\n" + typed if typed.strip() else ""))

    def close(self) -> None:
        """The window closes: a waiting prompt goes back into the box, and the box is kept for the next start."""
        self.unqueue()
        self._store.keep_unsent(self._box.toPlainText())
