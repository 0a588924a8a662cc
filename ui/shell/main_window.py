"""The main window: conversations | transcript (or comparison) and prompt | live statistics.

The window is built without touching a model; loading runs on the worker thread afterwards, with
its progress in the status bar, so the window appears at once.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from PySide6.QtCore import QByteArray, QEvent, QRect, QSize, QTimer, Signal, Slot
from PySide6.QtGui import QCloseEvent, QGuiApplication
from PySide6.QtWidgets import (
    QApplication,
    QDialog,
    QHBoxLayout,
    QLabel,
    QMainWindow,
    QProgressBar,
    QPushButton,
    QSplitter,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from app import settings as settings_mod
from app.chat.conversations import ChatStore
from app.engine.drafters import CHOICES, auto_mode
from app.engine.events import GovernorEvent
from app.engine.session import GenParams
from app.llama_backend import supports_gpu_offload
from app.models.recommended_sampling import CHAT_DEFAULT, recommended_for
from app.settings import Settings
from ui.base.message_bar import MessageBar
from ui.base.worker import GenerationWorker, LoadInfo
from ui.chat.chat_controller import ChatController
from ui.chat.compare_view import CompareView
from ui.chat.conversation_list import ConversationList
from ui.chat.prompt_box import PromptBox
from ui.chat.sampling_box import SamplingBox, describe_values
from ui.chat.transcript_view import TranscriptView
from ui.picker.models_controller import ModelsController
from ui.shell.about_dialog import show_about
from ui.shell.main_toolbar import MainToolBar
from ui.shell.settings_dialog import RUNTIME_FIELDS, SettingsDialog
from ui.shell.spec_banner import SpecBanner, SpecState
from ui.stats.side_panel import SidePanel

PREFERRED_SIZE = QSize(1280, 800)


def on_real_screen() -> bool:
    """False on the offscreen platform: its 800x600 "screen" is nobody's, so scripted runs and their pictures
    keep the default size, and the place a test window had is not kept."""
    return QGuiApplication.platformName() != "offscreen"


def fitted_geometry(available: QRect, preferred: QSize = PREFERRED_SIZE) -> QRect:
    """The first window's place: the preferred size, shrunk to 95% of a smaller screen's free area (a 1366x768
    laptop less its panel), centred on it."""
    width = min(preferred.width(), int(available.width() * 0.95))
    height = min(preferred.height(), int(available.height() * 0.95))
    rect = QRect(0, 0, width, height)
    rect.moveCenter(available.center())
    return rect


class MainWindow(QMainWindow):
    modelsLoaded = Signal(object)  # LoadInfo
    generationFinished = Signal(bool)  # a reply has ended and is rendered
    pickerOpened = Signal(object)  # the model picker dialog
    settingsOpened = Signal(object)  # the settings dialog
    # How long closing waits for the engine to end its step (a reply stops within one; a prompt batch on a slow
    # CPU can take longer); past it the app exits without the engine thread, its chats saved.
    close_timeout_ms = 120_000

    def place_on_screen(self) -> None:
        """Before the first show: where the window was last closed, else fitted to the screen it opens on (at
        1280x800 it ran off a 1024x768 screen, the side panel out of reach). Qt moves a saved place that is no
        longer on any screen back onto one."""
        if not on_real_screen():
            return
        saved = self.settings.window_geometry
        if saved and self.restoreGeometry(QByteArray.fromBase64(saved.encode("ascii", "ignore"))):
            return
        screen = self.screen() or QGuiApplication.primaryScreen()
        if screen is not None:
            self.setGeometry(fitted_geometry(screen.availableGeometry()))

    def __init__(self, settings: Settings | None = None, store: ChatStore | None = None,
                 save_settings: bool = True) -> None:
        super().__init__()
        self.settings = settings or Settings()
        self._save_settings = save_settings
        self.setWindowTitle("SpecChat")
        self.resize(PREFERRED_SIZE)
        self.store = store or ChatStore()
        self.store.load_all(lazy=True)
        self.worker = GenerationWorker(self)
        self._pending_prompt: str | None = None
        self._auto_mode = False
        self._mode_fallback = ""  # the mode the user chose that the loaded models cannot run (the banner says so)
        self.force_load = False  # --force: load even when the pair is predicted not to fit
        self.banner_governor: GovernorEvent | None = None
        self._build()
        self._build_actions()
        self.controller = ChatController(self.store, self.worker, self.transcript, self.compare_view,
                                         self.stats, self.errors, self)
        self.controller.default_system = self.settings.system_prompt
        self.controller.default_sampling = self.settings.sampling
        self.transcript.set_system(self.settings.system_prompt)
        self.dialog: QDialog | None = None  # the edit or system prompt dialog that is open (tests)
        self.models = ModelsController(self.worker, self.model_label, self.progress, self.meter,
                                       self.side.meter_box, self.errors, self)
        self._connect()
        from ui.shell.local_server import attach

        self.local_server = attach(self)  # the OpenAI-compatible server, on while Settings say so
        self.conversations.refresh()
        self._sync_enabled()
        self._update_banner()
        if self.store.problems:
            self.errors.show_message("\n".join(self.store.problems), "warning")
        unsent = self.store.unsent()
        self._unsent_on_disk = bool(unsent)  # cleared once a send puts it in the chat: no file read per send
        if unsent:
            self.prompt.setPlainText(unsent)  # queued or typed when the window last closed: nothing typed is lost
        self.prompt.setFocus()  # type at once: the toolbar's combo box took the first focus

    # --- layout --------------------------------------------------------------------------------------

    def _build(self) -> None:
        self.conversations = ConversationList(self.store.search)
        self.transcript = TranscriptView(actions=True)
        self.transcript.set_overlay(self.settings.show_colours, self.settings.show_ghosts)
        self.compare_view = CompareView()
        self.stack = QStackedWidget()
        self.stack.addWidget(self.transcript)
        self.stack.addWidget(self.compare_view)
        self.errors = MessageBar()
        self.banner = SpecBanner()
        self.prompt = PromptBox()
        self.send_button = QPushButton("Send")
        self.send_button.setToolTip("Send (Enter or Ctrl+Enter)")
        self.stop_button = QPushButton("Stop")
        self.stop_button.setToolTip("Stop the reply (Esc)")
        buttons = QVBoxLayout()
        buttons.addWidget(self.send_button)
        buttons.addWidget(self.stop_button)
        buttons.addStretch(1)
        prompt_row = QHBoxLayout()
        prompt_row.addWidget(self.prompt, 1)
        prompt_row.addLayout(buttons)
        # This chat's own sampling, under the prompt: which preset the next reply uses, in view.
        self.sampling_box = SamplingBox()
        self.sampling_box.set_default(self.settings.sampling)
        self.sampling_label = QLabel("Sampling for this chat")
        self.sampling_label.setBuddy(self.sampling_box)
        composer_row = QHBoxLayout()
        composer_row.addWidget(self.sampling_label)
        composer_row.addWidget(self.sampling_box)
        composer_row.addStretch(1)
        center = QWidget()
        col = QVBoxLayout(center)
        col.setContentsMargins(4, 4, 4, 4)
        col.addWidget(self.errors)
        col.addWidget(self.banner)
        col.addWidget(self.stack, 1)
        col.addLayout(prompt_row)
        col.addLayout(composer_row)

        self.side = SidePanel(self.settings)
        self.stats, self.legend, self.meter = self.side.stats, self.side.legend, self.side.meter

        splitter = QSplitter()
        splitter.addWidget(self.conversations)
        splitter.addWidget(center)
        splitter.addWidget(self.side)
        splitter.setStretchFactor(1, 1)
        splitter.setSizes([210, 760, 310])
        self.setCentralWidget(splitter)

        self.model_label = QLabel("No models loaded")
        self.progress = QProgressBar()
        self.progress.setMaximumWidth(220)
        self.progress.setRange(0, 100)
        self.progress.hide()
        self.statusBar().addWidget(self.model_label, 1)
        self.context_bar = QProgressBar()
        self.context_bar.setMaximumWidth(260)
        self.context_bar.setMinimumWidth(190)  # "context 12,345 / 32,768" on one line
        self.context_bar.setToolTip("Tokens this conversation fills in the model's context (the last reply "
                                    "included). When it would overflow, you choose what to leave out.")
        self.context_bar.hide()
        self.statusBar().addPermanentWidget(self.context_bar)
        self.statusBar().addPermanentWidget(self.progress)

    def _build_actions(self) -> None:
        self.toolbar = MainToolBar(self, self.settings)
        self.addToolBar(self.toolbar)
        t = self.toolbar
        self.new_action, self.models_action, self.compare_action = t.new_action, t.models_action, t.compare_action
        self.mode_box = t.mode_box
        t.new_action.triggered.connect(self._on_new_action_triggered)
        t.models_action.triggered.connect(self._on_models_action_triggered)
        t.settings_action.triggered.connect(self._on_settings_action_triggered)
        t.compare_action.toggled.connect(self._on_compare_action_toggled)
        t.send_action.triggered.connect(self._on_send_action_triggered)
        t.stop_action.triggered.connect(self._on_stop_action_triggered)
        t.search_action.triggered.connect(self._on_search_action_triggered)
        t.quit_action.triggered.connect(self.close)
        self.regenerate_action = t._action("Regenerate reply", "Ctrl+R", "A new reply to the last prompt")
        self.continue_action = t._action("Continue reply", "Ctrl+Shift+R", "Go on with a reply cut by the token limit")
        self.system_action = t._action("System prompt…", "Ctrl+Shift+S", "This chat's system prompt")
        self.export_md_action = t._action("Export chat as Markdown…", "Ctrl+E")
        self.export_json_action = t._action("Export chat as JSON…", "Ctrl+Shift+E")
        self.regenerate_action.triggered.connect(self._on_regenerate_action_triggered)
        self.continue_action.triggered.connect(self._on_continue_action_triggered)
        self.system_action.triggered.connect(self._on_system_action_triggered)
        self.export_md_action.triggered.connect(lambda: self.export_chat("md"))
        self.export_json_action.triggered.connect(lambda: self.export_chat("json"))
        self.undo_action = t._action("Undo delete", "Ctrl+Z", "Bring back the last deleted chat or message")
        self.undo_action.setEnabled(False)
        self.about_action = t._action("About SpecChat…", None, "Version, llama.cpp build and its backends")
        self.about_action.triggered.connect(self._on_about_action_triggered)
        from ui.shell.more_actions import MoreActions

        self.more = MoreActions(self)
        # A menu bar with every action and its shortcut, so nothing is reachable by key alone.
        bar = self.menuBar()
        for title, actions in (
            ("&File", (t.new_action, None, self.export_md_action, self.export_json_action, None, t.quit_action)),
            ("&Chat", (t.send_action, t.stop_action, None, self.regenerate_action, self.continue_action,
                       self.system_action, None, *self.more.chat_menu(), None, self.undo_action, None,
                       t.compare_action, t.search_action)),
            ("&View", self.more.view_menu()),
            ("&Models", (t.models_action, t.settings_action)),
            ("&Help", (self.about_action,)),
        ):
            menu = bar.addMenu(title)
            for action in actions:
                if action is None:
                    menu.addSeparator()
                else:
                    menu.addAction(action)

    def _connect(self) -> None:
        self.undo_action.triggered.connect(self.controller.undo)
        self.controller.undoChanged.connect(self.undo_action.setEnabled)
        self.prompt.submitted.connect(self._on_prompt_submitted)
        self.send_button.clicked.connect(self._on_send_action_triggered)
        self.stop_button.clicked.connect(self._on_stop_action_triggered)
        self.conversations.selected.connect(self.controller.select)
        self.conversations.newRequested.connect(self._on_new_action_triggered)
        self.conversations.renameRequested.connect(self.controller.rename)
        self.conversations.deleteRequested.connect(self.controller.delete)
        self.transcript.messageAction.connect(self._on_transcript_messageAction)
        self.controller.contextChanged.connect(self._on_controller_contextChanged)
        self.controller.prefillProgress.connect(self._on_controller_prefillProgress)
        self.controller.samplingChanged.connect(self._on_controller_samplingChanged)
        self.sampling_box.presetChosen.connect(self._on_sampling_box_presetChosen)
        self.controller.conversationsChanged.connect(self._on_controller_conversationsChanged)
        self.controller.busyChanged.connect(self._on_controller_busyChanged)
        self.controller.replyFinished.connect(self._on_controller_replyFinished)
        self.controller.governorSwitched.connect(self._on_controller_governorSwitched)
        self.legend.coloursToggled.connect(self._on_legend_coloursToggled)
        self.legend.ghostsToggled.connect(self._on_legend_ghostsToggled)
        self.banner.actionTriggered.connect(self._on_banner_actionTriggered)
        self.errors.actionTriggered.connect(self._on_errors_actionTriggered)
        self.mode_box.currentTextChanged.connect(self._on_mode_box_currentTextChanged)
        self.models.modelsLoaded.connect(self._on_models_modelsLoaded)
        self.models.loadFailed.connect(self._on_models_loadFailed)
        self._on_compare_action_toggled(self.settings.compare)
        self._update_sampling_details()

    # --- models --------------------------------------------------------------------------------------

    @property
    def loaded(self) -> LoadInfo | None:
        return self.models.loaded

    def load_models(self, target: Path, draft: Path | None, force: bool | None = None) -> None:
        """Load a pair on the worker thread; the window stays usable and shows progress."""
        if self.controller.busy():
            self.errors.show_message("Stop the current reply before loading other models.", "warning")
            return
        if self.models.load(target, draft, self.settings, self.force_load if force is None else force):
            self._update_banner()
            self._sync_enabled()

    def open_picker(self) -> QDialog | None:
        dialog = self.models.open_picker(self, self.settings)
        if dialog is not None:
            dialog.choiceMade.connect(self._on_picker_choiceMade)
            self.pickerOpened.emit(dialog)
        return dialog

    @Slot(object)
    def _on_picker_choiceMade(self, choice: Any) -> None:
        self.settings = choice.apply(self.settings)
        if self._save_settings:
            saved, _warning = settings_mod.load()
            settings_mod.save(choice.apply(saved))
        self.mode_box.setCurrentText(choice.mode)
        self.load_models(choice.target, choice.draft)

    def _remember_pair(self) -> None:
        """The pair that loaded opens again at the next start, also when it came from -m/-md."""
        if not self._save_settings or self.models.pair is None:
            return
        target, draft = (str(p) if p else None for p in self.models.pair)
        saved, _warning = settings_mod.load()
        if (saved.target_path, saved.draft_path) != (target, draft):
            settings_mod.save(replace(saved, target_path=target, draft_path=draft))

    @Slot(object)
    def _on_models_modelsLoaded(self, info: LoadInfo) -> None:
        self._remember_pair()
        self._update_sampling_details()
        available = {"auto", *info.modes}  # draft modes need a draft model, mtp a target with an MTP head
        for i, mode in enumerate(CHOICES):
            self.mode_box.model().item(i).setEnabled(mode in available)
        self._mode_fallback = ""
        if self.mode_box.currentText() not in available:
            self._mode_fallback = self.mode_box.currentText()  # said in the banner: never silently another mode
            self._auto_mode = True  # a fallback for this pair, not the user's new preference
            self.mode_box.setCurrentText("lookup")
            self._auto_mode = False
        self._update_banner()
        self._sync_enabled()
        self.modelsLoaded.emit(info)
        if self._pending_prompt is not None:
            text, self._pending_prompt = self._pending_prompt, None
            if self.errors.level == "info" and self.errors.isVisible():
                self.errors.hide()  # the "queued" note
            self.submit(text, from_box=False)

    @Slot(str, str)
    def _on_models_loadFailed(self, kind: str, message: str) -> None:
        if kind == "wontfit":
            self.errors.show_message(message, "error", ("Load anyway", "force"))
        elif kind == "cancelled":
            # Back to where the user was: the pair in use before (the worker closed it for this load), or the picker.
            previous = self.models.previous
            if previous is not None:
                self.errors.show_message(f"{message} Loading {previous[0].name} again.", "info")
                QTimer.singleShot(0, lambda: self.load_models(*previous))
            else:
                self.errors.show_message(message, "info")
                QTimer.singleShot(0, self.open_picker)
        self._unqueue()  # the queued prompt goes back into the box: nothing typed is lost
        self._update_banner()
        self._sync_enabled()
        self.generationFinished.emit(False)  # scripted runs waiting for a reply must not hang

    # --- generation ----------------------------------------------------------------------------------

    def submit(self, text: str, from_box: bool = True) -> bool:
        """Send `text`. While models load, one prompt waits in a visible queue; `from_box`: the text
        came from the prompt box, which is cleared once it is sent or queued."""
        if self.controller.busy():
            return False
        if self.loaded is None:
            if not self.worker.is_loading():
                self.errors.show_message("No models are loaded: choose a pair (Ctrl+M) first.", "warning")
                return False
            if self._pending_prompt is not None:
                self.errors.show_message("A prompt is already waiting for the models; this one stays in the box "
                                         "until that one has its reply.", "info", ("Edit the waiting one", "unqueue"))
                return False
            self._pending_prompt = text  # sent as soon as the models are in
            self.store.keep_unsent(text)  # a crash before the models are in must not lose it
            self._unsent_on_disk = True
            if from_box:
                self.prompt.clear_after_send()
            shown = text if len(text) <= 60 else text[:59] + "…"
            self.errors.show_message(f"Waiting for the models to load, then sending: “{shown}”", "info",
                                     ("Edit", "unqueue"))
            return True
        self.banner_governor = None
        ok = self.controller.submit(text, self.runs(), self._models())
        if ok:
            if from_box:
                self.prompt.clear_after_send()
            if self._unsent_on_disk:
                self.store.keep_unsent("")  # it is in the chat now
                self._unsent_on_disk = False
            self._update_banner()
        return ok

    def queued_prompt(self) -> str | None:
        return self._pending_prompt

    def _unqueue(self) -> None:
        """Take the waiting prompt back into the box (before anything typed since)."""
        text, self._pending_prompt = self._pending_prompt, None
        if text:
            typed = self.prompt.toPlainText()
            self.prompt.setPlainText(text + ("\n\n" + typed if typed.strip() else ""))

    def _mode(self, chosen: str | None = None) -> str:
        """The mode the next reply runs: "auto" resolved for the loaded pair and this build, so the
        transcript, the comparison and the banner name the mode that really ran."""
        chosen = chosen or self.mode_box.currentText()
        has_mtp = self.loaded is not None and "mtp" in self.loaded.modes
        return auto_mode(self.models.has_draft, supports_gpu_offload(), has_mtp) if chosen == "auto" else chosen

    def runs(self) -> list[tuple[str, GenParams]]:
        mode = self._mode()
        if not self.compare_action.isChecked():
            # The chat's own sampling preset, else the settings'; "recommended" takes the loaded target's
            # recommendation.
            recommended = recommended_for(self.loaded.config.target).values if self.loaded is not None else None
            preset = self.controller.sampling_preset() or self.settings.sampling
            return [("chat", self.settings.gen_params(mode, recommended, preset))]
        # The comparison is greedy: its badge checks the two outputs token for token.
        params = self.settings.gen_params(mode, preset="greedy")
        if mode == "none":
            params = params.with_mode(self._mode("auto"))
        plain = replace(self.settings.gen_params("none", preset="greedy"), track_margins=True)
        return [("plain", plain), ("spec", params)]

    def _models(self) -> dict[str, str | None]:
        """Model names stored with the reply (shown beside it; the mode is stored on its own)."""
        if self.loaded is None:
            return {}
        config = self.loaded.config
        mode = self.runs()[-1][1].mode
        draft = Path(config.draft).stem if config.draft and mode == "draft" else None
        return {"target": Path(config.target).stem, "draft": draft}

    # --- message controls ---------------------------------------------------------------------------

    def _ready(self) -> bool:
        if self.controller.busy():
            self.errors.show_message("Wait for the reply to end (or stop it) first.", "info")
            return False
        if self.loaded is None:
            self.errors.show_message("No models are loaded: choose a pair (Ctrl+M) first.", "warning")
            return False
        return True

    @Slot(str, int)
    def _on_transcript_messageAction(self, action: str, index: int) -> None:
        conv = self.controller.conv
        message = conv.messages[index] if conv is not None and 0 <= index < len(conv.messages) else None
        if action == "system":
            self._on_system_action_triggered()
        elif message is None:
            return
        elif action == "copy":
            QApplication.clipboard().setText(message.content)
            self.statusBar().showMessage("Message copied", 2000)
        elif action == "delete" and not self.controller.busy():
            self.controller.delete_message(index)
        elif action == "regenerate" and self._ready():
            self.controller.regenerate(index, self.runs(), self._models())
        elif action == "continue" and index != len(conv.messages) - 1:  # type: ignore[union-attr]
            self.errors.show_message("Only the last reply can be continued; Edit its prompt to start a new "
                                     "branch from there.", "info")
        elif action == "continue" and self._ready():
            self.controller.continue_reply(self._chat_run())
        elif action == "edit" and not self.controller.busy():
            from ui.chat.message_dialogs import edit_prompt_dialog

            dialog = edit_prompt_dialog(message.content, self)
            dialog.accepted.connect(lambda: self._ready() and self.controller.edit_resend(
                index, dialog.text(), self.runs(), self._models(), keep_branch=dialog.option.isChecked()))
            self._open_dialog(dialog)

    def _open_dialog(self, dialog: QDialog) -> None:
        self.dialog = dialog
        dialog.finished.connect(lambda _r: setattr(self, "dialog", None))
        dialog.open()

    def _chat_run(self) -> list[tuple[str, GenParams]]:
        """One run, no comparison: continuing a reply extends the chat's answer only."""
        return [("chat", self.runs()[-1][1])]

    @Slot()
    def _on_regenerate_action_triggered(self) -> None:
        if self._ready():
            self.controller.regenerate_last(self.runs(), self._models())

    @Slot()
    def _on_continue_action_triggered(self) -> None:
        if self._ready() and not self.controller.continue_reply(self._chat_run()):
            self.errors.show_message("There is no reply to continue: the last message is not a reply.", "info")

    @Slot()
    def _on_system_action_triggered(self) -> None:
        from ui.chat.message_dialogs import system_prompt_dialog

        dialog = system_prompt_dialog(self.controller.system_prompt(), self.settings.system_prompt, self)
        dialog.accepted.connect(lambda: self.set_system_prompt(dialog.text(), dialog.option.isChecked()))
        self._open_dialog(dialog)

    def set_system_prompt(self, text: str, as_default: bool = False) -> None:
        self.controller.set_system(text)
        if as_default:
            self._remember(system_prompt=text)
            self.controller.default_system = text

    def export_chat(self, fmt: str, path: Path | None = None) -> Path | None:
        """Save the current chat as Markdown or JSON (asks where unless `path` is given)."""
        from app.atomic import atomic_write_text
        from app.chat.export import export

        conv = self.controller.conv
        if conv is None or not conv.messages:
            self.errors.show_message("There is nothing to export yet: this chat is empty.", "info")
            return None
        if path is None:
            from PySide6.QtWidgets import QFileDialog

            name = "".join(c if c.isalnum() or c in " -_" else "_" for c in conv.title).strip() or conv.id
            chosen, _ = QFileDialog.getSaveFileName(self, "Export chat", str(Path.home() / f"{name}.{fmt}"),
                                                    "Markdown (*.md)" if fmt == "md" else "JSON (*.json)")
            if not chosen:
                return None
            path = Path(chosen)
        try:
            atomic_write_text(path, export(conv, fmt, self.settings.system_prompt))
        except OSError as exc:
            self.errors.show_message(f"Could not write {path}: {exc.strerror or exc}. Choose another folder.", "error")
            return None
        self.statusBar().showMessage(f"Exported to {path}", 4000)
        return path

    @Slot(str)
    def _on_prompt_submitted(self, text: str) -> None:
        self.submit(text)

    @Slot()
    def _on_send_action_triggered(self) -> None:
        self.prompt.submit()

    @Slot()
    def _on_stop_action_triggered(self) -> None:
        if not self.worker.cancel_load():  # Stop (Esc) during a load cancels it
            self.controller.stop()

    @Slot(bool)
    def _on_controller_busyChanged(self, _busy: bool) -> None:
        self._sync_enabled()

    def _sync_enabled(self) -> None:
        generating = self.controller.busy()
        self.send_button.setEnabled(not generating and (self.loaded is not None or self.worker.is_loading()))
        loading = self.worker.is_loading()
        self.stop_button.setEnabled(generating or loading)
        self.stop_button.setToolTip("Cancel loading the models (Esc)" if loading and not generating
                                    else "Stop the reply (Esc)")
        self.conversations.setEnabled(not generating)
        self.mode_box.setEnabled(not generating)
        self.sampling_box.setEnabled(not generating and not self.compare_action.isChecked())
        self.compare_action.setEnabled(not generating)
        self.models_action.setEnabled(not generating and not loading)  # a load in progress is left alone
        for action in (self.regenerate_action, self.continue_action):
            action.setEnabled(not generating and self.loaded is not None)

    @Slot(bool)
    def _on_controller_replyFinished(self, ok: bool) -> None:
        self.generationFinished.emit(ok)

    @Slot()
    def _on_about_action_triggered(self) -> None:
        show_about(self, self.loaded.backends if self.loaded is not None else "")

    @Slot(object)
    def _on_controller_governorSwitched(self, event: GovernorEvent) -> None:
        self.banner_governor = event
        self._update_banner()

    def _update_banner(self) -> None:
        if self.loaded is None and not self.models.incompatible:
            self.banner.hide()
            return
        self.banner.set_state(SpecState(self._mode(), self.models.has_draft, self.models.incompatible,
                                        self.banner_governor, auto=self.mode_box.currentText() == "auto",
                                        gpu_note=self.loaded.gpu_note if self.loaded is not None else "",
                                        fallback=self._mode_fallback))

    @Slot(str)
    def _on_banner_actionTriggered(self, key: str) -> None:
        if key == "picker":
            self.open_picker()
        elif key == "speculate":
            self.mode_box.setCurrentText("auto")
        elif key == "target_only" and self.models.pair is not None:
            self.mode_box.setCurrentText("lookup")
            self.load_models(self.models.pair[0], None)

    # --- toggles and navigation ---------------------------------------------------------------------

    @Slot(bool)
    def _on_compare_action_toggled(self, on: bool) -> None:
        self.stack.setCurrentWidget(self.compare_view if on else self.transcript)
        self._remember(compare=on)
        self._sync_enabled()
        self.sampling_label.setText("Sampling: greedy while comparing" if on else "Sampling for this chat")

    @Slot(object)
    def _on_sampling_box_presetChosen(self, preset: str | None) -> None:
        self.controller.set_sampling(preset)

    @Slot(object)
    def _on_controller_samplingChanged(self, preset: str | None) -> None:
        self.sampling_box.set_preset(preset)

    def _update_sampling_details(self) -> None:
        """The values behind each preset, for the sampling box's tooltips."""
        recommended = recommended_for(self.loaded.config.target) if self.loaded is not None else None
        self.sampling_box.set_details({
            "recommended": (describe_values(recommended.values) + f" ({recommended.source})" if recommended
                            else describe_values(CHAT_DEFAULT) + " until a model with its own is loaded"),
            "greedy": "always the most likely token, no penalties: the same reply every time",
            "custom": describe_values(self.settings.custom_sampling()) + " (Settings)",
        })

    @Slot(str)
    def _on_mode_box_currentTextChanged(self, mode: str) -> None:
        self.banner_governor = None
        if not self._auto_mode:
            self._mode_fallback = ""  # the user picked a mode: the fallback note is done
        self._update_banner()
        if not self._auto_mode:
            self._remember(mode=mode)

    @Slot(bool)
    def _on_legend_coloursToggled(self, on: bool) -> None:
        self._overlay(show_colours=on)

    @Slot(bool)
    def _on_legend_ghostsToggled(self, on: bool) -> None:
        self._overlay(show_ghosts=on)

    def _overlay(self, **change: bool) -> None:
        self._remember(**change)
        for view in (self.transcript, *self.compare_view.views.values()):
            view.set_overlay(self.settings.show_colours, self.settings.show_ghosts)

    def set_server_enabled(self, on: bool) -> None:
        self._remember(server_enabled=on)
        self.local_server.apply(self.settings)

    def _remember(self, **change: Any) -> None:
        """Apply a setting now and keep it; command-line overrides are never written back."""
        if all(getattr(self.settings, k) == v for k, v in change.items()):
            return
        self.settings = replace(self.settings, **change)
        if not self._save_settings:
            return
        saved, _warning = settings_mod.load()
        settings_mod.save(replace(saved, **change))

    @Slot()
    def _on_new_action_triggered(self) -> None:
        self.controller.new_chat()
        self.conversations.list.setCurrentRow(-1)
        self.prompt.setFocus()

    @Slot()
    def _on_models_action_triggered(self) -> None:
        self.open_picker()

    @Slot()
    def _on_settings_action_triggered(self) -> None:
        dialog = SettingsDialog(self.settings, self)
        dialog.accepted.connect(lambda: self._apply_settings(dialog.changes()))
        dialog.open()  # window-modal, never blocks the event loop
        self.settingsOpened.emit(dialog)

    def _apply_settings(self, changes: dict[str, Any]) -> None:
        self._remember(**changes)
        self.local_server.apply(self.settings)
        self.local_server.refresh_params()
        if "sampling" in changes:
            self.controller.default_sampling = self.settings.sampling
            self.sampling_box.set_default(self.settings.sampling)
        self._update_sampling_details()
        if "system_prompt" in changes:
            self.controller.default_system = self.settings.system_prompt
            self.transcript.set_system(self.controller.system_prompt())
        if "theme" in changes:
            from ui.shell.theme import apply_theme

            apply_theme(QApplication.instance(), self.settings.theme)  # type: ignore[arg-type]
        if any(key in RUNTIME_FIELDS for key in changes) and self.models.pair is not None:
            self.errors.show_message("Context, threads, GPU layers and flash attention apply when the models load.",
                                     "info", ("Reload now", "reload"))

    @Slot(int, int, str)
    def _on_controller_prefillProgress(self, done: int, total: int, model: str) -> None:
        """Between Send and the first token: "processing prompt" with progress (Stop cancels it), the
        target's and then, in the modes that draft with it, the draft model's."""
        if total == 0:
            if self.progress.format().startswith("processing"):
                self.progress.hide()
                self.progress.setMinimumWidth(0)
            return
        text = "processing prompt (draft model) %p%" if model == "draft" else "processing prompt %p%"
        self.progress.setFormat(text)
        # On one line: the status bar squeezes its widgets for a long model label, and the text wrapped.
        wide = self.progress.fontMetrics().horizontalAdvance(text.replace("%p", "100")) + 32
        self.progress.setMinimumWidth(wide)
        self.progress.setMaximumWidth(max(220, wide))
        self.progress.setRange(0, max(total, 0))  # (0, 0): busy until the first batch reports
        self.progress.setValue(done)
        self.progress.show()

    @Slot(int, int)
    def _on_controller_contextChanged(self, used: int, n_ctx: int) -> None:
        n_ctx = n_ctx or (self.loaded.config.n_ctx if self.loaded is not None else 0)
        if n_ctx <= 0:
            self.context_bar.hide()
            return
        self.context_bar.setRange(0, n_ctx)
        self.context_bar.setValue(min(used, n_ctx))
        self.context_bar.setFormat(f"context {used:,} / {n_ctx:,}")
        self.context_bar.show()

    @Slot(str)
    def _on_errors_actionTriggered(self, key: str) -> None:
        if key == "unqueue":
            self.errors.hide()
            self._unqueue()
            self.prompt.setFocus()
            return
        if key in ("ctx-drop", "ctx-new"):
            self.errors.hide()
            if self._ready():
                if key == "ctx-drop":
                    self.controller.drop_and_resend(self.runs(), self._models())
                else:
                    self.controller.continue_in_new_chat(self.runs(), self._models())
            return
        if key in ("reload", "force") and self.models.pair is not None:
            self.errors.hide()
            self.load_models(*self.models.pair, force=key == "force" or None)

    @Slot()
    def _on_search_action_triggered(self) -> None:
        self.conversations.focus_search()

    @Slot()
    def _on_controller_conversationsChanged(self) -> None:
        conv = self.controller.conv
        self.conversations.refresh(conv.id if conv else "")

    # --- Qt ------------------------------------------------------------------------------------------

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802 - Qt override
        if event.type() == QEvent.Type.PaletteChange and hasattr(self, "compare_view"):
            for view in (self.transcript, *self.compare_view.views.values()):
                view.rerender()  # dim text and code colours follow the theme
        super().changeEvent(event)

    def closeEvent(self, event: QCloseEvent) -> None:  # noqa: N802 - Qt override
        # Cancel the reply (the engine ends within one step), close the models on their own
        # thread, and flush what was generated so far into the conversation file.
        if self.isVisible() and on_real_screen():
            self._remember(window_geometry=bytes(self.saveGeometry().toBase64().data()).decode("ascii"))
        self.hide()
        self.local_server.stop()  # its requests end at their next step, before the engine closes
        self.worker.shutdown(self.close_timeout_ms)
        self.store.retry_unsaved()  # a chat a failed save left in memory: one more try (its journal stays)
        self._unqueue()  # a prompt waiting for the models goes back into the box, and the box is kept
        self.store.keep_unsent(self.prompt.toPlainText())
        self.store.close()  # the journals are flushed and closed: a reply cut by a stuck engine is recovered
        super().closeEvent(event)
