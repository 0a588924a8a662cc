"""The licences of everything the bundle carries: a DEP-5 copyright file and the full texts.

    .venv/bin/python packaging/licenses.py dist/SpecChat --out DOCDIR [--workpath build/pyinstaller/specchat]

Run it with the Python that built the bundle (it reads that environment's installed distributions).
Writes DOCDIR/copyright (Debian's machine-readable format) and DOCDIR/licenses/<name>/, the licence
files each component ships; packaging/build-deb.sh points DOCDIR at /usr/share/doc/specchat.

What the bundle holds comes from PyInstaller's own record of the build (COLLECT-00.toc: every file
copied into the folder, with its source; PYZ-00.toc: the Python modules compiled into the program's
archive). Each source file is attributed to its owner:

- a file listed in an installed distribution's RECORD: that Python distribution (name, version,
  `License-Expression` or `License` or its classifiers, the files named by `License-File` and any
  LICENSE/COPYING/NOTICE file in its .dist-info);
- the interpreter's standard library and libpython: Python (PSF-2.0, its LICENSE.txt);
- the program itself: PyInstaller's bootloader (GPL-2.0-or-later with the bootloader exception);
- a library outside Python (PyInstaller copies the system libraries the bundle links): its Debian
  package (`dpkg-query -S`), with that package's own copyright file;
- this checkout (app/, ui/, resources/): SpecChat, `Files: *`.

Wheels that ship no licence text (PySide6 and shiboken6 ship none) get Debian's copies of the
licences their metadata names, from /usr/share/common-licenses. llama.cpp's and ggml's licence is
not in the llama-cpp-python wheel either: it comes from packaging/license_texts/llama.cpp.

Without the work folder (a bundle built elsewhere) it falls back to the distributions whose top-level
packages sit in the bundle's _internal folder, and says so: pure-Python distributions compiled into
the archive are then missed.
"""

from __future__ import annotations

import argparse
import ast
import importlib.metadata as md
import os
import platform
import re
import shutil
import subprocess
import sys
import sysconfig
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from deb_depends import owning_package  # noqa: E402  (a sibling script, not a package)

INSTALL_DIR = "opt/specchat"  # where build-deb.sh puts the bundle, relative to /
DOC_DIR = "/usr/share/doc/specchat"
COMMON_LICENSES = Path("/usr/share/common-licenses")
TEXTS_NOT_IN_WHEELS = HERE / "license_texts"
FORMAT = "https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/"

