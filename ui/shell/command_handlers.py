"""What the window's commands do: each action of ui.shell.actions, the transcript's per-message controls and the
choices the message bar and the banner offer, each dispatched on its Enum member, never on a string.

The menu entries for the last message drive the same handler as the transcript's links, so the menu and the mouse
cannot disagree; the View menu's switches follow the legend's boxes and the mode selector both ways.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum, auto
from typing import Any

from PySide6.QtCore import QObject, Slot
from PySide6.QtWidgets import QApplication, QDialog

from app.engine.drafters import CHOICES
from ui.chat.chat_controller import ChatChoice
from ui.chat.message_dialogs import edit_prompt_dialog, system_prompt_dialog
from ui.chat.transcript_view import MessageAction
from ui.shell.about_dialog import show_about
from ui.shell.prompt_queue import QueueChoice
from ui.shell.spec_banner import BannerChoice


class LoadChoice(Enum):
    """The message bar's buttons about loading."""

    RELOAD = auto()  # "Reload now": settings that apply when the models load
    LOAD_ANYWAY = auto()  # "Load anyway": a pair predicted not to fit


class CommandHandlers(QObject):
    def __init__(self, window: Any) -> None:
        super().__init__(window)
        self._w = window
        self.dialog: QDialog | None = None  # the edit or system prompt dialog that is open (tests)
        a = window.commands
        for action, slot in (
            (a.new, self.new_chat), (a.send, window.prompt.submit), (a.stop, self.stop),
            (a.search, window.conversations.focus_search), (a.quit, window.close),
            (a.regenerate, self.regenerate_last), (a.continue_reply, self.continue_last), (a.system, self.edit_system),
            (a.export_md, lambda: window.export_chat("md")), (a.export_json, lambda: window.export_chat("json")),
            (a.undo, window.controller.undo), (a.about, self.about), (a.models, window.open_picker),
            (a.settings, window.open_settings), (a.rename_chat, self.rename_chat), (a.delete_chat, self.delete_chat),
            (a.copy_reply, lambda: self._on_last("assistant", MessageAction.COPY)),
            (a.edit_prompt, lambda: self._on_last("user", MessageAction.EDIT)),
            (a.delete_last, lambda: self._on_last(None, MessageAction.DELETE)),
            (a.replay, window.compare_view.replay_button.click),
        ):
            action.triggered.connect(slot)
        for action, box in ((a.colours, window.legend.colours_box), (a.ghosts, window.legend.ghosts_box)):
            action.setChecked(box.isChecked())
            action.toggled.connect(box.setChecked)
            box.toggled.connect(action.setChecked)
        for mode in CHOICES:
            a.mode(mode).setChecked(window.mode_box.currentText() == mode)
            a.mode(mode).triggered.connect(lambda _on=False, m=mode: window.mode_box.setCurrentText(m))
        window.mode_box.currentTextChanged.connect(lambda mode: a.mode(mode).setChecked(True))
        window.controller.undoChanged.connect(a.undo.setEnabled)
        window.send_button.clicked.connect(window.prompt.submit)
        window.stop_button.clicked.connect(self.stop)
        window.transcript.messageAction.connect(self.on_message_action)
        window.errors.actionTriggered.connect(self.on_choice)
        window.banner.actionTriggered.connect(self.on_choice)
        c = window.controller
        self._choices: dict[Enum, Callable[[], Any]] = {
            QueueChoice.UNQUEUE: self._unqueue,
            ChatChoice.DROP_OLDEST: lambda: self._resend(c.drop_and_resend),
            ChatChoice.NEW_CHAT_WITH_LAST: lambda: self._resend(c.continue_in_new_chat),
            LoadChoice.RELOAD: lambda: self._reload(None),
            LoadChoice.LOAD_ANYWAY: lambda: self._reload(True),
            BannerChoice.CHOOSE_MODELS: window.open_picker,
            BannerChoice.SPECULATE: lambda: window.mode_box.setCurrentText("auto"),
            BannerChoice.TARGET_ONLY: self._target_only,
        }

    # --- the message bar's and the banner's choices ------------------------------------------------------

    @Slot(object)
    def on_choice(self, choice: Enum) -> None:
        handler = self._choices.get(choice)  # the controller's own (Undo) are not ours
        if handler is not None:
            handler()

    def _unqueue(self) -> None:
        self._w.errors.hide()
        self._w.queue.unqueue()
        self._w.prompt.setFocus()

    def _resend(self, how: Callable[..., Any]) -> None:
        self._w.errors.hide()
        if self.ready():
            policy = self._w.policy()
            how(policy.runs(), policy.model_names())

    def _reload(self, force: bool | None) -> None:
        if self._w.models.pair is not None:
            self._w.errors.hide()
            self._w.load_models(*self._w.models.pair, force=force)

    def _target_only(self) -> None:
        if self._w.models.pair is not None:
            self._w.mode_box.setCurrentText("lookup")
            self._w.load_models(self._w.models.pair[0], None)

    # --- the chat ---------------------------------------------------------------------------------------

    def ready(self) -> bool:
        if self._w.controller.busy():
            self._w.errors.show_message("Wait for the reply to end (or stop it) first.", "info")
            return False
        if self._w.loaded is None:
            self._w.errors.show_message("No models are loaded: choose a pair (Ctrl+M) first.", "warning")
            return False
        return True

    def new_chat(self) -> None:
        self._w.controller.new_chat()
        self._w.conversations.list.setCurrentRow(-1)
        self._w.prompt.setFocus()

    def stop(self) -> None:
        if not self._w.worker.cancel_load():  # Stop (Esc) during a load cancels it
            self._w.controller.stop()

    def regenerate_last(self) -> None:
        if self.ready():
            policy = self._w.policy()
            self._w.controller.regenerate_last(policy.runs(), policy.model_names())

    def continue_last(self) -> None:
        if self.ready() and not self._w.controller.continue_reply(self._w.policy().chat_run()):
            self._w.errors.show_message("There is no reply to continue: the last message is not a reply.", "info")

    def edit_system(self) -> None:
        c = self._w.controller
        dialog = system_prompt_dialog(c.system_prompt(), self._w.settings.system_prompt, self._w)
        dialog.accepted.connect(lambda: self._w.set_system_prompt(dialog.text(), dialog.option.isChecked()))
        self._open(dialog)

    def about(self) -> None:
        show_about(self._w, self._w.loaded.backends if self._w.loaded is not None else "")

    def rename_chat(self) -> None:
        conversations = self._w.conversations
        conversations._rename(conversations.list.currentItem())

    def delete_chat(self) -> None:
        conv = self._w.controller.conv
        if conv is not None:
            self._w.controller.delete(conv.id)

    # --- one message ------------------------------------------------------------------------------------

    @Slot(object, int)
    def on_message_action(self, action: MessageAction, index: int) -> None:
        w, c = self._w, self._w.controller
        conv = c.conv
        message = conv.messages[index] if conv is not None and 0 <= index < len(conv.messages) else None
        if action is MessageAction.SYSTEM:
            self.edit_system()
            return
        if message is None:
            return
        match action:
            case MessageAction.COPY:
                QApplication.clipboard().setText(message.content)
                w.statusBar().showMessage("Message copied", 2000)
            case MessageAction.DELETE if not c.busy():
                c.delete_message(index)
            case MessageAction.REGENERATE if self.ready():
                policy = w.policy()
                c.regenerate(index, policy.runs(), policy.model_names())
            case MessageAction.CONTINUE if index != len(conv.messages) - 1:  # type: ignore[union-attr]
                w.errors.show_message("Only the last reply can be continued; Edit its prompt to start a new "
                                      "branch from there.", "info")
            case MessageAction.CONTINUE if self.ready():
                c.continue_reply(w.policy().chat_run())
            case MessageAction.EDIT if not c.busy():
                dialog = edit_prompt_dialog(message.content, w)
                dialog.accepted.connect(lambda: self.ready() and c.edit_resend(
                    index, dialog.text(), w.policy().runs(), w.policy().model_names(),
                    keep_branch=dialog.option.isChecked()))
                self._open(dialog)

    def _on_last(self, role: str | None, action: MessageAction) -> None:
        """The per-message control `action` on the last message (of `role`), as the transcript's link sends it."""
        conv = self._w.controller.conv
        messages = conv.messages if conv is not None else []
        index = next((i for i in range(len(messages) - 1, -1, -1) if role in (None, messages[i].role)), None)
        if index is None:
            self._w.errors.show_message("This chat has no such message yet.", "info")
            return
        self.on_message_action(action, index)

    def _open(self, dialog: QDialog) -> None:
        self.dialog = dialog
        dialog.finished.connect(lambda _r: setattr(self, "dialog", None))
        dialog.open()
