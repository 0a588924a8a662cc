"""Keep one copy of each shared library in the bundle: byte-identical copies become relative symlinks.

    python3 packaging/dedupe_libs.py dist/SpecChat [--check]

Wheels cannot hold symlinks, so a wheel that installs `libllama.so`, `libllama.so.0` and
`libllama.so.0.0.N` carries three identical files, and PyInstaller copies all three into
`_internal/llama_cpp/lib`. This replaces every shared library (`*.so`, `*.so.N...`, `*.dylib`) in the
folder that has a byte-identical twin by a relative symlink to one of them; tar, `cp -a` and
dpkg-deb keep symlinks, and the dynamic loader resolves them to one file (so one library is also
loaded once, whichever name asks for it). The copy kept is the one with the most specific name
(`libllama.so.0.0.N`), then the shallowest path: the usual layout of an installed library.

Prints what it linked and the bytes saved. `--check` changes nothing and exits 1 when twins exist.
Called by packaging/build.sh on Linux after PyInstaller (not on Windows, where symlinks need rights,
nor on the macOS .app, which BUNDLE has already assembled).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import sys
from pathlib import Path

SHARED_LIBRARY = re.compile(r"\.so(\.\d+)*$|\.dylib$")


def shared_libraries(bundle: Path) -> list[Path]:
    """Regular files (not symlinks) named like shared libraries, in a stable order."""
    return sorted(p for p in bundle.rglob("*") if SHARED_LIBRARY.search(p.name) and p.is_file() and not p.is_symlink())


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def identical_groups(bundle: Path) -> list[list[Path]]:
    """Groups of two or more byte-identical shared libraries; the copy to keep first."""
    by_size: dict[int, list[Path]] = {}
    for lib in shared_libraries(bundle):
        by_size.setdefault(lib.stat().st_size, []).append(lib)
    groups = []
    for same_size in by_size.values():
        if len(same_size) < 2:
            continue
        by_hash: dict[str, list[Path]] = {}
        for lib in same_size:
            by_hash.setdefault(_digest(lib), []).append(lib)
        for group in by_hash.values():
            if len(group) > 1:
                groups.append(sorted(group, key=lambda p: _keep_order(bundle, p)))
    return sorted(groups, key=lambda g: str(g[0]))


def _keep_order(bundle: Path, lib: Path) -> tuple[int, int, str]:
    # Most version parts after ".so" first (libllama.so.0.0.7 over libllama.so), then the shallowest path.
    versions = len(lib.name.split(".so", 1)[1].split(".")) - 1 if ".so" in lib.name else 0
    return (-versions, len(lib.relative_to(bundle).parts), str(lib))


def dedupe(bundle: Path, *, dry_run: bool = False) -> tuple[list[tuple[Path, Path]], int]:
    """Replace the twins by symlinks; returns ((link, target) pairs, bytes saved)."""
    links: list[tuple[Path, Path]] = []
    saved = 0
    for keep, *twins in identical_groups(bundle):
        for twin in twins:
            saved += twin.stat().st_size
            links.append((twin, keep))
            if not dry_run:
                target = os.path.relpath(keep, twin.parent)
                tmp = twin.with_name(twin.name + ".dedupe-link")
                tmp.unlink(missing_ok=True)
                tmp.symlink_to(target)
                os.replace(tmp, twin)  # atomic: the name is never missing
    return links, saved


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("bundle", type=Path)
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 if identical copies exist")
    args = ap.parse_args(argv)
    if not args.bundle.is_dir():
        print(f"dedupe_libs: {args.bundle} is not a folder", file=sys.stderr)
        return 2
    links, saved = dedupe(args.bundle, dry_run=args.check)
    for link, target in links:
        print(f"  {link.relative_to(args.bundle)} -> {os.path.relpath(target, link.parent)}")
    verb = "would save" if args.check else "saved"
    print(f"dedupe: {len(links)} identical shared-library copies {'found' if args.check else 'linked'}, "
          f"{verb} {saved / 1e6:.1f} MB")
    return 1 if args.check and links else 0


if __name__ == "__main__":
    sys.exit(main())
