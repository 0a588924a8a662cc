"""ggml's backend modules: load them (portable builds) and say which ones this process runs on.

llama.cpp's release builds (`GGML_BACKEND_DL=ON`, `GGML_CPU_ALL_VARIANTS=ON`, `GGML_NATIVE=OFF`), and
SpecChat's since issue 53, put each backend in a module beside libggml: `libggml-cpu-x64.so`,
`-sse42`, `-haswell`, `-skylakex`, `-icelake`, `-zen4`, `-alderlake` ... (one per x86 level),
`libggml-rpc.so`, and where built `libggml-cuda.so` or `libggml-vulkan.so`. ggml scores every CPU
module against the CPU's features and keeps the best, so a package built on an AVX-512 machine runs
on an AVX2 desktop or an SSE-only one instead of dying with SIGILL. llama.cpp loads nothing by itself:
`load` runs before any model. A build with its backends linked in (macOS Metal, or a user's own
CMAKE_ARGS without BACKEND_DL) already has them registered, and `load` only reports them.
"""

from __future__ import annotations

import ctypes
import os
import re
from dataclasses import dataclass
from pathlib import Path

import llama_cpp._ggml as _ggml

# lib + ggml-<backend> + the platform's suffix, with no version (a module, not a linked library)
_MODULE = re.compile(r"^(?:lib)?ggml-(?P<name>[\w.+-]+?)\.(?:so|dll|dylib)$")
_CPU_IN_MAPS = re.compile(r"[/\\](?:lib)?ggml-cpu-(?P<variant>[\w.+-]+?)\.(?:so|dll|dylib)\b")
_NOT_MODULES = {"base"}  # libggml-base is linked, never loaded as a backend
# The registry names backends give themselves, by module name (ggml-cuda registers "CUDA" ...).
_REG_NAMES = {"cpu": "CPU", "cuda": "CUDA", "vulkan": "Vulkan", "metal": "Metal", "rpc": "RPC", "hip": "ROCm",
              "sycl": "SYCL", "musa": "MUSA", "blas": "BLAS", "opencl": "OpenCL", "cann": "CANN"}
GPU_MODULES = ("cuda", "hip", "vulkan", "metal", "sycl", "musa", "opencl", "cann")


class BackendLoadError(RuntimeError):
    """No CPU backend could be loaded: the message names the folder and what to reinstall."""


@dataclass(frozen=True)
class LoadedBackends:
    dynamic: bool  # a GGML_BACKEND_DL build: the modules below were picked and loaded at start
    registered: tuple[str, ...]  # ggml's backend registry after loading: "CPU", "RPC", "CUDA" ...
    cpu_variant: str | None  # the CPU module ggml chose ("haswell", "x64" ...); None when linked in
    modules: tuple[str, ...]  # the backend modules found beside libggml (file names)
    failed: tuple[tuple[str, str], ...]  # (GPU module, why) for a module present but not in use
    device_counts: tuple[tuple[str, int], ...] = ()  # (registered backend, its devices): Vulkan with none is idle

    def describe(self) -> str:
        """One line for doctor, the self-test and the About box."""
        if not self.dynamic:
            return f"backends built in: {', '.join(self.registered) or 'none'}"
        cpu = f"CPU variant {self.cpu_variant}" if self.cpu_variant else "no CPU variant loaded"
        counts = dict(self.device_counts)
        gpus = [f"{r} ({_devices(counts[r])})" if r in counts else r
                for r in self.registered if r not in ("CPU", "RPC")]
        parts = [cpu, f"GPU backends: {', '.join(gpus) or 'none'}"]
        parts += [f"{module} not used ({why})" for module, why in self.failed]
        return "; ".join(parts)


def _devices(n: int) -> str:
    return "no device" if n == 0 else "1 device" if n == 1 else f"{n} devices"


def module_name(filename: str) -> str | None:
    """`libggml-cpu-haswell.so` -> `cpu-haswell`; None for anything that is not a backend module."""
    m = _MODULE.match(filename)
    if m is None or m["name"] in _NOT_MODULES:
        return None
    return m["name"]


def already_loaded(lib_dir: Path, stem: str) -> ctypes.CDLL | None:
    """The copy of lib<stem> from `lib_dir` that the process already holds, or None (never loads one).

    A wheel cannot hold symlinks, so libggml-base.so, .so.0 and .so.0.25.3 are three files; opening
    another one than the dynamic loader did gives a second copy with its own globals (its own backend
    registry, its own abort callback). RTLD_NOLOAD finds the one already in the process; the versioned
    names are the loader's, so they are tried first.
    """
    noload = getattr(os, "RTLD_NOLOAD", 0)
    if not noload:
        return None
    names = sorted(lib_dir.glob(f"lib{stem}.*")) + sorted(lib_dir.glob(f"{stem}.*"))
    for path in sorted(names, key=lambda p: -len(p.name)):
        try:
            return ctypes.CDLL(str(path), mode=noload)
        except OSError:
            continue
    return None


