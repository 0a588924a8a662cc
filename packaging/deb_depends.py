"""The Debian `Depends:` of the PyInstaller bundle, derived from the bundle itself.

    python3 packaging/deb_depends.py dist/SpecChat [--explain]

Prints one line, the value of `Depends:`. The bundle carries most libraries; what it does not carry
the system must provide. So: every ELF file in the bundle is resolved with `ldd`, with the bundle's
own library folders searched first (as at run time), and each library found *outside* the bundle is
mapped to its package with `dpkg-query -S`. Minimum versions come from `dpkg-shlibdeps`, Debian's
own tool, which reads the symbols each binary uses; it is asked only about those packages, since it
would also name packages for libraries the bundle carries.

A library that resolves nowhere is an error (exit 1) naming it and the files that need it: install
it on the build machine (a Debian package named like the library) and rebuild, or the .deb would
install an app that cannot load its plugins.

Two dependencies are data, not libraries, so no linker sees them: the bundled libfontconfig reads
the system's font configuration and fonts (fontconfig-config depends on a font package), and the
bundled libxkbcommon reads the keyboard maps in xkb-data (without them typing does nothing).

Which distributions the package runs on is decided by the glibc its Depends needs: the bundle carries
nearly everything else, and every release that has that glibc also meets the few other versions
Depends names (Wayland >= 1.20, xcb >= 1.12 on Debian 12). `--runs-on "DEPENDS"` prints the claim
from GLIBC_RELEASES, e.g. "Debian >= 12, Ubuntu >= 24.04" for `libc6 (>= 2.36)`; build-deb.sh
prints it and writes it into the package description, and tests/test_packaging.py checks that
docs/PACKAGING.md says the same.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

DATA_DEPENDS = {
    "fontconfig-config": "the bundled libfontconfig reads /etc/fonts and needs a font package",
    "xkb-data": "the bundled libxkbcommon reads the keyboard maps in /usr/share/X11/xkb",
}
# glibc version of each release, oldest first (Debian stable releases; Ubuntu LTS releases only: the
# interim ones live nine months). From the releases' libc6 packages: bullseye 2.31, bookworm 2.36,
# trixie 2.41; focal 2.31, jammy 2.35, noble 2.39.
GLIBC_RELEASES: dict[str, list[tuple[str, str]]] = {
    "Debian": [("11", "2.31"), ("12", "2.36"), ("13", "2.41")],
    "Ubuntu": [("20.04", "2.31"), ("22.04", "2.35"), ("24.04", "2.39")],
}
LIBC6 = re.compile(r"(?:^|,)\s*libc6\s*\(\s*>=\s*([0-9.]+)[^)]*\)")
LDD_LINE = re.compile(r"^\s*(\S+)\s+=>\s+(not found|\S+)")


def elf_files(bundle: Path) -> list[Path]:
    out = []
    for path in sorted(bundle.rglob("*")):
        if path.is_file() and not path.is_symlink():
            with path.open("rb") as f:
                if f.read(4) == b"\x7fELF":
                    out.append(path)
    return out


def external_libraries(bundle: Path, elves: list[Path]) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """(library path outside the bundle -> files needing it, missing soname -> files needing it)."""
    folders = sorted({str(p.parent) for p in elves})
    env = dict(os.environ, LD_LIBRARY_PATH=":".join(folders))
    found: dict[str, set[str]] = {}
    missing: dict[str, set[str]] = {}
    root = str(bundle.resolve())
    for elf in elves:
        res = subprocess.run(["ldd", str(elf)], env=env, capture_output=True, text=True)
        rel = str(elf.relative_to(bundle))
        for line in res.stdout.splitlines():
            m = LDD_LINE.match(line)
            if not m:
                continue
            soname, where = m.groups()
            if where == "not found":
                missing.setdefault(soname, set()).add(rel)
            elif not os.path.realpath(where).startswith(root):
                found.setdefault(where, set()).add(rel)
    return found, missing


def owning_package(library: str) -> str | None:
    """dpkg records merged-/usr paths as shipped, so try the path, its real path and both prefixes."""
    real = os.path.realpath(library)
    candidates = [library, real]
    for p in (library, real):
        candidates.append(p[4:] if p.startswith("/usr/") else "/usr" + p)
    for candidate in dict.fromkeys(candidates):
        if not candidate.startswith("/"):
            continue  # dpkg-query -S takes patterns: only absolute paths are safe
        res = subprocess.run(["dpkg-query", "-S", candidate], capture_output=True, text=True)
        if res.returncode == 0:
            return res.stdout.split(":", 1)[0].strip()
    return None


def shlibs_versions(bundle: Path, elves: list[Path]) -> dict[str, str]:
    """package -> its dependency as dpkg-shlibdeps writes it, e.g. 'libc6 (>= 2.36)'."""
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "debian").mkdir()
        (Path(tmp) / "debian" / "control").write_text(
            "Source: specchat\n\nPackage: specchat\nArchitecture: any\n"
        )
        # Absolute paths: the tool runs in the temporary folder.
        private = [f"-l{d}" for d in sorted({str(p.parent.resolve()) for p in elves})]
        res = subprocess.run(
            ["dpkg-shlibdeps", "-O", "--ignore-missing-info", *private, *(str(p.resolve()) for p in elves)],
            cwd=tmp, capture_output=True, text=True,
        )
    if res.returncode != 0:
        return {}  # versions are a refinement; the package names come from ldd and dpkg
    line = next((ln for ln in res.stdout.splitlines() if ln.startswith("shlibs:Depends=")), "")
    out = {}
    for item in line.split("=", 1)[-1].split(","):
        item = item.strip()
        if item and "|" not in item:
            out[item.split()[0]] = item
    return out


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", version))


def glibc_needed(depends: str) -> str | None:
    """The glibc version a Depends line needs: `libc6 (>= 2.36), ...` -> '2.36' (None without a versioned libc6)."""
    m = LIBC6.search(depends)
    return m.group(1) if m else None


def oldest_releases(glibc: str) -> dict[str, str | None]:
    """Per distribution, the oldest release in GLIBC_RELEASES whose glibc is at least `glibc` (None: none yet)."""
    need = _version_key(glibc)
    return {
        distro: next((release for release, have in releases if _version_key(have) >= need), None)
        for distro, releases in GLIBC_RELEASES.items()
    }


def runs_on(depends: str) -> str:
    """'Debian >= 12, Ubuntu >= 24.04' for a Depends line needing glibc 2.36. A distribution with no release in
    the table that is new enough is named as such, so the claim never overstates."""
    glibc = glibc_needed(depends)
    if glibc is None:
        raise ValueError(f"no versioned libc6 in Depends: {depends!r}")
    parts = []
    for distro, release in oldest_releases(glibc).items():
        newest = GLIBC_RELEASES[distro][-1][0]
        parts.append(f"{distro} >= {release}" if release else f"{distro} newer than {newest}")
    return ", ".join(parts)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("bundle", type=Path, nargs="?")
    ap.add_argument("--explain", action="store_true", help="also list, on stderr, why each package is needed")
    ap.add_argument("--runs-on", metavar="DEPENDS",
                    help="print the distributions a package with this Depends runs on, and exit")
    args = ap.parse_args(argv)
    if args.runs_on is not None:
        try:
            print(runs_on(args.runs_on))
        except ValueError as e:
            print(f"deb_depends: {e}", file=sys.stderr)
            return 1
        return 0
    if args.bundle is None:
        ap.error("the bundle folder is required")
    bundle: Path = args.bundle
    if not bundle.is_dir():
        print(f"deb_depends: {bundle} is not a folder; build the bundle first (packaging/build.sh)", file=sys.stderr)
        return 2
    elves = elf_files(bundle)
    found, missing = external_libraries(bundle, elves)
    if missing:
        print("deb_depends: libraries the bundle needs are neither in it nor on this machine:", file=sys.stderr)
        for soname, users in sorted(missing.items()):
            more = f" and {len(users) - 1} more" if len(users) > 1 else ""
            print(f"  {soname} (needed by {sorted(users)[0]}{more})", file=sys.stderr)
        print("Install their Debian packages on the build machine and rebuild (for example\n"
              "  apt-get install libwayland-cursor0 libwayland-egl1\n"
              "for libwayland-cursor.so.0 and libwayland-egl.so.1).", file=sys.stderr)
        return 1
    packages: dict[str, set[str]] = {}
    unowned = []
    for library in found:
        pkg = owning_package(library)
        if pkg is None:
            unowned.append(library)
        else:
            packages.setdefault(pkg, set()).update([library])
    if unowned:
        print(f"deb_depends: no Debian package owns {', '.join(sorted(unowned))}: the build machine has "
              "libraries installed by hand; build on a clean Debian machine", file=sys.stderr)
        return 1
    versions = shlibs_versions(bundle, elves)
    depends = [versions.get(pkg, pkg) for pkg in sorted(packages)]
    depends += sorted(DATA_DEPENDS)
    if args.explain:
        for pkg in sorted(packages):
            print(f"{pkg}: {', '.join(sorted(os.path.basename(lib) for lib in packages[pkg]))}", file=sys.stderr)
        for pkg, why in sorted(DATA_DEPENDS.items()):
            print(f"{pkg}: {why}", file=sys.stderr)
    print(", ".join(depends))
    return 0


if __name__ == "__main__":
    sys.exit(main())
