"""Replaces PyInstaller's own hook for PySide6.QtGui (hooks in `hookspath` take precedence): the
same collection, less the Qt plugins a desktop chat app never loads.

Dropping a plugin here, before the binary dependency analysis, also drops the system libraries it
alone would pull in: the GTK3 platform theme alone brings GTK's whole stack (cairo, pango,
gdk-pixbuf, atk...), which would then mix with the user's own GTK at run time. Desktop dark mode
and native dialogs still work through the xdg-desktop-portal theme. The embedded-device platforms
(eglfs, linuxfb, vnc, vkkhrdisplay) and input drivers (evdev) are for kiosks, not desktops.
"""

from PyInstaller.utils.hooks.qt import add_qt6_dependencies

hiddenimports, binaries, datas = add_qt6_dependencies(__file__)

_UNWANTED_PLUGINS = (
    "platformthemes/libqgtk3", "platforms/libqeglfs", "platforms/libqlinuxfb", "platforms/libqvnc",
    "platforms/libqvkkhrdisplay", "platforms/libqminimalegl", "egldeviceintegrations/", "generic/",
)


def _wanted(entry):
    source = entry[0].replace("\\", "/")
    return not any(part in source for part in _UNWANTED_PLUGINS)


binaries = [b for b in binaries if _wanted(b)]
