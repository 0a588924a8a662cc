"""PyInstaller hook for llama-cpp-python, which ships none.

llama_cpp loads its libraries with ctypes from `<package>/lib` at import time, so PyInstaller's
import analysis never sees them, and the app dies with "Shared library with base name 'llama' not
found". Collect every shared library under the package into the same relative folder
(`llama_cpp/lib`): libllama, libggml, libggml-base and the backends the wheel was built with
(ggml-cpu, ggml-cuda, ggml-metal, ggml-vulkan; .so, .dylib or .dll alike), plus the Metal shader
source or library a Metal build may keep beside them. Nothing here is platform-specific.
"""

from PyInstaller.utils.hooks import collect_data_files, collect_dynamic_libs

binaries = collect_dynamic_libs("llama_cpp")
datas = collect_data_files("llama_cpp", includes=["**/*.metal", "**/*.metallib"])

# The OpenAI-compatible server and the multimodal bindings are not used by SpecChat; the server
# would pull in fastapi/uvicorn/starlette where they happen to be installed.
excludedimports = ["llama_cpp.server"]

# `specchat doctor` reports the llama-cpp-python version from its distribution metadata.
try:
    from PyInstaller.utils.hooks import copy_metadata

    datas += copy_metadata("llama_cpp_python")
except Exception:  # noqa: BLE001 - metadata is informative only
    pass
