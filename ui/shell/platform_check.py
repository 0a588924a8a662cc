"""Before Qt aborts: can the xcb platform plugin load on this desktop?

Qt 6.5+ needs X11 helper libraries (libxcb-cursor0 on Ubuntu, libxcb-icccm4 and libxcb-keysyms1 on
a bare Debian) that many desktops lack; without them QApplication aborts with "Could not load the
Qt platform plugin xcb ... Reinstalling the application may fix this problem", which names nothing.
This module runs before any Qt import: it dlopens the very plugin Qt would load (same process, same
library path, so it fails exactly when Qt would), and when that fails for a missing library it
lists every missing one (`ldd` on the plugin, else the one dlopen named) with the apt and dnf
command that installs them. Whenever the check cannot decide, it stays out of the way and Qt starts
as it would have. `SPECCHAT_SKIP_PLATFORM_CHECK=1` turns it off.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

EXIT_CODE = 4  # distinct from a failed run (1), bad input (2) and "already running" (3)
PLUGIN = "libqxcb.so"

# Sonames whose Debian package breaks the naming rule, or that Fedora packages under another name.
# Everything else: Debian's library naming policy (libfoo.so.1 -> libfoo1) and, for dnf, RPM's
# automatic soname provide.
_PACKAGES: dict[str, tuple[str, str]] = {
    "libxcb-cursor.so.0": ("libxcb-cursor0", "xcb-util-cursor"),
    "libxcb-icccm.so.4": ("libxcb-icccm4", "xcb-util-wm"),
    "libxcb-keysyms.so.1": ("libxcb-keysyms1", "xcb-util-keysyms"),
    "libxcb-image.so.0": ("libxcb-image0", "xcb-util-image"),
    "libxcb-render-util.so.0": ("libxcb-render-util0", "xcb-util-renderutil"),
    "libxcb-util.so.1": ("libxcb-util1", "xcb-util"),
    "libxkbcommon-x11.so.0": ("libxkbcommon-x11-0", "libxkbcommon-x11"),
    "libxkbcommon.so.0": ("libxkbcommon0", "libxkbcommon"),
    "libX11-xcb.so.1": ("libx11-xcb1", "libX11-xcb"),
    "libX11.so.6": ("libx11-6", "libX11"),
    "libGL.so.1": ("libgl1", "libglvnd-glx"),
    "libEGL.so.1": ("libegl1", "libglvnd-egl"),
    "libOpenGL.so.0": ("libopengl0", "libglvnd-opengl"),
    "libfontconfig.so.1": ("libfontconfig1", "fontconfig"),
    "libfreetype.so.6": ("libfreetype6", "freetype"),
    "libglib-2.0.so.0": ("libglib2.0-0", "glib2"),
    "libgthread-2.0.so.0": ("libglib2.0-0", "glib2"),
    "libdbus-1.so.3": ("libdbus-1-3", "dbus-libs"),
    "libxcb.so.1": ("libxcb1", "libxcb"),
    "libGLdispatch.so.0": ("libglvnd0", "libglvnd"),
    "libz.so.1": ("zlib1g", "zlib"),
    "libbrotlidec.so.1": ("libbrotli1", "brotli"),
    "libbrotlicommon.so.1": ("libbrotli1", "brotli"),
    "libgcc_s.so.1": ("libgcc-s1", "libgcc"),
    **{soname: ("libc6", "glibc") for soname in ("libc.so.6", "libm.so.6", "libdl.so.2", "libpthread.so.0")},
}


def xcb_would_be_used(env: Mapping[str, str]) -> bool:
    """Whether QApplication would load the xcb plugin, by Qt 6's own order of choice."""
    if not sys.platform.startswith("linux"):
        return False
    requested = env.get("QT_QPA_PLATFORM", "").strip()
    if requested:  # a list "a;b" is tried in order; "xcb:option" carries plugin options
        return requested.split(";")[0].split(":")[0].strip() == "xcb"
    if _wayland_socket(env) is not None:
        return False  # Qt tries Wayland first where a session offers it, and it connects
    return bool(env.get("DISPLAY"))


def _wayland_socket(env: Mapping[str, str]) -> Path | None:
    if not env.get("WAYLAND_DISPLAY") and env.get("XDG_SESSION_TYPE") != "wayland":
        return None
    name = env.get("WAYLAND_DISPLAY") or "wayland-0"
    socket = Path(name) if name.startswith("/") else Path(env.get("XDG_RUNTIME_DIR", "/nonexistent")) / name
    return socket if socket.exists() else None


def plugin_candidates(env: Mapping[str, str]) -> list[Path]:
    """The xcb plugin files Qt may load, its own plugins folder first (PySide6/Qt/plugins)."""
    folders: list[Path] = []
    spec = importlib.util.find_spec("PySide6")  # finds the package without importing Qt
    for location in (spec.submodule_search_locations or []) if spec else []:
        folders.append(Path(location) / "Qt" / "plugins" / "platforms")
    for entry in env.get("QT_PLUGIN_PATH", "").split(os.pathsep):
        if entry:
            folders.append(Path(entry) / "platforms")
    if env.get("QT_QPA_PLATFORM_PLUGIN_PATH"):
        folders.append(Path(env["QT_QPA_PLATFORM_PLUGIN_PATH"]))
    return [folder / PLUGIN for folder in folders if (folder / PLUGIN).is_file()]


def load_error(plugin: Path) -> str | None:
    """dlopen's error for the plugin, None when it loads. Lazy binding, as QLibrary loads it; on
    success the libraries stay loaded, which costs nothing since Qt loads the same ones next."""
    try:
        ctypes.CDLL(str(plugin), mode=os.RTLD_LAZY)
    except OSError as exc:
        # PyInstaller's ctypes wrapper re-raises with its own text; the loader's is in the cause.
        return str(exc.__cause__ or exc)
    return None