# SPDX identifier -> Debian's copy in /usr/share/common-licenses (present on every Debian system).
DEBIAN_TEXTS = {
    "Apache-2.0": "Apache-2.0", "CC0-1.0": "CC0-1.0", "MPL-2.0": "MPL-2.0", "MPL-1.1": "MPL-1.1",
    "GPL-2.0-only": "GPL-2", "GPL-2.0-or-later": "GPL-2", "GPL-2.0": "GPL-2", "GPL-2.0+": "GPL-2",
    "GPL-3.0-only": "GPL-3", "GPL-3.0-or-later": "GPL-3", "GPL-3.0": "GPL-3", "GPL-3.0+": "GPL-3",
    "LGPL-2.1-only": "LGPL-2.1", "LGPL-2.1-or-later": "LGPL-2.1", "LGPL-2.1": "LGPL-2.1",
    "LGPL-3.0-only": "LGPL-3", "LGPL-3.0-or-later": "LGPL-3", "LGPL-3.0": "LGPL-3",
    "Artistic-1.0": "Artistic", "GFDL-1.3": "GFDL-1.3",
}
# Trove classifiers that name one licence unambiguously (others, such as "BSD License", are read from the text).
CLASSIFIERS = {
    "MIT License": "MIT", "MIT No Attribution License (MIT-0)": "MIT-0", "ISC License (ISCL)": "ISC",
    "Apache Software License": "Apache-2.0", "Python Software Foundation License": "PSF-2.0",
    "Mozilla Public License 2.0 (MPL 2.0)": "MPL-2.0", "The Unlicense (Unlicense)": "Unlicense",
    "GNU Lesser General Public License v3 (LGPLv3)": "LGPL-3.0-only",
    "GNU Library or Lesser General Public License (LGPL)": "LGPL-2.1-or-later",
    "Zope Public License": "ZPL-2.1",
}
# Metadata too vague to name the licence: what the project's own licence file says.
OVERRIDES = {
    # License: "GPLv2-or-later with a special exception which allows to use PyInstaller to build and distribute..."
    "pyinstaller": "GPL-2.0-or-later WITH Bootloader-exception",
}
LICENSE_NAME = re.compile(r"^(LICEN[CS]E|COPYING|NOTICE|AUTHORS|COPYRIGHT)", re.IGNORECASE)
SPDX_ID = re.compile(r"^[A-Za-z0-9.+-]+$")
TOC_ENTRY = re.compile(
    r"""\(\s*('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")\s*,\s*('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")\s*,\s*"""
    r"""'(PYMODULE|PYSOURCE|EXTENSION|BINARY|DATA|EXECUTABLE|SYMLINK|DEPENDENCY|ZIPFILE|PKG)'\s*\)"""
)
COPYRIGHT = re.compile(r"(?i)(copyright\b\s*(?:\(c\)|©)?\s*(?:\d{4}|\(c\)|©)|(?:\(c\)|©)\s*\d{4})")
MIT_TEXT = """\
Permission is hereby granted, free of charge, to any person obtaining a copy of this software and
associated documentation files (the "Software"), to deal in the Software without restriction,
including without limitation the rights to use, copy, modify, merge, publish, distribute,
sublicense, and/or sell copies of the Software, and to permit persons to whom the Software is
furnished to do so, subject to the following conditions:

The above copyright notice and this permission notice shall be included in all copies or
substantial portions of the Software.

THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR IMPLIED, INCLUDING BUT
NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY, FITNESS FOR A PARTICULAR PURPOSE AND
NONINFRINGEMENT. IN NO EVENT SHALL THE AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES
OR OTHER LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM, OUT OF OR IN
CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE SOFTWARE."""


@dataclass
class Component:
    """One thing the bundle carries under its own licence."""

    key: str  # folder under licenses/
    title: str  # "PySide6_Essentials 6.11.3 (Python distribution)"
    license: str  # SPDX expression
    copyright: list[str] = field(default_factory=list)
    texts: dict[str, str] = field(default_factory=dict)  # file name under licenses/<key>/ -> text
    paths: set[str] = field(default_factory=set)  # bundle-relative paths of its files
    comments: list[str] = field(default_factory=list)


# --- what the bundle holds ---------------------------------------------------------------------------


def read_toc(path: Path) -> list[tuple[str, str, str]]:
    """(dest, src, typecode) entries of a PyInstaller .toc file (a pprint-ed Python structure)."""
    out = []
    for m in TOC_ENTRY.finditer(path.read_text(encoding="utf-8")):
        out.append((ast.literal_eval(m.group(1)), ast.literal_eval(m.group(2)), m.group(3)))
    return out


def bundle_files(bundle: Path, workpath: Path) -> list[tuple[str, str, str]]:
    """(bundle-relative path, source path, typecode) of what PyInstaller put into the bundle. Modules in the
    program's archive get the path their package would have under the contents folder."""
    contents = "_internal" if (bundle / "_internal").is_dir() else ""
    out = []
    for dest, src, typecode in read_toc(workpath / "COLLECT-00.toc"):
        if typecode in ("SYMLINK", "DEPENDENCY"):
            continue
        rel = dest if typecode in ("EXECUTABLE", "PKG") or not contents else f"{contents}/{dest}"
        out.append((rel.replace(os.sep, "/"), src, typecode))
    pyz = workpath / "PYZ-00.toc"
    if pyz.is_file():
        for name, src, typecode in read_toc(pyz):
            if typecode == "PYMODULE" and src and src != "-":
                top = name.split(".")[0]
                is_package = "." in name or src.endswith("__init__.py")
                rel = f"{top}/{Path(src).name}" if is_package else f"{top}.py"
                out.append((f"{contents}/{rel}" if contents else rel, src, "PYZ"))
    return out


