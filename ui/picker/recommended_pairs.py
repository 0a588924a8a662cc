"""The "Recommended pairs" tab: the catalogue, where each pair already is, one-click download of a pair.

Downloads run with qasync: the coroutine lives on the GUI thread and awaits `fetch_pair` in a worker
thread (`run_in_executor`), so the window keeps painting. Progress comes back from the worker as a
queued Qt signal (widgets are only touched on the GUI thread); Cancel sets a `threading.Event` the
download checks between chunks, and keeps what was received for the next try.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from functools import partial
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app import paths
from app.models.catalog import PAIRS, CatalogPair
from app.models.hub import Destination, hub_cache_dir
from app.models.hub_support import DownloadProgress, HubCancelled, HubError
from app.models.pair_fetch import PairPaths, fetch_pair, local_pair
from ui.base.tints import style_text
from ui.picker.download_panel import DownloadPanel

_NAME_ROLE = Qt.ItemDataRole.UserRole


class RecommendedPairs(QWidget):
    """Known-good pairs; `pairReady(target, draft)` fires when both files of a pair are on disk."""

    pairReady = Signal(object, object)
    failed = Signal(str)
    _progress = Signal(str, object)  # emitted from the worker thread, delivered queued

    def __init__(
        self,
        pairs: Sequence[CatalogPair] = PAIRS,
        *,
        endpoint: str | None = None,
        token: str | None = None,
        cache_dir: Path | None = None,
        models_dir: Path | None = None,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self._pairs = {p.name: p for p in pairs}
        self._endpoint, self._token = endpoint, token
        self._cache_dir, self._models_dir = cache_dir, models_dir
        self._cancel: threading.Event | None = None
        self._task: asyncio.Task[PairPaths | None] | None = None

        self.table = QTreeWidget()
        self.table.setHeaderLabels(["Pair", "Target", "Draft", "Download", "Status"])
        self.table.setRootIsDecorated(False)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.header().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.dest = QComboBox()
        self.dest.addItem(f"Hugging Face cache ({cache_dir or hub_cache_dir()})", "cache")
        self.dest.addItem(f"Models folder ({models_dir or paths.models_dir()})", "models")
        self.dest.setAccessibleName("download destination")
        self.download_button = QPushButton("Download pair")
        self.note = QLabel()
        self.note.setWordWrap(True)
        self.panel = DownloadPanel()
        self.error = QLabel()
        self.error.setWordWrap(True)
        style_text(self.error, "error")
        self.error.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)

        row = QHBoxLayout()
        row.addWidget(QLabel("Save to:"))
        row.addWidget(self.dest, 1)
        row.addWidget(self.download_button)
        layout = QVBoxLayout(self)
        layout.addWidget(QLabel("Pairs known to share a tokenizer. Sizes are approximate; every file is "
                                "checked against the Hub's SHA-256 (the demo pair against its own)."))  # fmt: skip
        layout.addWidget(self.table, 1)
        layout.addWidget(self.note)
        layout.addLayout(row)
        layout.addWidget(self.panel)
        layout.addWidget(self.error)

        self.download_button.clicked.connect(self._on_download_button_clicked)
        self.table.itemSelectionChanged.connect(self._on_table_itemSelectionChanged)
        self.dest.currentIndexChanged.connect(self._on_dest_currentIndexChanged)
        self.panel.cancelRequested.connect(self._on_panel_cancelRequested)
        self._progress.connect(self._on_self_progress)
        self.refresh()

    # --- public API -------------------------------------------------------------------------------

    def refresh(self) -> None:
        """Re-read where each pair is (no network, no hashing)."""
        keep = self.selected_name()
        self.table.clear()
        for p in self._pairs.values():
            target, draft = local_pair(p, self.destination(), models_dir=self._models_dir, cache_dir=self._cache_dir)
            status = "downloaded" if target and draft else ("target only" if target else "")
            item = QTreeWidgetItem([p.title, f"{p.target.repo_id}\n{p.target.filename}",
                                    f"{p.draft.repo_id}\n{p.draft.filename}", f"~{p.approx_bytes / 1e9:.1f} GB",
                                    status])  # fmt: skip
            item.setData(0, _NAME_ROLE, p.name)
            item.setToolTip(0, p.note)
            self.table.addTopLevelItem(item)
            if p.name == keep:
                item.setSelected(True)

    def destination(self) -> Destination:
        return "models" if self.dest.currentData() == "models" else "cache"

    def selected_name(self) -> str | None:
        items = self.table.selectedItems()
        return str(items[0].data(0, _NAME_ROLE)) if items else None

    def select(self, name: str) -> None:
        for i in range(self.table.topLevelItemCount()):
            item = self.table.topLevelItem(i)
            if item is not None:
                item.setSelected(item.data(0, _NAME_ROLE) == name)

    def busy(self) -> bool:
        return self._task is not None and not self._task.done()

    def start_download(self, name: str) -> bool:
        """Start fetching `name` on the running asyncio loop (qasync); False if it cannot start."""
        if self.busy():
            return False
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._show_error("Downloads need the application's asyncio loop (start SpecChat through qasync).")
            return False
        self._task = loop.create_task(self.download(name))
        return True

    async def download(self, name: str) -> PairPaths | None:
        """Fetch both files of the pair `name`; shows progress, errors and the result in the tab."""
        pair = self._pairs[name]
        self._cancel = threading.Event()
        self.error.clear()
        self.download_button.setEnabled(False)
        self.panel.start(f"Downloading {pair.title}", [(m.role, f"{m.role}: {m.filename}") for m in pair.models])
        job = partial(fetch_pair, pair, dest=self.destination(), progress=self._progress.emit,
                      cancel=self._cancel, models_dir=self._models_dir, cache_dir=self._cache_dir,
                      endpoint=self._endpoint, token=self._token)  # fmt: skip
        try:
            got: PairPaths = await asyncio.get_running_loop().run_in_executor(None, job)
        except HubCancelled as e:
            self.panel.finish(f"Cancelled. {e}")
            return None
        except HubError as e:
            self.panel.finish(f"{pair.title}: download failed")
            self._show_error(str(e))
            return None
        except Exception as e:  # a download must never take the window down with it
            self.panel.finish(f"{pair.title}: download failed")
            self._show_error(f"{pair.title}: unexpected error {type(e).__name__}: {e}")
            return None
        finally:
            self.download_button.setEnabled(True)
        self.panel.finish(f"{pair.title}: both files downloaded and verified")
        self.refresh()
        self.pairReady.emit(got.target, got.draft)
        return got

    def cancel(self) -> None:
        if self._cancel is not None:
            self._cancel.set()

    # --- slots ------------------------------------------------------------------------------------

    def _on_download_button_clicked(self) -> None:
        name = self.selected_name()
        if name is None:
            self._show_error("Select a pair first.")
            return
        self.start_download(name)

    def _on_table_itemSelectionChanged(self) -> None:
        name = self.selected_name()
        self.note.setText(self._pairs[name].note if name in self._pairs else "")

    def _on_dest_currentIndexChanged(self, _index: int) -> None:
        self.refresh()

    def _on_panel_cancelRequested(self) -> None:
        self.cancel()

    def _on_self_progress(self, role: str, p: DownloadProgress) -> None:
        self.panel.update_file(role, p)

    def _show_error(self, message: str) -> None:
        self.error.setText(message)
        self.failed.emit(message)
