"""Detect a PySide6 build that drops references to None/True/False (PySide6 6.12.0 on Python 3.11).

There, every call of a void Qt method from Python and every `Signal.emit()` returns None/True
without taking a reference; after some thousands of calls the interpreter aborts with
"none_dealloc" or "bool_dealloc". Python 3.12+ is immune (those objects are immortal), and
PySide6 6.11.x is fine. The app checks at start and says so, rather than crash later unexplained.
"""

from __future__ import annotations

import sys

import PySide6
from PySide6.QtCore import QObject

FIX = "install PySide6-Essentials 6.11.3 (pip install 'PySide6-Essentials==6.11.3') or use Python 3.12+"


def refcount_bug() -> str | None:
    """A sentence for the user when this PySide6 loses references, else None."""
    probe = QObject()
    before = sys.getrefcount(None)
    for _ in range(20):
        probe.setObjectName("probe")
    lost = before - sys.getrefcount(None)
    if lost < 20:
        return None
    return (f"PySide6 {PySide6.__version__} on Python {sys.version_info.major}.{sys.version_info.minor} drops a "
            f"reference to None on every Qt call and will crash this app after a while: {FIX}.")
