"""The main window: conversations | transcript (or comparison) and prompt | live statistics.

The window is built without touching a model; loading runs on the worker thread afterwards, with
its progress in the status bar, so the window appears at once. It lays the widgets out and keeps
them in step; what the commands do is in ui.shell.command_handlers, which runs a prompt starts in
ui.shell.run_policy, and a prompt sent while the models load waits in ui.shell.prompt_queue.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtCore import QEvent, QTimer, Signal, Slot
from PySide6.QtGui import QCloseEvent
from PySide6.QtWidgets import (
    QApplication,
    QDialog,
    QHBoxLayout,
    QLabel,
    QMainWindow,
    QPushButton,
    QSplitter,
    QStackedWidget,
    QVBoxLayout,
    QWidget,
)

from app.chat.conversations import ChatStore
from app.engine.session import GenParams
from app.llama_backend import supports_gpu_offload
from app.models.recommended_sampling import recommended_for
from app.settings import Settings
from ui.base.message_bar import MessageBar
from ui.base.worker import GenerationWorker, LoadFailure, LoadInfo
from ui.chat.chat_controller import ChatController
from ui.chat.compare_view import CompareView
from ui.chat.conversation_list import ConversationList
from ui.chat.prompt_box import PromptBox
from ui.chat.sampling_box import SamplingBox, preset_details
from ui.chat.transcript_view import TranscriptView
from ui.picker.models_controller import ModelsController
from ui.shell import window_geometry
from ui.shell.actions import WindowActions
from ui.shell.command_handlers import CommandHandlers, LoadChoice
from ui.shell.export_chat import export_chat
from ui.shell.main_toolbar import MainToolBar
from ui.shell.mode_banner import ModeBanner
from ui.shell.prompt_queue import PromptQueue
from ui.shell.run_policy import RunPolicy
from ui.shell.settings_dialog import RUNTIME_FIELDS, SettingsDialog
from ui.shell.settings_keeper import SettingsKeeper
from ui.shell.spec_banner import SpecBanner
from ui.shell.status_line import StatusLine
from ui.stats.side_panel import SidePanel


class MainWindow(QMainWindow):
    modelsLoaded = Signal(object)  # LoadInfo
    generationFinished = Signal(bool)  # a reply has ended and is rendered
    pickerOpened = Signal(object)  # the model picker dialog
    settingsOpened = Signal(object)  # the settings dialog
    # How long closing waits for the engine to end its step (a reply stops within one; a prompt batch on a slow
    # CPU can take longer); past it the app exits without the engine thread, its chats saved.
    close_timeout_ms = 120_000

    def __init__(self, settings: Settings | None = None, store: ChatStore | None = None,
                 save_settings: bool = True) -> None:
        super().__init__()
        self.keeper = SettingsKeeper(settings or Settings(), save_settings)
        self.setWindowTitle("SpecChat")
        self.resize(window_geometry.PREFERRED_SIZE)
        self.store = store or ChatStore()
        self.store.load_all(lazy=True)
        self.worker = GenerationWorker(self)
        self.force_load = False  # --force: load even when the pair is predicted not to fit
        self._build()
        self.controller = ChatController(self.store, self.worker, self.transcript, self.compare_view,
                                         self.stats, self.errors, self)
        self.controller.default_system = self.settings.system_prompt
        self.controller.default_sampling = self.settings.sampling
        self.transcript.set_system(self.settings.system_prompt)
        self.models = ModelsController(self.worker, self.model_label, self.progress, self.meter,
                                       self.side.meter_box, self.errors, self)
        self.queue = PromptQueue(self.store, self.prompt, self.errors)  # a prompt kept at the last close comes back
        self.handlers = CommandHandlers(self)  # what each action, link and bar button does
        self.mode_banner = ModeBanner(self)  # the modes the pair can run, the fallback, the banner
        self._connect()
        from ui.shell.local_server import attach

        self.local_server = attach(self)  # the OpenAI-compatible server, on while Settings say so
        self.conversations.refresh()
        self._sync_enabled()
        self.mode_banner.update()
        if self.store.problems:
            self.errors.show_message("\n".join(self.store.problems), "warning")
        self.prompt.setFocus()  # type at once: the toolbar's combo box took the first focus

    @property
    def settings(self) -> Settings:
        return self.keeper.settings

    @settings.setter
    def settings(self, settings: Settings) -> None:  # for this window only (tests, command-line overrides)
        self.keeper.settings = settings

    def place_on_screen(self) -> None:
        """Before the first show: where the window was last closed, else fitted to the screen."""
        window_geometry.place_on_screen(self, self.settings.window_geometry)

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

        self.status = StatusLine(self.statusBar())
        self.model_label, self.progress, self.context_bar = (self.status.model_label, self.status.progress,
                                                             self.status.context_bar)
        # Every action, declared once in ui.shell.actions: the menu bar holds them all, the toolbar a few.
        self.commands = WindowActions(self)
        self.commands.compare.setChecked(self.settings.compare)
        self.toolbar = MainToolBar(self, self.settings, self.commands)
        self.addToolBar(self.toolbar)
        self.mode_box = self.toolbar.mode_box
        self.commands.build_menu_bar(self)

    def _connect(self) -> None:
        self.prompt.submitted.connect(self._on_prompt_submitted)
        self.conversations.selected.connect(self.controller.select)
        self.conversations.newRequested.connect(self.commands.new.trigger)
        self.conversations.renameRequested.connect(self.controller.rename)
        self.conversations.deleteRequested.connect(self.controller.delete)
        self.controller.contextChanged.connect(self._on_controller_contextChanged)
        self.controller.prefillProgress.connect(self.status.show_prefill)
        self.controller.samplingChanged.connect(self.sampling_box.set_preset)
        self.sampling_box.presetChosen.connect(self.controller.set_sampling)
        self.controller.conversationsChanged.connect(self._on_controller_conversationsChanged)
        self.controller.busyChanged.connect(self._on_controller_busyChanged)
        self.controller.replyFinished.connect(self.generationFinished)
        self.legend.coloursToggled.connect(lambda on: self._overlay(show_colours=on))
        self.legend.ghostsToggled.connect(lambda on: self._overlay(show_ghosts=on))
        self.commands.compare.toggled.connect(self._on_compare_toggled)
        self.models.modelsLoaded.connect(self._on_models_modelsLoaded)
        self.models.loadFailed.connect(self._on_models_loadFailed)
        self._on_compare_toggled(self.settings.compare)
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
            self.mode_banner.update()
            self._sync_enabled()

    def open_picker(self) -> QDialog | None:
        dialog = self.models.open_picker(self, self.settings)
        if dialog is not None:
            dialog.choiceMade.connect(self._on_picker_choiceMade)
            self.pickerOpened.emit(dialog)
        return dialog

    @Slot(object)
    def _on_picker_choiceMade(self, choice: Any) -> None:
        self.keeper.remember_choice(choice)
        self.mode_box.setCurrentText(choice.mode)
        self.load_models(choice.target, choice.draft)

    @Slot(object)
    def _on_models_modelsLoaded(self, info: LoadInfo) -> None:
        if self.models.pair is not None:
            self.keeper.remember_pair(*self.models.pair)  # opens again at the next start, also from -m/-md
        self._update_sampling_details()
        self.mode_banner.pair_loaded(info)
        self._sync_enabled()
        self.modelsLoaded.emit(info)
        text = self.queue.take()
        if text is not None:
            self.submit(text, from_box=False)

    @Slot(str, str)
    def _on_models_loadFailed(self, kind: str, message: str) -> None:
        if kind == LoadFailure.WONTFIT:
            self.errors.show_message(message, "error", ("Load anyway", LoadChoice.LOAD_ANYWAY))
        elif kind == LoadFailure.CANCELLED:
            # Back to where the user was: the pair in use before (the worker closed it for this load), or the picker.
            previous = self.models.previous
            if previous is not None:
                self.errors.show_message(f"{message} Loading {previous[0].name} again.", "info")
                QTimer.singleShot(0, lambda: self.load_models(*previous))
            else:
                self.errors.show_message(message, "info")
                QTimer.singleShot(0, self.open_picker)
        self.queue.unqueue()  # the queued prompt goes back into the box: nothing typed is lost
        self.mode_banner.update()
        self._sync_enabled()
        self.generationFinished.emit(False)  # scripted runs waiting for a reply must not hang

    # --- generation ----------------------------------------------------------------------------------

    @Slot(str)
    def _on_prompt_submitted(self, text: str) -> None:
        self.submit(text)

    def submit(self, text: str, from_box: bool = True) -> bool:
        """Send `text`. While models load, one prompt waits in a visible queue; `from_box`: the text
        came from the prompt box, which is cleared once it is sent or queued."""
        if self.controller.busy():
            return False
        if self.loaded is None:
            if self.worker.is_loading():
                return self.queue.offer(text, from_box)
            self.errors.show_message("No models are loaded: choose a pair (Ctrl+M) first.", "warning")
            return False
        self.mode_banner.governor = None
        ok = self.controller.submit(text, self.runs(), self.policy().model_names())
        if ok:
            if from_box:
                self.prompt.clear_after_send()
            self.queue.sent()
            self.mode_banner.update()
        return ok

    def queued_prompt(self) -> str | None:
        return self.queue.waiting

    def policy(self) -> RunPolicy:
        """The run policy for what the controls show now."""
        loaded = self.loaded
        return RunPolicy(self.settings, self.mode_box.currentText(), self.commands.compare.isChecked(),
                         loaded.config if loaded else None, loaded.modes if loaded else (),
                         self.controller.sampling_preset(), supports_gpu_offload())

    def runs(self) -> list[tuple[str, GenParams]]:
        return self.policy().runs()

    def set_system_prompt(self, text: str, as_default: bool = False) -> None:
        self.controller.set_system(text)
        if as_default:
            self.keeper.remember(system_prompt=text)
            self.controller.default_system = text

    def export_chat(self, fmt: str, path: Path | None = None) -> Path | None:
        """Save the current chat as Markdown or JSON (asks where unless `path` is given)."""
        written = export_chat(self, self.errors, self.controller.conv, fmt, self.settings.system_prompt, path)
        if written is not None:
            self.statusBar().showMessage(f"Exported to {written}", 4000)
        return written

    # --- keeping the controls in step -----------------------------------------------------------------

    @Slot(bool)
    def _on_controller_busyChanged(self, _busy: bool) -> None:
        self._sync_enabled()

    def _sync_enabled(self) -> None:
        generating, loading = self.controller.busy(), self.worker.is_loading()
        self.commands.sync(generating, loading, self.loaded is not None)
        self.send_button.setEnabled(not generating and (self.loaded is not None or loading))
        self.stop_button.setEnabled(generating or loading)
        self.stop_button.setToolTip("Cancel loading the models (Esc)" if loading and not generating
                                    else "Stop the reply (Esc)")
        self.conversations.setEnabled(not generating)
        self.mode_box.setEnabled(not generating)
        self.sampling_box.setEnabled(not generating and not self.commands.compare.isChecked())

    @Slot(bool)
    def _on_compare_toggled(self, on: bool) -> None:
        self.stack.setCurrentWidget(self.compare_view if on else self.transcript)
        self.keeper.remember(compare=on)
        self._sync_enabled()
        self.sampling_label.setText("Sampling: greedy while comparing" if on else "Sampling for this chat")

    def _update_sampling_details(self) -> None:
        """The values behind each preset, for the sampling box's tooltips."""
        recommended = recommended_for(self.loaded.config.target) if self.loaded is not None else None
        self.sampling_box.set_details(preset_details(recommended, self.settings.custom_sampling()))

    def _overlay(self, **change: bool) -> None:
        self.keeper.remember(**change)
        for view in (self.transcript, *self.compare_view.views.values()):
            view.set_overlay(self.settings.show_colours, self.settings.show_ghosts)

    def set_server_enabled(self, on: bool) -> None:
        self.keeper.remember(server_enabled=on)
        self.local_server.apply(self.settings)

    def open_settings(self) -> None:
        dialog = SettingsDialog(self.settings, self)
        dialog.accepted.connect(lambda: self._apply_settings(dialog.changes()))
        dialog.open()  # window-modal, never blocks the event loop
        self.settingsOpened.emit(dialog)

    def _apply_settings(self, changes: dict[str, Any]) -> None:
        self.keeper.remember(**changes)
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
                                     "info", ("Reload now", LoadChoice.RELOAD))

    @Slot(int, int)
    def _on_controller_contextChanged(self, used: int, n_ctx: int) -> None:
        self.status.show_context(used, n_ctx or (self.loaded.config.n_ctx if self.loaded is not None else 0))

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
        geometry = window_geometry.saved_geometry(self)
        if geometry is not None:
            self.keeper.remember(window_geometry=geometry)
        self.hide()
        self.local_server.stop()  # its requests end at their next step, before the engine closes
        self.worker.shutdown(self.close_timeout_ms)
        self.store.retry_unsaved()  # a chat a failed save left in memory: one more try (its journal stays)
        self.queue.close()  # a prompt waiting for the models goes back into the box, and the box is kept
        self.store.close()  # the journals are flushed and closed: a reply cut by a stuck engine is recovered
        super().closeEvent(event)
