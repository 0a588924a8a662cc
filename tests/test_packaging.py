"""The pieces of the desktop package that can be checked without building it: the self-test (engine
and window, on SmolLM2), the icon set, the .desktop file, the user install script, the spec's
platform neutrality. The PyInstaller build itself runs in packaging/ci_package.sh."""

from __future__ import annotations

import configparser
import os
import re
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


# --- the .deb tells the truth: the distributions it claims, the licences it carries, one copy per library ---

DIST = ROOT / "dist"
BUNDLE = DIST / "SpecChat"
WORKPATH = ROOT / "build" / "pyinstaller" / "specchat"


def _packaging_script(name: str) -> object:
    """A script of packaging/ as a module (they are scripts, not a package)."""
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location(f"packaging_{name}", ROOT / "packaging" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _built_deb() -> Path | None:
    debs = sorted(DIST.glob("specchat_*.deb"), key=lambda p: p.stat().st_mtime)
    return debs[-1] if debs and shutil.which("dpkg-deb") else None


def _deb_file(deb: Path, member: str) -> str:
    tar = subprocess.run(["dpkg-deb", "--fsys-tarfile", str(deb)], capture_output=True, check=True).stdout
    return subprocess.run(["tar", "-xO", f"./{member}"], input=tar, capture_output=True, check=True).stdout.decode()


def test_runs_on_follows_the_glibc_the_depends_needs() -> None:
    dd = _packaging_script("deb_depends")
    assert dd.glibc_needed("libc6 (>= 2.36), libegl1, xkb-data") == "2.36"  # type: ignore[attr-defined]
    assert dd.glibc_needed("libegl1, libc6-dev (>= 2.36)") is None  # type: ignore[attr-defined]
    assert dd.runs_on("libc6 (>= 2.36), libx11-6") == "Debian >= 12, Ubuntu >= 24.04"  # type: ignore[attr-defined]
    assert dd.runs_on("libc6 (>= 2.35)") == "Debian >= 12, Ubuntu >= 22.04"  # type: ignore[attr-defined]
    assert dd.runs_on("libc6 (>= 2.34)") == "Debian >= 12, Ubuntu >= 22.04"  # type: ignore[attr-defined]
    assert dd.runs_on("libc6 (>= 2.28)") == "Debian >= 11, Ubuntu >= 20.04"  # type: ignore[attr-defined]
    assert dd.runs_on("libc6 (>= 2.41)") == "Debian >= 13, Ubuntu newer than 24.04"  # type: ignore[attr-defined]
    with pytest.raises(ValueError):
        dd.runs_on("libegl1")  # type: ignore[attr-defined]
    # The table itself: the releases' glibc, oldest first, never going down.
    for releases in dd.GLIBC_RELEASES.values():  # type: ignore[attr-defined]
        keys = [tuple(int(x) for x in glibc.split(".")) for _, glibc in releases]
        assert keys == sorted(keys)
    assert dict(dd.GLIBC_RELEASES["Ubuntu"])["22.04"] == "2.35"  # type: ignore[attr-defined]
    assert dict(dd.GLIBC_RELEASES["Debian"])["12"] == "2.36"  # type: ignore[attr-defined]


def test_packaging_doc_claims_what_the_depends_allows() -> None:
    """docs/PACKAGING.md names the distributions the .deb runs on: the claim must follow from the glibc in
    the Depends of the package built here, else from the Depends the doc shows."""
    dd = _packaging_script("deb_depends")
    doc = (ROOT / "docs" / "PACKAGING.md").read_text()
    shown = re.search(r"^Depends: (.*?)\n```", doc, re.S | re.M)
    assert shown, "docs/PACKAGING.md shows no Depends: block"
    depends = " ".join(shown.group(1).split())
    deb = _built_deb()
    if deb is not None:
        depends = subprocess.run(["dpkg-deb", "-f", str(deb), "Depends"], capture_output=True, text=True,
                                 check=True).stdout.strip()
        description = subprocess.run(["dpkg-deb", "-f", str(deb), "Description"], capture_output=True, text=True,
                                     check=True).stdout
        assert dd.runs_on(depends) in " ".join(description.split())  # type: ignore[attr-defined]
    claim = dd.runs_on(depends)  # type: ignore[attr-defined]
    assert claim in doc, f"docs/PACKAGING.md should say the package runs on {claim}"


def test_build_deb_takes_maintainer_and_homepage_from_pyproject() -> None:
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["maintainers"][0]["name"] and "@" in project["maintainers"][0]["email"]
    script = (ROOT / "packaging" / "build-deb.sh").read_text()
    assert "Maintainer: $maintainer" in script and "Homepage: http" not in script
    deb = _built_deb()
    if deb is not None:
        control = subprocess.run(["dpkg-deb", "-f", str(deb)], capture_output=True, text=True, check=True).stdout
        person = project["maintainers"][0]
        assert f"Maintainer: {person['name']} <{person['email']}>" in control
        assert ("Homepage:" in control) == bool(project.get("urls"))


def test_dedupe_links_identical_libraries(tmp_path: Path) -> None:
    dedupe = _packaging_script("dedupe_libs")
    lib = tmp_path / "_internal" / "llama_cpp" / "lib"
    lib.mkdir(parents=True)
    payload = os.urandom(50_000)
    for name in ("libllama.so", "libllama.so.0", "libllama.so.0.0.7"):
        (lib / name).write_bytes(payload)
    (tmp_path / "_internal" / "libllama.so.0").write_bytes(payload)  # a twin in another folder
    (lib / "libggml.so").write_bytes(os.urandom(50_000))  # same size, other bytes
    (tmp_path / "_internal" / "a.txt").write_text("same")
    (tmp_path / "_internal" / "b.txt").write_text("same")  # not a library: left alone
    assert dedupe.main([str(tmp_path), "--check"]) == 1  # type: ignore[attr-defined]
    assert not any(p.is_symlink() for p in tmp_path.rglob("*"))  # --check changes nothing
    links, saved = dedupe.dedupe(tmp_path)  # type: ignore[attr-defined]
    assert saved == 3 * 50_000 and len(links) == 3
    assert not (lib / "libllama.so.0.0.7").is_symlink()  # the most specific name keeps the bytes
    for link in (lib / "libllama.so", lib / "libllama.so.0", tmp_path / "_internal" / "libllama.so.0"):
        assert link.is_symlink() and not os.path.isabs(os.readlink(link))
        assert link.resolve() == (lib / "libllama.so.0.0.7").resolve() and link.read_bytes() == payload
    assert not (lib / "libggml.so").is_symlink() and not (tmp_path / "_internal" / "b.txt").is_symlink()
    assert dedupe.identical_groups(tmp_path) == []  # type: ignore[attr-defined]
    assert dedupe.main([str(tmp_path), "--check"]) == 0  # type: ignore[attr-defined]


@pytest.mark.skipif(not BUNDLE.is_dir(), reason="needs the built bundle (packaging/build.sh)")
def test_bundle_has_one_copy_of_each_shared_library() -> None:
    dedupe = _packaging_script("dedupe_libs")
    groups = dedupe.identical_groups(BUNDLE)  # type: ignore[attr-defined]
    assert groups == [], [[str(p.relative_to(BUNDLE)) for p in g] for g in groups]


@pytest.mark.skipif(not BUNDLE.is_dir(), reason="needs the built bundle (packaging/build.sh)")
def test_bundle_has_no_hf_xet() -> None:
    """huggingface_hub uses hf_xet only when its metadata says it is installed; SpecChat downloads over HTTP."""
    assert not [str(p) for p in BUNDLE.rglob("*hf_xet*")]
    pyz = WORKPATH / "PYZ-00.toc"
    if pyz.is_file():
        assert "'hf_xet" not in pyz.read_text()


@pytest.mark.skipif(not BUNDLE.is_dir(), reason="needs the built bundle (packaging/build.sh)")
def test_the_bundle_serves_the_openai_api(smol_path: Path, tmp_path: Path) -> None:
    """uvicorn imports its loop and protocol by name, which PyInstaller cannot see (the spec lists them): the frozen
    app must still answer a chat completion, and leave OpenAI's client out."""
    import json
    import socket
    import time
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([str(BUNDLE / "SpecChat"), "serve", "-m", str(smol_path), "--port", str(port), "-c", "512"],
                            env={**os.environ, "SPECCHAT_HOME": str(tmp_path), "SPECCHAT_API_KEY": ""},
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 180
        body = json.dumps({"model": "specchat", "max_tokens": 4, "temperature": 0,
                           "messages": [{"role": "user", "content": "Hi"}]}).encode()
        while True:
            try:
                request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", body,
                                                 {"Content-Type": "application/json"})
                with urllib.request.urlopen(request, timeout=60) as response:
                    reply = json.loads(response.read())
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.stderr else ""
                time.sleep(1)
        assert reply["object"] == "chat.completion" and reply["choices"][0]["message"]["content"]
    finally:
        proc.terminate()
        proc.wait(30)
    assert not list(BUNDLE.rglob("openai"))


def _fake_dist(site: Path, name: str, version: str, metadata: str, files: dict[str, str]) -> list[Path]:
    """An installed distribution in `site`: METADATA, RECORD and its files (relative to site)."""
    info = site / f"{name}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.4\nName: {name}\nVersion: {version}\n{metadata}\n")
    paths = []
    for rel, text in files.items():
        path = site / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        paths.append(path)
    records = [*files, f"{info.name}/METADATA", f"{info.name}/RECORD"]
    (info / "RECORD").write_text("".join(f"{r},,\n" for r in records))
    return paths


