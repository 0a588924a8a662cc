"""File ▸ Export: the current chat saved as Markdown or JSON (app.chat.export), where the user chooses."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import QFileDialog, QWidget

from app.atomic import atomic_write_text
from app.chat.conversations import Conversation
from app.chat.export import export
from ui.base.message_bar import MessageBar

FILTERS = {"md": "Markdown (*.md)", "json": "JSON (*.json)"}  # the formats app.chat.export writes


def export_chat(parent: QWidget, errors: MessageBar, conv: Conversation | None, fmt: str, system: str,
                path: Path | None = None) -> Path | None:
    """Save `conv` as `fmt` (asks where unless `path` is given); the path written, or None (said in `errors`)."""
    if conv is None or not conv.messages:
        errors.show_message("There is nothing to export yet: this chat is empty.", "info")
        return None
    if path is None:
        name = "".join(c if c.isalnum() or c in " -_" else "_" for c in conv.title).strip() or conv.id
        chosen, _ = QFileDialog.getSaveFileName(parent, "Export chat", str(Path.home() / f"{name}.{fmt}"),
                                                FILTERS[fmt])
        if not chosen:
            return None
        path = Path(chosen)
    try:
        atomic_write_text(path, export(conv, fmt, system))
    except OSError as exc:
        errors.show_message(f"Could not write {path}: {exc.strerror or exc}. Choose another folder.", "error")
        return None
    return path
