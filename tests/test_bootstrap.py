"""bootstrap.py: the backend it detects and chooses, the prerequisites it checks before any long step,
the install stamp that makes a later `run` a launcher, the repair of a half-made .venv, the build's
progress line, and a launch with the network cut.

The machine is faked: a PATH holding only fake executables, system paths re-rooted in a temporary
folder (SPECCHAT_BOOTSTRAP_SYSROOT), the venv and the wheel cache in it too. `--dry-run` prints the
plan after the real checks and creates nothing. Standard library, pytest and bootstrap only.
"""

from __future__ import annotations

import io
import json
import os
import platform
import shutil
import subprocess
import sys
import time
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
import bootstrap  # noqa: E402

pytestmark = pytest.mark.skipif(
    platform.system() != "Linux", reason="the fake machines are Linux ones (PATH scripts, /proc, /dev/dri)"
)

DEBIAN = 'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\nVERSION_ID="12"\n'
FEDORA = 'NAME="Fedora Linux"\nID=fedora\nVERSION_ID=40\n'
VULKAN_CORE = "#define VK_HEADER_VERSION 309\n#define VK_HEADER_VERSION_COMPLETE VK_MAKE_API_VERSION(0, 1, 4, 309)\n"


class Machine:
    """A fake machine in a temporary folder: tools on PATH, system files, a venv and a cache place."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.bin = tmp / "bin"
        self.root = tmp / "root"
        self.venv = tmp / "venv"
        self.cache = tmp / "cache"
        self.home = tmp / "home"
        for d in (self.bin, self.root, self.home):
            d.mkdir()
        self.file("/etc/os-release", DEBIAN)
        self.tools("cc", "c++")  # a compiler: most tests are about the GPU, not about this

    def tools(self, *names: str) -> None:
        for name in names:
            path = self.bin / name
            path.write_text("#!/bin/sh\nexit 0\n")
            path.chmod(0o755)

    def remove_tools(self, *names: str) -> None:
        for name in names:
            (self.bin / name).unlink()

    def file(self, path: str, text: str = "") -> Path:
        target = self.root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        return target

    def vulkan_sdk(self) -> None:
        """glslc and new enough Vulkan headers: what a Vulkan build needs."""
        self.tools("glslc")
        self.file("/usr/include/vulkan/vulkan.h", "#include \"vulkan_core.h\"\n")
        self.file("/usr/include/vulkan/vulkan_core.h", VULKAN_CORE)

    def env(self, **extra: str) -> dict[str, str]:
        env = {
            "PATH": str(self.bin),
            "HOME": str(self.home),
            "XDG_CACHE_HOME": str(self.cache),
            "SPECCHAT_VENV": str(self.venv),
            "SPECCHAT_BOOTSTRAP_SYSROOT": str(self.root),
            "SPECCHAT_HOME": str(self.home / "specchat"),
            "LANG": "C.UTF-8",
        }
        env.update(extra)
        return env

    def bootstrap(self, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        result = subprocess.run([sys.executable, str(ROOT / "bootstrap.py"), *args], cwd=ROOT, env=self.env(**extra),
                                capture_output=True, text=True, timeout=120)
        result.output = result.stdout + result.stderr  # type: ignore[attr-defined]
        result.text = " ".join(result.stdout.split())  # type: ignore[attr-defined]  # the paragraph, unwrapped
        return result


@pytest.fixture
def machine(tmp_path: Path) -> Machine:
    return Machine(tmp_path)


def plan(result: subprocess.CompletedProcess[str]) -> dict[str, str]:
    """The `key: value` lines of --dry-run's plan."""
    lines = result.stdout.split("plan (--dry-run", 1)[1].splitlines()[1:]
    return {k.strip(): v.strip() for k, _, v in (ln.partition(":") for ln in lines if ln.startswith("    "))}


def build_info(result: subprocess.CompletedProcess[str]) -> dict[str, object]:
    return json.loads(plan(result)["build info"])