def _deb822(text: str) -> list[dict[str, str]]:
    paragraphs = []
    for block in text.strip().split("\n\n"):
        fields: dict[str, str] = {}
        key = ""
        for line in block.splitlines():
            if line.startswith(" "):
                assert key, f"a continuation line with no field: {line!r}"
                fields[key] += "\n" + line[1:]
            else:
                key, _, value = line.partition(":")
                assert key and _, f"not a field: {line!r}"
                fields[key] = value.strip()
        paragraphs.append(fields)
    return paragraphs


def _check_dep5(copyright_text: str) -> list[dict[str, str]]:
    """Machine-readable: a header, Files paragraphs with Copyright and License, every licence named defined."""
    paragraphs = _deb822(copyright_text)
    assert paragraphs[0]["Format"].startswith("https://www.debian.org/doc/packaging-manuals/copyright-format/1.0")
    files = [p for p in paragraphs[1:] if "Files" in p]
    assert files[0]["Files"] == "*" and files[0]["License"] == "MIT"
    for p in files:
        assert p["Copyright"].strip() and p["License"].strip(), p
    defined = {p["License"].split("\n")[0] for p in paragraphs[1:] if "Files" not in p}
    for p in files:
        expression = p["License"].split("\n")[0]
        for name in re.split(r"\s+(?:and|or)\s+|[(),]", expression):
            assert not name.strip() or name.strip() in defined, f"{name} has no License paragraph"
    return files


