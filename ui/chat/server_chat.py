"""The "Local server" chat: the requests the window's server answered (the newest 50), kept with the token overlay.

The server's requests are not the user's chats, so they go to one chat of their own (found by its id, kept in the
store's folder as any chat), a prompt and its reply per request, saved when the reply ends. Opened, it shows the
served replies coloured by each token's fate, prediction-accepted tokens included."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from PySide6.QtCore import QObject, Signal

from app.chat.conversations import ChatStore, Conversation, Message, records_from_events
from app.engine.events import FinishEvent
from app.engine.live_stats import LiveStats

TITLE = "Local server"
# The newest requests kept: an editor sends the whole file with each one, so the chat would grow without bound.
KEEP_REQUESTS = 50


class ServerChat(QObject):
    recorded = Signal(str)  # the chat's id, after a request was added and saved

    def __init__(self, store: ChatStore, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.store = store
        self._id = next((c.id for c in store.sorted() if c.title == TITLE), "")

    def conversation(self) -> Conversation:
        conv = self.store.conversations.get(self._id) if self._id else None
        if conv is None:
            conv = self.store.new()
            conv.title = TITLE
            self._id = conv.id
        return self.store.ensure_loaded(conv)

    def record(self, job: Any, finish: FinishEvent, events: list[Any]) -> Conversation:
        """Add one served request: its prompt (the last user message, or the completion's prompt) and the reply."""
        spec = job.spec
        system = next((m["content"] for m in spec.messages if m["role"] == "system"), "")
        asked = next((m["content"] for m in reversed(spec.messages) if m["role"] == "user"), spec.prompt_text)
        conv = self.conversation()
        tokens, ghosts = records_from_events(events)
        stats = asdict(finish.stats)
        live = LiveStats()  # the rolling acceptance the stats panel draws, as a chat's live reply records it
        for event in events:
            live.apply(event)
        conv.messages.append(Message("user", asked))
        conv.messages.append(Message("assistant", finish.text, tokens=tokens, ghosts=ghosts, stats=stats,
                                     mode=finish.stats.mode, system=system,
                                     rolling=[[i, round(rate, 4)] for i, rate in live.rolling] or None,
                                     error=None if finish.stats.finish_reason != "cancelled" else
                                     "The client disconnected, or a stop sequence ended the reply here."))
        del conv.messages[:-2 * KEEP_REQUESTS]
        self.store.save(conv)
        self.recorded.emit(conv.id)
        return conv