# --- who owns a file ---------------------------------------------------------------------------------


def record_index(dists: Iterable[md.Distribution]) -> dict[str, md.Distribution]:
    """Real path of every file an installed distribution's RECORD lists -> that distribution."""
    index: dict[str, md.Distribution] = {}
    for dist in dists:
        for f in dist.files or ():
            index.setdefault(os.path.realpath(dist.locate_file(f)), dist)  # type: ignore[arg-type]
    return index


def _under(path: str, folder: str | None) -> bool:
    return bool(folder) and (path == folder or path.startswith(folder.rstrip(os.sep) + os.sep))  # type: ignore[union-attr]


def _in_site_packages(path: str) -> bool:
    parts = Path(path).parts
    return "site-packages" in parts or "dist-packages" in parts


def python_owned(src: str) -> bool:
    """A file of the interpreter itself: its standard library or libpython, not a site-packages."""
    if _in_site_packages(src):
        return False
    stdlib = os.path.realpath(sysconfig.get_paths()["stdlib"])
    libdir = os.path.realpath(sysconfig.get_config_var("LIBDIR") or stdlib)
    return _under(src, stdlib) or (Path(src).name.startswith("libpython") and _under(src, libdir))


# --- licence facts of one component ------------------------------------------------------------------


def spdx_to_dep5(expression: str) -> str:
    return re.sub(r"\s+(AND|OR|WITH)\s+", lambda m: f" {m.group(1).lower()} ", expression.strip())


def short_names(expression: str) -> list[str]:
    """The licences an expression names, as DEP-5 short names ('GPL-2.0-or-later with Bootloader-exception')."""
    out = []
    for part in re.split(r"\s+(?:and|or|AND|OR)\s+|[(),]", expression):
        part = re.sub(r"\s+WITH\s+", " with ", part.strip())
        if part and part not in out:
            out.append(part)
    return out


def guess_from_text(text: str) -> str | None:
    """A licence from its well-known wording, for metadata that names none precisely."""
    flat = " ".join(text.split())
    if "Apache License" in flat and "Version 2.0" in flat:
        return "Apache-2.0"
    if "Permission is hereby granted, free of charge" in flat:
        return "MIT"
    if "Redistribution and use in source and binary forms" in flat:
        return "BSD-3-Clause" if "Neither the name" in flat or "may be used to endorse" in flat else "BSD-2-Clause"
    if "PYTHON SOFTWARE FOUNDATION LICENSE" in flat:
        return "PSF-2.0"
    return None


def license_of(meta: md.PackageMetadata, canonical: str, texts: dict[str, str]) -> str:
    """SPDX expression: License-Expression, else a short License field, else classifiers, else the text."""
    if canonical in OVERRIDES:
        return OVERRIDES[canonical]
    expression = (meta.get("License-Expression") or "").strip()
    if expression:
        return expression
    declared = (meta.get("License") or "").strip()
    if declared and declared.upper() != "UNKNOWN" and "\n" not in declared and len(declared) <= 80 and all(
        SPDX_ID.match(token) for token in re.split(r"\s+(?:AND|OR|WITH|and|or|with)\s+|[()]", declared) if token
    ):
        return declared
    found = []
    for classifier in meta.get_all("Classifier") or []:
        if classifier.startswith("License ::"):
            name = classifier.split(" :: ")[-1]
            if name in CLASSIFIERS and CLASSIFIERS[name] not in found:
                found.append(CLASSIFIERS[name])
    if found:
        return " OR ".join(found)  # several licence classifiers mean a choice (dual licensing)
    for text in texts.values():
        guess = guess_from_text(text)
        if guess:
            return guess
    return "other"