def test_licenses_from_pyinstallers_record(tmp_path: Path) -> None:
    """A fake build: two installed distributions, PyInstaller's records of what went where, a file of the
    checkout and one of the standard library."""
    import importlib.metadata as md
    import pprint
    import sysconfig

    lic = _packaging_script("licenses")
    site = tmp_path / "site-packages"
    mit_text = "MIT License\n\nCopyright (c) 2023 Jane Doe\n\nPermission is hereby granted, free of charge, ..."
    mit = _fake_dist(site, "fake_mit", "1.2", "License-Expression: MIT\nLicense-File: LICENSE",
                     {"fake_mit/__init__.py": "", "fake_mit/_speedups.so": "elf"})
    (site / "fake_mit-1.2.dist-info" / "licenses").mkdir()
    (site / "fake_mit-1.2.dist-info" / "licenses" / "LICENSE").write_text(mit_text)
    qt = _fake_dist(site, "Fake_Qt", "6.0", "License: LGPL-3.0-only OR GPL-3.0-only",
                    {"FakeQt/__init__.py": "", "FakeQt/Qt/lib/libQt6Fake.so.6": "elf"})
    stdlib_file = Path(sysconfig.get_paths()["stdlib"]) / "json" / "__init__.py"
    work = tmp_path / "work"
    work.mkdir()
    collect = [("SpecChat", str(work / "SpecChat"), "EXECUTABLE"),
               ("fake_mit/_speedups.so", str(mit[1]), "EXTENSION"),
               ("FakeQt/Qt/lib/libQt6Fake.so.6", str(qt[1]), "BINARY"),
               ("FakeQt/Qt/lib/libQt6Link.so.6", "libQt6Fake.so.6", "SYMLINK"),
               ("app/data/models.jsonl", str(ROOT / "app" / "__init__.py"), "DATA")]
    pyz = [("fake_mit", str(mit[0]), "PYMODULE"), ("FakeQt", str(qt[0]), "PYMODULE"),
           ("json", str(stdlib_file), "PYMODULE")]
    (work / "COLLECT-00.toc").write_text(pprint.pformat((str(tmp_path / "bundle"), collect)))
    (work / "PYZ-00.toc").write_text(pprint.pformat((str(work / "PYZ-00.pyz"), pyz)))
    bundle = tmp_path / "bundle"
    (bundle / "_internal").mkdir(parents=True)

    components, unowned = lic.collect(bundle, work, list(md.distributions(path=[str(site)])))  # type: ignore[attr-defined]
    assert unowned == ["SpecChat"]  # no PyInstaller among these distributions: the bootloader is unclaimed
    by_key = {c.key: c for c in components}
    assert set(by_key) == {"fake-mit", "fake-qt"}  # the stdlib module and the checkout file are not components
    assert by_key["fake-mit"].paths == {"_internal/fake_mit/_speedups.so", "_internal/fake_mit/__init__.py"}
    assert by_key["fake-mit"].copyright == ["2023 Jane Doe"] and by_key["fake-mit"].texts == {"LICENSE": mit_text}

    out = tmp_path / "doc"
    lic.write(out, components, {"license": {"text": "MIT"}, "maintainers": [{"name": "M", "email": "m@x"}]})  # type: ignore[attr-defined]
    text = (out / "copyright").read_text()
    files = {p["Files"]: p for p in _check_dep5(text)}
    assert files["opt/specchat/_internal/fake_mit/*"]["License"] == "MIT"
    assert files["opt/specchat/_internal/FakeQt/*"]["License"] == "LGPL-3.0-only or GPL-3.0-only"
    assert "Upstream-Contact: M <m@x>" in text
    assert (out / "licenses" / "fake-mit" / "LICENSE").read_text() == mit_text
    if Path("/usr/share/common-licenses/LGPL-3").is_file():  # a wheel with no text gets Debian's copies
        assert "GNU LESSER GENERAL PUBLIC LICENSE" in (out / "licenses" / "fake-qt" / "LGPL-3").read_text()
        assert (out / "licenses" / "fake-qt" / "GPL-3").is_file()


