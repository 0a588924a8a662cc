"""A GPU this machine has but this llama.cpp build cannot use, and the command that fixes it.

The build knows only the backends it was compiled with: a CPU build on a machine with an NVIDIA card
lists no GPU, and "No GPU found" would be false. This looks at the hardware itself (the NVIDIA
driver, the PCI display devices' vendors, Apple silicon), never through llama.cpp,
so the picker, the banner and `doctor` can say which GPU is there, which backend would use it and
how to get it. Standard library only; nothing here blocks for long (file reads, one `which`).
"""

from __future__ import annotations

import json
import platform
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

# PCI vendor ids of GPU makers (the `vendor` file of a display-class device in sysfs).
_VENDORS = {"0x10de": "NVIDIA", "0x1002": "AMD", "0x8086": "Intel"}


@dataclass(frozen=True)
class GpuHardware:
    vendor: str  # "NVIDIA", "AMD", "Intel", "Apple"
    evidence: str  # where it was seen: "/proc/driver/nvidia", "PCI 0000:01:00.0" ...
    backends: tuple[str, ...]  # llama.cpp backends that drive it, best first ("cuda", "vulkan")


@dataclass(frozen=True)
class UnusedGpu:
    gpu: GpuHardware
    backend: str  # the backend to build: "cuda", "vulkan", "metal"
    fix: str  # the command or step that gets a build with it

    def message(self) -> str:
        return (f"This machine has an {self.gpu.vendor} GPU ({self.gpu.evidence}), but this llama.cpp build has no "
                f"{_LABEL[self.backend]} backend, so both models run on the CPU. To use the GPU: {self.fix}")


_LABEL = {"cuda": "CUDA", "vulkan": "Vulkan", "metal": "Metal", "hip": "ROCm"}


def _pci_gpus(sysfs: Path) -> list[GpuHardware]:
    out = []
    for dev in sorted(sysfs.glob("*")):
        try:
            cls = (dev / "class").read_text().strip()
            vendor = (dev / "vendor").read_text().strip()
        except OSError:
            continue
        if not cls.startswith("0x03") or vendor not in _VENDORS:  # 0x03xxxx: display controllers
            continue
        name = _VENDORS[vendor]
        backends = ("cuda", "vulkan") if name == "NVIDIA" else ("vulkan",)
        out.append(GpuHardware(name, f"PCI {dev.name}", backends))
    return out


def find_gpus(root: Path = Path("/"), system: str | None = None, machine: str | None = None,
              which: object = shutil.which) -> list[GpuHardware]:
    """The GPUs this machine has, as far as the OS shows them (root: a fake filesystem for tests)."""
    system = system or platform.system()
    machine = (machine or platform.machine()).lower()
    if system == "Darwin":
        return [GpuHardware("Apple", "Apple silicon", ("metal",))] if machine == "arm64" else []
    gpus = _pci_gpus(root / "sys/bus/pci/devices")
    if not any(g.vendor == "NVIDIA" for g in gpus):
        if (root / "proc/driver/nvidia").exists():
            gpus.insert(0, GpuHardware("NVIDIA", "/proc/driver/nvidia", ("cuda", "vulkan")))
        elif callable(which) and which("nvidia-smi"):
            gpus.insert(0, GpuHardware("NVIDIA", "nvidia-smi", ("cuda", "vulkan")))
    return gpus


def _checkout() -> Path | None:
    """The source checkout this app runs from (bootstrap.py beside app/), if any."""
    root = Path(__file__).resolve().parents[2]
    return root if (root / "bootstrap.py").is_file() and not getattr(sys, "frozen", False) else None


def _fix(backend: str) -> str:
    checkout = _checkout()
    if checkout is not None:
        return f"run `python3 bootstrap.py run --backend {backend}` in {checkout} (it rebuilds llama.cpp once)."
    return (f"install SpecChat from its source with `python3 bootstrap.py run --backend {backend}`, which builds "
            "llama.cpp for this GPU (this package carries the CPU backends only).")


def unused_gpu(registered: tuple[str, ...], gpus: list[GpuHardware] | None = None) -> UnusedGpu | None:
    """The first GPU none of the registered backends drives, or None when the build uses the GPU (or none exists)."""
    gpus = find_gpus() if gpus is None else gpus
    have = {r.lower() for r in registered} | ({"hip"} if "ROCm" in registered else set())
    for gpu in gpus:
        if any(b in have for b in gpu.backends):
            return None  # the build has a backend for this machine's GPU
    if not gpus:
        return None
    gpu = gpus[0]
    return UnusedGpu(gpu, gpu.backends[0], _fix(gpu.backends[0]))


def build_choice(venv: Path | None = None) -> dict[str, object] | None:
    """What bootstrap found and chose when it built llama.cpp (.venv/specchat-build.json), if it did."""
    venv = venv or Path(sys.prefix)
    try:
        data = json.loads((venv / "specchat-build.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


__all__ = ["GpuHardware", "UnusedGpu", "build_choice", "find_gpus", "unused_gpu"]
