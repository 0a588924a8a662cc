"""Glue between the worker's signals, the conversation store and the views (no widgets of its own).

One reply at a time: the prompt and an empty assistant message are saved first, then every batch
of events goes to the recorder (journal, then the message), then to the views. A comparison runs
"plain" then "spec"; only the speculative reply becomes the chat's answer, with the plain run and
the verdict stored beside it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from enum import Enum, auto

from PySide6.QtCore import QObject, QTimer, Signal, Slot

from app.chat.conversations import (
    ChatStore,
    Conversation,
    Message,
    ReplyRecorder,
    rolling_from_json,
    sampling_record,
    stats_from_json,
    title_from,
)
from app.engine.events import Event, FinishEvent, GovernorEvent, PrefillEvent, TokenEvent
from app.engine.session import GenParams
from ui.base.message_bar import MessageBar
from ui.base.worker import GenerationWorker, PartingCheck
from ui.chat.compare_view import CompareView
from ui.chat.transcript_view import TranscriptView
from ui.stats.stats_panel import StatsPanel

CHAT_RUNS = ("chat", "spec")  # run names whose reply is the conversation's answer


SAVE_RETRY_MS = 5000


class ChatChoice(Enum):
    """The message bar's buttons that the controller offers: Undo it handles; the overflow choices need the runs,
    so the window (ui.shell.chat_commands) answers them."""

    UNDO_DELETE = auto()
    DROP_OLDEST = auto()  # "Leave out the oldest turns"
    NEW_CHAT_WITH_LAST = auto()  # "New chat with the last turns"


class ChatController(QObject):
    busyChanged = Signal(bool)
    replyFinished = Signal(bool)  # a reply or comparison has ended and is rendered; False after an error
    conversationsChanged = Signal()
    governorSwitched = Signal(object)  # GovernorEvent: drafting turned off or back on
    contextChanged = Signal(int, int)  # tokens the conversation fills, the context's size
    # Prompt tokens processed, of, by which model ("target", then "draft" in the modes that draft with it);
    # (0, -1, "target") when the reply starts, (0, 0, "") when the first token comes or the reply ends.
    prefillProgress = Signal(int, int, str)
    samplingChanged = Signal(object)  # the shown chat's own sampling preset (None: the default)
    undoChanged = Signal(bool)  # whether a delete can be taken back

    def __init__(
        self,
        store: ChatStore,
        worker: GenerationWorker,
        transcript: TranscriptView,
        compare: CompareView,
        stats: StatsPanel,
        errors: MessageBar,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self.store, self.worker = store, worker
        self.transcript, self.compare, self.stats, self.errors = transcript, compare, stats, errors
        self.conv: Conversation | None = None
        self.recorder: ReplyRecorder | None = None
        self.last_finish: dict[str, FinishEvent] = {}
        self.forwarded: dict[str, list[Event]] = {}  # every event of the last job, per run (tests, replays)
        self._comparing = False
        self._error = ""
        self._result = True
        self._waiting: list[TranscriptView] = []
        self.default_system = ""  # the settings' system prompt, for chats without their own
        self._new_chat_system: str | None = None  # set before a new chat's first message
        self.default_sampling = "recommended"  # the settings' preset, for chats without their own
        self._new_chat_sampling: str | None = None
        worker.runStarted.connect(self._on_worker_runStarted)
        worker.events.connect(self._on_worker_events)
        worker.finished.connect(self._on_worker_finished)
        worker.error.connect(self._on_worker_error)
        worker.jobDone.connect(self._on_worker_jobDone)
        worker.contextUsed.connect(self._on_worker_contextUsed)
        worker.contextOverflow.connect(self._on_worker_contextOverflow)
        worker.contextTrimmed.connect(self._on_worker_contextTrimmed)
        worker.partingChecked.connect(self._on_worker_partingChecked)
        self._compared: tuple[Conversation, Message] | None = None  # the last comparison's reply, for its check
        self.n_ctx = 0  # of the loaded pair, as the worker last reported it
        # Turns each chat's last reply left out of what the model read: the next reply keeps them out while the
        # rest fits, so the prompt starts as before and the model's cache of it serves (context_fit).
        self._left_out: dict[str, int] = {}
        self._prefilling = False
        # A save that failed (disk full, read-only folder) is said in the bar and tried again every few seconds;
        # the chat stays in memory, its reply in its journal where the disk took it.
        store.on_save_error = self._on_store_saveFailed
        self._undo: Callable[[], None] | None = None  # takes back the last delete
        self._undo_text = ""
        errors.actionTriggered.connect(self._on_errors_actionTriggered)
        self._retry = QTimer(self)
        self._retry.setInterval(SAVE_RETRY_MS)
        self._retry.timeout.connect(self._on_retry_timeout)

    @Slot(object)
    def _on_errors_actionTriggered(self, choice: Enum) -> None:
        if choice is ChatChoice.UNDO_DELETE:
            self.undo()

    # --- saving --------------------------------------------------------------------------------------

    def _on_store_saveFailed(self, conv: Conversation, exc: OSError) -> None:
        where = exc.filename or self.store.folder
        self.errors.show_message(
            f"Could not save the chat “{conv.title}” to {where}: {exc.strerror or exc}. Nothing is lost yet: the chat "
            "is kept in this window and saved as soon as the disk allows (tried every few seconds); do not quit "
            "before this message goes away, or free some space.", "error", details=repr(exc))
        if not self._retry.isActive():
            self._retry.start()

    @Slot()
    def _on_retry_timeout(self) -> None:
        if self.store.retry_unsaved():
            self._retry.stop()
            self.errors.show_message("The chats that could not be saved are saved now.", "info")

    # --- conversations -------------------------------------------------------------------------------

    def select(self, conv_id: str) -> None:
        conv = self.store.conversations.get(conv_id)
        if conv is None or self.busy():
            return
        known = len(self.store.problems)
        self.conv = self.store.ensure_loaded(conv)  # the list holds stubs until a chat is opened
        if len(self.store.problems) > known:  # its file could not be read now: set aside, never overwritten
            self.errors.show_message(f"{self.store.problems[-1]} The chat is shown empty.", "error")
        self._show(conv)
        last = next((m for m in reversed(conv.messages) if m.role == "assistant"), None)
        self.stats.show_saved(stats_from_json(last.stats) if last else None,
                              rolling_from_json(last.rolling) if last else ())
        used = (last.stats or {}) if last else {}
        self.contextChanged.emit(int(used.get("n_prompt_tokens", 0)) + int(used.get("n_tokens", 0)), self.n_ctx)
        if last is not None and last.compare:
            self.compare.show_saved(last)
        else:
            self.compare.begin(last.mode or "draft" if last else "draft", True)

    def new_chat(self) -> None:
        if self.busy():
            return
        self.conv = None  # created (and saved) with its first message
        self._new_chat_system = None
        self._new_chat_sampling = None
        self.samplingChanged.emit(None)
        self.transcript.set_messages([], self.default_system)
        self.contextChanged.emit(0, self.n_ctx)
        self.compare.begin("draft", True)
        self.stats.reset()

    def rename(self, conv_id: str, title: str) -> None:
        conv = self.store.conversations.get(conv_id)
        if conv is not None:
            self.store.rename(conv, title)
            self.conversationsChanged.emit()

    def delete(self, conv_id: str) -> None:
        conv = self.store.conversations.get(conv_id)
        if conv is None or (self.busy() and conv is self.conv):
            return
        kept = self.store.ensure_loaded(conv).copy()  # a stub is read first: the undo needs all of it
        self.store.delete(conv)
        if conv is self.conv:
            self.new_chat()
        self.conversationsChanged.emit()
        self._offer_undo(f"Deleted the chat “{kept.title}”.", lambda: self._restore_chat(kept))

    # --- generation ----------------------------------------------------------------------------------

    def busy(self) -> bool:
        return self.recorder is not None or self.worker.is_generating()

    def system_prompt(self) -> str:
        """The system prompt the current chat (or the next new one) uses."""
        if self.conv is not None:
            return self.conv.system_prompt(self.default_system)
        return self._new_chat_system if self._new_chat_system is not None else self.default_system

    def set_system(self, text: str) -> None:
        """This chat's own system prompt ("" for none); the default stays as it is."""
        if self.conv is None:
            self._new_chat_system = text
        else:
            self.conv.system = text
            if self.conv.messages:
                self.store.save(self.conv)
        self.transcript.set_system(text)

    def sampling_preset(self) -> str | None:
        """The current chat's (or the next new one's) own sampling preset; None: the default."""
        return self.conv.sampling if self.conv is not None else self._new_chat_sampling

    def set_sampling(self, preset: str | None) -> None:
        """This chat's own sampling preset (None: follow the default); used from its next reply."""
        if self.conv is None:
            self._new_chat_sampling = preset
        elif preset != self.conv.sampling:
            self.conv.sampling = preset
            if self.conv.messages and not self.busy():
                self.store.save(self.conv)  # (while a reply streams, its end saves the chat)

    def submit(self, text: str, runs: Sequence[tuple[str, GenParams]],
               models: dict[str, str | None] | None = None) -> bool:
        if self.busy():
            return False
        if self.conv is None:
            self.conv = self.store.new()
            self.conv.system, self._new_chat_system = self._new_chat_system, None
            self.conv.sampling, self._new_chat_sampling = self._new_chat_sampling, None
        conv = self.conv
        if not any(m.role == "user" for m in conv.messages):
            conv.title = title_from(text)
        user = Message("user", text)
        conv.messages.append(user)
        self.transcript.append_message(user)
        return self._reply(runs, models)

    def regenerate(self, index: int, runs: Sequence[tuple[str, GenParams]],
                   models: dict[str, str | None] | None = None) -> bool:
        """Replace reply `index` (and everything after it) by a new reply to the same prompt."""
        conv = self.conv
        if self.busy() or conv is None or not 0 < index < len(conv.messages):
            return False
        if conv.messages[index].role != "assistant":
            return False
        self.store.truncate(conv, index)
        self._show(conv)
        return self._reply(runs, models)

    def regenerate_last(self, runs: Sequence[tuple[str, GenParams]],
                        models: dict[str, str | None] | None = None) -> bool:
        """A new reply to the last prompt (Ctrl+R). A prompt left without its reply (a dismissed overflow bar
        keeps it) is answered as it stands: regenerating the reply before it would cut the kept prompt."""
        conv = self.conv
        if self.busy() or conv is None or not conv.messages:
            return False
        if conv.messages[-1].role == "user":
            return self._reply(runs, models)
        last = next((i for i in range(len(conv.messages) - 1, 0, -1) if conv.messages[i].role == "assistant"), None)
        return last is not None and self.regenerate(last, runs, models)

    def edit_resend(self, index: int, text: str, runs: Sequence[tuple[str, GenParams]],
                    models: dict[str, str | None] | None = None, keep_branch: bool = False) -> bool:
        """Replace prompt `index` by `text` and answer it; the later turns go, or with
        `keep_branch` stay in a copy of the chat listed beside it."""
        conv = self.conv
        if self.busy() or conv is None or not 0 <= index < len(conv.messages) or not text.strip():
            return False
        if conv.messages[index].role != "user":
            return False
        if keep_branch:
            self.store.fork(conv, title=f"{conv.title} (before edit)")
        self.store.truncate(conv, index)
        self._show(conv)
        return self.submit(text, runs, models)

    def continue_reply(self, runs: Sequence[tuple[str, GenParams]]) -> bool:
        """Go on with the last reply (cut by the token limit or stopped) where it ended."""
        conv = self.conv
        if self.busy() or conv is None or not conv.messages:
            return False
        reply = conv.messages[-1]
        if reply.role != "assistant" or not reply.content:
            return False
        history = conv.chat_messages(self.default_system)  # ends on the reply: the engine continues it
        self._show(conv, conv.messages[:-1])
        return self._start(history, reply, runs, continuing=True)

    def drop_and_resend(self, runs: Sequence[tuple[str, GenParams]], models: dict[str, str | None] | None = None
                        ) -> bool:
        """The user's choice for an overflowing chat: leave out its oldest turns from now on."""
        conv = self.conv
        if self.busy() or conv is None or not conv.messages or conv.messages[-1].role != "user":
            return False
        conv.overflow = "drop"
        return self._reply(runs, models)

    def continue_in_new_chat(self, runs: Sequence[tuple[str, GenParams]], models: dict[str, str | None] | None = None,
                             turns: int = 2) -> bool:
        """The other choice: a new chat carrying the system prompt, the last `turns` turns and the
        unanswered prompt; the long one stays as it is."""
        conv = self.conv
        if self.busy() or conv is None or not conv.messages or conv.messages[-1].role != "user":
            return False
        starts = [i for i, m in enumerate(conv.messages) if m.role == "user"]
        keep = conv.messages[starts[max(0, len(starts) - 1 - turns)]:]
        fresh = self.store.new()
        fresh.title, fresh.system, fresh.overflow = f"{conv.title} (continued)", conv.system, "drop"
        fresh.sampling = conv.sampling
        fresh.messages = [Message.from_json(m.to_json()) for m in keep]
        self.store.save(fresh)
        self.conv = fresh
        self._show(fresh)
        return self._reply(runs, models)

    def delete_message(self, index: int) -> None:
        conv = self.conv
        if self.busy() or conv is None or not 0 <= index < len(conv.messages):
            return
        before = [Message.from_json(m.to_json()) for m in conv.messages]
        self.store.delete_message(conv, index)
        self._show(conv)
        self.conversationsChanged.emit()
        gone = len(before) - len(conv.messages)
        role = "prompt" if before[index].role == "user" else "reply"
        what = "the prompt and its reply" if gone == 2 else f"the {role}"
        self._offer_undo(f"Deleted {what}.", lambda: self._restore_messages(conv, before))

    # --- undo ----------------------------------------------------------------------------------------

    @property
    def can_undo(self) -> bool:
        return self._undo is not None

    def undo(self) -> bool:
        """Take back the last delete (a chat, or a message with its reply); False when there is none."""
        if self._undo is None or self.busy():
            return False
        restore, self._undo = self._undo, None
        restore()
        self.undoChanged.emit(False)
        if self.errors.isVisible() and self.errors.text() == self._undo_text:
            self.errors.hide()
        return True

    def _offer_undo(self, text: str, restore: Callable[[], None]) -> None:
        self._undo = restore
        self._undo_text = f"{text} Ctrl+Z or Undo brings it back."
        self.errors.show_message(self._undo_text, "info", ("Undo", ChatChoice.UNDO_DELETE))
        self.undoChanged.emit(True)

    def _restore_chat(self, kept: Conversation) -> None:
        self.store.save(kept)
        self.conversationsChanged.emit()
        self.select(kept.id)

    def _restore_messages(self, conv: Conversation, messages: list[Message]) -> None:
        if self.store.conversations.get(conv.id) is not conv:
            return  # the chat itself was deleted since: undoing that brings the chat back first
        conv.messages = messages
        self.store.save(conv)
        if conv is self.conv:
            self._show(conv)
        self.conversationsChanged.emit()

    def _show(self, conv: Conversation, messages: list[Message] | None = None) -> None:
        """Put `conv` (or the given part of it) in the transcript, with the system prompt it uses."""
        self.transcript.set_messages(conv.messages if messages is None else messages,
                                     conv.system_prompt(self.default_system))
        self.samplingChanged.emit(conv.sampling)

    def _reply(self, runs: Sequence[tuple[str, GenParams]], models: dict[str, str | None] | None) -> bool:
        assert self.conv is not None
        params = runs[-1][1]
        # A comparison decodes greedily whatever the chat's preset (its badge checks token for token).
        preset = "greedy" if any(name == "plain" for name, _ in runs) else self.conv.sampling or self.default_sampling
        reply = Message("assistant", "", mode=params.mode, models=models,
                        sampling=sampling_record(preset, params.sampling))
        self.conv.messages.append(reply)
        history = self.conv.chat_messages(self.default_system)  # the empty reply is left out
        return self._start(history, reply, runs)

    def _start(self, history: list[dict[str, str]], reply: Message, runs: Sequence[tuple[str, GenParams]],
               continuing: bool = False) -> bool:
        assert self.conv is not None
        # The chat keeps the system prompt it is answered under (the default, or `gui --system`): reopened,
        # continued or exported later, it says what the model was told. Each reply records its own too.
        if self.conv.system is None:
            self.conv.system = self.default_system
        reply.system = self.conv.system
        self.recorder = ReplyRecorder(self.store, self.conv, reply)  # saves the prompt before anything runs
        self.transcript.begin_reply(reply)
        if continuing:
            self.transcript.append_records(reply.tokens or [], reply.ghosts or [])
        self._comparing = any(name == "plain" for name, _ in runs)
        self._compared = None
        if self._comparing:
            self.compare.begin(runs[-1][1].mode, runs[-1][1].sampling.greedy)
        self.last_finish.clear()
        self.forwarded = {name: [] for name, _ in runs}
        self._error = ""
        self.stats.reset()
        self.errors.hide()
        self.worker.start(history, runs, self.conv.overflow == "drop", self._left_out.get(self.conv.id, 0))
        self.conversationsChanged.emit()
        self.busyChanged.emit(True)
        return True

    def stop(self) -> None:
        self.worker.stop()

    @Slot(str, object)
    def _on_worker_runStarted(self, name: str, _params: GenParams) -> None:
        self._prefilling = True
        self.prefillProgress.emit(0, -1, "target")  # the prompt is being processed: progress follows per batch
        self.stats.reset()
        if self._comparing:
            self.compare.start_run(name)

    @Slot(str, object)
    def _on_worker_events(self, name: str, events: list[Event]) -> None:
        self.forwarded.setdefault(name, []).extend(events)
        if name in CHAT_RUNS and self.recorder is not None:
            tokens, ghosts = self.recorder.add(events)  # journaled before it is shown
            self.transcript.append_records(tokens, ghosts)
        if self._comparing:
            self.compare.append(name, events)
        self.stats.apply(events)
        for event in events:
            if isinstance(event, GovernorEvent) and event.scope == "draft" and event.action in ("disable", "enable"):
                self.governorSwitched.emit(event)
            elif isinstance(event, PrefillEvent):
                self.prefillProgress.emit(event.done, event.total, event.model)
            elif isinstance(event, TokenEvent) and self._prefilling:
                self._prefilling = False
                self.prefillProgress.emit(0, 0, "")

    @Slot(str, object)
    def _on_worker_finished(self, name: str, finish: FinishEvent) -> None:
        self.last_finish[name] = finish
        self.stats.finish(finish.stats)
        if self._comparing:
            self.compare.finish_run(name, finish)
        if name in CHAT_RUNS and self.n_ctx:
            self.contextChanged.emit(finish.stats.n_prompt_tokens + finish.stats.n_tokens, self.n_ctx)
        if name in CHAT_RUNS and self.recorder is not None:
            self.recorder.finish(finish, self.compare.result() if self._comparing else None, self.stats.stats.rolling)
            if self._comparing:
                self._compared = (self.recorder.conv, self.recorder.message)
            self.recorder = None
            self.transcript.finish_reply()

    @Slot(object)
    def _on_worker_partingChecked(self, check: PartingCheck | None) -> None:
        """A comparison parted: the replay of its speculative batches started (None), or says what it found,
        which is stored with the reply beside the margin."""
        if check is None:
            self.compare.parting_checking()
            return
        self.compare.parting_checked(check)
        if self._compared is not None:
            conv, reply = self._compared
            self._compared = None
            reply.compare = self.compare.result() or reply.compare  # the verdict again, with what the replay found
            self.store.save(conv)

    @Slot(int, int)
    def _on_worker_contextUsed(self, used: int, n_ctx: int) -> None:
        self.n_ctx = n_ctx
        self.contextChanged.emit(used, n_ctx)
        if self.recorder is not None:
            self._left_out[self.recorder.conv.id] = 0  # until contextTrimmed says otherwise (the history fits)

    @Slot(int, int)
    def _on_worker_contextOverflow(self, needed: int, n_ctx: int) -> None:
        """Nothing ran: take the empty reply back and let the user choose (never a bare error)."""
        conv, recorder = self.conv, self.recorder
        if conv is not None and recorder is not None and conv.messages and conv.messages[-1] is recorder.message:
            conv.messages.pop()
            self.recorder = None
            self.store.save(conv)
            self._show(conv)
        self.errors.show_message(
            f"This conversation needs {needed:,} tokens, more than the {n_ctx:,}-token context holds with room "
            "for a reply. Your prompt is kept.", "warning", ("Leave out the oldest turns", ChatChoice.DROP_OLDEST),
            more=(("New chat with the last turns", ChatChoice.NEW_CHAT_WITH_LAST),))

    @Slot(int, int, int)
    def _on_worker_contextTrimmed(self, dropped: int, used: int, n_ctx: int) -> None:
        self.contextChanged.emit(used, n_ctx)
        if self.recorder is not None:
            self._left_out[self.recorder.conv.id] = dropped
        if dropped:
            turns = "turn was" if dropped == 1 else "turns were"
            self.errors.show_message(f"The {dropped} oldest {turns} left out of what the model reads, so this "
                                     f"conversation fits its {n_ctx:,}-token context with room for the next "
                                     "turns (the chat keeps them).", "info")

    @Slot(str)
    def _on_worker_error(self, text: str) -> None:
        self._error = text
        self.errors.show_message(text, "error")
        if self._comparing:
            self.compare.error(text)

    @Slot(bool)
    def _on_worker_jobDone(self, ok: bool) -> None:
        if self.recorder is not None:  # an error, or a comparison stopped before its speculative run
            self.recorder.fail(self._error or "stopped before the reply started")
            self.recorder = None
            self.transcript.finish_reply()
        self._comparing = False
        self._prefilling = False
        self.prefillProgress.emit(0, 0, "")
        self.conversationsChanged.emit()
        self.busyChanged.emit(False)
        self._result = ok and not self._error
        self._waiting = [v for v in (self.transcript, *self.compare.views.values()) if v.render_pending()]
        for view in self._waiting:
            view.rendered.connect(self._on_view_rendered)
        if not self._waiting:
            self.replyFinished.emit(self._result)

    @Slot()
    def _on_view_rendered(self) -> None:
        """The reply is announced once its Markdown is on screen (scripts take pictures then)."""
        view = self.sender()
        if view in self._waiting:
            self._waiting.remove(view)
            view.rendered.disconnect(self._on_view_rendered)
            if not self._waiting:
                self.replyFinished.emit(self._result)
