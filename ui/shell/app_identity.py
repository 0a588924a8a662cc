"""Who the app is to the desktop: its reverse-DNS id, its icon, and where `resources/` lives.

The id names the `.desktop` file (`resources/org.specchat.SpecChat.desktop`) and the hicolor icon,
so GNOME and KDE (Wayland included) match the window to its launcher. `resources` is a package whose
data importlib.resources finds in a source checkout, an installed wheel and the PyInstaller bundle
(`packaging/specchat.spec` puts it there).
"""

from __future__ import annotations

import importlib.resources
import os
from pathlib import Path

from PySide6.QtGui import QGuiApplication, QIcon

APP_ID = "org.specchat.SpecChat"
ICON_SIZES = (16, 24, 32, 48, 64, 128, 256, 512)


def resources_dir() -> Path | None:
    """$SPECCHAT_RESOURCES, else the `resources` package's folder."""
    override = os.environ.get("SPECCHAT_RESOURCES")
    candidates = [Path(override)] if override else []
    candidates.append(Path(str(importlib.resources.files("resources"))))
    return next((c for c in candidates if (c / "icons").is_dir()), None)


def icon_files() -> list[Path]:
    root = resources_dir()
    if root is None:
        return []
    found = (root / "icons" / "hicolor" / f"{s}x{s}" / "apps" / f"{APP_ID}.png" for s in ICON_SIZES)
    return [path for path in found if path.is_file()]


def app_icon() -> QIcon:
    """The themed icon when the desktop has it installed, else our PNGs (no SVG plugin needed)."""
    icon = QIcon()
    for path in icon_files():
        icon.addFile(str(path))
    return QIcon.fromTheme(APP_ID, icon)


def apply_identity(app: QGuiApplication) -> None:
    """Call once, right after the QApplication exists and before the first window is shown."""
    QGuiApplication.setDesktopFileName(APP_ID)
    icon = app_icon()
    if not icon.isNull():
        app.setWindowIcon(icon)
