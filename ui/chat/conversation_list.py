"""The list of conversations: new, rename (F2 or double-click), delete, search over titles and text."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from PySide6.QtCore import QPoint, Qt, QTimer, Signal, Slot
from PySide6.QtWidgets import (
    QHBoxLayout,
    QInputDialog,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QMenu,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.chat.conversations import Conversation

ID_ROLE = Qt.ItemDataRole.UserRole
SEARCH_DEBOUNCE_MS = 200


class ConversationList(QWidget):
    selected = Signal(str)  # conversation id
    newRequested = Signal()
    renameRequested = Signal(str, str)  # id, new title
    deleteRequested = Signal(str)

    def __init__(self, search: Callable[[str], Sequence[Conversation]], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._search_fn = search
        self._current = ""
        self.search_box = QLineEdit()
        self.search_box.setPlaceholderText("Search chats (Ctrl+F)")
        self.search_box.setClearButtonEnabled(True)
        self.list = QListWidget()
        self.list.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.list.setEditTriggers(QListWidget.EditTrigger.NoEditTriggers)
        self.list.setTextElideMode(Qt.TextElideMode.ElideRight)  # long titles elide instead of scrolling
        self.list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        new_button = QPushButton("New chat")
        new_button.setToolTip("New chat (Ctrl+N)")
        top = QHBoxLayout()
        top.addWidget(new_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(top)
        layout.addWidget(self.search_box)
        layout.addWidget(self.list, 1)
        new_button.clicked.connect(self.newRequested)
        # Search runs once typing pauses, not on every keystroke (it reads every chat's text).
        self._search_timer = QTimer(self)
        self._search_timer.setSingleShot(True)
        self._search_timer.setInterval(SEARCH_DEBOUNCE_MS)
        self._search_timer.timeout.connect(self.refresh)
        self.search_box.textChanged.connect(self._on_search_box_textChanged)
        self.list.currentItemChanged.connect(self._on_list_currentItemChanged)
        self.list.customContextMenuRequested.connect(self._on_list_customContextMenuRequested)
        self.list.itemDoubleClicked.connect(self._on_list_itemDoubleClicked)

    def refresh(self, current: str = "") -> None:
        """Rebuild from the store (filtered by the search box), keeping `current` selected."""
        self._current = current or self._current
        self.list.blockSignals(True)
        self.list.clear()
        for conv in self._search_fn(self.search_box.text()):
            item = QListWidgetItem(conv.title)
            item.setData(ID_ROLE, conv.id)
            item.setToolTip(conv.title)
            self.list.addItem(item)
            if conv.id == self._current:
                self.list.setCurrentItem(item)
        self.list.blockSignals(False)

    def focus_search(self) -> None:
        self.search_box.setFocus()
        self.search_box.selectAll()

    def current_id(self) -> str:
        item = self.list.currentItem()
        return str(item.data(ID_ROLE)) if item else ""

    def keyPressEvent(self, event) -> None:  # noqa: N802, ANN001 - Qt override
        if event.key() == Qt.Key.Key_F2:
            self._rename(self.list.currentItem())
        elif event.key() == Qt.Key.Key_Delete:
            self._delete(self.list.currentItem())
        else:
            super().keyPressEvent(event)

    @Slot(str)
    def _on_search_box_textChanged(self, _text: str) -> None:
        self._search_timer.start()

    @Slot(QListWidgetItem, QListWidgetItem)
    def _on_list_currentItemChanged(self, item: QListWidgetItem | None, _prev: QListWidgetItem | None) -> None:
        if item is not None:
            self._current = str(item.data(ID_ROLE))
            self.selected.emit(self._current)

    @Slot(QListWidgetItem)
    def _on_list_itemDoubleClicked(self, item: QListWidgetItem) -> None:
        self._rename(item)

    @Slot(QPoint)
    def _on_list_customContextMenuRequested(self, pos: QPoint) -> None:
        item = self.list.itemAt(pos)
        if item is None:
            return
        menu = QMenu(self)
        menu.addAction("Rename…", lambda: self._rename(item))
        menu.addAction("Delete…", lambda: self._delete(item))
        menu.exec(self.list.viewport().mapToGlobal(pos))

    def _rename(self, item: QListWidgetItem | None) -> None:
        if item is None:
            return
        title, ok = QInputDialog.getText(self, "Rename chat", "Title:", text=item.text())
        if ok and title.strip():
            self.renameRequested.emit(str(item.data(ID_ROLE)), title.strip())

    def _delete(self, item: QListWidgetItem | None) -> None:
        if item is None:
            return
        self.deleteRequested.emit(str(item.data(ID_ROLE)))  # at once: the window offers Undo
