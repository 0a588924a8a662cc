"""Help > About: SpecChat's version and the llama.cpp it runs on (the CPU module a portable build picked,
the GPU backends it loaded), so a bug report says which build and which code path were used."""

from __future__ import annotations

import html
import platform
from importlib.metadata import PackageNotFoundError, version

from PySide6.QtWidgets import QMessageBox, QWidget

import app


def about_text(backends: str) -> str:
    """The About box's rich text; `backends` is LoadInfo.backends ("" before a pair is loaded)."""
    try:
        llama = version("llama-cpp-python")
    except PackageNotFoundError:
        llama = "unknown"
    loaded = html.escape(backends) if backends else "read when the first model loads"
    return (f"<h3>SpecChat {html.escape(app.__version__)}</h3>"
            "<p>Chat with local LLMs through llama.cpp speculative decoding, every accept/reject decision shown.</p>"
            f"<p><b>llama-cpp-python</b> {html.escape(llama)}<br><b>llama.cpp</b>: {loaded}<br>"
            f"<b>System</b>: {html.escape(platform.platform())}, Python {html.escape(platform.python_version())}</p>"
            "<p>MIT licence; the bundled Qt and PySide6 are LGPL-3.0, llama.cpp is MIT.</p>")


def show_about(parent: QWidget, backends: str) -> None:
    QMessageBox.about(parent, "About SpecChat", about_text(backends))