def created_nothing(m: Machine) -> bool:
    return not m.venv.exists() and not m.cache.exists() and not (m.home / "specchat").exists()


# --- the backend ------------------------------------------------------------------------------------


def test_an_nvidia_gpu_with_its_toolkit_gets_a_cuda_build(machine):
    machine.tools("nvidia-smi", "nvcc")
    result = machine.bootstrap("run", "--dry-run")
    assert result.returncode == 0, result.output
    assert "Chose cuda" in result.text
    assert plan(result)["backend"] == "cuda"
    assert plan(result)["CMAKE_ARGS"] == bootstrap.LLAMA_CMAKE_ARGS + " -DGGML_CUDA=on"
    assert build_info(result) == {"backend": "cuda", "gpu_found": "NVIDIA (nvidia-smi)", "missing": [],
                                  "rebuild": None, "cmake_args": bootstrap.LLAMA_CMAKE_ARGS + " -DGGML_CUDA=on"}
    assert created_nothing(machine)


def test_an_nvidia_gpu_without_the_toolkit_names_the_package_and_builds_for_the_cpu(machine):
    machine.tools("nvidia-smi")
    result = machine.bootstrap("run", "--dry-run")
    assert result.returncode == 0, result.output
    assert "nvidia-cuda-toolkit" in result.text  # this Debian's package
    assert "Building for the CPU only" in result.text
    assert plan(result)["backend"] == "cpu"
    assert plan(result)["CMAKE_ARGS"] == bootstrap.LLAMA_CMAKE_ARGS
    info = build_info(result)
    assert info["gpu_found"] == "NVIDIA (nvidia-smi)"
    assert info["missing"] == ["nvidia-cuda-toolkit"]
    assert info["rebuild"] == "python3 bootstrap.py run --backend cuda"
    # The toolkit in the usual place, not on PATH, counts.
    machine.file("/usr/local/cuda/bin/nvcc")
    assert plan(machine.bootstrap("run", "--dry-run"))["backend"] == "cuda"


def test_the_cuda_package_is_named_for_the_distribution(machine):
    machine.tools("nvidia-smi")
    machine.file("/etc/os-release", FEDORA)
    result = machine.bootstrap("run", "--dry-run")
    assert "dnf install cuda-toolkit" in result.text
    assert build_info(result)["missing"] == ["cuda-toolkit"]


def test_the_nvidia_driver_alone_is_found_too(machine):
    machine.file("/proc/driver/nvidia/version", "NVRM version: 550\n")
    result = machine.bootstrap("run", "--dry-run")
    assert build_info(result)["gpu_found"] == "NVIDIA (/proc/driver/nvidia)"
    assert plan(result)["backend"] == "cpu"


def test_backend_cpu_overrides_the_detection_and_is_remembered(machine):
    machine.tools("nvidia-smi", "nvcc")
    result = machine.bootstrap("run", "--backend", "cpu", "--dry-run")
    assert result.returncode == 0, result.output
    assert plan(result)["backend"] == "cpu"
    assert plan(result)["CMAKE_ARGS"] == bootstrap.LLAMA_CMAKE_ARGS
    assert "the detection would have chosen cuda" in result.text
    # The app learns that this build leaves the GPU idle, and how to change that.
    assert build_info(result)["rebuild"] == "python3 bootstrap.py run --backend cuda"
    assert build_info(result)["missing"] == []
    # A later plain `run` keeps the choice a real run recorded in the stamp; `--backend auto` drops it.
    write_stamp(machine, backend="cpu", requested="cpu")
    later = machine.bootstrap("run", "--dry-run")
    assert plan(later)["backend"] == "cpu" and "earlier run" in later.text
    assert plan(later)["pip would run"].startswith("no")
    assert plan(machine.bootstrap("run", "--backend", "auto", "--dry-run"))["backend"] == "cuda"


