"""The "Search the Hub" tab: find GGUF repositories, list their files with sizes, download one.

Like the recommended pairs, every network call is awaited in a worker thread from a coroutine on
the GUI thread (qasync), progress comes back as a queued signal, and Stop keeps the partial file.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPushButton,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app import paths
from app.models import hub
from app.models.hub_support import DownloadProgress, HubCancelled, HubError
from ui.base.tints import style_text
from ui.picker.download_panel import DownloadPanel

_DATA = Qt.ItemDataRole.UserRole


class HubSearch(QWidget):
    fileReady = Signal(object)  # the downloaded file's path
    _progress = Signal(str, object)  # from the worker thread, delivered queued

    def __init__(
        self, *, endpoint: str | None = None, cache_dir: Path | None = None, models_dir: Path | None = None,
        parent: QWidget | None = None,
    ) -> None:  # fmt: skip
        super().__init__(parent)
        self._endpoint, self._cache_dir, self._models_dir = endpoint, cache_dir, models_dir
        self._cancel: threading.Event | None = None
        self._task: asyncio.Task[Any] | None = None
        self.query = QLineEdit()
        self.query.setPlaceholderText("e.g. Qwen2.5-Coder GGUF")
        self.search_button = QPushButton("Search")
        self.repos = self._tree(["Repository", "Downloads", "Access"])
        self.files = self._tree(["File", "Size", "SHA-256"])
        self.dest = QComboBox()
        self.dest.addItem(f"Hugging Face cache ({cache_dir or hub.hub_cache_dir()})", "cache")
        self.dest.addItem(f"Models folder ({models_dir or paths.models_dir()})", "models")
        self.download_button = QPushButton("Download file")
        self.panel = DownloadPanel()
        self.error = QLabel()
        self.error.setWordWrap(True)
        style_text(self.error, "error")

        top = QHBoxLayout()
        top.addWidget(self.query, 1)
        top.addWidget(self.search_button)
        bottom = QHBoxLayout()
        bottom.addWidget(QLabel("Save to:"))
        bottom.addWidget(self.dest, 1)
        bottom.addWidget(self.download_button)
        layout = QVBoxLayout(self)
        layout.addLayout(top)
        layout.addWidget(self.repos, 1)
        layout.addWidget(self.files, 1)
        layout.addLayout(bottom)
        layout.addWidget(self.panel)
        layout.addWidget(self.error)

        self.query.returnPressed.connect(self._on_search_button_clicked)
        self.search_button.clicked.connect(self._on_search_button_clicked)
        self.repos.itemSelectionChanged.connect(self._on_repos_itemSelectionChanged)
        self.download_button.clicked.connect(self._on_download_button_clicked)
        self.panel.cancelRequested.connect(self._on_panel_cancelRequested)
        self._progress.connect(self._on_self_progress)

    # --- coroutines (run on the GUI thread's asyncio loop) -----------------------------------------

    async def search(self, text: str) -> None:
        found = await self._call(partial(hub.search_gguf, text, 30, hub=self._endpoint))
        self.repos.clear()
        self.files.clear()
        for r in found or []:
            item = QTreeWidgetItem([r.repo_id, f"{r.downloads or 0:,}", "gated: needs HF_TOKEN" if r.gated else ""])
            item.setData(0, _DATA, r.repo_id)
            self.repos.addTopLevelItem(item)
        if found == []:
            self.error.setText(f"No GGUF repository matches {text!r}.")

    async def list_files(self, repo_id: str) -> None:
        files = await self._call(partial(hub.list_files, repo_id, hub=self._endpoint))
        self.files.clear()
        for f in files or []:
            size = f"{f.size / 1e9:.2f} GB" if f.size else "?"
            item = QTreeWidgetItem([f.filename, size, (f.sha256 or "")[:16]])
            item.setData(0, _DATA, (repo_id, f.filename))
            self.files.addTopLevelItem(item)

    async def download(self, repo_id: str, filename: str) -> Path | None:
        self._cancel = threading.Event()
        self.panel.start(f"Downloading {repo_id}", [("file", filename)])
        dest: hub.Destination = "models" if self.dest.currentData() == "models" else "cache"
        job = partial(hub.download, repo_id, filename, dest=dest, progress=partial(self._progress.emit, "file"),
                      cancel=self._cancel, hub=self._endpoint, cache_dir=self._cache_dir,
                      models_dir=self._models_dir)  # fmt: skip
        try:
            result = await self._call(job, raise_cancel=True)
        except HubCancelled as e:
            self.panel.finish(f"Stopped. {e}")
            return None
        if result is None:
            self.panel.finish(f"{filename}: download failed")
            return None
        self.panel.finish(f"{filename}: downloaded and verified")
        self.fileReady.emit(result.path)
        return Path(result.path)

    # --- slots ------------------------------------------------------------------------------------

    def _on_search_button_clicked(self) -> None:
        self._spawn(self.search(self.query.text().strip()))

    def _on_repos_itemSelectionChanged(self) -> None:
        items = self.repos.selectedItems()
        if items:
            self._spawn(self.list_files(str(items[0].data(0, _DATA))))

    def _on_download_button_clicked(self) -> None:
        items = self.files.selectedItems()
        if not items:
            self.error.setText("Select a file first.")
            return
        repo_id, filename = items[0].data(0, _DATA)
        self._spawn(self.download(repo_id, filename))

    def _on_panel_cancelRequested(self) -> None:
        if self._cancel is not None:
            self._cancel.set()

    def _on_self_progress(self, _key: str, p: DownloadProgress) -> None:
        self.panel.update_file("file", p)

    # --- internals --------------------------------------------------------------------------------

    def _tree(self, headers: list[str]) -> QTreeWidget:
        tree = QTreeWidget()
        tree.setHeaderLabels(headers)
        tree.setRootIsDecorated(False)
        tree.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        tree.header().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        return tree

    def _spawn(self, coro: Any) -> None:
        if self._task is not None and not self._task.done():
            coro.close()
            self.error.setText("Wait for the current request to finish (or stop the download).")
            return
        try:
            self._task = asyncio.get_running_loop().create_task(coro)
        except RuntimeError:
            coro.close()
            self.error.setText("Hub access needs the application's asyncio loop (start SpecChat through qasync).")

    async def _call(self, job: Callable[[], Any], raise_cancel: bool = False) -> Any:
        """Run `job` in a worker thread; a HubError becomes the message under the tab (None returned)."""
        self.error.clear()
        self.setCursor(Qt.CursorShape.BusyCursor)
        try:
            return await asyncio.get_running_loop().run_in_executor(None, job)
        except HubCancelled:
            if raise_cancel:
                raise
            return None
        except HubError as e:
            self.error.setText(str(e))
            return None
        except Exception as e:  # never let a network surprise take the window down
            self.error.setText(f"Unexpected error {type(e).__name__}: {e}")
            return None
        finally:
            self.unsetCursor()
