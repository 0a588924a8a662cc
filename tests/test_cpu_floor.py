"""The processor floor (issue 53: never a crash on an older CPU): NumPy 2.4 and Qt 6 need x86-64-v2 and die with
SIGILL below it, so the entry points ask the CPU (CPUID) first and refuse with a message. Proved on emulated
CPUs with qemu-user, whose CPUID answers as the emulated model (its /proc/cpuinfo would be this machine's)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from app import cpu_floor

ROOT = Path(__file__).resolve().parents[1]
QEMU = shutil.which("qemu-x86_64")
X86_LINUX = sys.platform == "linux" and os.uname().machine == "x86_64"
needs_qemu = pytest.mark.skipif(not (QEMU and X86_LINUX), reason="needs qemu-user on x86-64 Linux")

# CPUID leaf 1 ECX and leaf 0x80000001 ECX of a CPU with every x86-64-v2 feature (bits 0, 9, 13, 19, 20, 23; 0).
V2_ECX = (1 << 0) | (1 << 9) | (1 << 13) | (1 << 19) | (1 << 20) | (1 << 23)


def _registers(ecx1: int, ext_ecx: int = 1) -> dict[int, tuple[int, int, int, int]]:
    return {1: (0, 0, ecx1, 0), 0x80000001: (0, 0, ext_ecx, 0)}


def test_missing_features_are_named_from_the_registers():
    assert cpu_floor.missing_features(_registers(V2_ECX)) == []
    assert cpu_floor.missing_features(_registers(V2_ECX & ~(1 << 20) & ~(1 << 23))) == ["SSE4.2", "POPCNT"]
    assert cpu_floor.missing_features(_registers(V2_ECX, ext_ecx=0)) == ["LAHF/SAHF"]
    assert cpu_floor.missing_features({}) == [name for *_, name in cpu_floor.V2_FEATURES]  # nothing answered


@pytest.mark.skipif(not X86_LINUX, reason="CPUID is asked on x86-64 Linux only")
def test_this_processor_answers_and_passes():
    registers = cpu_floor.read_cpuid((1, 0x80000001))
    assert registers is not None
    flags = Path("/proc/cpuinfo").read_text().split("flags", 1)[1].split("\n", 1)[0].split()
    assert bool((registers[1][2] >> 20) & 1) == ("sse4_2" in flags)  # CPUID says what the kernel says
    assert cpu_floor.missing_features(registers) == []
    assert cpu_floor.problem() is None
    assert cpu_floor.problem({"SPECCHAT_SKIP_CPU_CHECK": "1"}) is None


def _under(cpu: str, *args: str) -> subprocess.CompletedProcess[str]:
    assert QEMU is not None
    return subprocess.run([QEMU, "-cpu", cpu, sys.executable, *args], capture_output=True, text=True, timeout=300,
                          cwd=ROOT, env={k: v for k, v in os.environ.items() if k != "SPECCHAT_SKIP_CPU_CHECK"})


@needs_qemu
@pytest.mark.parametrize(("cpu", "missing"), [("Conroe", "CMPXCHG16B, SSE4.1, SSE4.2, POPCNT"),
                                              ("Penryn", "SSE4.2, POPCNT"),
                                              ("Opteron_G3", "SSSE3, SSE4.1, SSE4.2")])
def test_the_command_refuses_an_emulated_older_cpu_with_a_message(cpu, missing):
    # Without the check, this import of NumPy dies with SIGILL (exit -4) on these models.
    done = _under(cpu, "-c", "from ui.shell.entry import main; raise SystemExit(main(['--help']))")
    assert done.returncode == cpu_floor.EXIT_CODE, done.stderr[-2000:]
    assert f"it lacks {missing}." in done.stderr
    assert "x86-64-v2" in done.stderr


@needs_qemu
def test_an_emulated_x86_64_v2_cpu_passes_the_check():
    done = _under("Nehalem", "-c", "from app import cpu_floor; print(cpu_floor.problem())")
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "None"


@needs_qemu
def test_bootstrap_refuses_before_building():
    done = subprocess.run([QEMU, "-cpu", "Conroe", sys.executable, "bootstrap.py", "run", "--dry-run"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 1
    assert "bootstrap: SpecChat cannot run on this processor" in done.stderr
    assert "llama.cpp backend" not in done.stdout  # stopped before anything was planned
