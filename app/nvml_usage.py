"""This process's memory on each NVIDIA GPU, through NVML (the optional `nvidia-ml-py`, extra
`nvidia`). llama.cpp reports what it allocated; NVML adds what the driver and CUDA runtime hold for
us, which no log line shows. Everywhere else (no NVIDIA driver, no package) the answer is None."""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class GpuProcessUse:
    index: int
    name: str
    used_bytes: int  # this process's memory on the GPU
    total_bytes: int


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
            out.append(GpuProcessUse(index, name.decode() if isinstance(name, bytes) else str(name), used, total))
        return out
    except pynvml.NVMLError:
        return None
    finally:
        pynvml.nvmlShutdown()