def test_a_gpu_backend_whose_toolkit_is_missing_is_refused_before_anything(machine):
    result = machine.bootstrap("run", "--backend", "cuda", "--dry-run")
    assert result.returncode != 0
    assert "nvidia-cuda-toolkit" in result.stderr
    assert created_nothing(machine)
    assert machine.bootstrap("run", "--backend", "metal", "--dry-run").returncode != 0  # not on Linux


def test_cmake_args_override_everything(machine):
    machine.tools("nvidia-smi", "nvcc")
    user = "-DGGML_CUDA=on -DLLAVA_BUILD=OFF -DCMAKE_CUDA_ARCHITECTURES=89"
    result = machine.bootstrap("run", "--backend", "cpu", "--dry-run", CMAKE_ARGS=user)
    assert result.returncode == 0, result.output
    assert "CMAKE_ARGS is set, and it overrides the detection and --backend cpu" in result.text
    args = plan(result)["CMAKE_ARGS"]
    assert args.startswith(user + " -DGGML_RPC=ON")  # RPC is always in
    assert "GGML_BACKEND_DL" not in args  # theirs, not ours
    assert plan(result)["backend"] == "cuda"


def test_a_custom_build_stays_until_another_choice(machine, monkeypatch):
    """A later plain `run` launches the build made with CMAKE_ARGS; it does not rebuild for the detection."""
    user = "-DGGML_VULKAN=on -DLLAVA_BUILD=OFF"
    monkeypatch.setenv("CMAKE_ARGS", user)
    args = bootstrap.cmake_args()
    monkeypatch.delenv("CMAKE_ARGS")
    bare_venv(machine.venv, with_pip=True)
    data = {**bootstrap.wanted_stamp("vulkan", args, []), "requested": None, "requested_cmake_args": user}
    (machine.venv / bootstrap.STAMP).write_text(json.dumps(data))
    later = machine.bootstrap("run", "--dry-run")
    assert later.returncode == 0, later.output
    assert plan(later)["pip would run"].startswith("no")
    assert plan(later)["CMAKE_ARGS"] == args + "   (from your CMAKE_ARGS)"
    detected = machine.bootstrap("run", "--backend", "auto", "--dry-run")
    assert plan(detected)["CMAKE_ARGS"] == bootstrap.LLAMA_CMAKE_ARGS
    assert "CMAKE_ARGS changed" in plan(detected)["pip would run"]
    assert plan(machine.bootstrap("run", "--dry-run", CMAKE_ARGS=""))["CMAKE_ARGS"] == bootstrap.LLAMA_CMAKE_ARGS


def test_mesa_software_vulkan_is_not_a_gpu(machine):
    machine.vulkan_sdk()
    machine.file("/usr/share/vulkan/icd.d/lvp_icd.x86_64.json", "{}")
    machine.file("/dev/dri/renderD128")
    result = machine.bootstrap("run", "--dry-run")
    assert plan(result)["backend"] == "cpu"
    assert build_info(result)["gpu_found"] is None
    # The same machine with a hardware driver beside it: a Vulkan GPU, and everything to build for it.
    machine.file("/usr/share/vulkan/icd.d/radeon_icd.x86_64.json", "{}")
    result = machine.bootstrap("run", "--dry-run")
    assert plan(result)["backend"] == "vulkan"
    assert plan(result)["CMAKE_ARGS"] == bootstrap.LLAMA_CMAKE_ARGS + " -DGGML_VULKAN=on"
    assert "radeon_icd" in str(build_info(result)["gpu_found"])


def test_a_mesa_driver_manifest_without_a_gpu_device_is_not_a_gpu(machine):
    machine.vulkan_sdk()
    machine.file("/usr/share/vulkan/icd.d/intel_icd.x86_64.json", "{}")  # mesa-vulkan-drivers installs all
    assert plan(machine.bootstrap("run", "--dry-run"))["backend"] == "cpu"


