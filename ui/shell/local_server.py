"""The window's local server: the OpenAI-compatible API (app/server) on the window's loaded pair.

HTTP runs on its own thread (`ServerThread`); each request becomes a job on the window's engine thread, queued
behind the window's own replies (`GenerationWorker.serve`). A status-bar button shows the address and the traffic;
each finished request is recorded in the "Local server" chat with the token overlay (ui/chat/server_chat.py)."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import replace
from typing import Any

from PySide6.QtCore import QObject, Signal, Slot
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QMenu, QToolButton

from app.engine.session import GenParams
from app.models.recommended_sampling import SamplingValues, recommended_for
from app.server.engine_thread import Served
from app.server.errors import not_ready, queue_full
from app.server.jobs import DONE, Job

log = logging.getLogger(__name__)
MAX_QUEUE = 16


class WindowBackend:
    """app.server.api.Backend on the window's worker. `submit` runs on the HTTP thread."""

    def __init__(self, worker: Any, max_queue: int = MAX_QUEUE) -> None:
        self._worker = worker
        self.max_queue = max_queue
        self.served: Served | None = None  # set on the GUI thread when a pair loads; read by the HTTP thread
        self.load_error: str | None = None
        self._lock = threading.Lock()
        self._live: set[Job] = set()  # running or waiting

    def submit(self, job: Job) -> None:
        if self.served is None:
            raise not_ready(self.load_error or "no models are loaded in the window.")
        with self._lock:
            if len(self._live) >= self.max_queue:
                raise queue_full(len(self._live), 5)
            self._live.add(job)
        deliver = job.deliver

        def counted(item: object) -> None:
            deliver(item)
            if item is DONE:
                with self._lock:
                    self._live.discard(job)

        job.deliver = counted
        self._worker.serve(job)

    @property
    def pending(self) -> int:
        return len(self._live)

    def cancel_all(self) -> None:
        """The server stops: what runs ends at its next step, what waits is answered without running."""
        with self._lock:
            jobs = list(self._live)
        for job in jobs:
            job.cancel.set()