def missing_libraries(plugin: Path, error: str, env: Mapping[str, str]) -> list[str]:
    """Every library of the plugin that the loader cannot find ([] when the error is another one)."""
    if "cannot open shared object file" not in error:
        return []
    listed = _ldd_not_found(plugin, env)
    if listed:
        return listed
    first = error.split(":")[0].strip()  # dlerror: "libxcb-cursor.so.0: cannot open shared object file: ..."
    return [first] if first and Path(first).name != plugin.name else []


def _ldd_not_found(plugin: Path, env: Mapping[str, str]) -> list[str]:
    ldd = shutil.which("ldd", path=env.get("PATH", os.defpath))
    if ldd is None:
        return []
    try:  # the same environment, so the same LD_LIBRARY_PATH (a PyInstaller bundle sets one)
        out = subprocess.run([ldd, str(plugin)], env=dict(env), capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    found = re.findall(r"^\s*(\S+)\s+=>\s+not found", out, flags=re.MULTILINE)
    return list(dict.fromkeys(found))


def packages(sonames: Sequence[str]) -> tuple[list[str], list[str]]:
    """(apt packages, dnf packages) that provide these libraries, each once, in order."""
    apt: dict[str, None] = {}
    dnf: dict[str, None] = {}
    for soname in sonames:
        deb, rpm = _PACKAGES.get(soname, (_debian_name(soname), _rpm_provide(soname)))
        apt[deb] = None
        dnf[rpm] = None
    return list(apt), list(dnf)


def _debian_name(soname: str) -> str:
    """Debian policy 8.1: libfoo.so.1 is in libfoo1, libfoo-2.so.0 in libfoo-2-0."""
    stem, _, version = soname.partition(".so.")
    stem = stem.lower()
    if not version:
        return stem
    return f"{stem}-{version}" if stem[-1].isdigit() else f"{stem}{version}"


def _rpm_provide(soname: str) -> str:
    if soname.startswith("libxcb-"):
        return "libxcb"  # Fedora packages every xcb extension library in libxcb
    return f"'{soname}()(64bit)'" if sys.maxsize > 2**32 else soname  # RPM's soname provide


def message(missing: Sequence[str], plugin: Path, program: str = "specchat") -> str:
    apt, dnf = packages(missing)
    return "\n".join([
        f'{program}: cannot open a window: Qt\'s X11 platform plugin ("xcb") needs system libraries '
        "that are not installed:",
        *(f"    {soname}" for soname in missing),
        "Install them, then start SpecChat again:",
        f"    Debian, Ubuntu:  sudo apt install {' '.join(apt)}",
        f"    Fedora, RHEL:    sudo dnf install {' '.join(dnf)}",
        "Or run without a window (for --screenshot, --self-test and scripts):",
        f"    QT_QPA_PLATFORM=offscreen {program} gui ...",
        "The command line (specchat generate, bench, models, ...) needs no display at all.",
        f"(plugin: {plugin})",
    ])


def problem(env: Mapping[str, str] | None = None, program: str = "specchat") -> str | None:
    """The message to print instead of starting Qt, or None to let Qt start."""
    env = os.environ if env is None else env
    try:
        if env.get("SPECCHAT_SKIP_PLATFORM_CHECK") or not xcb_would_be_used(env):
            return None
        candidates = plugin_candidates(env)
        if not candidates:
            return None  # not where we look: Qt will say what it finds
        errors = [load_error(plugin) for plugin in candidates]
        if any(error is None for error in errors):
            return None
        missing = missing_libraries(candidates[0], errors[0] or "", env)
        return message(missing, candidates[0], program) if missing else None
    except Exception:  # noqa: BLE001 - a check that breaks must never stop a working app
        return None


# Shown when no terminal sees stderr (started from the applications menu): tools that need no Qt.
_DIALOGS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("zenity", ("--error", "--no-markup", "--title", "SpecChat", "--text")),
    ("kdialog", ("--title", "SpecChat", "--error")),
    ("xmessage", ("-center", "-title", "SpecChat")),
    ("notify-send", ("--urgency", "critical", "--app-name", "SpecChat", "SpecChat cannot open a window")),
)


def show_outside_terminal(text: str, env: Mapping[str, str] | None = None) -> str | None:
    """Show `text` in a desktop dialog when stderr reaches no terminal; the tool used, or None."""
    env = os.environ if env is None else env
    if sys.stderr.isatty() or not (env.get("DISPLAY") or env.get("WAYLAND_DISPLAY")):
        return None
    for tool, args in _DIALOGS:
        exe = shutil.which(tool, path=env.get("PATH"))
        if exe:
            try:
                subprocess.Popen([exe, *args, text], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL, start_new_session=True, env=dict(env))
            except OSError:
                continue
            return tool
    return None


def refuse_if_broken(program: str = "") -> int:
    """0 to go on; else the message is on stderr (and in a dialog without a terminal): the exit code."""
    name = program or Path(sys.argv[0]).name
    text = problem(program=name if name and not name.endswith(".py") else "specchat")
    if text is None:
        return 0
    print(text, file=sys.stderr, flush=True)
    show_outside_terminal(text)
    return EXIT_CODE


if __name__ == "__main__":  # bootstrap.py: `python -m ui.shell.platform_check [PROGRAM]` before the app
    sys.exit(refuse_if_broken(sys.argv[1] if len(sys.argv) > 1 else "specchat"))
