#!/usr/bin/env python3
"""One-command set-up and launcher: `python3 bootstrap.py run` or `python3 bootstrap.py test`.

The first time (and whenever something that matters changed) it checks the prerequisites, finds the
GPU and picks llama.cpp's backend for it, creates .venv, builds llama-cpp-python for that backend
(~15 minutes on 2 cores, once: the wheel is kept in ~/.cache/specchat/llama-wheels/), installs
SpecChat, downloads and verifies the demo pair, then opens the app on it (`run`) or runs the whole
test suite (`test`). Later runs find the install stamp in .venv up to date and start the app at once,
without pip and without the network.

    python3 bootstrap.py run  [--backend auto|cpu|cuda|vulkan|metal] [--dry-run] [ARGS for specchat gui]
    python3 bootstrap.py test [--backend ...] [--dry-run] [ARGS for pytest]

Uses only the standard library, so it runs on a bare Python 3.11.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import textwrap
import threading
import time
import venv
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

ROOT = Path(__file__).resolve().parent
# SPECCHAT_VENV moves the virtual environment (the tests point it at a temporary folder).
VENV = Path(os.environ["SPECCHAT_VENV"]).absolute() if os.environ.get("SPECCHAT_VENV") else ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PY = BIN / ("python.exe" if os.name == "nt" else "python")

STAMP = "specchat-install.json"  # what was installed: decides "install" or "just launch"
BUILD_INFO = "specchat-build.json"  # the backend chosen and what the detection found, for the app
MODELS_MARKER = "specchat-models.json"  # the demo files fetch-demo verified, for a cheap check at launch
LLAMA_STAMP = "llama-cmake-args.txt"  # the CMAKE_ARGS the installed llama-cpp-python was built with

BACKENDS = ("cpu", "cuda", "vulkan", "metal")
PY_VERSION = f"{sys.version_info[0]}.{sys.version_info[1]}"
USAGE = """\
usage: python3 bootstrap.py [run|test] [--backend auto|cpu|cuda|vulkan|metal] [--dry-run] [ARGS ...]

  run     set up what is missing, then open SpecChat on the demo pair (ARGS go to `specchat gui`)
  test    set up what is missing (with the test tools), then run the test suite (ARGS go to pytest)

  --backend NAME  build llama.cpp for this backend instead of the one detected (remembered for later
                  runs; `--backend auto` detects again). CMAKE_ARGS, when set, overrides both (and is
                  remembered too, until --backend or CMAKE_ARGS is given again).
  --dry-run       detect and check everything, print the plan, change nothing
"""


def step(message: str) -> None:
    print(f"\n==> {message}", flush=True)


def say(text: str) -> None:
    """A paragraph, wrapped at 100 columns; a `command` stays on one line, to be copied."""
    glued = re.sub(r"`[^`]*`", lambda m: m.group(0).replace(" ", "\0"), text)
    wrapped = textwrap.fill(glued, width=100, break_on_hyphens=False, break_long_words=False)
    print(wrapped.replace("\0", " "), flush=True)


def run(*cmd: object, env: dict[str, str] | None = None) -> None:
    result = subprocess.run([str(c) for c in cmd], cwd=ROOT, env=env)
    if result.returncode != 0:
        sys.exit(f"bootstrap: step failed (exit {result.returncode}): {' '.join(str(c) for c in cmd)}")


# ---------------------------------------------------------------------------------------------------
# llama.cpp's build flags
# ---------------------------------------------------------------------------------------------------

# llama.cpp's release recipe: every backend a module ggml loads at run time (GGML_BACKEND_DL), the CPU
# backend in one variant per x86 CPU generation (ggml picks the best the CPU runs), no -march=native:
# the wheel runs on any x86-64 CPU, not only the one that built it. RPC for `specchat rpc-server`/--rpc;
# the multimodal part of llama.cpp is not used, and skipping it saves build time.
LLAMA_CMAKE_ARGS = "-DLLAVA_BUILD=OFF -DGGML_RPC=ON -DGGML_NATIVE=OFF -DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=ON"
MACOS_CMAKE_ARGS = "-DLLAVA_BUILD=OFF -DGGML_RPC=ON"  # no BACKEND_DL on macOS
GPU_FLAGS = {"cuda": "-DGGML_CUDA=on", "vulkan": "-DGGML_VULKAN=on", "metal": "-DGGML_METAL=on"}


def backend_cmake_args(backend: str, system: str | None = None) -> str:
    """Our CMAKE_ARGS for a backend on this OS (`cpu`, `cuda`, `vulkan`, `metal`)."""
    if (system or platform.system()) == "Darwin":
        if backend == "metal":
            return f"{MACOS_CMAKE_ARGS} {GPU_FLAGS['metal']}"
        extra = f" {GPU_FLAGS['vulkan']}" if backend == "vulkan" else ""
        return f"{MACOS_CMAKE_ARGS} -DGGML_METAL=OFF{extra}"
    return f"{LLAMA_CMAKE_ARGS} {GPU_FLAGS[backend]}" if backend in ("cuda", "vulkan") else LLAMA_CMAKE_ARGS


def llama_pin() -> str:
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    start = text.index('"llama-cpp-python==') + len('"llama-cpp-python==')
    return text[start : text.index('"', start)]


def user_cmake_args() -> str:
    return os.environ.get("CMAKE_ARGS", "").strip()


def cmake_args(backend: str = "cpu") -> str:
    """The user's CMAKE_ARGS (they win over everything) or ours for `backend`; RPC is always in."""
    args = user_cmake_args() or backend_cmake_args(backend)
    if "GGML_RPC" not in args:
        args += " -DGGML_RPC=ON"
    if amx_would_be_built(args):
        args += f" {NO_AMX_ARGS}"
    return args


def backend_of(args: str, system: str | None = None) -> str:
    """Which backend a set of CMAKE_ARGS builds (`cpu` when none of the GPU ones)."""
    for name in ("cuda", "vulkan", "metal", "hip", "sycl", "musa", "opencl", "cann"):
        if re.search(rf"-DGGML_{name.upper()}=(ON|1|TRUE|YES)\b", args, re.IGNORECASE):
            return name
    if (system or platform.system()) == "Darwin" and not re.search(r"-DGGML_METAL=(OFF|0|FALSE|NO)\b", args, re.I):
        return "metal"  # llama.cpp's default on Apple
    return "cpu"


