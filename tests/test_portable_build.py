"""The portable llama.cpp build (issue 53): backend modules loaded by the app, the CPU variant chosen by
the processor's features (proved on emulated older CPUs with qemu-user), a GPU the build cannot use
named with its fix, and the wheel slimmed to one copy of each library with no AMX variant."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from app.llama_backend import backend_modules, loaded_backends
from app.llama_backend.gpu_hint import GpuHardware, find_gpus, unused_gpu

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "packaging"))
import slim_wheel  # noqa: E402

QEMU = shutil.which("qemu-x86_64")
X86 = sys.platform == "linux" and os.uname().machine == "x86_64"


def test_module_names_are_backends_only():
    assert backend_modules.module_name("libggml-cpu-haswell.so") == "cpu-haswell"
    assert backend_modules.module_name("libggml-cuda.so") == "cuda"
    assert backend_modules.module_name("ggml-vulkan.dll") == "vulkan"
    assert backend_modules.module_name("libggml-base.so") is None  # linked, not a backend
    assert backend_modules.module_name("libggml-base.so.0") is None
    assert backend_modules.module_name("libllama.so") is None


def test_the_installed_build_loads_its_cpu_module_by_this_cpus_features():
    loaded = loaded_backends()
    assert "CPU" in loaded.registered
    if not loaded.dynamic:
        pytest.skip(f"this llama.cpp has its backends built in ({loaded.describe()}); bootstrap builds portable ones")
    assert loaded.cpu_variant is not None, loaded
    assert f"libggml-cpu-{loaded.cpu_variant}.so" in loaded.modules
    assert "libggml-cpu-sapphirerapids.so" not in loaded.modules  # the AMX variant is never shipped
    assert "libggml-cpu-x64.so" in loaded.modules  # the variant every x86-64 CPU can run
    assert f"CPU variant {loaded.cpu_variant}" in loaded.describe()
    flags = Path("/proc/cpuinfo").read_text().split("flags", 1)[1].split("\n", 1)[0].split()
    expect = "haswell" if {"avx2", "fma", "f16c", "bmi2"} <= set(flags) and "avx512f" not in flags else None
    if expect and "avx_vnni" not in flags:
        assert loaded.cpu_variant == expect


def _venv_python_under(cpu: str, code: str) -> subprocess.CompletedProcess[str]:
    # The venv's python is a symlink to the base interpreter; qemu runs the real file with the venv's
    # sys.prefix taken from pyvenv.cfg beside argv[0], as a native start would.
    return subprocess.run([QEMU, "-cpu", cpu, sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=600, cwd=ROOT)


@pytest.mark.skipif(not (QEMU and X86), reason="needs qemu-user (apt-get install qemu-user) on x86-64 Linux")
@pytest.mark.parametrize(("cpu", "variant"), [("Haswell", "haswell"), ("Nehalem", "sse42")])
def test_an_older_cpu_gets_its_own_variant_and_no_sigill(cpu, variant):
    """Emulated CPUs without AVX-512 (Haswell) and without AVX at all (Nehalem) pick the module made for
    them and run a decode step; a native (-march=native) build dies here with SIGILL (signal 4)."""
    if not loaded_backends().dynamic:
        pytest.skip("this llama.cpp build is not portable (no backend modules)")
    code = ("from app.llama_backend import loaded_backends, system_info; b = loaded_backends(); "
            "print(b.cpu_variant); print(system_info())")
    proc = _venv_python_under(cpu, code)
    assert proc.returncode == 0, f"exit {proc.returncode} under -cpu {cpu}: {proc.stderr[-2000:]}"
    assert proc.stdout.split()[0] == variant, proc.stdout
    if cpu == "Nehalem":
        assert "AVX = 1" not in proc.stdout and "AVX2 = 1" not in proc.stdout


@pytest.mark.skipif(not (QEMU and X86), reason="needs qemu-user (apt-get install qemu-user) on x86-64 Linux")
def test_the_self_test_generates_on_an_emulated_cpu_without_avx(smol_path):
    if not loaded_backends().dynamic:
        pytest.skip("this llama.cpp build is not portable (no backend modules)")
    code = ("import sys; from app.cli.selftest import run_selftest; "
            f"sys.exit(run_selftest({str(smol_path)!r}, n_predict=4))")
    proc = _venv_python_under("Nehalem", code)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "self-test OK" in proc.stdout and "CPU variant sse42" in proc.stdout, proc.stdout


def test_doctor_json_names_the_variant_and_the_backends():
    proc = subprocess.run([sys.executable, "-m", "app.cli", "doctor", "--json"], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    loaded = loaded_backends()
    assert data["cpu_variant"] == loaded.cpu_variant
    assert data["backend_dl"] is loaded.dynamic
    assert "CPU" in data["backends"]
    assert set(data) >= {"backend_modules", "backends_failed", "unused_gpu", "build_choice"}


def _fake_pci(root: Path, vendor: str, cls: str = "0x030000") -> None:
    dev = root / "sys/bus/pci/devices/0000:01:00.0"
    dev.mkdir(parents=True)
    (dev / "vendor").write_text(vendor + "\n")
    (dev / "class").write_text(cls + "\n")


def test_a_gpu_the_build_cannot_drive_is_named_with_its_fix(tmp_path):
    _fake_pci(tmp_path, "0x10de")
    gpus = find_gpus(tmp_path, "Linux", "x86_64", which=lambda _name: None)
    assert [g.vendor for g in gpus] == ["NVIDIA"]
    hint = unused_gpu(("CPU", "RPC"), gpus)
    assert hint is not None and hint.backend == "cuda"
    assert "NVIDIA" in hint.message() and "--backend cuda" in hint.message() and "CUDA" in hint.message()
    assert unused_gpu(("CPU", "RPC", "CUDA"), gpus) is None  # the build drives it
    assert unused_gpu(("CPU", "Vulkan"), gpus) is None  # Vulkan drives an NVIDIA card too
    assert unused_gpu(("CPU", "RPC"), []) is None  # no GPU: nothing to say


def test_amd_gpus_want_vulkan_and_other_display_devices_are_no_gpus(tmp_path):
    _fake_pci(tmp_path / "amd", "0x1002")
    hint = unused_gpu(("CPU",), find_gpus(tmp_path / "amd", "Linux", "x86_64", which=lambda _n: None))
    assert hint is not None and hint.backend == "vulkan" and "AMD" in hint.message()
    _fake_pci(tmp_path / "vm", "0x1234")  # QEMU's virtual VGA
    assert find_gpus(tmp_path / "vm", "Linux", "x86_64", which=lambda _n: None) == []
    _fake_pci(tmp_path / "net", "0x10de", cls="0x020000")  # an NVIDIA network card is no GPU
    assert find_gpus(tmp_path / "net", "Linux", "x86_64", which=lambda _n: None) == []
    (tmp_path / "drv/proc/driver/nvidia").mkdir(parents=True)
    assert find_gpus(tmp_path / "drv", "Linux", "x86_64", which=lambda _n: None) == [
        GpuHardware("NVIDIA", "/proc/driver/nvidia", ("cuda", "vulkan"))]
    assert [g.backends for g in find_gpus(tmp_path, "Darwin", "arm64")] == [("metal",)]


def test_the_picker_and_banner_say_so_instead_of_no_gpu_found(tmp_path):
    from app.memory.predict import BuildSpec

    _fake_pci(tmp_path, "0x10de")
    hint = unused_gpu(("CPU",), find_gpus(tmp_path, "Linux", "x86_64", which=lambda _n: None))
    assert hint is not None
    pytest.importorskip("PySide6")
    from ui.shell.spec_banner import BannerChoice, SpecState, banner_message

    message = banner_message(SpecState("lookup", False, gpu_note=hint.message()))
    assert message is not None and "GPU unused" in message[0] and "bootstrap.py run --backend cuda" in message[0]
    assert message[2] == ("Choose a draft…", BannerChoice.CHOOSE_MODELS)  # the speculation message's action stays
    assert BuildSpec(gpu_note=hint.message()).gpu_note.startswith("This machine has an NVIDIA GPU")


def _wheel(path: Path, names: list[str]) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        for name in names:
            z.writestr(name, "x" if not name.endswith("RECORD") else "\n".join(f"{n},sha256=abc,1" for n in names))
    return path


def test_slim_wheel_keeps_one_copy_moves_modules_and_drops_amx(tmp_path):
    names = ["llama_cpp/__init__.py", "llama_cpp/lib/libllama.so", "llama_cpp/lib/libllama.so.0",
             "llama_cpp/lib/libllama.so.0.0.1", "llama_cpp/lib/libggml-base.so", "llama_cpp/lib/libggml-base.so.0",
             "llama_cpp/lib/libggml-base.so.0.9.4", "llama_cpp/lib/libggml.so", "llama_cpp/lib/libggml.so.0",
             "llama_cpp/lib/libggml-rpc.so", "bin/libggml-rpc.so", "bin/libggml-cpu-x64.so",
             "bin/libggml-cpu-haswell.so", "bin/libggml-cpu-sapphirerapids.so", "lib/libllama.so.0",
             "bin/libggml-base.so", "include/llama.h", "llama_cpp_python-0.3.36.dist-info/RECORD"]
    wheel = _wheel(tmp_path / "llama_cpp_python-0.3.36-py3-none-linux_x86_64.whl", names)
    slim_wheel.slim(wheel)
    with zipfile.ZipFile(wheel) as z:
        kept = set(z.namelist())
        record = z.read("llama_cpp_python-0.3.36.dist-info/RECORD").decode()
    assert kept == {"llama_cpp/__init__.py", "llama_cpp/lib/libllama.so", "llama_cpp/lib/libllama.so.0",
                    "llama_cpp/lib/libggml-base.so.0", "llama_cpp/lib/libggml.so", "llama_cpp/lib/libggml.so.0",
                    "llama_cpp/lib/libggml-rpc.so", "llama_cpp/lib/libggml-cpu-x64.so",
                    "llama_cpp/lib/libggml-cpu-haswell.so", "llama_cpp_python-0.3.36.dist-info/RECORD"}
    assert {ln.split(",")[0] for ln in record.splitlines()} == kept  # pip uninstalls exactly what is there