def copyright_lines(texts: Iterable[str], limit: int = 60) -> list[str]:
    """Holders named in licence texts ('2023 Andrei Betlen'), without the word Copyright. A notice runs on to
    the next line while it ends in a comma or 'and' (a list of years or names), has no year yet, or the next
    line goes on in lower case; it ends at the next notice, a quote, a semicolon, a full stop or 'All rights
    reserved'. The notice of a licence document itself (the FSF's on the GPL, followed by 'Everyone is
    permitted to copy and distribute verbatim copies of this license document') names no holder."""
    out: list[str] = []
    for text in texts:
        lines = [" ".join(re.sub(r"^[ \t]*(#|//|\*|/\*|--)?", "", line).split()) for line in text.splitlines()]
        for i, line in enumerate(lines):
            starts = [m.start() for m in COPYRIGHT.finditer(line)]
            if not starts or "verbatim copies of this licen" in " ".join(lines[i : i + 4]).lower():
                continue
            for begin, stop in zip(starts, [*starts[1:], len(line)], strict=True):
                holder, j = line[begin:stop], i + 1
                while (j < len(lines) and lines[j] and not COPYRIGHT.search(lines[j])
                       and (re.search(r"(,|\band)$", holder) or not re.search(r"\d{4}", holder)
                            or lines[j][0].islower())):
                    holder, j = f"{holder} {lines[j]}", j + 1
                holder = re.split(r'["\u201d;]|\.\s|\.$|All rights reserved', holder, flags=re.I)[0]
                holder = re.sub(r"(?i)^\s*(copyright\s*)?((\(c\)|©)\s*)*", "", holder)
                holder = " ".join(holder.split()).strip(" .,;:*/#")
                years = re.match(r"([\d\s,\-–]+)(\D.*)", holder)
                if years and len(found := re.findall(r"\d{4}", years.group(1))) > 2:  # 2001, 2002, ... 2023
                    holder = f"{found[0]}-{found[-1]} {years.group(2).strip(' ,')}"
                if 4 <= len(holder) <= 160 and re.search(r"\d{4}", holder) and holder not in out:
                    out.append(holder)
                if len(out) >= limit:
                    return out
    return out


def _author(meta: md.PackageMetadata) -> str | None:
    for key in ("Author", "Author-email", "Maintainer", "Maintainer-email"):
        value = (meta.get(key) or "").strip()
        if value and value.upper() != "UNKNOWN":
            return " ".join(value.split())
    return None


def dist_license_files(dist: md.Distribution) -> dict[str, str]:
    """Licence texts a distribution ships: its License-File entries and LICENSE-like files in its .dist-info."""
    texts: dict[str, str] = {}
    for name in dist.metadata.get_all("License-File") or []:
        for candidate in (f"licenses/{name}", name):  # metadata 2.4 puts them under licenses/
            text = dist.read_text(candidate)
            if text is not None:
                texts[name] = text
                break
    for f in dist.files or ():
        parts = f.parts
        if len(parts) >= 2 and parts[0].endswith((".dist-info", ".egg-info")) and LICENSE_NAME.match(f.name):
            name = "/".join(parts[2:] if parts[1] == "licenses" else parts[1:])
            if name not in texts:
                try:
                    texts[name] = Path(dist.locate_file(f)).read_text(encoding="utf-8", errors="replace")  # type: ignore[arg-type]
                except OSError:
                    pass
    return texts


def debian_texts(expression: str) -> dict[str, str]:
    """Debian's copies of the licences an expression names, for wheels that ship none."""
    texts = {}
    for name in short_names(expression):
        base = DEBIAN_TEXTS.get(name.split(" with ")[0])
        if base and (COMMON_LICENSES / base).is_file():
            texts[base] = (COMMON_LICENSES / base).read_text(encoding="utf-8", errors="replace")
    return texts