# llama.cpp's native x86 build (-march=native) turns on its AMX kernels on Intel Xeons that have AMX
# (Sapphire Rapids and later), and there they segfault in ggml_backend_amx_mul_mat on the first
# decode with Q4_K weights (llama.cpp issue 20824; seen here on 2026-12-02, llama-completion too).
# An explicit -mno-amx-int8 outranks -march=native in GCC and Clang, so the CPU repack kernels run.
# Our own builds are portable (GGML_NATIVE=OFF): there the AMX code is only in the `sapphirerapids`
# CPU variant, which packaging/slim_wheel.py removes from every wheel this script builds. This covers
# a native build from the user's own CMAKE_ARGS.
NO_AMX_ARGS = "-DCMAKE_C_FLAGS=-mno-amx-int8 -DCMAKE_CXX_FLAGS=-mno-amx-int8"


def amx_would_be_built(args: str, system: str | None = None, machine: str | None = None) -> bool:
    """A native Linux x86-64 build whose flags say nothing of AMX or of the compiler flags."""
    system = system or platform.system()
    machine = (machine or platform.machine()).lower()
    if system != "Linux" or machine not in ("x86_64", "amd64"):
        return False
    return not any(word in args for word in ("AMX", "CMAKE_C_FLAGS", "CMAKE_CXX_FLAGS", "GGML_NATIVE=OFF"))


def llama_wheel_dir(args: str) -> Path:
    """Where our build of llama-cpp-python for these CMAKE_ARGS is kept.

    pip's own wheel cache keys on the version only, so a wheel built with other CMAKE_ARGS (without
    RPC, or for another GPU backend) would be reused silently; this folder keys on both.
    """
    key = hashlib.sha256(f"{llama_pin()}\n{args}".encode()).hexdigest()[:16]
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "specchat" / "llama-wheels" / key


def cached_wheel(args: str) -> Path | None:
    found = sorted(llama_wheel_dir(args).glob("llama_cpp_python-*.whl"))
    return found[-1] if found else None


# ---------------------------------------------------------------------------------------------------
# What this machine has: the distribution, the GPU, the toolkits
# ---------------------------------------------------------------------------------------------------


def sys_path(path: str) -> Path:
    """A system path (/proc, /dev, /usr, /etc). SPECCHAT_BOOTSTRAP_SYSROOT re-roots them: the tests'
    fake machines."""
    root = os.environ.get("SPECCHAT_BOOTSTRAP_SYSROOT")
    return Path(root) / path.lstrip("/") if root else Path(path)


def os_release() -> dict[str, str]:
    for name in ("/etc/os-release", "/usr/lib/os-release"):
        try:
            text = sys_path(name).read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        values = {}
        for line in text.splitlines():
            key, sep, value = line.partition("=")
            if sep:
                values[key.strip()] = value.strip().strip("\"'")
        return values
    return {}


def distro(system: str | None = None) -> str:
    """debian, fedora, arch, suse, macos, windows or unknown: which package names and manager to name."""
    system = system or platform.system()
    if system == "Darwin":
        return "macos"
    if system == "Windows":
        return "windows"
    info = os_release()
    ids = [info.get("ID", "").lower(), *info.get("ID_LIKE", "").lower().split()]
    for family, names in (
        ("debian", ("debian", "ubuntu", "linuxmint", "pop", "raspbian")),
        ("fedora", ("fedora", "rhel", "centos", "rocky", "almalinux", "amzn", "ol")),
        ("arch", ("arch", "manjaro", "endeavouros")),
        ("suse", ("suse", "opensuse", "opensuse-leap", "opensuse-tumbleweed", "sles")),
    ):
        if any(i in names or i.startswith("opensuse") and family == "suse" for i in ids):
            return family
    return "unknown"


def _venv_package() -> str:
    return f"python3.{sys.version_info[1]}-venv"


# For each distribution family: the install command's prefix, and the packages for a need.
_MANAGERS = {
    "debian": "apt install",
    "fedora": "dnf install",
    "arch": "pacman -S --needed",
    "suse": "zypper install",
    "macos": "brew install",
}
_PACKAGES: dict[str, dict[str, list[str]]] = {
    "debian": {"compiler": ["build-essential"], "venv": [], "cuda": ["nvidia-cuda-toolkit"],
               "glslc": ["glslc"], "vulkan-headers": ["libvulkan-dev"]},
    "fedora": {"compiler": ["gcc-c++"], "venv": ["python3"], "cuda": ["cuda-toolkit"],
               "glslc": ["glslc"], "vulkan-headers": ["vulkan-headers", "vulkan-loader-devel"]},
    "arch": {"compiler": ["base-devel"], "venv": ["python"], "cuda": ["cuda"],
             "glslc": ["shaderc"], "vulkan-headers": ["vulkan-headers"]},
    "suse": {"compiler": ["gcc-c++"], "venv": ["python3"], "cuda": ["cuda-toolkit"],
             "glslc": ["shaderc"], "vulkan-headers": ["vulkan-headers", "vulkan-devel"]},
    "macos": {"compiler": [], "venv": [], "cuda": [], "glslc": ["shaderc"],
              "vulkan-headers": ["vulkan-headers", "vulkan-loader", "molten-vk"]},
}
_NOTES = {
    ("debian", "cuda"): "(Debian: from the non-free component; Ubuntu: multiverse)",
    ("fedora", "cuda"): "(cuda-toolkit comes from NVIDIA's CUDA repository: https://developer.nvidia.com/cuda-downloads)",
    ("suse", "cuda"): "(cuda-toolkit comes from NVIDIA's CUDA repository: https://developer.nvidia.com/cuda-downloads)",
}
_WINDOWS = {
    "compiler": "Visual Studio 2022 Build Tools with the C++ workload: winget install "
                "Microsoft.VisualStudio.2022.BuildTools --override \"--add Microsoft.VisualStudio.Workload.VCTools "
                "--includeRecommended --passive\"",
    "venv": "Python from python.org (its installer includes venv and pip)",
    "cuda": "the CUDA toolkit: winget install Nvidia.CUDA",
    "glslc": "the Vulkan SDK: winget install KhronosGroup.VulkanSDK",
    "vulkan-headers": "the Vulkan SDK: winget install KhronosGroup.VulkanSDK",
}
_GENERIC = {
    "compiler": "a C and C++ compiler (gcc and g++, or clang)",
    "venv": "Python's venv module with ensurepip",
    "cuda": "NVIDIA's CUDA toolkit (https://developer.nvidia.com/cuda-downloads)",
    "glslc": "glslc (shaderc)",
    "vulkan-headers": "the Vulkan headers and loader (the Vulkan SDK)",
}


