#!/usr/bin/env python3
"""One-command set-up: `python3 bootstrap.py run` or `python3 bootstrap.py test`.

Creates .venv, installs SpecChat with its dependencies (llama-cpp-python compiles from source the
first time: ~15 minutes on 2 cores; pip caches the wheel), downloads and verifies the demo pair,
then opens the app on it (`run`) or runs the whole test suite (`test`). Safe to run again: every
step is idempotent. Uses only the standard library, so it runs on a bare Python 3.11.
"""

from __future__ import annotations

import hashlib
import os
import platform
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PY = BIN / ("python.exe" if os.name == "nt" else "python")


def step(message: str) -> None:
    print(f"\n==> {message}", flush=True)


def run(*cmd: object, env: dict[str, str] | None = None) -> None:
    result = subprocess.run([str(c) for c in cmd], cwd=ROOT, env=env)
    if result.returncode != 0:
        sys.exit(f"bootstrap: step failed (exit {result.returncode}): {' '.join(str(c) for c in cmd)}")


def ensure_venv() -> None:
    if not PY.exists():
        step(f"creating the virtual environment in {VENV}")
        venv.EnvBuilder(with_pip=True).create(VENV)


LLAMA_CMAKE_ARGS = "-DLLAVA_BUILD=OFF -DGGML_RPC=ON"


def llama_pin() -> str:
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    start = text.index('"llama-cpp-python==') + len('"llama-cpp-python==')
    return text[start : text.index('"', start)]


def cmake_args() -> str:
    """The user's CMAKE_ARGS (a GPU build, see README) or ours; RPC is always in (`specchat rpc-server`, `--rpc`).

    The multimodal part of llama.cpp is not used; skipping it saves build time.
    """
    args = os.environ.get("CMAKE_ARGS", "").strip() or LLAMA_CMAKE_ARGS
    if "GGML_RPC" not in args:
        args += " -DGGML_RPC=ON"
    if amx_would_be_built(args):
        args += f" {NO_AMX_ARGS}"
    return args


# llama.cpp's native x86 build (-march=native) turns on its AMX kernels on Intel Xeons that have AMX
# (Sapphire Rapids and later), and there they segfault in ggml_backend_amx_mul_mat on the first
# decode with Q4_K weights (llama.cpp issue 20824; seen here on 2026-12-02, llama-completion too).
# An explicit -mno-amx-int8 outranks -march=native in GCC and Clang, so the CPU repack kernels run.
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


def installed_llama_matches(args: str) -> bool:
    """The venv's llama-cpp-python is the pinned version, built with the CMAKE_ARGS asked for."""
    stamp = VENV / "llama-cmake-args.txt"
    probe = (
        "import importlib.metadata as m, llama_cpp, sys; "
        f"sys.exit(0 if m.version('llama-cpp-python') == {llama_pin()!r} "
        "and llama_cpp.llama_supports_rpc() else 1)"
    )
    if not stamp.exists() or stamp.read_text(encoding="utf-8") != args:
        return False
    return subprocess.run([str(PY), "-c", probe], cwd=ROOT, capture_output=True).returncode == 0


def install_llama(env: dict[str, str]) -> None:
    args = cmake_args()
    if installed_llama_matches(args):
        return
    wheels = llama_wheel_dir(args)
    found = sorted(wheels.glob("llama_cpp_python-*.whl"))
    if not found:
        step(f"building llama-cpp-python {llama_pin()} with CMAKE_ARGS={args!r} (~15 min on 2 cores, once)")
        wheels.mkdir(parents=True, exist_ok=True)
        run(PY, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-cache-dir", "-w", wheels,
            f"llama-cpp-python=={llama_pin()}", env={**env, "CMAKE_ARGS": args})
        found = sorted(wheels.glob("llama_cpp_python-*.whl"))
    step(f"installing llama-cpp-python from {found[-1]}")
    run(PY, "-m", "pip", "install", "--quiet", "--force-reinstall", "--no-deps", found[-1], env=env)
    (VENV / "llama-cmake-args.txt").write_text(args, encoding="utf-8")


def install(extras: str) -> None:
    env = dict(os.environ)
    step(f"installing SpecChat{extras} and its dependencies (the first llama-cpp-python build takes ~15 min)")
    run(PY, "-m", "pip", "install", "--quiet", "--upgrade", "pip", env=env)
    install_llama(env)
    run(PY, "-m", "pip", "install", "--quiet", "-e", f".{extras}", env=env)


def fetch_models(with_smollm2: bool) -> None:
    step("downloading and verifying the demo pair (1.6 GB, once)")
    extra = ["--with-smollm2"] if with_smollm2 else []
    run(BIN / "specchat", "models", "fetch-demo", *extra)


def main(argv: list[str]) -> int:
    if sys.version_info < (3, 11):
        sys.exit(f"bootstrap: SpecChat needs Python 3.11 or newer; this is {sys.version.split()[0]}")
    command = argv[0] if argv else "run"
    rest = argv[1:]
    ensure_venv()
    if command == "run":
        install("")
        step("checking that Qt can open a window here (X11 libraries)")
        # Before the download and before Qt aborts with a message that names nothing: the X11
        # libraries the window needs, and the command that installs them.
        code = subprocess.call([str(PY), "-m", "ui.shell.platform_check", str(BIN.relative_to(ROOT) / "specchat")],
                               cwd=ROOT)
        if code != 0:
            return code
        fetch_models(with_smollm2=False)
        step("starting SpecChat on the demo pair")
        return subprocess.call([str(BIN / "specchat"), "gui", *rest], cwd=ROOT)
    if command == "test":
        install("[test,dev]")
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
    sys.exit(f"bootstrap: unknown command {command!r}; use `run` or `test`")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