def test_a_vulkan_gpu_without_glslc_names_the_packages(machine):
    machine.file("/etc/vulkan/icd.d/intel_icd.x86_64.json", "{}")
    machine.file("/dev/dri/renderD128")
    result = machine.bootstrap("run", "--dry-run")
    assert plan(result)["backend"] == "cpu"
    assert "glslc libvulkan-dev" in result.text
    assert build_info(result)["missing"] == ["glslc", "libvulkan-dev"]
    assert build_info(result)["rebuild"] == "python3 bootstrap.py run --backend vulkan"


def test_vulkan_headers_too_old_for_this_llama_cpp_do_not_count(machine):
    machine.vulkan_sdk()
    machine.file("/usr/include/vulkan/vulkan_core.h", "#define VK_HEADER_VERSION 239\n")  # Debian 12's
    machine.file("/usr/share/vulkan/icd.d/radeon_icd.x86_64.json", "{}")
    machine.file("/dev/dri/renderD128")
    result = machine.bootstrap("run", "--dry-run")
    assert plan(result)["backend"] == "cpu"
    assert "newer than 1.3.239" in result.text


# --- prerequisites ----------------------------------------------------------------------------------


def test_a_missing_compiler_is_one_message_before_anything_is_created(machine):
    machine.remove_tools("cc", "c++")
    for args in (["run", "--dry-run"], ["run"], ["test"]):
        result = machine.bootstrap(*args)
        assert result.returncode != 0, args
        assert result.stderr.count("bootstrap:") == 1, result.stderr
        assert "a C and C++ compiler" in result.stderr
        assert "apt install build-essential" in result.stderr
        assert "pip install" not in result.output
        assert created_nothing(machine), args


def test_no_compiler_is_needed_when_the_wheel_is_cached(machine, monkeypatch):
    machine.remove_tools("cc", "c++")
    monkeypatch.setenv("XDG_CACHE_HOME", str(machine.cache))
    monkeypatch.delenv("CMAKE_ARGS", raising=False)
    wheels = bootstrap.llama_wheel_dir(bootstrap.LLAMA_CMAKE_ARGS)
    wheels.mkdir(parents=True)
    (wheels / f"llama_cpp_python-{bootstrap.llama_pin()}-cp311-cp311-linux_x86_64.whl").write_bytes(b"")
    result = machine.bootstrap("run", "--dry-run")
    assert result.returncode == 0, result.output
    assert plan(result)["llama build"].startswith("no")
    assert "holds llama_cpp_python-" in plan(result)["wheel cache"]


def test_missing_venv_support_joins_the_compiler_in_one_command(monkeypatch):
    monkeypatch.setattr(bootstrap, "venv_supported", lambda: False)
    monkeypatch.setattr(bootstrap, "compiler_missing", lambda system=None: True)
    monkeypatch.setattr(bootstrap, "distro", lambda system=None: "debian")
    message = bootstrap.prerequisite_problem(bootstrap.Finding("cpu"), need_venv=True, need_build=True)
    assert message is not None
    assert f"install build-essential python3.{sys.version_info[1]}-venv" in message
    assert bootstrap.prerequisite_problem(bootstrap.Finding("cpu"), need_venv=False, need_build=False) is None
    monkeypatch.setattr(bootstrap, "distro", lambda system=None: "fedora")
    assert "dnf install gcc-c++ python3" in bootstrap.prerequisite_problem(bootstrap.Finding("cpu"), True, True)
    monkeypatch.setattr(bootstrap, "distro", lambda system=None: "macos")
    assert "xcode-select --install" in bootstrap.prerequisite_problem(bootstrap.Finding("cpu"), False, True)


# --- the half-made venv -------------------------------------------------------------------------------


def bare_venv(path: Path, with_pip: bool) -> None:
    """A venv in a second: without ensurepip; `import pip` satisfied by an empty package if asked."""
    venv.EnvBuilder(with_pip=False, symlinks=os.name != "nt").create(path)
    if with_pip:
        site = bootstrap.site_packages(path)
        assert site is not None
        (site / "pip").mkdir()
        (site / "pip" / "__init__.py").write_text("")