def test_licenses_of_the_installed_pyside6_and_llama_cpp(tmp_path: Path) -> None:
    """This environment's PySide6 and llama-cpp-python, in the real bundle when built, else in a fake one
    holding their folders: the copyright file names them and the licence texts are copied."""
    import importlib.metadata as md
    import sys

    try:
        md.distribution("PySide6_Essentials")
        md.distribution("llama_cpp_python")
    except md.PackageNotFoundError:
        pytest.skip("needs PySide6-Essentials and llama-cpp-python installed")
    if not Path("/usr/share/common-licenses/LGPL-3").is_file():
        pytest.skip("the PySide6 wheel ships no licence text; its LGPL comes from Debian's common-licenses")
    if BUNDLE.is_dir() and (WORKPATH / "COLLECT-00.toc").is_file():
        bundle, args = BUNDLE, ["--workpath", str(WORKPATH)]
    else:
        bundle, args = tmp_path / "bundle", ["--workpath", str(tmp_path / "no-build")]
        for folder in ("PySide6", "shiboken6", "llama_cpp"):
            (bundle / "_internal" / folder).mkdir(parents=True)
    out = tmp_path / "doc"
    res = subprocess.run([sys.executable, str(ROOT / "packaging" / "licenses.py"), str(bundle), "--out", str(out),
                          *args], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    text = (out / "copyright").read_text()
    files = _check_dep5(text)
    licences = {p["Comment"].split(" ")[0]: p["License"] for p in files if "Comment" in p}
    assert licences["PySide6_Essentials"].startswith("LGPL-3.0-only")
    assert licences["llama_cpp_python"] == "MIT" and licences["llama.cpp"] == "MIT"
    assert "GNU LESSER GENERAL PUBLIC LICENSE" in (out / "licenses" / "pyside6-essentials" / "LGPL-3").read_text()
    assert "Permission is hereby granted" in (out / "licenses" / "llama-cpp-python" / "LICENSE.md").read_text()
    assert "The ggml authors" in (out / "licenses" / "llama.cpp" / "LICENSE").read_text()
    if bundle == BUNDLE:  # the whole record: Python and numpy (with OpenBLAS's licence) too
        assert licences["Python"] == "PSF-2.0"
        assert "numpy" in licences and "OpenBLAS" in (out / "licenses" / "numpy" / "LICENSE.txt").read_text()


@pytest.mark.skipif(_built_deb() is None, reason="needs a built .deb (packaging/build-deb.sh) and dpkg-deb")
def test_deb_carries_the_licences() -> None:
    deb = _built_deb()
    assert deb is not None
    listing = subprocess.run(["dpkg-deb", "-c", str(deb)], capture_output=True, text=True, check=True).stdout
    assert "./usr/share/doc/specchat/licenses/pyside6-essentials/LGPL-3" in listing
    assert "./usr/share/doc/specchat/licenses/llama-cpp-python/LICENSE.md" in listing
    assert "hf_xet" not in listing
    files = _check_dep5(_deb_file(deb, "usr/share/doc/specchat/copyright"))
    assert any(p["Files"].startswith("opt/specchat/_internal/PySide6") for p in files)


# --- the research bench stays in the checkout: not in the wheel, the bundle or the .deb (issue 56) ---------------

# Once app/cli's, now tools/bench's: the product must not carry them under either name.
RESEARCH_MODULES = ("bench_pool", "bench_replay", "copy_bound", "copy_bound_report", "native_replay", "policy_replay")


def _research(modules: list[str]) -> list[str]:
    moved = {f"app.cli.{name}" for name in RESEARCH_MODULES}
    return sorted(m for m in modules if m == "tools" or m.startswith("tools.") or m in moved)


def _bundled_modules(executable: Path) -> list[str]:
    """The Python modules a PyInstaller executable carries: its embedded PYZ archive's table of contents."""
    readers = pytest.importorskip("PyInstaller.archive.readers")
    archive = readers.CArchiveReader(str(executable))
    pyz = next(name for name in archive.toc if name.startswith("PYZ"))
    return list(archive.open_embedded_archive(pyz).toc)


def test_the_research_modules_live_in_tools_only() -> None:
    """The list the checks below look for is the real one: every research module is in tools/bench, none in app/."""
    assert all((ROOT / "tools" / "bench" / f"{name}.py").is_file() for name in RESEARCH_MODULES)
    assert _research([".".join(p.relative_to(ROOT).with_suffix("").parts) for p in (ROOT / "app").rglob("*.py")]) == []


def test_wheel_leaves_out_the_research_tools() -> None:
    """pyproject.toml's package discovery, as setuptools runs it for the wheel, finds app/, ui/ and never tools/."""
    import tomllib

    from setuptools import find_packages

    find = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    packages = find_packages(str(ROOT), include=find["include"], exclude=find.get("exclude", ()))
    assert "app.cli" in packages and "ui.shell" in packages
    assert _research(packages) == [] and not any(p.startswith("tests") for p in packages)


def test_spec_keeps_the_research_tools_out_of_the_bundle() -> None:
    """PyInstaller follows imports (and takes app/ and ui/ whole); tools/ is excluded outright, so even a stray
    import of it would not ship it (import-linter forbids that import too)."""
    spec = (ROOT / "packaging" / "specchat.spec").read_text()
    assert re.search(r'^RESEARCH_EXCLUDES = \["tools"\]', spec, re.M) and "+ RESEARCH_EXCLUDES" in spec
    assert 'collect_submodules("tools' not in spec


@pytest.mark.skipif(not (BUNDLE / "SpecChat").is_file(), reason="needs the built bundle (packaging/build.sh)")
def test_bundle_carries_no_research_tool() -> None:
    modules = _bundled_modules(BUNDLE / "SpecChat")
    assert "app.cli.bench" in modules and "app.cli.native_bench" in modules  # `specchat bench --native` ships
    assert _research(modules) == []


@pytest.mark.skipif(_built_deb() is None, reason="needs the built .deb (packaging/build-deb.sh) and dpkg-deb")
def test_deb_carries_no_research_tool(tmp_path: Path) -> None:
    deb = _built_deb()
    assert deb is not None
    tar = subprocess.run(["dpkg-deb", "--fsys-tarfile", str(deb)], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tmp_path), "./opt/specchat/SpecChat"], input=tar, check=True)
    modules = _bundled_modules(tmp_path / "opt" / "specchat" / "SpecChat")
    assert "app.cli.bench" in modules and "app.cli.native_bench" in modules
    assert _research(modules) == []