def canonical_name(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def dist_component(dist: md.Distribution) -> Component:
    meta = dist.metadata
    name, version = meta["Name"], dist.version
    canonical = canonical_name(name)
    texts = dist_license_files(dist)
    expression = license_of(meta, canonical, texts)
    comp = Component(canonical, f"{name} {version} (Python distribution)", expression)
    if not texts:
        texts = debian_texts(expression)
        if texts:
            comp.comments.append(
                f"The wheel ships no licence text; licenses/{canonical}/ holds Debian's copies of the licences its "
                "metadata names (/usr/share/common-licenses)."
            )
        else:
            comp.comments.append("The wheel ships no licence text; the licence is the one its metadata names.")
    comp.texts = texts
    author = _author(meta)
    comp.copyright = copyright_lines(texts.values()) or [f"the {name} authors" + (f" ({author})" if author else "")]
    if canonical in ("pyside6-essentials", "pyside6-addons", "pyside6", "shiboken6"):
        comp.copyright.insert(0, "The Qt Company Ltd. and other contributors")
    urls = [u.split(",", 1) for u in meta.get_all("Project-URL") or []]
    source = next((u.strip() for label, u in urls if label.strip().lower() in ("source", "repository", "source code")),
                  None) or next((u.strip() for label, u in urls if label.strip().lower() == "homepage"), None) \
        or (meta.get("Home-page") or "").strip() or None
    if source:
        comp.comments.append(f"Source: {source}")
    if canonical in ("pyside6-essentials", "pyside6-addons", "pyside6"):
        comp.comments.append(
            "Carries the Qt 6 libraries and plugins (PySide6/Qt), used unmodified under LGPL-3.0-only; each is a "
            "separate shared library that can be replaced. Qt's source: https://download.qt.io/official_releases/qt/ ; "
            "the third-party code inside Qt and its licences: https://doc.qt.io/qt-6/licenses-used-in-qt.html"
        )
    if canonical == "pyinstaller":
        comp.comments.append(
            "The program /opt/specchat/SpecChat is PyInstaller's bootloader; its licence's exception allows "
            "distributing it with any program."
        )
    return comp


def python_component() -> Component:
    version = platform.python_version()
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    candidates = [stdlib / "LICENSE.txt", Path(sys.base_prefix) / "LICENSE.txt",
                  Path(f"/usr/share/doc/python{sys.version_info[0]}.{sys.version_info[1]}/copyright")]
    texts = {}
    for path in candidates:
        if path.is_file():
            texts[path.name] = path.read_text(encoding="utf-8", errors="replace")
            break
    comp = Component("python", f"Python {version} (the interpreter and its standard library)", "PSF-2.0", texts=texts)
    comp.copyright = copyright_lines(texts.values()) or ["Python Software Foundation"]
    comp.comments.append(f"Also the standard-library modules in the program's archive (/{INSTALL_DIR}/SpecChat).")
    return comp


def llama_cpp_component(paths: set[str]) -> Component:
    folder = TEXTS_NOT_IN_WHEELS / "llama.cpp"
    texts = {p.name: p.read_text(encoding="utf-8") for p in sorted(folder.iterdir()) if p.is_file()}
    libs = {m.group(1) + "*" for p in paths if (m := re.match(r"(.*/lib/lib(?:llama|ggml|mtmd))", p))}
    if not libs:  # only the package folder is known (no PyInstaller record): its lib/ folder
        libs = {m.group(1) + "/lib/*" for p in paths if (m := re.match(r"((?:_internal/)?llama_cpp)(/|$)", p))}
    comp = Component("llama.cpp", "llama.cpp and ggml (the native libraries of llama-cpp-python)", "MIT",
                     copyright=copyright_lines(texts.values()), texts=texts, paths=libs)
    comp.comments.append("The llama-cpp-python wheel ships only its own licence: these texts come from the llama.cpp "
                         "tree it vendors (packaging/license_texts/llama.cpp).")
    if any("libmtmd" in p for p in libs):
        comp.comments.append("libmtmd compiles in stb_image and miniaudio, each offered as public domain (Unlicense) "
                             "or MIT/MIT-0; used under their public-domain terms.")
    return comp


def debian_component(package: str) -> Component:
    res = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", package], capture_output=True, text=True)
    version = res.stdout.strip() if res.returncode == 0 else "?"
    path = Path("/usr/share/doc") / package / "copyright"
    text = path.read_text(encoding="utf-8", errors="replace") if path.is_file() else ""
    expression, holders = "other", []
    if "GCC RUNTIME LIBRARY EXCEPTION" in text:  # libgcc, libgomp, libstdc++: not in the machine-readable format
        expression = "GPL-3.0-or-later WITH GCC-exception-3.1"
    if text.startswith("Format:"):
        for para in text.split("\n\n"):
            fields = _fields(para)
            if fields.get("Files", "").split() == ["*"]:
                expression = fields.get("License", "other").splitlines()[0].strip() or "other"
                holders = [" ".join(h.split()) for h in fields.get("Copyright", "").splitlines() if h.strip()]
                break
    title = f"{package} {version} (Debian package, library copied from the build machine)"
    holders = holders or copyright_lines([text]) or [f"the authors of {package}"]
    texts = {"copyright": text} if text else {}
    comp = Component(f"debian-{package}", title, expression, copyright=holders, texts=texts)
    comp.comments.append(f"Terms: licenses/debian-{package}/copyright, Debian's copyright file of {package} {version}.")
    return comp


def _fields(paragraph: str) -> dict[str, str]:
    fields: dict[str, str] = {}
    key = None
    for line in paragraph.splitlines():
        if line[:1] in (" ", "\t") and key:
            fields[key] += "\n" + line.strip()
        elif ":" in line:
            key, value = line.split(":", 1)
            fields[key] = value.strip()
    return fields


# --- putting it together -----------------------------------------------------------------------------


def collect(bundle: Path, workpath: Path | None, dists: list[md.Distribution]) -> tuple[list[Component], list[str]]:
    """The components the bundle carries (SpecChat's own files excluded) and the files no one claimed."""
    by_name: dict[str, Component] = {}
    unowned: list[str] = []
    if workpath is not None and (workpath / "COLLECT-00.toc").is_file():
        index = record_index(dists)
        checkout = str(ROOT.resolve())
        work = str(workpath.resolve())
        for rel, src, typecode in bundle_files(bundle, workpath):
            real = os.path.realpath(src)
            dist = index.get(real)
            if dist is not None:
                comp = by_name.get(canonical_name(dist.metadata["Name"]))
                if comp is None:
                    comp = dist_component(dist)
                    by_name[comp.key] = comp
            elif typecode == "EXECUTABLE":
                pyi = next((d for d in dists if canonical_name(d.metadata["Name"]) == "pyinstaller"), None)
                if pyi is None:
                    unowned.append(rel)
                    continue
                if "pyinstaller" not in by_name:
                    by_name["pyinstaller"] = dist_component(pyi)
                comp = by_name["pyinstaller"]
            elif python_owned(real) or (_under(real, work) and Path(real).name == "base_library.zip"):
                if typecode == "PYZ":
                    continue  # standard-library modules: named in the Python paragraph's comment
                if "python" not in by_name:
                    by_name["python"] = python_component()
                comp = by_name["python"]
            elif _under(real, work) or (_under(real, checkout) and not _in_site_packages(real)):
                continue  # SpecChat's own files (app/, ui/, resources/, the generated archive)
            elif _in_site_packages(real):
                unowned.append(rel)  # in an environment but in no RECORD
                continue
            else:
                package = owning_package(src) if shutil.which("dpkg-query") else None
                if package is None:
                    unowned.append(rel)
                    continue
                if f"debian-{package}" not in by_name:
                    by_name[f"debian-{package}"] = debian_component(package)
                comp = by_name[f"debian-{package}"]
            comp.paths.add(rel)
    else:
        contents = bundle / "_internal" if (bundle / "_internal").is_dir() else bundle
        prefix = "_internal/" if contents != bundle else ""
        present = {p.name for p in contents.iterdir()}
        for dist in dists:
            tops = {f.parts[0] for f in dist.files or () if f.parts} - {"..", "__pycache__", "bin"}
            tops = {t for t in tops if not t.endswith((".dist-info", ".egg-info"))}
            here = tops & present
            if here:
                key = canonical_name(dist.metadata["Name"])
                if key not in by_name:
                    by_name[key] = dist_component(dist)
                comp = by_name[key]
                comp.paths.update(prefix + t + ("/x" if (contents / t).is_dir() else "") for t in here)
    if "llama-cpp-python" in by_name:
        by_name["llama.cpp"] = llama_cpp_component(by_name["llama-cpp-python"].paths)
    return sorted(by_name.values(), key=lambda c: (c.key == "llama.cpp", c.key.startswith("debian-"), c.key)), unowned


def file_patterns(components: list[Component]) -> dict[str, list[str]]:
    """DEP-5 Files patterns (relative to /) per component: a top-level folder as `folder/*`, a file by name; a
    folder shared by two components is split one level deeper. llama.cpp's libraries are named one by one
    (its paragraph comes after llama-cpp-python's, and the last matching paragraph wins)."""
    def patterns(paths: set[str], depth: int) -> set[str]:
        out = set()
        for p in paths:
            parts = p.split("/")
            cut = parts[: depth + 1] if parts[0] == "_internal" else parts[:depth]
            out.add("/".join(cut) + ("/*" if len(cut) < len(parts) else ""))
        return out

    result = {}
    shallow = {c.key: patterns(c.paths, 1) for c in components if c.key != "llama.cpp"}
    for c in components:
        if c.key == "llama.cpp":
            pats = {p for p in c.paths}
        else:
            others = set().union(*(v for k, v in shallow.items() if k != c.key))
            pats = shallow[c.key]
            if pats & others:
                pats = (pats - others) | patterns({p for p in c.paths if any(_matches(p, o) for o in pats & others)}, 2)
        result[c.key] = sorted(f"{INSTALL_DIR}/{p}" for p in pats)
    return result


def _matches(path: str, pattern: str) -> bool:
    return path == pattern or (pattern.endswith("/*") and path.startswith(pattern[:-1]))


def _capped(holders: list[str], where: str, most: int = 12) -> list[str]:
    return holders if len(holders) <= most else [*holders[:most], f"and others: see {where}"]


def _field(name: str, value: str) -> str:
    """A deb822 field; continuation lines indented, empty ones as ' .'."""
    lines = value.strip("\n").split("\n")
    rest = "".join("\n " + (line.rstrip() if line.strip() else ".") for line in lines[1:])
    return f"{name}: {lines[0].rstrip()}{rest}"


def project() -> dict:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]


