#!/usr/bin/env bash
# The memory meter and the engine on llama.cpp's Vulkan backend, with the real demo pair (needs a
# network; on Mesa's llvmpipe software device where there is no GPU). The lent NVIDIA machine has its
# own offline check: packaging/gpu_check.sh (docs/GPU.md).
#
#     bash packaging/vulkan_check.sh [OUT_DIR]
#
# Builds llama-cpp-python (the version pyproject.toml pins) for the backend into .venv-gpu-BACKEND
# (never the project's .venv; pip's wheel cache is bypassed so a CPU wheel is never reused), then
# writes to OUT_DIR (default gpu-check-BACKEND/): doctor.json, memory-grid.md (predicted vs
# measured over contexts 2048/8192/32768 and zero/partial/full offload; -closed-form.md without
# llama.cpp's dry run for the compute buffers), the memory tests' log,
# and a short greedy bench that checks speculative output against plain decoding on the GPU
# (GPU_CHECK_TOKENS tokens per prompt, default 32; llvmpipe decodes the demo target at 0.15 tok/s).
#
# Vulkan on a machine without a GPU: `apt-get install mesa-vulkan-drivers libvulkan-dev glslc`,
# and GGML_VK_VISIBLE_DEVICES=0 so llama.cpp uses llvmpipe (it skips CPU-type devices otherwise).
# Debian 12's Vulkan headers (1.3.239) are too old for this llama.cpp: point VULKAN_INCLUDE_DIR at
# newer ones (for example Debian 13's libvulkan-dev, unpacked with `dpkg -x`).
set -euo pipefail
cd "$(dirname "$0")/.."
backend=vulkan
out=${1:-gpu-check-$backend}
cmake="-DGGML_VULKAN=on${VULKAN_INCLUDE_DIR:+ -DVulkan_INCLUDE_DIR=$VULKAN_INCLUDE_DIR}"
pin=$(python3 -c 'import re,sys; print(re.search(r"llama-cpp-python==([\w.]+)", open("pyproject.toml").read())[1])')
venv=.venv-gpu-$backend
mkdir -p "$out"
if ! "$venv/bin/python" -c 'import llama_cpp' 2>/dev/null; then
  echo "==> building llama-cpp-python $pin with $cmake (long: the GPU kernels compile)"
  python3 -m venv "$venv"
  CMAKE_ARGS="$cmake -DLLAVA_BUILD=OFF" "$venv/bin/pip" install --no-cache-dir "llama-cpp-python==$pin"
fi
"$venv/bin/pip" install -q -e ".[test,nvidia]"
"$venv/bin/specchat" models fetch-demo
"$venv/bin/specchat" doctor --json | tee "$out/doctor.json"
"$venv/bin/python" packaging/memory_grid.py "$venv/bin/specchat" | tee "$out/memory-grid.md"
"$venv/bin/python" packaging/memory_grid.py "$venv/bin/specchat" --model-compute > "$out/memory-grid-closed-form.md"
QT_QPA_PLATFORM=offscreen "$venv/bin/python" -m pytest -q -p no:cacheprovider tests/test_memory.py \
  2>&1 | tee "$out/test_memory.log"
head -2 app/data/bench_prompts.jsonl > "$out/prompts.jsonl"
"$venv/bin/specchat" bench --prompts "$out/prompts.jsonl" --modes draft,lookup --no-adapt \
  -n "${GPU_CHECK_TOKENS:-32}" \
  | tee "$out/bench.txt"
echo "==> results in $out/"