def packages_for(needs: Iterable[str], family: str) -> list[str]:
    """The package names that provide `needs` (compiler, venv, cuda, glslc, vulkan-headers) here."""
    names: list[str] = []
    for need in needs:
        if family == "debian" and need == "venv":
            found = [_venv_package()]
        else:
            found = _PACKAGES.get(family, {}).get(need, [])
        names += [n for n in found if n not in names]
    return names


def install_command(needs: Iterable[str], family: str) -> str:
    """One command (or, where there is none, one sentence) that installs what `needs` names."""
    needs = list(dict.fromkeys(needs))
    if family == "windows":
        return "; ".join(dict.fromkeys(_WINDOWS[n] for n in needs))
    parts: list[str] = []
    if family == "macos" and "compiler" in needs:
        parts.append("xcode-select --install")
    if family in _MANAGERS:
        names = packages_for(needs, family)
        if names:
            sudo = "" if family == "macos" or (hasattr(os, "geteuid") and os.geteuid() == 0) else "sudo "
            parts.append(f"{sudo}{_MANAGERS[family]} {' '.join(names)}")
        notes = [_NOTES[(family, n)] for n in needs if (family, n) in _NOTES]
        return " && ".join(parts) + (" " + " ".join(notes) if notes else "")
    return "install " + ", ".join(_GENERIC[n] for n in needs)


def which(name: str) -> str | None:
    return shutil.which(name)


def find_nvcc(env: Mapping[str, str]) -> str | None:
    exe = "nvcc.exe" if os.name == "nt" else "nvcc"
    found = which("nvcc")
    if found:
        return found
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if env.get(var) and (Path(env[var]) / "bin" / exe).is_file():
            return str(Path(env[var]) / "bin" / exe)
    candidate = sys_path("/usr/local/cuda/bin/nvcc")
    return str(candidate) if candidate.is_file() else None


def nvidia_gpu() -> str | None:
    if which("nvidia-smi"):
        return "nvidia-smi"
    if sys_path("/proc/driver/nvidia").exists():
        return "/proc/driver/nvidia"
    return None


ICD_DIRS = ("/usr/share/vulkan/icd.d", "/etc/vulkan/icd.d", "/usr/local/share/vulkan/icd.d")
SOFTWARE_ICDS = ("lvp", "llvmpipe", "swiftshader")  # Mesa's CPU rasteriser, Google's: not a GPU


def vulkan_icds(env: Mapping[str, str]) -> list[Path]:
    """The Vulkan driver manifests the loader would read (the variables replace the folders)."""
    listed = env.get("VK_DRIVER_FILES") or env.get("VK_ICD_FILENAMES")
    places = [Path(p) for p in listed.split(os.pathsep) if p] if listed else [sys_path(d) for d in ICD_DIRS]
    found: list[Path] = []
    for place in places:
        if place.is_dir():
            found += sorted(place.glob("*.json"))
        elif place.is_file():
            found.append(place)
    return found


def is_software_icd(path: Path) -> bool:
    return any(word in path.name.lower() for word in SOFTWARE_ICDS)


def vulkan_gpu(env: Mapping[str, str], nvidia: str | None, system: str) -> str | None:
    """A Vulkan driver for a GPU that is there. Mesa installs the manifests of all its drivers whatever
    the hardware, so one counts with a GPU device node (/dev/dri/renderD*), NVIDIA's with an NVIDIA GPU."""
    if system == "Darwin":
        return None
    render = sorted(p.name for p in sys_path("/dev/dri").glob("renderD*")) if system == "Linux" else []
    hardware = [p.name for p in vulkan_icds(env) if not is_software_icd(p)]
    for name in hardware:
        if "nvidia" in name.lower() and nvidia:
            return f"driver {name} for the NVIDIA GPU"
    mesa = [n for n in hardware if "nvidia" not in n.lower()]
    if mesa and render:
        return f"/dev/dri/{render[0]} with driver{'s' if len(mesa) > 1 else ''} {', '.join(mesa)}"
    if (render or nvidia or system == "Windows") and which("vulkaninfo"):
        return _vulkaninfo_gpu()
    return None


def _vulkaninfo_gpu() -> str | None:
    try:
        out = subprocess.run(["vulkaninfo", "--summary"], capture_output=True, text=True, timeout=15).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    name = None
    for line in out.splitlines():
        key, _, value = (s.strip() for s in line.partition("="))
        if key == "deviceName":
            name = value
        elif key == "deviceType" and value != "PHYSICAL_DEVICE_TYPE_CPU" and name:
            return f"{name} (vulkaninfo)"
    return None


# The newest Vulkan headers this llama.cpp is known not to build with: Debian 12's (1.4.309 builds).
VULKAN_HEADERS_TOO_OLD = 239


def vulkan_tool_gaps(env: Mapping[str, str], args: str = "") -> list[tuple[str, str]]:
    """What a Vulkan build lacks: [(need, what)] with need in glslc / vulkan-headers."""
    gaps: list[tuple[str, str]] = []
    sdk = env.get("VULKAN_SDK")
    exe = "glslc.exe" if os.name == "nt" else "glslc"
    if not (which("glslc") or (sdk and (Path(sdk) / "bin" / exe).is_file())):
        gaps.append(("glslc", "glslc"))
    if "Vulkan_INCLUDE_DIR" in args:
        return gaps  # the user points CMake at their own headers
    includes = [sys_path("/usr/include"), sys_path("/usr/local/include")]
    if sdk:
        includes += [Path(sdk) / "include", Path(sdk) / "Include"]
    header = next((inc / "vulkan" for inc in includes if (inc / "vulkan" / "vulkan.h").is_file()), None)
    if header is None:
        gaps.append(("vulkan-headers", "the Vulkan headers (vulkan/vulkan.h)"))
    else:
        try:
            core = (header / "vulkan_core.h").read_text(encoding="utf-8", errors="replace")
            match = re.search(r"#define\s+VK_HEADER_VERSION\s+(\d+)", core)
        except OSError:
            match = None
        if match and int(match.group(1)) <= VULKAN_HEADERS_TOO_OLD:
            gaps.append(("vulkan-headers", f"Vulkan headers newer than 1.3.{match.group(1)} (this llama.cpp does "
                                           f"not build with those in {header}; or give CMake newer ones with "
                                           "CMAKE_ARGS=\"-DGGML_VULKAN=on -DVulkan_INCLUDE_DIR=...\")"))
    return gaps