def render(components: list[Component], project_meta: dict) -> str:
    people = project_meta.get("maintainers") or project_meta.get("authors") or []
    contact = ", ".join(f"{p['name']} <{p['email']}>" if p.get("email") else p["name"] for p in people)
    lic = project_meta.get("license", {})
    own = lic.get("text") if isinstance(lic, dict) else str(lic)
    header = [
        f"Format: {FORMAT}",
        "Upstream-Name: SpecChat",
        *([f"Upstream-Contact: {contact}"] if contact else []),
        _field("Comment", (
            f"/{INSTALL_DIR} is a PyInstaller bundle: SpecChat, the Python interpreter and what SpecChat\n"
            "imports, and the system libraries they link that a desktop may lack. The paragraphs below name\n"
            "each component's files by path. Modules of Python distributions are compiled into the archive\n"
            f"inside /{INSTALL_DIR}/SpecChat; their paths are the ones they would have under _internal. The\n"
            f"licence files each component ships are in {DOC_DIR}/licenses/<component>/. Generated by\n"
            "packaging/licenses.py from the build."
        )),
    ]
    paras = ["\n".join(header)]
    paras.append("\n".join([
        "Files: *", "Copyright: The SpecChat developers", f"License: {own or 'MIT'}",
        "Comment: SpecChat itself: the Python packages app and ui (in the program's archive), resources/, the\n"
        " launchers, the desktop entry, the icons and the AppStream metadata.",
    ]))
    patterns = file_patterns(components)
    used: dict[str, list[str]] = {own or "MIT": ["SpecChat"]}
    for c in components:
        if not patterns[c.key]:
            continue
        expression = spdx_to_dep5(c.license)
        for name in short_names(expression):
            used.setdefault(name, []).append(c.key)
        texts = ", ".join(f"licenses/{c.key}/{t}" for t in c.texts) or "none shipped"
        comment = "\n".join([c.title, *c.comments, f"Licence files: {texts}"])
        paras.append("\n".join([
            _field("Files", "\n".join(patterns[c.key])),
            _field("Copyright", "\n".join(_capped(c.copyright, f"{DOC_DIR}/licenses/{c.key}/"))),
            f"License: {expression}",
            _field("Comment", comment),
        ]))
    for name, users in sorted(used.items()):
        body = []
        if name == "MIT":
            body.append(MIT_TEXT)
        base = DEBIAN_TEXTS.get(name.split(" with ")[0])
        if base and (COMMON_LICENSES / base).is_file():
            body.append(f"On Debian systems the full text is in /usr/share/common-licenses/{base}.")
        shipped = [u for u in users if u != "SpecChat"]
        if shipped:
            body.append("The texts as each component ships them: "
                        + ", ".join(f"{DOC_DIR}/licenses/{u}/" for u in shipped) + ".")
        paras.append(_field("License", name + "\n" + "\n\n".join(body)))
    return "\n\n".join(paras) + "\n"


