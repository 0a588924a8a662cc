"""This process's memory on each NVIDIA GPU, through NVML (the optional `nvidia-ml-py`, extra
`nvidia`). llama.cpp reports what it allocated; NVML adds what the driver and CUDA runtime hold for
us, which no log line shows: the difference is the runtime overhead the memory meter predicts.
Everywhere else (no NVIDIA driver, no package) the answer is None, or an empty mapping."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from app.memory.fit import DeviceLike


@dataclass(frozen=True)
class GpuProcessUse:
    index: int
    name: str
    used_bytes: int  # this process's memory on the GPU
    total_bytes: int
    pci_bus_id: str = ""  # normalised like ggml's device_id: "0000:c1:00.0"


class PciDevice(DeviceLike, Protocol):
    @property
    def device_id(self) -> str | None: ...


_BUS_ID = re.compile(r"^([0-9a-fA-F]+):([0-9a-fA-F]+):([0-9a-fA-F]+)\.([0-7])$")


def normalize_bus_id(bus_id: str) -> str:
    """NVML's "00000000:C1:00.0" and CUDA's "0000:c1:00.0" as one form; "" when it is not a PCI id."""
    m = _BUS_ID.match(bus_id.strip())
    if not m:
        return ""
    domain, bus, dev, fn = m.groups()
    return f"{int(domain, 16):04x}:{int(bus, 16):02x}:{int(dev, 16):02x}.{fn}"


def process_gpu_memory(pid: int | None = None) -> list[GpuProcessUse] | None:
    try:
        import pynvml  # type: ignore[import-not-found]
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return None
    pid = os.getpid() if pid is None else pid
    try:
        out = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            name = pynvml.nvmlDeviceGetName(handle)
            procs = list(pynvml.nvmlDeviceGetComputeRunningProcesses(handle))
            procs += list(pynvml.nvmlDeviceGetGraphicsRunningProcesses(handle))
            used = sum(p.usedGpuMemory or 0 for p in procs if p.pid == pid)
            total = int(pynvml.nvmlDeviceGetMemoryInfo(handle).total)
            bus = pynvml.nvmlDeviceGetPciInfo(handle).busId
            out.append(
                GpuProcessUse(
                    index,
                    _str(name),
                    used,
                    total,
                    normalize_bus_id(_str(bus)),
                )
            )
        return out
    except pynvml.NVMLError:
        return None
    finally:
        pynvml.nvmlShutdown()


def _str(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def match_devices(devices: Iterable[PciDevice], uses: Iterable[GpuProcessUse]) -> dict[str, GpuProcessUse]:
    """llama.cpp device name -> NVML's reading of the same GPU, matched by PCI bus id.

    CUDA and NVML number GPUs differently (fastest first vs bus order), so indexes are not trusted;
    only a lone CUDA device beside a lone NVIDIA GPU is matched without an id.
    """
    gpus = [d for d in devices if d.type in ("gpu", "igpu")]
    uses = list(uses)
    by_bus = {u.pci_bus_id: u for u in uses if u.pci_bus_id}
    out: dict[str, GpuProcessUse] = {}
    for d in gpus:
        bus = normalize_bus_id(d.device_id or "")
        if bus in by_bus:
            out[d.name] = by_bus[bus]
    cuda = [d for d in gpus if d.name.startswith("CUDA")]
    if not out and len(cuda) == 1 and len(uses) == 1 and not cuda[0].device_id:
        out[cuda[0].name] = uses[0]
    return out


def process_use_by_device(devices: Iterable[PciDevice]) -> dict[str, int]:
    """This process's bytes per llama.cpp GPU device, as NVML sees them ({} without NVML)."""
    uses = process_gpu_memory()
    if not uses:
        return {}
    return {name: u.used_bytes for name, u in match_devices(devices, uses).items()}
