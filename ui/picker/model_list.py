"""One column of the model picker: local GGUF files with what matters for choosing a pair.

The draft column also shows, once a target is chosen, each draft's fit: compatible drafts first, with
their size ratio to the target and a hint; incompatible ones stay listed, greyed and not selectable,
with the pair doctor's exact reason, so the list is never mysteriously empty. While the dialog still
checks the pairs (off the GUI thread), their fit reads "checking…".
"""

from __future__ import annotations

import math
from pathlib import Path

from PySide6.QtCore import QModelIndex, QPersistentModelIndex, QSize, Qt, Signal
from PySide6.QtGui import QBrush, QFont, QPalette
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHeaderView,
    QStyle,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QTreeWidget,
    QTreeWidgetItem,
    QWidget,
)

from app.models.library import LibraryEntry
from app.models.pair_doctor import PairReport
from ui.base.tints import text_colour

LOOKUP = "lookup"  # the draft column's "Prompt lookup (no draft model)" row
COLUMNS = ("Model", "Arch", "Params", "Quant", "Context", "Size", "Tokenizer")
_PATH_ROLE = Qt.ItemDataRole.UserRole


def params_text(n: int) -> str:
    return f"{n / 1e9:.2f}B" if n >= 1e9 else f"{n / 1e6:.0f}M"


def size_text(n: int) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e9 else f"{n / 1e6:.0f} MB"


def ratio_hint(ratio: float) -> tuple[str, int]:
    """Short hint and its rank (0 best) for a draft/target parameter ratio; the useful range is ~1/4 to 1/10."""
    share = f"1/{1 / ratio:.1f}" if 0 < ratio < 1 else f"{ratio:.1f}x the target"
    if ratio >= 0.9:
        return f"{share}: same size, gains nothing", 4
    if ratio > 1 / 3:
        return f"{share}: too big to gain much", 3
    if ratio > 1 / 4:
        return f"{share}: near the useful range", 1
    if ratio >= 1 / 10:
        return f"{share}: in the useful range (1/4 to 1/10)", 0
    return f"{share}: very small, cheap but agrees less", 2


class _PaddedRows(QStyledItemDelegate):
    """Rows 4 px taller than the text: room for underscores in Q4_K_M. A delegate, not a style sheet:
    a style sheet routes every cell's measuring and painting through Qt's slow style-sheet style."""

    def sizeHint(self, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex) -> QSize:
        return super().sizeHint(option, index) + QSize(0, 4)