def write(out: Path, components: list[Component], project_meta: dict) -> int:
    """Writes out/copyright and out/licenses/; returns the bytes of licence text copied."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "copyright").write_text(render(components, project_meta), encoding="utf-8")
    total = 0
    licenses = out / "licenses"
    if licenses.exists():
        shutil.rmtree(licenses)
    for c in components:
        for name, text in c.texts.items():
            target = licenses / c.key / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
            total += len(text.encode())
    return total


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("bundle", type=Path)
    ap.add_argument("--out", type=Path, required=True, help="folder for copyright and licenses/")
    ap.add_argument("--workpath", type=Path, default=ROOT / "build" / "pyinstaller" / "specchat",
                    help="PyInstaller's work folder for this bundle (default: build/pyinstaller/specchat)")
    args = ap.parse_args(argv)
    global DOC_DIR
    if args.out.parent.name == "doc":  # .../usr/share/doc/<package>: the texts name where they are installed
        DOC_DIR = f"/usr/share/doc/{args.out.name}"
    if not args.bundle.is_dir():
        print(f"licenses: {args.bundle} is not a folder; build the bundle first", file=sys.stderr)
        return 2
    if not (args.workpath / "COLLECT-00.toc").is_file():
        print(f"licenses: warning: no PyInstaller record in {args.workpath}; listing only the distributions whose "
              "packages sit in the bundle's folder (those compiled into the archive are missed)", file=sys.stderr)
    components, unowned = collect(args.bundle, args.workpath, list(md.distributions()))
    if unowned:
        print(f"licenses: warning: {len(unowned)} bundled files belong to no known component: "
              + ", ".join(sorted(unowned)[:10]), file=sys.stderr)
    for c in components:
        if not c.texts:
            print(f"licenses: warning: no licence text for {c.title} ({c.license})", file=sys.stderr)
    size = write(args.out, components, project())
    dists = [c for c in components if c.title.endswith("(Python distribution)")]
    debs = [c for c in components if c.key.startswith("debian-")]
    others = ", ".join(c.key for c in components if c not in dists and c not in debs) or "nothing else"
    print(f"licenses: {len(dists)} Python distributions, {len(debs)} Debian packages' libraries, {others}; "
          f"{size / 1e3:.0f} kB of licence texts -> {args.out}/copyright, {args.out}/licenses/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
