"""Drop the duplicate copies of each shared library from a llama-cpp-python wheel, in place.

A wheel cannot hold symlinks, so CMake's `libX.so -> libX.so.0 -> libX.so.0.25.3` chain becomes
three full copies, and the build installs them twice (into the wheel's root `lib/` and into
`llama_cpp/lib/`): 6 copies of the 39 MB libggml-cuda, 138 MiB in all, over the device tool's
64 MiB. What is loaded: `llama_cpp` opens `llama_cpp/lib/libllama.so` and `libggml.so` by those
names, and the dynamic loader follows sonames (`libggml.so.0`, `libggml-cuda.so.0` ...) through
RUNPATH `$ORIGIN`. So `llama_cpp/lib/` keeps each library's soname file and those two bare
names, and everything else goes (RECORD is rewritten to match).

    python packaging/gpu_kit/slim_wheel.py WHEEL
"""

from __future__ import annotations

import re
import sys
import zipfile
from pathlib import Path

LOADED_BY_NAME = {"libllama.so", "libggml.so"}  # llama_cpp's load_shared_library("llama" / "ggml")
SONAME = re.compile(r"^lib[\w.+-]+?\.so\.\d+$")  # libggml-cuda.so.0, libllama.so.0


def keep(name: str) -> bool:
    if name.startswith("lib/") or name.startswith("bin/") or name.startswith("include/"):
        return False  # the second install tree: nothing imports from the wheel's root
    if name.startswith("llama_cpp/lib/"):
        base = name.rsplit("/", 1)[1]
        return base in LOADED_BY_NAME or bool(SONAME.match(base))
    return True


def slim(path: Path) -> tuple[int, int]:
    """Rewrite the wheel without the duplicates; returns (bytes before, bytes after)."""
    before = path.stat().st_size
    tmp = path.with_suffix(".slim")
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as dst:
        kept = [i for i in src.infolist() if keep(i.filename)]
        names = {i.filename for i in kept}
        for info in kept:
            data = src.read(info)
            if info.filename.endswith(".dist-info/RECORD"):
                lines = [ln for ln in data.decode().splitlines() if ln.split(",", 1)[0] in names]
                data = ("\n".join(lines) + "\n").encode()
            dst.writestr(info, data)
    tmp.replace(path)
    return before, path.stat().st_size


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        b, a = slim(Path(arg))
        print(f"slim_wheel: {arg}: {b / 2**20:.1f} MiB -> {a / 2**20:.1f} MiB")