def test_the_venv_checks_tell_a_working_venv_from_half_made_ones(tmp_path):
    assert bootstrap.venv_problem(tmp_path / "none") == "missing"
    bare_venv(tmp_path / "ok", with_pip=True)
    assert bootstrap.venv_problem(tmp_path / "ok") is None
    bare_venv(tmp_path / "nopip", with_pip=False)  # what Debian leaves when ensurepip is missing
    assert bootstrap.venv_problem(tmp_path / "nopip") == "it has no pip"
    (tmp_path / "nopython").mkdir()
    (tmp_path / "nopython" / "pyvenv.cfg").write_text("home = /nowhere\n")
    assert "no Python" in str(bootstrap.venv_problem(tmp_path / "nopython"))
    broken = tmp_path / "broken"
    bare_venv(broken, with_pip=True)
    bootstrap.venv_python(broken).unlink()
    bootstrap.venv_python(broken).symlink_to(tmp_path / "gone" / "python3")  # the system Python went
    assert "no Python" in str(bootstrap.venv_problem(broken))


def test_a_half_made_venv_is_removed_and_made_again(tmp_path, capsys):
    half = tmp_path / "venv"
    bare_venv(half, with_pip=False)
    (half / "leftover").mkdir()  # from the failed attempt: not in a venv's usual layout, but pyvenv.cfg is there
    made: list[Path] = []

    def create(path: Path) -> None:
        made.append(path)
        bare_venv(path, with_pip=True)

    bootstrap.ensure_venv(half, create)
    assert made == [half]
    assert not (half / "leftover").exists()
    assert bootstrap.venv_problem(half) is None
    assert "half-made (it has no pip): removing it and creating it again" in capsys.readouterr().out
    bootstrap.ensure_venv(half, create)  # a working one is left alone
    assert made == [half]


def test_a_folder_that_is_not_a_venv_is_never_removed(tmp_path):
    other = tmp_path / "venv"
    other.mkdir()
    (other / "my-notes.txt").write_text("keep me")
    with pytest.raises(SystemExit, match="not a virtual environment"):
        bootstrap.ensure_venv(other, lambda p: None)
    assert (other / "my-notes.txt").read_text() == "keep me"


def test_a_failed_creation_leaves_nothing_and_names_the_package(tmp_path, monkeypatch):
    monkeypatch.setattr(bootstrap, "distro", lambda system=None: "debian")

    def fail(path: Path) -> None:
        path.mkdir()
        raise subprocess.CalledProcessError(1, ["python", "-m", "ensurepip"])

    with pytest.raises(SystemExit, match=f"python3.{sys.version_info[1]}-venv"):
        bootstrap.ensure_venv(tmp_path / "venv", fail)
    assert not (tmp_path / "venv").exists()


# --- the install stamp --------------------------------------------------------------------------------


def stamp(**changes: object) -> dict[str, object]:
    base = bootstrap.wanted_stamp("cpu", bootstrap.LLAMA_CMAKE_ARGS, [])
    return {**base, **changes}


def test_the_stamp_decides_between_install_and_launch():
    want_run = stamp()
    want_test = stamp(extras=["dev", "test"])
    assert bootstrap.stamp_changes(want_run, want_run) == []
    assert bootstrap.stamp_changes(want_test, want_run) == []  # a test install serves run
    assert bootstrap.stamp_changes(want_run, want_test) == ["the extras [dev,test] are not installed yet"]
    assert bootstrap.stamp_changes(None, want_run) == ["not installed yet"]
    assert bootstrap.stamp_changes({**want_run, "requested": "cpu"}, want_run) == []  # a preference only
    for key, value, words in (
        ("pyproject", "0" * 64, "pyproject.toml changed"),
        ("llama_pin", "0.3.1", "pin changed"),
        ("backend", "cuda", "backend changed (cuda -> cpu)"),
        ("cmake_args", "-DGGML_RPC=ON", "CMAKE_ARGS changed"),
        ("python", "3.10", "Python version changed"),
    ):
        [reason] = bootstrap.stamp_changes({**want_run, key: value}, want_run)
        assert words in reason