@dataclass
class Finding:
    """The detection's result and the backend chosen."""

    backend: str
    gpu_found: str | None = None
    missing: list[str] = field(default_factory=list)  # packages that would let a build use the GPU found
    rebuild: str | None = None  # the command that builds for that GPU, once `missing` is installed
    paragraph: str = ""  # what was found, what was chosen, why
    hint: str | None = None  # one line for a launch: the GPU this build does not use
    toolkit_gaps: list[tuple[str, str]] = field(default_factory=list)  # the chosen backend's build lacks these
    refusal: str | None = None  # a backend that cannot be built on this OS at all
    build_env: dict[str, str] = field(default_factory=dict)  # extra variables for the build (CUDACXX)

    def info(self, args: str) -> dict[str, object]:
        return {"backend": self.backend, "gpu_found": self.gpu_found, "missing": self.missing,
                "rebuild": self.rebuild, "cmake_args": args}


def decide(requested: str | None, remembered: bool = False, env: Mapping[str, str] | None = None,
           system: str | None = None, machine: str | None = None, args_remembered: bool = False) -> Finding:
    """Find the GPU and its toolkit, and choose the backend: `requested` (--backend) wins over the
    detection, CMAKE_ARGS over both."""
    env = os.environ if env is None else env
    system = system or platform.system()
    machine = (machine or platform.machine()).lower()
    family = distro(system)
    nvidia = nvidia_gpu() if system != "Darwin" else None
    nvcc = find_nvcc(env) if system != "Darwin" else None
    vk = vulkan_gpu(env, nvidia, system)
    vk_gaps = vulkan_tool_gaps(env)
    apple = system == "Darwin" and machine in ("arm64", "aarch64")

    found: list[str] = []
    if nvidia:
        found.append(f"an NVIDIA GPU ({nvidia}), " + (f"with the CUDA toolkit ({nvcc})" if nvcc
                                                     else "but not the CUDA toolkit (no nvcc)"))
    if vk:
        tools = "with glslc and the Vulkan headers" if not vk_gaps else "without " + " or ".join(w for _, w in vk_gaps)
        found.append(f"a Vulkan GPU ({vk}), {tools}")
    if apple:
        found.append("an Apple silicon GPU (Metal)")
    gpu_found = (f"NVIDIA ({nvidia})" if nvidia else f"Vulkan: {vk}" if vk
                 else "Apple silicon (Metal)" if apple else None)

    if apple:
        auto, why = "metal", "Metal runs on every Apple silicon Mac"
    elif nvidia and nvcc:
        auto, why = "cuda", "the NVIDIA GPU and its toolkit are there"
    elif vk and not vk_gaps:
        auto, why = "vulkan", "the Vulkan GPU and the tools to build for it are there"
    elif gpu_found:
        auto, why = "cpu", "the build tools for the GPU are missing"
    else:
        auto, why = "cpu", "there is no GPU llama.cpp could use"

    user = env.get("CMAKE_ARGS", "").strip()
    if user:
        backend = backend_of(user, system)
        over = f" and --backend {requested}" if requested else ""
        if args_remembered:
            chose = (f"The CMAKE_ARGS of an earlier run override the detection{over}: building with them ({backend}; "
                     "`--backend auto` or another --backend drops them).")
        else:
            chose = f"CMAKE_ARGS is set, and it overrides the detection{over}: building with it ({backend})."
    elif requested:
        backend = requested
        how = "as asked on an earlier run (`--backend auto` detects again)" if remembered else "as asked (--backend)"
        chose = f"Chose {backend} {how}" + ("." if backend == auto else f"; the detection would have chosen {auto}.")
    else:
        backend = auto
        chose = f"Chose {backend}: {why}."

    finding = Finding(backend=backend, gpu_found=gpu_found)
    if backend == "metal" and system != "Darwin" or backend == "cuda" and system == "Darwin":
        finding.refusal = f"bootstrap: there is no {backend} build of llama.cpp on {system}; " \
                          f"use --backend {'cpu' if system == 'Darwin' else 'cuda, vulkan or cpu'}"
    if backend == "cuda":
        if nvcc is None:
            finding.toolkit_gaps.append(("cuda", "the CUDA toolkit (nvcc)"))
        elif not which("nvcc") and not env.get("CUDACXX"):
            finding.build_env["CUDACXX"] = nvcc  # CMake finds an nvcc that is not on PATH by this
    elif backend == "vulkan":
        finding.toolkit_gaps += vulkan_tool_gaps(env, user)

    # Does this build use the GPU that is there? If not: what it takes, and the command.
    uses_gpu = (backend == "cuda" and nvidia) or (backend == "vulkan" and vk) or (backend == "metal" and apple)
    later = ""
    if gpu_found and not uses_gpu:
        if nvidia:
            target, needs = "cuda", ([] if nvcc else ["cuda"])
        elif vk:
            target, needs = "vulkan", [n for n, _ in vk_gaps]
        else:
            target, needs = "metal", []
        finding.missing = packages_for(needs, family) if family in _PACKAGES else [_GENERIC[n] for n in needs]
        prefix = "CMAKE_ARGS= " if user and not args_remembered else ""
        finding.rebuild = f"{prefix}python3 bootstrap.py run --backend {target}"
        gpu_name = {"cuda": "NVIDIA GPU", "vulkan": "Vulkan GPU", "metal": "Apple GPU"}[target]
        if needs:
            later = (f" To use the {gpu_name}, install what its build needs: `{install_command(needs, family)}`, "
                     f"then run `{finding.rebuild}` (a rebuild of llama.cpp).")
            finding.hint = f"this build does not use the {gpu_name}: install it with " \
                           f"`{install_command(needs, family)}`, then run `{finding.rebuild}`"
        else:
            later = f" `{finding.rebuild}` builds for the {gpu_name}."
            finding.hint = f"this build does not use the {gpu_name}: `{finding.rebuild}` builds for it"
        if backend == "cpu":
            later += " Building for the CPU only."
    elif backend == "vulkan" and nvidia and not nvcc:
        later = (f" CUDA is usually faster on NVIDIA: `{install_command(['cuda'], family)}`, then "
                 "`python3 bootstrap.py run --backend cuda`.")

    seen = "Found " + "; ".join(found) + "." if found else "Found no GPU (no nvidia-smi, no Vulkan GPU driver" + \
        (", not an Apple silicon Mac)." if system == "Darwin" else ").")
    finding.paragraph = f"{seen} {chose}{later}"
    return finding


