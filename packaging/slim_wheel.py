"""Make a llama-cpp-python wheel fit to ship: one copy of each library, backend modules where the app
loads them, no AMX CPU variant. Rewrites the wheel in place (RECORD too). Standard library only:
bootstrap.py runs it on every wheel it builds, and the GPU kit on its CUDA wheel.

    python packaging/slim_wheel.py WHEEL [WHEEL ...]

* **Duplicates.** A wheel cannot hold symlinks, so CMake's `libX.so -> libX.so.0 -> libX.so.0.25.3`
  chain becomes three full copies, and the build installs them twice (the wheel's root `lib/` and
  `llama_cpp/lib/`): six copies of each library (138 MiB for a CUDA wheel). `llama_cpp` opens
  `llama_cpp/lib/libllama.so` and `libggml.so` by those names, and the dynamic loader follows
  sonames (`libggml-base.so.0` ...) through RUNPATH `$ORIGIN`; everything else goes.
* **Backend modules.** A portable build (`GGML_BACKEND_DL=ON`, `GGML_CPU_ALL_VARIANTS=ON`) makes each
  backend a module (`libggml-cpu-haswell.so`, `libggml-cuda.so`, `libggml-vulkan.so` ...) that ggml
  picks and loads at run time. llama-cpp-python installs only the targets it knows into
  `llama_cpp/lib`; ggml installs the modules into the wheel's root `bin/`. They move to
  `llama_cpp/lib`, the folder `app.llama_backend` asks ggml to load backends from.
* **AMX.** llama.cpp's AMX kernels segfault on the first Q4_K decode on some Xeons (llama.cpp issue
  20824). The `sapphirerapids` CPU variant is the only one built with them; without it, such a CPU
  gets the `zen4` variant (AVX-512 VNNI/BF16), which it supports.
"""

from __future__ import annotations

import re
import sys
import zipfile
from pathlib import Path

LOADED_BY_NAME = {"libllama.so", "libggml.so"}  # llama_cpp's load_shared_library("llama" / "ggml")
SONAME = re.compile(r"^lib[\w.+-]+?\.so\.\d+$")  # libggml-base.so.0, libllama.so.0
MODULE = re.compile(r"^libggml-[\w.+-]+\.(so|dll|dylib)$")  # a backend module: no version suffix
AMX_VARIANTS = {"libggml-cpu-sapphirerapids"}  # CPU variants built with AMX_INT8 (ggml/src/CMakeLists.txt)
LIB = "llama_cpp/lib/"


def _base(name: str) -> str:
    return name.rsplit("/", 1)[-1]


def plan(names: list[str]) -> dict[str, str]:
    """Which archive members to keep, and under which name (a module from `bin/` moves to llama_cpp/lib)."""
    in_lib = {_base(n) for n in names if n.startswith(LIB)}
    versioned = {_base(n).split(".so.", 1)[0] for n in names if ".so." in _base(n)}  # libX of libX.so.N...
    out: dict[str, str] = {}
    for name in names:
        base = _base(name)
        if base.rsplit(".", 1)[0] in AMX_VARIANTS:
            continue
        if name.startswith(("bin/", "lib/")) and MODULE.match(base) and base.rsplit(".", 1)[0] not in versioned:
            if base not in in_lib:
                out[name] = LIB + base  # ggml's install of a backend module
            continue
        if name.startswith(("lib/", "bin/", "include/")):
            continue  # the second install tree: nothing imports from the wheel's root
        if name.startswith(LIB):
            stem = base.split(".so", 1)[0]
            if base in LOADED_BY_NAME or SONAME.match(base):
                out[name] = name
            elif MODULE.match(base) and stem not in versioned:
                out[name] = name  # a module llama-cpp-python installed itself (libggml-rpc.so)
            elif not base.startswith("lib") or not (".so" in base or base.endswith((".dylib", ".dll"))):
                out[name] = name  # not a library (a Metal shader ...)
            continue
        out[name] = name
    return out


def slim(path: Path) -> tuple[int, int]:
    """Rewrite the wheel; returns (bytes before, bytes after)."""
    before = path.stat().st_size
    tmp = path.with_suffix(".slim")
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as dst:
        keep = plan([i.filename for i in src.infolist()])
        for info in src.infolist():
            if info.filename not in keep:
                continue
            data = src.read(info)
            new = keep[info.filename]
            if info.filename.endswith(".dist-info/RECORD"):
                rows = {ln.split(",", 1)[0]: ln for ln in data.decode().splitlines() if ln}
                lines = [rows[old].replace(old, keep[old], 1) for old in keep if old in rows]
                data = ("\n".join(lines) + "\n").encode()
            if new != info.filename:
                moved = zipfile.ZipInfo(new, info.date_time)
                moved.external_attr, moved.compress_type = info.external_attr, zipfile.ZIP_DEFLATED
                info = moved
            dst.writestr(info, data)
    tmp.replace(path)
    return before, path.stat().st_size


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        b, a = slim(Path(arg))
        print(f"slim_wheel: {arg}: {b / 2**20:.1f} MiB -> {a / 2**20:.1f} MiB")