def write_stamp(m: Machine, backend: str = "cpu", extras: tuple[str, ...] = (), **extra: object) -> None:
    """An installed venv as far as the stamp goes: the venv runs, the stamp matches."""
    if not m.venv.exists():
        bare_venv(m.venv, with_pip=True)
    args = bootstrap.backend_cmake_args(backend)
    data = {**bootstrap.wanted_stamp(backend, args, extras), **extra}
    (m.venv / bootstrap.STAMP).write_text(json.dumps(data))


def test_an_up_to_date_stamp_means_no_pip_and_a_change_means_install(machine):
    write_stamp(machine)
    assert plan(machine.bootstrap("run", "--dry-run"))["pip would run"] == "no (installed and up to date)"
    # `test` needs its extras; a `test` install serves a later `run`.
    assert "extras [dev,test]" in plan(machine.bootstrap("test", "--dry-run"))["pip would run"]
    write_stamp(machine, extras=("dev", "test"))
    assert plan(machine.bootstrap("run", "--dry-run"))["pip would run"].startswith("no")
    # A new GPU toolkit changes the backend chosen: that is an install.
    machine.tools("nvidia-smi", "nvcc")
    assert "backend changed (cpu -> cuda)" in plan(machine.bootstrap("run", "--dry-run"))["pip would run"]
    machine.remove_tools("nvidia-smi", "nvcc")
    # A venv whose Python no longer runs is repaired, whatever the stamp says.
    bootstrap.venv_python(machine.venv).unlink()
    result = machine.bootstrap("run", "--dry-run")
    assert "broken" in plan(result)["pip would run"]
    assert "would be made again" in plan(result)["venv"]


def test_the_installed_llama_is_checked_from_its_files_without_loading_it(tmp_path):
    args = bootstrap.LLAMA_CMAKE_ARGS
    bare_venv(tmp_path / "v", with_pip=True)
    site = bootstrap.site_packages(tmp_path / "v")
    assert site is not None
    (tmp_path / "v" / bootstrap.LLAMA_STAMP).write_text(args)
    (site / f"llama_cpp_python-{bootstrap.llama_pin()}.dist-info").mkdir()
    lib = site / "llama_cpp" / "lib"
    lib.mkdir(parents=True)
    for name in ("libllama.so", "libggml.so", "libggml-base.so.0"):
        (lib / name).write_bytes(b"")
    assert not bootstrap.installed_llama_matches(args, tmp_path / "v")  # no CPU backend module
    (lib / "libggml-cpu-haswell.so").write_bytes(b"")
    assert not bootstrap.installed_llama_matches(args, tmp_path / "v")  # no RPC
    (lib / "libggml-rpc.so").write_bytes(b"")
    assert bootstrap.installed_llama_matches(args, tmp_path / "v")
    assert not bootstrap.installed_llama_matches(args + " -DGGML_CUDA=on", tmp_path / "v")  # other flags
    (site / f"llama_cpp_python-{bootstrap.llama_pin()}.dist-info").rename(site / "llama_cpp_python-0.3.1.dist-info")
    assert not bootstrap.installed_llama_matches(args, tmp_path / "v")  # other version


