"""The oldest x86-64 processor SpecChat runs on, checked before any library that needs it is loaded.

llama.cpp picks a CPU module by the processor's features (down to plain x86-64), but the libraries around it
do not: NumPy 2.4 and PySide6 (Qt 6) are built for x86-64-v2 (SSE3, SSSE3, SSE4.1, SSE4.2, POPCNT, CMPXCHG16B,
LAHF/SAHF: Intel since Nehalem, 2008; AMD since Bulldozer and Jaguar, 2011-13). On an older CPU (Core 2,
Athlon 64, Phenom) their import dies with "Illegal instruction" before any message can be shown, measured with
`qemu-x86_64 -cpu Conroe`. So the entry points ask the CPU itself (the CPUID instruction, through a few bytes
of machine code: /proc/cpuinfo would be the host's under qemu-user, and is absent elsewhere) and say what is
missing instead. Standard library only: this module runs before NumPy is imported.

`SPECCHAT_SKIP_CPU_CHECK=1` turns the check off; wherever it cannot decide (not x86-64 Linux, no executable
memory), it stays out of the way.
"""

from __future__ import annotations

import ctypes
import functools
import mmap
import os
import platform
import sys
from collections.abc import Callable

EXIT_CODE = 5  # distinct from a failed run (1), bad input (2), "already running" (3), a broken desktop (4)
LEVEL = "x86-64-v2"

# (CPUID leaf, register index in (eax, ebx, ecx, edx), bit, name) of every x86-64-v2 feature.
V2_FEATURES = (
    (1, 2, 0, "SSE3"),
    (1, 2, 9, "SSSE3"),
    (1, 2, 13, "CMPXCHG16B"),
    (1, 2, 19, "SSE4.1"),
    (1, 2, 20, "SSE4.2"),
    (1, 2, 23, "POPCNT"),
    (0x80000001, 2, 0, "LAHF/SAHF"),
)

# System V x86-64: cpuid(leaf=edi, subleaf=esi, out=rdx) stores eax, ebx, ecx, edx at out[0..3].
_CPUID_CODE = bytes([
    0x53,                    # push rbx (callee-saved; cpuid writes it)
    0x89, 0xF8,              # mov eax, edi
    0x89, 0xF1,              # mov ecx, esi
    0x49, 0x89, 0xD0,        # mov r8, rdx
    0x0F, 0xA2,              # cpuid
    0x41, 0x89, 0x00,        # mov [r8], eax
    0x41, 0x89, 0x58, 0x04,  # mov [r8+4], ebx
    0x41, 0x89, 0x48, 0x08,  # mov [r8+8], ecx
    0x41, 0x89, 0x50, 0x0C,  # mov [r8+12], edx
    0x5B,                    # pop rbx
    0xC3,                    # ret
])


def _x86_64_linux() -> bool:
    return sys.platform.startswith("linux") and platform.machine().lower() in ("x86_64", "amd64")


@functools.cache  # the bundle checks twice in one process (its runtime hook, then ui.shell.entry): ask once
def read_cpuid(leaves: tuple[int, ...]) -> dict[int, tuple[int, int, int, int]] | None:
    """(eax, ebx, ecx, edx) of each leaf, asked of the processor; None where that cannot be done here. The dict is
    shared between callers: read it, never change it."""
    if not _x86_64_linux():
        return None
    try:
        page = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    except (OSError, ValueError):  # a hardened kernel may refuse writable executable memory
        return None
    try:
        page.write(_CPUID_CODE)
        buffer = ctypes.c_char.from_buffer(page)
        func = ctypes.CFUNCTYPE(None, ctypes.c_uint32, ctypes.c_uint32, ctypes.POINTER(ctypes.c_uint32))(
            ctypes.addressof(buffer))
        out = (ctypes.c_uint32 * 4)()
        highest = {}
        for base in (0, 0x80000000):  # a leaf above the highest one supported returns another leaf's data
            func(base, 0, out)
            highest[base] = out[0]
        result = {}
        for leaf in leaves:
            base = leaf & 0x80000000
            if leaf > highest[base]:
                result[leaf] = (0, 0, 0, 0)
                continue
            func(leaf, 0, out)
            result[leaf] = (out[0], out[1], out[2], out[3])
        del func, buffer  # the exported pointer must go before the mapping can close
        return result
    finally:
        try:
            page.close()
        except BufferError:
            pass


def missing_features(registers: dict[int, tuple[int, int, int, int]]) -> list[str]:
    """The x86-64-v2 features the given CPUID registers lack, in V2_FEATURES' order."""
    return [name for leaf, reg, bit, name in V2_FEATURES if not (registers.get(leaf, (0, 0, 0, 0))[reg] >> bit) & 1]


def problem(env: dict[str, str] | None = None) -> str | None:
    """The message for a processor the shipped libraries cannot run on; None when it can (or it is unknown)."""
    env = dict(os.environ) if env is None else env
    if env.get("SPECCHAT_SKIP_CPU_CHECK") == "1":
        return None
    registers = read_cpuid(tuple(sorted({leaf for leaf, _, _, _ in V2_FEATURES})))
    if registers is None:
        return None
    missing = missing_features(registers)
    if not missing:
        return None
    return (f"SpecChat cannot run on this processor: it lacks {', '.join(missing)}.\n"
            f"SpecChat needs an {LEVEL} processor (Intel since Nehalem, 2008; AMD since Bulldozer and Jaguar, "
            "2011-13): NumPy and Qt, which it is built on, use these instructions and would stop with "
            "'Illegal instruction'.")


def refuse_if_too_old(show: Callable[[str], object] | None = None) -> int:
    """0 to go on; else the message is on stderr (and passed to `show`, the GUI's desktop dialog) and the exit
    code."""
    text = problem()
    if text is None:
        return 0
    print(text, file=sys.stderr, flush=True)
    if show is not None:
        show(text)
    return EXIT_CODE