class LocalServer(QObject):
    """Starts and stops the server as Settings say; owns its status-bar button."""

    requestServed = Signal(object, object, object)  # Job, FinishEvent or None, its events (for the Server chat)

    def __init__(self, window: Any) -> None:
        super().__init__(window)
        self.window = window
        self.backend = WindowBackend(window.worker)
        self.thread: Any = None  # app.server.runner.ServerThread while running
        self.error = ""  # why the last start failed
        self.served_count = 0
        self.running_job: Job | None = None
        self._params = GenParams()
        self._sampling = SamplingValues()
        self._config: tuple[str, int, str] | None = None
        self.button = QToolButton()
        self.button.setAutoRaise(True)
        self.button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        self.button.setAccessibleName("Local server")
        menu = QMenu(self.button)
        self.copy_action = menu.addAction("Copy the address", self._copy_address)
        self.chat_action = menu.addAction("Show the Local server chat", self._show_chat)
        self.toggle_action = menu.addAction("Stop the server", self._toggle)
        self.button.setMenu(menu)
        window.worker.loaded.connect(self._on_worker_loaded)
        window.worker.serving.connect(self._on_worker_serving)
        window.worker.served.connect(self._on_worker_served)
        self._refresh()

    # --- control ------------------------------------------------------------------------------------------------

    def apply(self, settings: Any) -> None:
        """Run the server when settings.server_enabled, on its host and port (restarted when they changed)."""
        s = settings
        want = (s.server_host, s.server_port, s.server_api_key) if s.server_enabled else None
        if want == self._config and (want is None or self.thread is not None):
            return
        self.stop()
        if want is not None:
            self.start(*want)

    def start(self, host: str, port: int, api_key: str) -> bool:
        from app.server.api import ApiConfig, asgi_app
        from app.server.runner import BindRefused, ServerThread, check_bind

        self._config = (host, port, api_key)
        try:
            check_bind(host, api_key or None)
            config = ApiConfig(GenParams(), SamplingValues(), api_key or None, live=self._live_params)
            self.thread = ServerThread(asgi_app(self.backend, config), host, port).start()
            self.error = ""
        except (BindRefused, OSError) as error:
            self.thread = None
            self.error = str(error) if isinstance(error, BindRefused) else error.strerror or str(error)
            self.window.errors.show_message(f"The local server did not start: {self.error}", "error")
        self._refresh()
        return self.thread is not None

    def stop(self) -> None:
        self._config = None
        if self.thread is not None:
            self.backend.cancel_all()
            self.thread.stop()
            self.thread = None
        self._refresh()

    @property
    def address(self) -> str:
        return self.thread.address.base_url if self.thread is not None else ""

    def _live_params(self) -> tuple[GenParams, SamplingValues]:
        """The window's own choices at the time of a request: its mode and speculation settings; sampling fields a
        request leaves out take the loaded target's recommendation (read on the HTTP thread: plain values only)."""
        params: GenParams = self._params
        return params, self._sampling

    # --- the worker's news --------------------------------------------------------------------------------------

    @Slot(object)
    def _on_worker_loaded(self, info: Any) -> None:
        cfg = info.config
        self._sampling = recommended_for(cfg.target).values
        self._params = self._window_params()
        self.backend.served = Served(cfg.target, cfg.draft, self._params.mode, cfg.n_ctx, int(time.time()))
        self.backend.load_error = None
        self._refresh()

    def _window_params(self) -> GenParams:
        runs = self.window.runs()
        _name, params = runs[-1]  # the speculative run (a comparison's second)
        return replace(params, n_predict=0)

    def refresh_params(self) -> None:
        """The mode box or settings changed: later requests run with them."""
        if self.backend.served is not None:
            self._params = self._window_params()
            self.backend.served = replace(self.backend.served, mode=self._params.mode)

    @Slot(object)
    def _on_worker_serving(self, job: Job) -> None:
        self.running_job = job
        self._refresh()

    @Slot(object, object, object)
    def _on_worker_served(self, job: Job, finish: Any, events: Any) -> None:
        self.running_job = None
        if finish is not None:
            self.served_count += 1
            self.requestServed.emit(job, finish, events)
        self._refresh()

    # --- the button ---------------------------------------------------------------------------------------------

    def _refresh(self) -> None:
        if self.thread is None:
            self.button.setText("Server off" if not self.error else "Server failed")
            self.button.setToolTip(self.error or "The local OpenAI-compatible server is off (Settings > Local server)")
            self.toggle_action.setText("Start the server")
            self.copy_action.setEnabled(False)
        else:
            busy = " · serving" if self.running_job is not None else ""
            self.button.setText(f"Server {self.address}{busy}")
            self.button.setToolTip(f"OpenAI-compatible API at {self.address}: {self.served_count} requests served, "
                                   f"{self.backend.pending} running or waiting. Point an editor or the openai "
                                   "client at this address (README: Local server).")
            self.toggle_action.setText("Stop the server")
            self.copy_action.setEnabled(True)
        self.button.setVisible(self.thread is not None or bool(self.error))

    @Slot()
    def _copy_address(self) -> None:
        if self.address:
            QGuiApplication.clipboard().setText(self.address)

    @Slot()
    def _show_chat(self) -> None:
        self.window.show_server_chat()

    @Slot()
    def _toggle(self) -> None:
        self.window.set_server_enabled(self.thread is None)



def attach(window: Any) -> LocalServer:
    """Give the window its server: the status-bar button, the Local server chat, and the settings' switch."""
    from ui.chat.server_chat import ServerChat

    server = LocalServer(window)
    window.statusBar().addPermanentWidget(server.button)
    chat = ServerChat(window.store, window)

    def on_served(job: Job, finish: Any, events: Any) -> None:
        conv = chat.record(job, finish, events)
        current = window.controller.conv
        window.conversations.refresh(current.id if current else "")
        if current is conv and not window.controller.busy():
            window.controller.select(conv.id)  # shown: re-render with the new request

    def show_chat() -> None:
        conv = chat.conversation()
        window.store.save(conv)
        window.conversations.refresh(conv.id)
        window.controller.select(conv.id)

    server.requestServed.connect(on_served)
    window.show_server_chat = show_chat
    window.server_chat = chat
    window.mode_box.currentTextChanged.connect(lambda _mode: server.refresh_params())
    server.apply(window.settings)
    return server