# ---------------------------------------------------------------------------------------------------
# Prerequisites and the virtual environment
# ---------------------------------------------------------------------------------------------------


def compiler_missing(system: str | None = None) -> bool:
    system = system or platform.system()
    if system == "Darwin":
        try:
            return subprocess.run(["xcode-select", "-p"], capture_output=True).returncode != 0
        except OSError:
            return True
    if system == "Windows":
        vswhere = Path(os.environ.get("ProgramFiles(x86)", r"C:\Program Files (x86)")) / \
            "Microsoft Visual Studio" / "Installer" / "vswhere.exe"
        return not (which("cl") or vswhere.is_file())
    c = os.environ.get("CC") or next((n for n in ("cc", "gcc", "clang") if which(n)), None)
    cxx = os.environ.get("CXX") or next((n for n in ("c++", "g++", "clang++") if which(n)), None)
    return not (c and which(c.split()[0]) and cxx and which(cxx.split()[0]))


def venv_supported() -> bool:
    """Can this Python make a virtual environment with pip? Debian and Ubuntu ship venv and ensurepip
    apart (python3.X-venv): without it `python3 -m venv` fails, or leaves a venv without pip."""
    try:
        return subprocess.run([sys.executable, "-m", "ensurepip", "--version"], capture_output=True,
                              timeout=60).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def venv_python(venv_dir: Path) -> Path:
    return venv_dir / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def venv_runs(venv_dir: Path, with_pip: bool = False) -> str | None:
    """None when the venv's Python runs as this Python's version (and has pip); else what is wrong."""
    py = venv_python(venv_dir)
    if not py.exists():
        return f"it has no Python ({py.relative_to(venv_dir)} is missing)"
    code = "import sys; print('%d.%d' % sys.version_info[:2])" + ("; import pip" if with_pip else "")
    try:
        result = subprocess.run([str(py), "-I", "-c", code], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.SubprocessError) as e:
        return f"its Python does not start ({e})"
    ours = PY_VERSION
    if result.returncode != 0:
        if with_pip and result.stdout.strip() == ours and "pip" in result.stderr:
            return "it has no pip"
        return "its Python does not start" + (f" ({result.stderr.strip().splitlines()[-1]})" if result.stderr.strip()
                                              else "")
    if result.stdout.strip() != ours:
        return f"it was made with Python {result.stdout.strip()}, and this is {ours}"
    return None


def venv_problem(venv_dir: Path) -> str | None:
    """"missing", None (a working venv with pip), or what is wrong with a half-made one."""
    if not venv_dir.exists():
        return "missing"
    return venv_runs(venv_dir, with_pip=True)


_VENV_ENTRIES = {"bin", "Scripts", "include", "Include", "lib", "Lib", "lib64", "share", "pyvenv.cfg",
                 ".gitignore", STAMP, BUILD_INFO, MODELS_MARKER, LLAMA_STAMP}


def looks_like_venv(venv_dir: Path) -> bool:
    """Only what a virtual environment (or the start of one) holds: safe to remove and make again."""
    if (venv_dir / "pyvenv.cfg").is_file():
        return True
    return venv_dir.is_dir() and all(p.name in _VENV_ENTRIES for p in venv_dir.iterdir())


def create_venv(venv_dir: Path) -> None:
    venv.EnvBuilder(with_pip=True).create(venv_dir)


def ensure_venv(venv_dir: Path | None = None, create: Callable[[Path], None] | None = None) -> None:
    """A working venv with pip at `venv_dir`: made if missing, made again if half-made."""
    venv_dir = venv_dir or VENV
    problem = venv_problem(venv_dir)
    if problem is None:
        return
    if problem != "missing":
        if not looks_like_venv(venv_dir):
            sys.exit(f"bootstrap: {venv_dir} is not a virtual environment this script made ({problem}); "
                     "move it away and run again")
        step(f"{venv_dir} is half-made ({problem}): removing it and creating it again")
        shutil.rmtree(venv_dir)
    step(f"creating the virtual environment in {venv_dir}")
    try:
        (create or create_venv)(venv_dir)
    except (Exception, SystemExit) as e:  # noqa: BLE001 - Debian's venv exits when ensurepip is absent
        shutil.rmtree(venv_dir, ignore_errors=True)
        sys.exit(f"bootstrap: could not create {venv_dir} ({e}); "
                 f"install Python's venv support: {install_command(['venv'], distro())}")
    problem = venv_problem(venv_dir)
    if problem is not None:
        shutil.rmtree(venv_dir, ignore_errors=True)
        sys.exit(f"bootstrap: the new {venv_dir} does not work ({problem}); "
                 f"install Python's venv support: {install_command(['venv'], distro())}")


def prerequisite_problem(finding: Finding, need_venv: bool, need_build: bool, again: str = "run") -> str | None:
    """ONE message naming everything missing and the command that installs it, or None."""
    if finding.refusal:
        return finding.refusal
    needs: list[str] = []
    what: list[str] = []
    if need_build and compiler_missing():
        needs.append("compiler")
        what.append("a C and C++ compiler")
    if need_venv and not venv_supported():
        needs.append("venv")
        what.append("Python's venv module with pip (ensurepip)")
    if need_build and finding.toolkit_gaps:
        needs += [need for need, _ in finding.toolkit_gaps]
        what.append(" and ".join(text for _, text in finding.toolkit_gaps) + f" for the {finding.backend} build")
    if not needs:
        return None
    family = distro()
    why = " (llama-cpp-python is compiled here once)" if "compiler" in needs else ""
    return (f"bootstrap: missing {', '.join(what)}{why}. Install with:\n\n    {install_command(needs, family)}\n\n"
            f"then run `python3 bootstrap.py {again}` again. Nothing was changed.")


