"""Render the SVG icon to the PNG sizes of the hicolor theme, a Windows .ico and a macOS .icns.

    .venv/bin/python packaging/render_icons.py

Run it after editing the SVG; its outputs are committed, so a build needs neither this script nor
Pillow (PyInstaller takes the .ico and .icns as they are). Uses PySide6's QSvgRenderer, which
PySide6-Essentials ships; the .ico and .icns containers are written here (PNG entries).
"""

from __future__ import annotations

import os
import struct
import sys
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import QBuffer, QByteArray, QIODevice, Qt  # noqa: E402
from PySide6.QtGui import QGuiApplication, QImage, QPainter  # noqa: E402
from PySide6.QtSvg import QSvgRenderer  # noqa: E402

APP_ID = "org.specchat.SpecChat"
ROOT = Path(__file__).resolve().parent.parent
ICONS = ROOT / "resources" / "icons"
SVG = ICONS / "hicolor" / "scalable" / "apps" / f"{APP_ID}.svg"
PNG_SIZES = (16, 24, 32, 48, 64, 128, 256, 512)
ICO_SIZES = (16, 24, 32, 48, 64, 128, 256)
# icns entry types holding PNG data, by pixel size (ic10 is 512@2x).
ICNS_TYPES = {16: b"icp4", 32: b"icp5", 64: b"icp6", 128: b"ic07", 256: b"ic08", 512: b"ic09", 1024: b"ic10"}


def render_png(renderer: QSvgRenderer, size: int) -> bytes:
    image = QImage(size, size, QImage.Format.Format_ARGB32_Premultiplied)
    image.fill(Qt.GlobalColor.transparent)
    painter = QPainter(image)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    renderer.render(painter)
    painter.end()
    data = QByteArray()
    buffer = QBuffer(data)
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    image.save(buffer, "PNG")
    buffer.close()
    return bytes(data.data())


def ico(pngs: dict[int, bytes]) -> bytes:
    """ICONDIR + ICONDIRENTRY per size, PNG payloads (valid since Windows Vista)."""
    sizes = sorted(pngs)
    header = struct.pack("<HHH", 0, 1, len(sizes))
    offset = len(header) + 16 * len(sizes)
    entries, payload = b"", b""
    for size in sizes:
        png = pngs[size]
        side = 0 if size >= 256 else size  # 0 means 256
        entries += struct.pack("<BBBBHHII", side, side, 0, 0, 1, 32, len(png), offset + len(payload))
        payload += png
    return header + entries + payload


def icns(pngs: dict[int, bytes]) -> bytes:
    body = b"".join(ICNS_TYPES[s] + struct.pack(">I", 8 + len(pngs[s])) + pngs[s] for s in sorted(pngs))
    return b"icns" + struct.pack(">I", 8 + len(body)) + body


def main() -> int:
    _app = QGuiApplication(sys.argv[:1])
    renderer = QSvgRenderer(str(SVG))
    if not renderer.isValid():
        print(f"render_icons: cannot read {SVG}", file=sys.stderr)
        return 1
    pngs = {size: render_png(renderer, size) for size in sorted(set(PNG_SIZES) | set(ICNS_TYPES))}
    for size in PNG_SIZES:
        out = ICONS / "hicolor" / f"{size}x{size}" / "apps" / f"{APP_ID}.png"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(pngs[size])
    (ICONS / f"{APP_ID}.ico").write_bytes(ico({s: pngs[s] for s in ICO_SIZES}))
    (ICONS / f"{APP_ID}.icns").write_bytes(icns({s: pngs[s] for s in ICNS_TYPES}))
    print(f"wrote {len(PNG_SIZES)} PNGs, {APP_ID}.ico and {APP_ID}.icns under {ICONS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
