"""llama.cpp's AMX kernels segfault on the first decode on some Xeons (issue 20824; this machine kind
on 2026-12-02): the bootstrap builds without them (its portable build's AMX CPU variant is removed by
packaging/slim_wheel.py; a native build from the user's CMAKE_ARGS gets -mno-amx-int8), and a build
that has them is refused by name."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from app.llama_backend.core import LlamaError, LlamaModel, ModelConfig, amx_refusal, system_info

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import bootstrap  # noqa: E402


@pytest.mark.parametrize(
    ("args", "system", "machine", "added"),
    [
        (bootstrap.LLAMA_CMAKE_ARGS, "Linux", "x86_64", False),  # portable: no -march=native (GGML_NATIVE=OFF)
        ("-DLLAVA_BUILD=OFF -DGGML_RPC=ON", "Linux", "x86_64", True),  # a native build (the user's CMAKE_ARGS)
        ("-DGGML_CUDA=on -DLLAVA_BUILD=OFF", "Linux", "x86_64", True),  # a CUDA wheel has CPU code too
        (bootstrap.LLAMA_CMAKE_ARGS, "Linux", "aarch64", False),
        (bootstrap.LLAMA_CMAKE_ARGS, "Darwin", "x86_64", False),  # no Mac has AMX
        (bootstrap.LLAMA_CMAKE_ARGS, "Windows", "AMD64", False),  # MSVC builds no AMX (ggml/CMakeLists.txt)
        ("-DGGML_AMX_INT8=ON", "Linux", "x86_64", False),  # the user asked for it
        ("-DCMAKE_CXX_FLAGS=-O3", "Linux", "x86_64", False),  # the user's own flags stay theirs
        ("-DGGML_NATIVE=OFF -DGGML_AVX2=ON", "Linux", "x86_64", False),  # no -march=native, no AMX
    ],
)
def test_bootstrap_builds_native_x86_linux_wheels_without_amx(args, system, machine, added):
    assert bootstrap.amx_would_be_built(args, system, machine) is added


def test_the_no_amx_flags_reach_cmake_and_change_the_cache_key(monkeypatch):
    monkeypatch.delenv("CMAKE_ARGS", raising=False)
    assert "amx" not in bootstrap.cmake_args().lower()  # portable: slim_wheel drops the AMX variant
    native = "-DGGML_CUDA=on -DLLAVA_BUILD=OFF"
    monkeypatch.setenv("CMAKE_ARGS", native)
    args = bootstrap.cmake_args()
    if bootstrap.amx_would_be_built(native + " -DGGML_RPC=ON"):
        assert args.endswith(bootstrap.NO_AMX_ARGS)
        # A wheel cached before the fix (with AMX) is not reused.
        assert bootstrap.llama_wheel_dir(args) != bootstrap.llama_wheel_dir(native + " -DGGML_RPC=ON")
    else:
        assert "amx" not in args.lower()


def test_the_installed_build_has_no_amx_kernels():
    # Fails on an AMX machine whose wheel was built before the fix: that build crashed every decode.
    assert "AMX_INT8 = 1" not in system_info()


def test_a_build_with_amx_kernels_is_refused_by_name_before_loading(target_path, monkeypatch):
    amx = "CPU : SSE3 = 1 | AVX512_VNNI = 1 | AMX_INT8 = 1 | REPACK = 1 |"
    message = amx_refusal(amx, repack=True, allowed=False)
    assert message is not None
    for part in ("AMX_INT8 = 1", "issue 20824", "bootstrap.py", "-mno-amx-int8", "--strict", "SPECCHAT_ALLOW_AMX=1"):
        assert part in message
    assert amx_refusal(amx, repack=False, allowed=False) is None  # --strict: no AMX buffer is used
    assert amx_refusal(amx, repack=True, allowed=True) is None
    assert amx_refusal(amx.replace("AMX_INT8 = 1", "AMX_INT8 = 0"), repack=True, allowed=False) is None

    # The model loader applies it: with this build's info claiming AMX, loading stops with that message.
    import app.llama_backend.core as core

    monkeypatch.setattr(core, "system_info", lambda: amx)
    monkeypatch.delenv(core.ALLOW_AMX_ENV, raising=False)
    with pytest.raises(LlamaError, match="issue 20824"):
        LlamaModel(ModelConfig(target_path))