# ---------------------------------------------------------------------------------------------------
# The install stamp: install, or just launch
# ---------------------------------------------------------------------------------------------------


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def wanted_stamp(backend: str, args: str, extras: Iterable[str]) -> dict[str, object]:
    return {
        "pyproject": file_sha256(ROOT / "pyproject.toml"),
        "llama_pin": llama_pin(),
        "backend": backend,
        "cmake_args": args,
        "extras": sorted(extras),
        "python": PY_VERSION,
    }


_STAMP_WORDS = {
    "pyproject": "pyproject.toml changed",
    "llama_pin": "the llama-cpp-python pin changed",
    "backend": "the llama.cpp backend changed",
    "cmake_args": "the CMAKE_ARGS changed",
    "python": "the Python version changed",
}


def stamp_changes(have: Mapping[str, object] | None, want: Mapping[str, object]) -> list[str]:
    """Why an install is needed ([] when the installed one serves): a `test` install serves `run`."""
    if not have:
        return ["not installed yet"]
    changes = [f"{text} ({have.get(key)} -> {want[key]})" if key in ("backend", "python") else text
               for key, text in _STAMP_WORDS.items() if have.get(key) != want[key]]
    extras = want["extras"]
    assert isinstance(extras, list)
    had = have.get("extras")
    if not set(extras) <= set(had if isinstance(had, list) else []):
        changes.append(f"the extras [{','.join(extras)}] are not installed yet")
    return changes


