"""The pieces of the desktop package that can be checked without building it: the self-test (engine
and window, on SmolLM2), the icon set, the .desktop file, the user install script, the spec's
platform neutrality. The PyInstaller build itself runs in packaging/ci_package.sh."""

from __future__ import annotations

import configparser
import os
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from app.cli import selftest

ROOT = Path(__file__).resolve().parent.parent
APP_ID = "org.specchat.SpecChat"
ICONS = ROOT / "resources" / "icons"


def test_engine_selftest_generates_and_reports(smol_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert selftest.run_selftest(smol_path) == 0
    out = capsys.readouterr().out
    assert out.startswith("self-test OK: SmolLM2") and "tok/s" in out and "libllama" in out and "CPU :" in out


def test_engine_selftest_fails_clearly_without_a_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert selftest.run_selftest(tmp_path / "missing.gguf") == selftest.EXIT_NO_MODEL
    assert "does not exist" in capsys.readouterr().err
    not_gguf = tmp_path / "broken.gguf"
    not_gguf.write_bytes(b"not a model")
    assert selftest.run_selftest(not_gguf) == selftest.EXIT_FAILED
    assert "self-test FAILED" in capsys.readouterr().err


def test_find_model_prefers_smollm2_then_the_smallest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPECCHAT_SELFTEST_MODEL", raising=False)
    monkeypatch.setenv("SPECCHAT_TEST_MODELS", str(tmp_path / "none"))
    monkeypatch.setenv("SPECCHAT_MODELS_DIR", str(tmp_path))
    assert selftest.find_model() is None
    (tmp_path / "big.gguf").write_bytes(b"x" * 200)
    (tmp_path / "small.gguf").write_bytes(b"x" * 100)
    assert selftest.find_model() == tmp_path / "small.gguf"
    (tmp_path / selftest.SMOL).write_bytes(b"x" * 300)
    assert selftest.find_model() == tmp_path / selftest.SMOL
    assert selftest.find_model(Path("/explicit.gguf")) == Path("/explicit.gguf")


@pytest.mark.gui
def test_gui_selftest_shows_the_window_and_replies(qapp: object, smol_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    from ui.shell.selftest_gui import run_gui_selftest

    home = os.environ.get("SPECCHAT_HOME")
    assert run_gui_selftest(smol_path, timeout_s=120) == 0
    assert os.environ.get("SPECCHAT_HOME") == home  # the throw-away profile does not leak
    out = capsys.readouterr().out
    assert "gui self-test OK" in out and "reply in" in out


def test_icon_set_is_complete() -> None:
    for size in (16, 24, 32, 48, 64, 128, 256, 512):
        png = ICONS / "hicolor" / f"{size}x{size}" / "apps" / f"{APP_ID}.png"
        data = png.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n"
        assert struct.unpack(">II", data[16:24]) == (size, size)
    svg = (ICONS / "hicolor" / "scalable" / "apps" / f"{APP_ID}.svg").read_text()
    assert "#0072B2" in svg and "#D55E00" in svg
    ico = (ICONS / f"{APP_ID}.ico").read_bytes()
    assert struct.unpack("<HHH", ico[:6]) == (0, 1, 7)
    icns = (ICONS / f"{APP_ID}.icns").read_bytes()
    assert icns[:4] == b"icns" and struct.unpack(">I", icns[4:8])[0] == len(icns)


def test_desktop_file() -> None:
    parser = configparser.ConfigParser(interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read(ROOT / "resources" / f"{APP_ID}.desktop")
    entry = parser["Desktop Entry"]
    assert entry["Type"] == "Application" and entry["Icon"] == APP_ID and entry["Terminal"] == "false"
    assert entry["Categories"] == "Development;"
    assert entry["Exec"]


@pytest.mark.skipif(os.name != "posix" or shutil.which("bash") is None, reason="a POSIX shell script")
def test_install_desktop_script_installs_and_uninstalls(tmp_path: Path) -> None:
    binary = tmp_path / "My Apps" / "SpecChat"
    binary.parent.mkdir()
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    env = dict(os.environ, HOME=str(tmp_path / "home"), XDG_DATA_HOME=str(tmp_path / "data"))
    script = ROOT / "packaging" / "install-desktop.sh"
    subprocess.run(["bash", str(script), "--binary", str(binary)], env=env, check=True, capture_output=True)
    desktop = (tmp_path / "data" / "applications" / f"{APP_ID}.desktop").read_text()
    assert f'Exec="{binary}"' in desktop and f"TryExec={binary}" in desktop
    assert (tmp_path / "data" / "icons" / "hicolor" / "256x256" / "apps" / f"{APP_ID}.png").is_file()
    assert (tmp_path / "data" / "icons" / "hicolor" / "scalable" / "apps" / f"{APP_ID}.svg").is_file()
    subprocess.run(["bash", str(script), "--uninstall"], env=env, check=True, capture_output=True)
    assert not (tmp_path / "data" / "applications" / f"{APP_ID}.desktop").exists()
    assert not list((tmp_path / "data" / "icons").rglob(f"{APP_ID}.*"))


def test_spec_has_no_platform_specific_paths() -> None:
    spec = (ROOT / "packaging" / "specchat.spec").read_text()
    compile(spec, "specchat.spec", "exec")
    for fragment in ("/usr/", "/opt/", "/home/", "/tmp/", "/work/", ".venv", "site-packages", "C:\\"):
        assert fragment not in spec, fragment
    assert "BUNDLE(" in spec and ".icns" in spec and ".ico" in spec


def test_metainfo_matches_the_desktop_file_and_the_version() -> None:
    """Software centres join the metainfo to the launcher by id; a stale release entry would
    advertise the wrong version in the .deb."""
    import tomllib
    import xml.etree.ElementTree as ET

    meta = ET.parse(ROOT / "resources" / f"{APP_ID}.metainfo.xml").getroot()
    assert meta.findtext("id") == APP_ID
    assert meta.findtext("launchable") == f"{APP_ID}.desktop"
    assert {b.text for b in meta.iter("binary")} == {"specchat", "specchat-gui"}
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert meta.find("releases/release").get("version") == version  # type: ignore[union-attr]
    if shutil.which("appstreamcli"):
        metainfo = ROOT / "resources" / f"{APP_ID}.metainfo.xml"
        res = subprocess.run(["appstreamcli", "validate", "--no-net", str(metainfo)], capture_output=True, text=True)
        assert res.returncode == 0, res.stdout + res.stderr


# Extension modules that link one system library each. Which of them are files depends on the Python: Debian's
# python3 builds zlib in (no __file__), pyenv's builds it as a module.
LINKING_MODULES = (("zlib", "libz.so.1"), ("_lzma", "liblzma.so.5"), ("_bz2", "libbz2.so.1.0"))


def _linking_module() -> tuple[Path, str, str] | None:
    """(the module's file, the library it links, that library's resolved path) for the first candidate that is a
    shared object linking its library here."""
    import importlib

    for name, lib in LINKING_MODULES:
        file = getattr(importlib.import_module(name), "__file__", None)
        if not file or not file.endswith(".so"):
            continue
        linked = subprocess.run(["ldd", file], capture_output=True, text=True).stdout
        path = next((line.split("=>")[1].split()[0] for line in linked.splitlines() if lib in line), None)
        if path:
            return Path(file), lib, path
    return None


@pytest.mark.skipif(not (shutil.which("dpkg-query") and shutil.which("ldd")), reason="needs a Debian machine")
def test_deb_depends_names_the_system_libraries_a_bundle_does_not_carry(tmp_path: Path) -> None:
    """A bundle of one real extension module (zlib's or another that links one system library): libraries
    found outside the bundle become packages, a carried one does not, an unresolvable one is an
    error that names it and the file needing it."""
    import sys

    found = _linking_module()
    if found is None:
        pytest.skip("none of this Python's zlib, _lzma, _bz2 modules is a shared object linking its system library")
    ext, lib, lib_path = found
    owner = subprocess.run(["dpkg-query", "-S", lib_path], capture_output=True, text=True)
    if owner.returncode != 0:
        pytest.skip(f"{lib_path} does not come from a Debian package here")
    package = owner.stdout.split(":")[0]  # "zlib1g:amd64: /lib/x86_64-linux-gnu/libz.so.1"
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    shutil.copy(ext, bundle / ext.name)
    script = [sys.executable, str(ROOT / "packaging" / "deb_depends.py"), str(bundle)]

    def depends() -> list[str]:
        res = subprocess.run(script, capture_output=True, text=True)
        assert res.returncode == 0, res.stderr
        return [d.strip().split()[0] for d in res.stdout.split(",")]

    first = depends()
    assert "libc6" in first and "xkb-data" in first and "fontconfig-config" in first
    assert package in first
    shutil.copy(lib_path, bundle / Path(lib_path).name)  # now the bundle carries the library
    assert package not in depends() and "libc6" in depends()
    missing = "libq" + lib[4:]  # the same length, so the ELF string table keeps its layout
    (bundle / "broken.so").write_bytes(ext.read_bytes().replace(lib.encode(), missing.encode()))
    res = subprocess.run(script, capture_output=True, text=True)
    assert res.returncode == 1 and missing in res.stderr and "broken.so" in res.stderr