class ModelList(QTreeWidget):
    """Local GGUF files, one row each; `chosen` carries the selected path, LOOKUP, or None."""

    chosen = Signal(object)

    def __init__(self, role: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._role = role
        self._entries: list[LibraryEntry] = []
        self._reports: dict[str, PairReport] = {}
        self._checking = False
        columns = list(COLUMNS) + (["Fit with the target"] if role == "draft" else [])
        self.setColumnCount(len(columns))
        self.setHeaderLabels(columns)
        self.setRootIsDecorated(False)
        self.setUniformRowHeights(True)
        self.setAlternatingRowColors(True)
        self.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.setAccessibleName(f"{role} models")
        self.setItemDelegate(_PaddedRows(self))
        header = self.header()
        header.setStretchLastSection(True)
        # Widths set from the texts at each rebuild (`_fit_columns`), not ResizeToContents: that mode
        # measures every cell again at each resize and relayout of the list, tens of ms on the GUI thread.
        header.setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        self.itemSelectionChanged.connect(self._on_self_itemSelectionChanged)

    # --- public API -------------------------------------------------------------------------------

    def set_entries(self, entries: list[LibraryEntry]) -> None:
        """The readable files (errors are the dialog's to show); keeps the selection when it can."""
        self._entries = [e for e in entries if e.ok]
        self._rebuild()

    def set_reports(self, reports: dict[str, PairReport] | None, checking: bool = False) -> None:
        """Pair reports keyed by draft path (str) for the chosen target; None when no target is chosen.
        `checking`: the missing ones are on their way."""
        self._reports = dict(reports or {})
        self._checking = checking
        self._rebuild()

    def current(self) -> Path | str | None:
        items = self.selectedItems()
        return items[0].data(0, _PATH_ROLE) if items else None

    def select(self, value: Path | str | None) -> bool:
        """Select the row of `value` (a path or LOOKUP); False if there is none or it is greyed."""
        for i in range(self.topLevelItemCount()):
            item = self.topLevelItem(i)
            if item is not None and _same(item.data(0, _PATH_ROLE), value):
                if not item.flags() & Qt.ItemFlag.ItemIsSelectable:
                    return False
                self.setCurrentItem(item)
                item.setSelected(True)
                return True
        self.clearSelection()
        return False

    def row_texts(self) -> list[list[str]]:
        """Every row's texts in display order (for tests and accessibility checks)."""
        out = []
        for i in range(self.topLevelItemCount()):
            item = self.topLevelItem(i)
            if item is not None:
                out.append([item.text(c) for c in range(self.columnCount())])
        return out

    def is_greyed(self, value: Path | str) -> bool:
        for i in range(self.topLevelItemCount()):
            item = self.topLevelItem(i)
            if item is not None and _same(item.data(0, _PATH_ROLE), value):
                return not item.flags() & Qt.ItemFlag.ItemIsSelectable
        raise KeyError(value)

    # --- internals --------------------------------------------------------------------------------

    def _rebuild(self) -> None:
        """All rows again; `chosen` only if the selected one is gone or greyed now."""
        keep = self.current()
        self.blockSignals(True)
        self.clear()
        items = [self._lookup_item()] if self._role == "draft" else []
        self.addTopLevelItems(items + [self._item(entry) for entry in self._sorted()])
        self._fit_columns()
        kept = keep is None or self.select(keep)
        self.blockSignals(False)
        if not kept:
            self.chosen.emit(None)

    def _fit_columns(self) -> None:
        """Each column as wide as its widest text (header included), the last one stretched."""
        header = self.header()
        fm, header_fm = self.fontMetrics(), header.fontMetrics()
        pad = 2 * self.style().pixelMetric(QStyle.PixelMetric.PM_FocusFrameHMargin) + 16
        for c in range(self.columnCount() - 1):
            texts = (self.topLevelItem(i).text(c) for i in range(self.topLevelItemCount()))  # type: ignore[union-attr]
            wide = max((fm.horizontalAdvance(t) for t in texts), default=0)
            header.resizeSection(c, max(wide, header_fm.horizontalAdvance(self.headerItem().text(c)) + 8) + pad)

    def _sorted(self) -> list[LibraryEntry]:
        if not self._reports:
            return list(self._entries)

        def key(e: LibraryEntry) -> tuple[int, int, float, str]:
            r = self._reports.get(str(e.path))
            if r is None or not r.compatible:
                return (1, 9, 0.0, e.path.name.lower())
            ratio = r.size_ratio or 1.0
            rank = ratio_hint(ratio)[1]
            return (0, rank, abs(math.log(max(ratio, 1e-6)) - math.log(1 / 6)), e.path.name.lower())

        return sorted(self._entries, key=key)

    def _lookup_item(self) -> QTreeWidgetItem:
        item = QTreeWidgetItem(["Prompt lookup (no draft model)", "", "", "", "", "", "",
                                "always available: drafts from n-grams of the context"])  # fmt: skip
        item.setData(0, _PATH_ROLE, LOOKUP)
        font = QFont(item.font(0))
        font.setItalic(True)
        item.setFont(0, font)
        item.setToolTip(0, "Speculate without a second model: candidate tokens are copied from earlier text.")
        return item

    def _item(self, e: LibraryEntry) -> QTreeWidgetItem:
        i = e.info
        assert i is not None
        texts = [e.path.stem, i.architecture, params_text(i.n_params), i.file_type, f"{i.context_length:,}",
                 size_text(e.file_size), i.tokenizer_fingerprint]  # fmt: skip
        report = self._reports.get(str(e.path)) if self._role == "draft" else None
        if self._role == "draft":
            texts.append(self._fit_text(report))
        item = QTreeWidgetItem(texts)
        item.setData(0, _PATH_ROLE, e.path)
        item.setToolTip(0, f"{i.name}\n{e.path}\n{i.n_layer} layers, vocabulary {i.vocab_size:,} ({i.vocab_type})")
        if report is not None and not report.compatible:
            item.setFlags(Qt.ItemFlag.ItemIsEnabled)  # listed, not selectable
            grey = self.palette().color(QPalette.ColorGroup.Disabled, QPalette.ColorRole.Text)
            for c in range(self.columnCount()):
                item.setForeground(c, QBrush(grey))
            item.setToolTip(len(texts) - 1, report.reason or "")
        elif report is not None:
            colour = text_colour("good" if ratio_hint(report.size_ratio or 1.0)[1] <= 1 else "warn", self.palette())
            item.setForeground(len(texts) - 1, QBrush(colour))
            notes = [f.message for f in report.findings if f.severity != "informs"]
            item.setToolTip(len(texts) - 1, "\n".join(notes) or "compatible")
        return item

    def _fit_text(self, report: PairReport | None) -> str:
        if report is None:
            return "checking…" if self._checking else "pick a target first" if not self._reports else ""
        if not report.compatible:
            return f"incompatible: {report.reason}"
        return ratio_hint(report.size_ratio or 1.0)[0]

    def _on_self_itemSelectionChanged(self) -> None:
        self.chosen.emit(self.current())


def _same(a: object, b: object) -> bool:
    if isinstance(a, Path) and isinstance(b, str | Path) and b != LOOKUP:
        return str(a) == str(b)
    return a == b