def read_json(path: Path) -> dict[str, object] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_json(path: Path, data: Mapping[str, object]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    tmp.replace(path)


def site_packages(venv_dir: Path) -> Path | None:
    if os.name == "nt":
        found = [venv_dir / "Lib" / "site-packages"]
    else:
        ours = venv_dir / "lib" / f"python{PY_VERSION}" / "site-packages"
        found = [ours, *sorted(venv_dir.glob("lib/python3*/site-packages"))]
    return next((p for p in found if p.is_dir()), None)


def installed_llama_matches(args: str, venv_dir: Path | None = None) -> bool:
    """The venv's llama-cpp-python is the pinned version, built with the CMAKE_ARGS asked for.

    Read from the files, never by importing llama_cpp: a GGML_BACKEND_DL build loads its backends
    only when the app asks ggml to, so an import would prove nothing, and it is slow.
    """
    venv_dir = venv_dir or VENV
    try:
        if (venv_dir / LLAMA_STAMP).read_text(encoding="utf-8") != args:
            return False
    except OSError:
        return False
    sp = site_packages(venv_dir)
    if sp is None:
        return False
    versions = [p.name[len("llama_cpp_python-") : -len(".dist-info")] for p in sp.glob("llama_cpp_python-*.dist-info")]
    if versions != [llama_pin()]:
        return False
    lib = sp / "llama_cpp" / "lib"
    names = [p.name for p in lib.iterdir()] if lib.is_dir() else []
    if re.search(r"GGML_BACKEND_DL=(ON|1|TRUE)", args, re.I) and not any(
        re.match(r"(lib)?ggml-cpu-.+\.(so|dll|dylib)$", n) for n in names
    ):
        return False
    return not ("GGML_RPC" in args and not any("ggml-rpc" in n for n in names))


# ---------------------------------------------------------------------------------------------------
# Building llama-cpp-python, with progress
# ---------------------------------------------------------------------------------------------------

NINJA_STEP = re.compile(r"^\s*\[(\d+)/(\d+)\]")
MAKE_STEP = re.compile(r"^\s*\[\s*(\d+)%\]")


def _elapsed(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs:02d}s"


class BuildProgress:
    """Turns `pip wheel -v` output into one progress line: updated in place on a terminal (at most once a
    second), else printed at most every 30 s (CI logs)."""

    def __init__(self, out: TextIO | None = None, tty: bool | None = None, interval: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.out = out or sys.stdout
        self.tty = self.out.isatty() if tty is None else tty
        self.interval = interval if interval is not None else (1.0 if self.tty else 30.0)
        self.clock = clock
        self.start = clock()
        self.last_print: float | None = None
        self.done: int | None = None
        self.total: int | None = None
        self.percent: int | None = None
        self.width = 0
        self.lock = threading.Lock()

    def feed(self, line: str) -> None:
        if m := NINJA_STEP.match(line):
            self.done, self.total = int(m.group(1)), int(m.group(2))
        elif m := MAKE_STEP.match(line):
            self.percent = int(m.group(1))
        else:
            return
        self.show()

    def status(self) -> str:
        spent = _elapsed(self.clock() - self.start)
        if self.total:
            return f"    compiling llama.cpp: objects built {self.done}/{self.total}, {spent} elapsed"
        if self.percent is not None:
            return f"    compiling llama.cpp: {self.percent}% built, {spent} elapsed"
        return f"    preparing the build (build tools, CMake configure), {spent} elapsed"

    def show(self, force: bool = False) -> None:
        with self.lock:
            now = self.clock()
            if not force and self.last_print is not None and now - self.last_print < self.interval:
                return
            self.last_print = now
            text = self.status()
            if self.tty:
                self.out.write("\r" + text.ljust(self.width))
                self.width = len(text)
            else:
                self.out.write(text + "\n")
            self.out.flush()

    def finish(self) -> None:
        self.show(force=True)
        if self.tty:
            self.out.write("\n")
            self.out.flush()


def run_logged(cmd: list[str], env: Mapping[str, str], log_path: Path,
               progress: BuildProgress | None = None, tail_lines: int = 60) -> tuple[int, list[str]]:
    """Run `cmd`, its whole output to `log_path`, only progress to the terminal. (exit code, last lines)."""
    progress = progress or BuildProgress()
    tail: deque[str] = deque(maxlen=tail_lines)
    stop = threading.Event()

    def tick() -> None:
        while not stop.wait(1.0):
            progress.show()

    with open(log_path, "w", encoding="utf-8", errors="replace", buffering=1) as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=dict(env), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, errors="replace", bufsize=1)
        ticker = threading.Thread(target=tick, daemon=True)
        ticker.start()
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                log.write(line)
                tail.append(line.rstrip("\n"))
                progress.feed(line)
            code = proc.wait()
        except BaseException:
            proc.terminate()
            proc.wait()
            raise
        finally:
            stop.set()
            ticker.join()
            progress.finish()
    return code, list(tail)


def slim_wheel(wheel: Path) -> None:
    """packaging/slim_wheel.py: one copy of each library, backend modules in llama_cpp/lib, no AMX variant."""
    run(sys.executable, ROOT / "packaging" / "slim_wheel.py", wheel)


def build_llama_wheel(args: str, backend: str, env: Mapping[str, str]) -> Path:
    wheels = llama_wheel_dir(args)
    wheels.mkdir(parents=True, exist_ok=True)
    partial = wheels / "partial"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir()
    log = wheels / "build.log"
    step(f"building llama-cpp-python {llama_pin()} for {backend} with CMAKE_ARGS={args!r} "
         f"(~15 min on 2 cores, once; the full log: {log})")
    cmd = [str(PY), "-m", "pip", "wheel", "-v", "--no-deps", "--no-cache-dir", "-w", str(partial),
           f"llama-cpp-python=={llama_pin()}"]
    code, tail = run_logged(cmd, {**env, "CMAKE_ARGS": args}, log)
    built = sorted(partial.glob("llama_cpp_python-*.whl"))
    if code != 0 or not built:
        print("\n".join(tail), file=sys.stderr)
        sys.exit(f"bootstrap: building llama-cpp-python failed (exit {code}); the last lines are above, "
                 f"the full log is {log}")
    slim_wheel(built[-1])
    final = wheels / built[-1].name
    built[-1].replace(final)
    shutil.rmtree(partial, ignore_errors=True)
    return final


def install_llama(args: str, backend: str, env: dict[str, str]) -> None:
    if installed_llama_matches(args):
        return
    wheel = cached_wheel(args) or build_llama_wheel(args, backend, env)
    step(f"installing llama-cpp-python from {wheel}")
    run(PY, "-m", "pip", "install", "--quiet", "--force-reinstall", "--no-deps", wheel, env=env)
    (VENV / LLAMA_STAMP).write_text(args, encoding="utf-8")


def install(finding: Finding, args: str, extras: list[str]) -> None:
    env = {**os.environ, **finding.build_env}
    ensure_venv()
    spec = f"[{','.join(extras)}]" if extras else ""
    step(f"installing SpecChat{spec} and its dependencies")
    run(PY, "-m", "pip", "install", "--quiet", "--upgrade", "pip", env=env)
    install_llama(args, finding.backend, env)
    run(PY, "-m", "pip", "install", "--quiet", "-e", f".{spec}", env=env)


# ---------------------------------------------------------------------------------------------------
# The demo models
# ---------------------------------------------------------------------------------------------------

MODEL_ENV = ("SPECCHAT_HOME", "SPECCHAT_MODELS_DIR")  # where the app looks for them (app/paths.py)
TEST_MODELS = 2  # fetch-demo --with-smollm2 adds SmolLM2-135M and Gemma 3 270M


def models_present(with_smollm2: bool, venv_dir: Path | None = None) -> bool:
    """The files fetch-demo verified (sha256) are still there, whole: same size, the app's sidecar
    beside them. A cheap check for every launch; fetch-demo verifies at install."""
    data = read_json((venv_dir or VENV) / MODELS_MARKER)
    if not data or data.get("env") != {k: os.environ.get(k) for k in MODEL_ENV}:
        return False
    if with_smollm2 and data.get("test_models") != TEST_MODELS:  # an older marker lacks Gemma 3 270M
        return False
    files = data.get("files")
    if not isinstance(files, dict) or len(files) < 2:
        return False
    for name, size in files.items():
        path = Path(name)
        try:
            if path.stat().st_size != size or not path.with_name(f".{path.name}.verified.json").is_file():
                return False
        except OSError:
            return False
    return True


def write_models_marker(paths: Iterable[Path], with_smollm2: bool, venv_dir: Path | None = None) -> None:
    files = {str(p): p.stat().st_size for p in paths}
    write_json((venv_dir or VENV) / MODELS_MARKER,
               {"env": {k: os.environ.get(k) for k in MODEL_ENV}, "test_models": TEST_MODELS if with_smollm2 else 0,
                "files": files})


def fetch_models(with_smollm2: bool) -> None:
    step("downloading and verifying the demo pair (1.6 GB, once)" + (" and the tests' small models (350 MB)"
                                                                      if with_smollm2 else ""))
    extra = ["--with-smollm2"] if with_smollm2 else []
    result = subprocess.run([str(BIN / "specchat"), "models", "fetch-demo", *extra], cwd=ROOT,
                            stdout=subprocess.PIPE, text=True)
    print(result.stdout, end="", flush=True)
    if result.returncode != 0:
        sys.exit(f"bootstrap: step failed (exit {result.returncode}): specchat models fetch-demo {' '.join(extra)}")
    # "target: PATH", "draft:  PATH", and with the test models "smollm2 PATH", "gemma3 PATH"
    found = [Path(line.split(None, 1)[1]) for line in result.stdout.splitlines()
             if line.startswith(("target:", "draft:", "smollm2 ", "gemma3 ")) and len(line.split(None, 1)) == 2]
    if len(found) == 2 + TEST_MODELS * with_smollm2 and all(p.is_file() for p in found):
        write_models_marker(found, with_smollm2)


# ---------------------------------------------------------------------------------------------------
# The command line
# ---------------------------------------------------------------------------------------------------


def parse_args(argv: list[str]) -> tuple[str, str | None, bool, list[str]]:
    """(command, --backend or None, --dry-run, the rest for the app or pytest)."""
    if argv[:1] in (["-h"], ["--help"], ["help"]):
        print(USAGE, end="")
        sys.exit(0)
    command = "run"
    if argv and not argv[0].startswith("-"):
        command, argv = argv[0], argv[1:]
    backend: str | None = None
    dry_run = False
    rest: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            rest += argv[i + 1 :]
            break
        if arg == "--dry-run":
            dry_run = True
        elif arg == "--backend" or arg.startswith("--backend="):
            if arg == "--backend":
                if i + 1 >= len(argv):
                    sys.exit("bootstrap: --backend needs a value: auto, " + ", ".join(BACKENDS))
                i += 1
                backend = argv[i]
            else:
                backend = arg.split("=", 1)[1]
            if backend not in (*BACKENDS, "auto"):
                sys.exit(f"bootstrap: unknown backend {backend!r}; use auto, " + ", ".join(BACKENDS))
        else:
            rest.append(arg)
        i += 1
    return command, backend, dry_run, rest


def main(argv: list[str]) -> int:
    if sys.version_info < (3, 11):
        sys.exit(f"bootstrap: SpecChat needs Python 3.11 or newer; this is {sys.version.split()[0]}")
    from app.cpu_floor import problem as cpu_problem  # standard library only (this file's folder is on sys.path)

    if text := cpu_problem():  # before minutes of compiling for a CPU that NumPy and Qt cannot run on
        sys.exit(f"bootstrap: {text}")
    command, asked, dry_run, rest = parse_args(argv)
    if command not in ("run", "test"):
        sys.exit(f"bootstrap: unknown command {command!r}; use `run` or `test` (`--help` for more)")
    extras = [] if command == "run" else ["dev", "test"]

    have = read_json(VENV / STAMP) or {}
    # A choice made on an earlier run stays until another is made: --backend X, or the CMAKE_ARGS of a
    # custom build (a later plain `run` launches that build, it does not rebuild for the detection).
    # `--backend auto`, another --backend or CMAKE_ARGS set (even empty) replace it.
    remembered = asked is None and bool(have.get("requested"))
    requested = None if asked == "auto" else asked or (str(have["requested"]) if remembered else None)
    args_remembered = asked is None and "CMAKE_ARGS" not in os.environ and bool(have.get("requested_cmake_args"))
    if args_remembered:
        os.environ["CMAKE_ARGS"] = str(have["requested_cmake_args"])
    try:
        finding = decide(requested, remembered, args_remembered=args_remembered)
        args = cmake_args(finding.backend)
        choice = {"requested": requested, "requested_cmake_args": user_cmake_args() or None}
    finally:
        if args_remembered:
            del os.environ["CMAKE_ARGS"]  # not for the app or pytest; the build gets `args` itself
    again = " ".join(argv) or "run"
    want = wanted_stamp(finding.backend, args, extras)
    changes = stamp_changes(have, want)
    if not changes and (problem := venv_runs(VENV)):
        changes = [f"{VENV.name} is broken: {problem}"]
    with_smollm2 = command == "test"
    models_ok = models_present(with_smollm2)

    if dry_run or changes:
        step("llama.cpp backend")
        say(finding.paragraph)
    if dry_run:
        return dry_run_plan(command, finding, args, changes, models_ok, again, bool(choice["requested_cmake_args"]))

    if changes:
        step(f"setting up: {'; '.join(changes)}")
        llama_ok = installed_llama_matches(args)
        need_venv = venv_problem(VENV) is not None
        problem = prerequisite_problem(finding, need_venv, not llama_ok and cached_wheel(args) is None, again)
        if problem:
            sys.exit(problem)
        install(finding, args, extras)
        write_json(VENV / STAMP, {**want, **choice})
    else:
        print(f"==> SpecChat is set up (llama.cpp for {finding.backend}; {VENV})", flush=True)
        if finding.hint:
            print(f"    note: {finding.hint}", flush=True)
        if any(have.get(k) != v for k, v in choice.items()):
            write_json(VENV / STAMP, {**have, **choice})
    info = finding.info(args)
    if read_json(VENV / BUILD_INFO) != info:
        write_json(VENV / BUILD_INFO, info)

    if command == "run":
        if not models_ok:
            step("checking that Qt can open a window here (X11 libraries)")
            # Before the download and before Qt aborts with a message that names nothing: the X11
            # libraries the window needs, and the command that installs them. (Later launches: the
            # app makes the same check itself.)
            shown = BIN / "specchat"
            if shown.is_relative_to(ROOT):
                shown = shown.relative_to(ROOT)
            code = subprocess.call([str(PY), "-m", "ui.shell.platform_check", str(shown)], cwd=ROOT)
            if code != 0:
                return code
            fetch_models(with_smollm2=False)
        step("starting SpecChat on the demo pair")
        return subprocess.call([str(BIN / "specchat"), "gui", *rest], cwd=ROOT)
    if not models_ok:
        fetch_models(with_smollm2=True)
    step("checking that app/ stays free of Qt (import-linter)")
    run(BIN / "lint-imports")
    if os.environ.get("SPECCHAT_PACKAGE_CHECK"):
        step("building the desktop bundle and running its self-test (packaging/ci_package.sh)")
        run("bash", "packaging/ci_package.sh")
    step("running the test suite")
    env = dict(os.environ)
    env.setdefault("QT_QPA_PLATFORM", "offscreen")
    env.setdefault("SPECCHAT_REQUIRE_MODELS", "1")
    return subprocess.call([str(PY), "-m", "pytest", *(rest or ["-q"])], cwd=ROOT, env=env)


def dry_run_plan(command: str, finding: Finding, args: str, changes: list[str], models_ok: bool, again: str,
                 custom: bool = False) -> int:
    """--dry-run: the plan, after the same checks a real run makes; creates nothing."""
    llama_ok = installed_llama_matches(args)
    wheel = cached_wheel(args)
    need_build = bool(changes) and not llama_ok and wheel is None
    venv_state = venv_problem(VENV) if changes else None
    need_venv = venv_state is not None
    step("plan (--dry-run: nothing is changed)")
    lines = [
        ("backend", finding.backend),
        ("gpu found", finding.gpu_found or "none"),
        ("CMAKE_ARGS", args + ("   (from your CMAKE_ARGS)" if custom else "")),
        ("wheel cache", f"{llama_wheel_dir(args)} ("
                        + (f"holds {wheel.name})" if wheel else "empty: llama-cpp-python would be compiled)")),
        ("venv", f"{VENV} (" + ("would be created)" if venv_state == "missing" else
                                f"would be made again: {venv_state})" if venv_state else "works)")),
        ("pip would run", "yes: " + "; ".join(changes) if changes else "no (installed and up to date)"),
        ("llama build", "yes" if need_build else "no" + (" (installed)" if llama_ok else " (cached wheel)"
                                                         if changes else "")),
        ("demo models", "present" if models_ok else "would be downloaded (specchat models fetch-demo)"),
        ("then", "specchat gui" if command == "run" else "pytest"),
    ]
    for key, value in lines:
        print(f"    {key + ':':<15}{value}")
    print(f"    {'build info:':<15}{json.dumps(finding.info(args))}")
    problem = prerequisite_problem(finding, need_venv, need_build, again) if changes else None
    if problem:
        print(file=sys.stderr)
        sys.exit(problem)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
