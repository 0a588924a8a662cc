"""The xcb start-up check (ui/shell/platform_check.py) on the real Qt plugin.

A missing library is staged as on a user's desktop: a copy of PySide6 (links to the real files)
whose libqxcb.so has a NEEDED soname patched to one that exists nowhere. Bare Qt then aborts with
its "Could not load the Qt platform plugin" message; the app must instead name the libraries and
the install commands. Under Xvfb, with the libraries installed, the check passes and the app starts
on the xcb platform.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ui.shell import platform_check

ROOT = Path(__file__).resolve().parents[1]
HIDDEN = {b"libxcb-icccm.so.4": b"libxcb-iccXm.so.4", b"libxcb-keysyms.so.1": b"libxcb-keysXms.so.1"}
QT_ABORT = "Could not load the Qt platform plugin"

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the xcb platform is Linux's")


def real_plugin() -> Path:
    found = platform_check.plugin_candidates({})
    assert found, "PySide6's Qt/plugins/platforms/libqxcb.so not found"
    return found[0]


def desktop_env(**extra: str) -> dict[str, str]:
    """This environment as a user's X11 session would have it: no platform chosen, no Wayland."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("QT_QPA_PLATFORM", "WAYLAND_DISPLAY", "XDG_SESSION_TYPE", "SPECCHAT_SKIP_PLATFORM_CHECK")}
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def broken_pyside(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding a PySide6 whose xcb plugin needs two libraries that do not exist."""
    real = real_plugin().parents[3]  # .../PySide6
    root = tmp_path_factory.mktemp("pyside")
    keep = Path("Qt/plugins/platforms/libqxcb.so")

    def mirror(src: Path, dst: Path) -> None:
        dst.mkdir()
        for entry in src.iterdir():
            rel = entry.relative_to(real)
            if rel == keep:
                continue
            if rel in keep.parents:
                mirror(entry, dst / entry.name)
            else:
                (dst / entry.name).symlink_to(entry)

    mirror(real, root / "PySide6")
    data = (real / keep).read_bytes()
    for name, patched in HIDDEN.items():
        assert data.count(name) == 1 and len(name) == len(patched)
        data = data.replace(name, patched)
    (root / "PySide6" / keep).write_bytes(data)
    (root / "PySide6" / keep).chmod(0o755)
    return root


def test_xcb_is_checked_only_where_qt_would_use_it(tmp_path: Path) -> None:
    used = platform_check.xcb_would_be_used
    assert used({"DISPLAY": ":0"})
    assert used({"QT_QPA_PLATFORM": "xcb"}) and used({"QT_QPA_PLATFORM": "xcb:nograb", "DISPLAY": ":0"})
    assert not used({})  # no display at all: not the missing-library problem
    assert not used({"DISPLAY": ":0", "QT_QPA_PLATFORM": "offscreen"})
    assert not used({"DISPLAY": ":0", "QT_QPA_PLATFORM": "wayland;xcb"})
    (tmp_path / "wayland-0").touch()
    wayland = {"DISPLAY": ":0", "XDG_RUNTIME_DIR": str(tmp_path)}
    assert not used({**wayland, "XDG_SESSION_TYPE": "wayland"})  # Qt connects to wayland-0 first
    assert not used({**wayland, "WAYLAND_DISPLAY": "wayland-0"})
    assert used({**wayland, "WAYLAND_DISPLAY": "wayland-1"})  # no such socket: Qt falls back to xcb
    assert used({**wayland, "XDG_SESSION_TYPE": "x11"})


def test_package_names_match_the_packages_that_hold_the_libraries_here() -> None:
    """Every library the real plugin loads, outside PySide6, maps to the Debian package that
    actually holds it on this machine (dpkg is asked)."""
    assert platform_check.packages(["libxcb-cursor.so.0", "libxcb-icccm.so.4", "libxcb-keysyms.so.1"]) == (
        ["libxcb-cursor0", "libxcb-icccm4", "libxcb-keysyms1"],
        ["xcb-util-cursor", "xcb-util-wm", "xcb-util-keysyms"])
    if not (shutil.which("dpkg-query") and shutil.which("ldd")):
        pytest.skip("needs a Debian machine")
    linked = subprocess.run(["ldd", str(real_plugin())], capture_output=True, text=True, check=True).stdout
    checked = 0
    for line in linked.splitlines():
        if "=>" not in line or "PySide6" in line:
            continue
        soname, path = line.split("=>")[0].strip(), line.split("=>")[1].split()[0]
        owners = [subprocess.run(["dpkg-query", "-S", p], capture_output=True, text=True)
                  for p in dict.fromkeys([path, os.path.realpath(path), os.path.realpath(path).removeprefix("/usr")])]
        owner = next((r.stdout.split(":")[0] for r in owners if r.returncode == 0), None)
        if owner is None:
            continue  # not from a package (a locally built library)
        assert platform_check.packages([soname])[0] == [owner], soname
        checked += 1
    assert checked >= 20  # the X11/xcb set, GL, fonts, glib


def test_a_hidden_library_is_named_with_the_commands_that_install_it(broken_pyside: Path, smol_path: Path,
                                                                      tmp_path: Path) -> None:
    env = desktop_env(PYTHONPATH=str(broken_pyside), DISPLAY=":97", SPECCHAT_HOME=str(tmp_path / "home"))
    # What a user saw: bare Qt aborts with a message that names nothing.
    bare = subprocess.run([sys.executable, "-c", "from PySide6.QtWidgets import QApplication; QApplication([])"],
                          env=env, capture_output=True, text=True, timeout=120)
    assert bare.returncode != 0 and QT_ABORT in bare.stderr
    # The app, before Qt: the libraries, apt and dnf commands, the offscreen way, exit 4.
    res = subprocess.run([sys.executable, "-m", "ui.shell.entry", "gui", "--quit-when-done"], cwd=ROOT,
                         env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == platform_check.EXIT_CODE, res.stderr
    assert QT_ABORT not in res.stderr
    assert "libxcb-iccXm.so.4" in res.stderr and "libxcb-keysXms.so.1" in res.stderr
    assert "sudo apt install libxcb-iccxm4 libxcb-keysxms1" in res.stderr
    assert "sudo dnf install libxcb" in res.stderr
    assert "QT_QPA_PLATFORM=offscreen specchat gui" in res.stderr
    assert str(broken_pyside / "PySide6" / "Qt" / "plugins" / "platforms" / "libqxcb.so") in res.stderr
    # The same from the self-test when xcb is asked for (its engine half runs first), and from
    # the module itself, as bootstrap.py runs it.
    selftest = subprocess.run([sys.executable, "-m", "ui.shell.entry", "--self-test", "--model", str(smol_path)],
                              cwd=ROOT, env={**env, "QT_QPA_PLATFORM": "xcb"}, capture_output=True, text=True,
                              timeout=120)
    assert selftest.returncode == platform_check.EXIT_CODE, selftest.stderr
    assert "self-test OK" in selftest.stdout and "libxcb-iccXm.so.4" in selftest.stderr
    module = subprocess.run([sys.executable, "-m", "ui.shell.platform_check"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=60)
    assert module.returncode == platform_check.EXIT_CODE and "libxcb-keysXms.so.1" in module.stderr
    # Offscreen, the xcb plugin is not loaded, so nothing is refused.
    offscreen = subprocess.run([sys.executable, "-m", "ui.shell.platform_check"], cwd=ROOT,
                               env={**env, "QT_QPA_PLATFORM": "offscreen"}, capture_output=True, text=True, timeout=60)
    assert offscreen.returncode == 0 and offscreen.stderr == ""


def test_without_ldd_the_loader_names_the_first_missing_library(broken_pyside: Path) -> None:
    plugin = broken_pyside / "PySide6" / "Qt" / "plugins" / "platforms" / "libqxcb.so"
    error = platform_check.load_error(plugin)
    assert error is not None and "cannot open shared object file" in error
    missing = platform_check.missing_libraries(plugin, error, {"PATH": "/nonexistent"})
    assert len(missing) == 1 and missing[0] in ("libxcb-iccXm.so.4", "libxcb-keysXms.so.1")
    with_ldd = platform_check.missing_libraries(plugin, error, os.environ)
    assert with_ldd == ["libxcb-iccXm.so.4", "libxcb-keysXms.so.1"]


def test_the_loader_error_survives_pyinstallers_ctypes_wrapper(broken_pyside: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A frozen bundle's ctypes.CDLL re-raises a failed load with its own text ("Failed to load
    dynlib/dll ..."), the loader's message only as the cause (PyInstaller's pyimod03_ctypes)."""
    import ctypes

    class FrozenCDLL(ctypes.CDLL):
        def __init__(self, name: str, *args: object, **kwargs: object) -> None:
            try:
                super().__init__(name, *args, **kwargs)  # type: ignore[arg-type]
            except Exception as base_error:
                raise OSError(f"Failed to load dynlib/dll {name!r}.") from base_error

    monkeypatch.setattr(platform_check.ctypes, "CDLL", FrozenCDLL)
    plugin = broken_pyside / "PySide6" / "Qt" / "plugins" / "platforms" / "libqxcb.so"
    error = platform_check.load_error(plugin) or ""
    assert platform_check.missing_libraries(plugin, error, {"PATH": "/nonexistent"})


def test_a_check_that_cannot_decide_lets_qt_start(tmp_path: Path) -> None:
    garbage = tmp_path / "libqxcb.so"
    garbage.write_bytes(b"not an ELF file")
    error = platform_check.load_error(garbage)
    assert error is not None and platform_check.missing_libraries(garbage, error, os.environ) == []
    assert platform_check.load_error(real_plugin()) is None
    # The real plugin loads here; a second, broken one beside it on QT_PLUGIN_PATH changes nothing.
    (tmp_path / "platforms").mkdir()
    garbage.rename(tmp_path / "platforms" / "libqxcb.so")
    assert platform_check.problem({"DISPLAY": ":97", "QT_PLUGIN_PATH": str(tmp_path)}) is None


@pytest.mark.skipif(not shutil.which("xvfb-run"), reason="needs Xvfb (Debian: apt install xvfb xauth)")
def test_under_xvfb_the_check_passes_and_the_app_starts_on_xcb(smol_path: Path, tmp_path: Path) -> None:
    env = desktop_env(SPECCHAT_HOME=str(tmp_path / "home"), QT_DEBUG_PLUGINS="1")
    shot = tmp_path / "window.png"
    res = subprocess.run(
        ["xvfb-run", "-a", "-s", "-screen 0 1280x900x24", sys.executable, "-m", "ui.shell.entry", "gui",
         "-m", str(smol_path), "--mode", "lookup", "-n", "8", "--prompt", "Say hello.", "--quit-when-done",
         "--screenshot", str(shot)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    tail = res.stderr[-3000:]
    assert res.returncode == 0, tail
    assert "platforms/libqxcb.so\" loaded library" in res.stderr, tail  # Qt chose xcb itself
    assert QT_ABORT not in res.stderr and "cannot open a window" not in res.stderr
    assert shot.stat().st_size > 10_000


def test_from_the_menu_the_message_is_shown_in_a_dialog(broken_pyside: Path, tmp_path: Path) -> None:
    """Started from the applications menu nobody reads stderr: the message goes to a desktop dialog."""
    fake = tmp_path / "bin"
    fake.mkdir()
    record = tmp_path / "shown.txt"
    tool = fake / "zenity"
    tool.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > "{record}"\n')
    tool.chmod(0o755)
    env = desktop_env(PYTHONPATH=str(broken_pyside), DISPLAY=":97", SPECCHAT_HOME=str(tmp_path / "home"),
                      PATH=f"{fake}{os.pathsep}{os.environ.get('PATH', '')}")
    res = subprocess.run([sys.executable, "-m", "ui.shell.entry", "gui"], cwd=ROOT, env=env,
                         stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
    assert res.returncode == platform_check.EXIT_CODE, res.stderr
    for _ in range(50):  # the dialog is started detached
        if record.exists() and record.read_text():
            break
        time.sleep(0.1)
    shown = record.read_text()
    assert "--error" in shown and "libxcb-iccXm.so.4" in shown and "sudo apt install" in shown