def test_the_demo_models_marker_is_a_cheap_check_of_what_fetch_demo_verified(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECCHAT_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("SPECCHAT_MODELS_DIR", raising=False)
    (tmp_path / "v").mkdir()
    files = []
    for name in ("target.gguf", "draft.gguf"):
        path = tmp_path / name
        path.write_bytes(b"x" * 10)
        (tmp_path / f".{name}.verified.json").write_text("{}")
        files.append(path)
    assert not bootstrap.models_present(False, tmp_path / "v")
    bootstrap.write_models_marker(files, False, tmp_path / "v")
    assert bootstrap.models_present(False, tmp_path / "v")
    assert not bootstrap.models_present(True, tmp_path / "v")  # `test` also wants SmolLM2
    monkeypatch.setenv("SPECCHAT_MODELS_DIR", str(tmp_path / "elsewhere"))
    assert not bootstrap.models_present(False, tmp_path / "v")  # the app would look elsewhere
    monkeypatch.delenv("SPECCHAT_MODELS_DIR")
    files[0].write_bytes(b"x" * 5)  # cut short
    assert not bootstrap.models_present(False, tmp_path / "v")


# --- the portable build -----------------------------------------------------------------------------


def test_the_default_builds_are_llama_cpps_portable_release_recipe(monkeypatch):
    monkeypatch.delenv("CMAKE_ARGS", raising=False)
    portable = "-DLLAVA_BUILD=OFF -DGGML_RPC=ON -DGGML_NATIVE=OFF -DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=ON"
    assert bootstrap.cmake_args("cpu") == portable  # the cache key of the wheel built by hand
    assert bootstrap.cmake_args("cuda") == portable + " -DGGML_CUDA=on"
    assert bootstrap.cmake_args("vulkan") == portable + " -DGGML_VULKAN=on"
    assert bootstrap.backend_cmake_args("metal", "Darwin") == "-DLLAVA_BUILD=OFF -DGGML_RPC=ON -DGGML_METAL=on"
    assert not bootstrap.amx_would_be_built(portable, "Linux", "x86_64")


def fake_llama_wheel(folder: Path) -> Path:
    wheel = folder / f"llama_cpp_python-{bootstrap.llama_pin()}-cp311-cp311-linux_x86_64.whl"
    names = ["llama_cpp/__init__.py", "llama_cpp/lib/libllama.so", "bin/libggml-cpu-haswell.so",
             "bin/libggml-cpu-sapphirerapids.so", f"llama_cpp_python-{bootstrap.llama_pin()}.dist-info/RECORD"]
    with zipfile.ZipFile(wheel, "w") as z:
        for name in names:
            z.writestr(name, "\n".join(f"{n},," for n in names) if name.endswith("RECORD") else "x")
    return wheel


def test_a_built_wheel_is_slimmed_before_it_is_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    args = bootstrap.LLAMA_CMAKE_ARGS
    seen: dict[str, object] = {}

    def pip_wheel(cmd, env, log, progress=None, tail_lines=60):
        seen.update(cmd=cmd, env=env, log=log)
        log.write_text("[1/1] cc\n")
        fake_llama_wheel(Path(cmd[cmd.index("-w") + 1]))
        return 0, []

    monkeypatch.setattr(bootstrap, "run_logged", pip_wheel)
    wheel = bootstrap.build_llama_wheel(args, "cpu", {"PATH": os.environ["PATH"]})
    assert wheel.parent == bootstrap.llama_wheel_dir(args)
    assert bootstrap.cached_wheel(args) == wheel
    assert seen["env"]["CMAKE_ARGS"] == args  # type: ignore[index]
    assert "-v" in seen["cmd"] and seen["log"] == wheel.parent / "build.log"  # type: ignore[operator]
    assert not (wheel.parent / "partial").exists()
    with zipfile.ZipFile(wheel) as z:
        kept = set(z.namelist())
    assert "llama_cpp/lib/libggml-cpu-haswell.so" in kept
    assert not any("sapphirerapids" in n for n in kept)  # the AMX variant (llama.cpp issue 20824)


def test_a_failed_build_caches_nothing_and_points_at_the_log(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(bootstrap, "run_logged", lambda cmd, env, log, *a, **k: (1, ["ninja: build stopped"]))
    with pytest.raises(SystemExit, match="build.log"):
        bootstrap.build_llama_wheel(bootstrap.LLAMA_CMAKE_ARGS, "cpu", {})
    assert "ninja: build stopped" in capsys.readouterr().err
    assert bootstrap.cached_wheel(bootstrap.LLAMA_CMAKE_ARGS) is None


# --- the build's progress -----------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_without_a_terminal_progress_is_a_line_at_most_every_30_s():
    out, clock = io.StringIO(), Clock()
    progress = bootstrap.BuildProgress(out, tty=False, clock=clock)
    progress.feed("  Running command Building wheel for llama_cpp_python (pyproject.toml)\n")
    for i in range(1, 391):
        clock.now = i * 2.0  # an object every 2 s: 780 s in all
        progress.feed(f"  [{i}/390] /usr/bin/g++ -DGGML_AVX -O3 -c ops.cpp\n")
    progress.finish()
    lines = out.getvalue().splitlines()
    assert 780 / 30 <= len(lines) <= 780 / 30 + 2
    assert lines[-1] == "    compiling llama.cpp: objects built 390/390, 13m00s elapsed"
    assert not any("g++" in line for line in lines)


def test_on_a_terminal_progress_is_one_line_updated_in_place():
    out, clock = io.StringIO(), Clock()
    progress = bootstrap.BuildProgress(out, tty=True, clock=clock)
    for i in range(1, 101):
        clock.now = i * 0.5
        progress.feed(f"[{i}/100] cc -c x.c\n")
    progress.finish()
    text = out.getvalue()
    assert text.count("\n") == 1 and text.endswith("\n")
    assert text.count("\r") >= 45
    assert "objects built 100/100, 0m50s elapsed" in text


def test_a_failed_build_keeps_the_whole_log_and_gives_the_last_lines(tmp_path):
    log = tmp_path / "build.log"
    script = "import sys\nfor i in range(100): print(f'line {i}')\nsys.exit(3)"
    code, tail = bootstrap.run_logged([sys.executable, "-c", script], dict(os.environ), log,
                                      bootstrap.BuildProgress(io.StringIO(), tty=False))
    assert code == 3
    assert tail == [f"line {i}" for i in range(40, 100)]
    assert log.read_text().splitlines() == [f"line {i}" for i in range(100)]


# --- the launcher -------------------------------------------------------------------------------------


def test_run_passes_its_other_arguments_to_the_app():
    assert bootstrap.parse_args(["run", "--backend", "cuda", "--prompt", "hi", "--dry-run"]) == (
        "run", "cuda", True, ["--prompt", "hi"])
    assert bootstrap.parse_args(["test", "-k", "engine", "--", "--dry-run"]) == ("test", None, False,
                                                                                 ["-k", "engine", "--dry-run"])
    assert bootstrap.parse_args([]) == ("run", None, False, [])
    with pytest.raises(SystemExit):
        bootstrap.parse_args(["run", "--backend", "rocm"])


def test_run_starts_the_app_with_the_network_cut_and_no_pip():
    """After a set-up (`python3 bootstrap.py run` or `test` once), `run` is a launcher: no pip, no download."""
    if not (ROOT / ".venv" / "bin" / "specchat").exists():
        pytest.skip(".venv is not installed yet: run `python3 bootstrap.py run` (or `test`) once")
    if shutil.which("unshare") is None:
        pytest.skip("unshare (util-linux) is not installed")
    if subprocess.run(["unshare", "-n", "true"], capture_output=True).returncode != 0:
        pytest.skip("`unshare -n` needs root or unprivileged user namespaces here")
    env = {k: v for k, v in os.environ.items() if k not in ("SPECCHAT_VENV", "SPECCHAT_BOOTSTRAP_SYSROOT")}
    dry = subprocess.run([sys.executable, "bootstrap.py", "run", "--dry-run"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=120)
    if dry.returncode != 0 or not plan(dry)["pip would run"].startswith("no") or plan(dry)["demo models"] != "present":
        pytest.skip(f".venv is not up to date with this checkout: {plan(dry) if dry.returncode == 0 else dry.stderr}")
    start = time.monotonic()
    result = subprocess.run(["unshare", "-n", sys.executable, "bootstrap.py", "run", "--help"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=120)
    took = time.monotonic() - start
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "usage:" in result.stdout and "--prompt" in result.stdout  # `specchat gui --help`
    for word in ("installing", "pip", "building", "downloading", "setting up"):
        assert word not in output.lower(), output
    assert took < 30, f"{took:.1f} s"