def _ggml_copies(lib_dir: Path) -> list[ctypes.CDLL]:
    """Every copy of libggml in the process, each once: llama_cpp._ggml opens `libggml.so` by path while
    libllama links `libggml.so.0`, two copies with two backend registries where the wheel holds two files,
    and llama.cpp's models see only the second."""
    out: list[ctypes.CDLL] = []
    seen: set[int | None] = set()
    for lib in (_ggml.libggml, already_loaded(lib_dir, "ggml")):
        if lib is None:
            continue
        fn = lib.ggml_backend_reg_count
        fn.argtypes, fn.restype = [], ctypes.c_size_t
        address = ctypes.cast(fn, ctypes.c_void_p).value
        if address not in seen:
            seen.add(address)
            out.append(lib)
    return out


def _registered(lib: ctypes.CDLL) -> tuple[tuple[str, int], ...]:
    """(name, device count) of every backend in this libggml's registry."""
    vp, sz = ctypes.c_void_p, ctypes.c_size_t
    for name, args, res in (("ggml_backend_reg_get", [sz], vp), ("ggml_backend_reg_name", [vp], ctypes.c_char_p),
                            ("ggml_backend_reg_dev_count", [vp], sz)):
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = args, res
    regs = [lib.ggml_backend_reg_get(i) for i in range(lib.ggml_backend_reg_count())]
    return tuple(((lib.ggml_backend_reg_name(r) or b"").decode("utf-8", errors="replace"),
                  int(lib.ggml_backend_reg_dev_count(r))) for r in regs)


def _cpu_variant_loaded(lib_dir: Path, modules: list[str]) -> str | None:
    """The CPU module in this process's memory map (Linux); elsewhere the one ggml's score prefers."""
    try:
        maps = Path("/proc/self/maps").read_text(encoding="utf-8", errors="replace")
    except OSError:
        maps = ""
    found = {m["variant"] for m in _CPU_IN_MAPS.finditer(maps)}
    if len(found) == 1:
        return found.pop()
    best, best_score = None, 0
    for filename in modules:
        name = module_name(filename) or ""
        if not name.startswith("cpu-"):
            continue
        try:
            score = ctypes.CDLL(str(lib_dir / filename)).ggml_backend_score
        except (OSError, AttributeError):
            continue
        score.restype = ctypes.c_int
        if (s := score()) > best_score:
            best, best_score = name.removeprefix("cpu-"), s
    return best


def _why_not(lib_dir: Path, filename: str) -> str:
    """Why a GPU module present beside libggml did not register: the loader's error, or no device."""
    try:
        ctypes.CDLL(str(lib_dir / filename))
    except OSError as exc:
        return f"cannot be loaded: {exc}"
    return "loaded, but it found no usable device (driver missing or too old?)"


def load(lib_dir: Path) -> LoadedBackends:
    """Load ggml's backend modules from `lib_dir` into every libggml copy that has none yet."""
    modules = sorted(p.name for p in lib_dir.iterdir() if module_name(p.name)) if lib_dir.is_dir() else []
    copies = _ggml_copies(lib_dir)
    dynamic = False
    for lib in copies:
        if lib.ggml_backend_reg_count() == 0:  # a BACKEND_DL build registers nothing on its own
            dynamic = True
            fn = lib.ggml_backend_load_all_from_path
            fn.argtypes, fn.restype = [ctypes.c_char_p], None
            fn(os.fsencode(lib_dir))
    counts = _registered(copies[-1])  # the copy libllama links (the last one found)
    registered = tuple(name for name, _n in counts)
    if not dynamic:
        return LoadedBackends(False, registered, None, tuple(modules), (), counts)
    failed = tuple(
        (filename, _why_not(lib_dir, filename))
        for filename in modules
        if (name := module_name(filename)) in GPU_MODULES and _REG_NAMES[name] not in registered
    )
    variant = _cpu_variant_loaded(lib_dir, modules) if "CPU" in registered else None
    if "CPU" not in registered:
        cpus = [m for m in modules if (module_name(m) or "").startswith("cpu")]
        raise BackendLoadError(
            f"llama.cpp has no CPU backend: none of the CPU modules in {lib_dir} ({', '.join(cpus) or 'none found'}) "
            "loads on this processor. Reinstall llama-cpp-python with `python3 bootstrap.py run` (a portable build), "
            "or install a SpecChat package built for this architecture."
        )
    return LoadedBackends(True, registered, variant, tuple(modules), failed, counts)
