#!/usr/bin/env bash
# Build llama-cpp-python (the version pyproject.toml pins) for CUDA on a machine WITHOUT a GPU, for
# the H200 of the device tool (sm_90), and put the wheel where the device tool carries it from:
#
#     bash packaging/gpu_kit/build_cuda_wheel.sh        # ~20 min of 2 cores; reused once built
#
# Needs nvcc 13.0 (the GPU machine's version) on PATH or in /usr/local/cuda, cmake and ninja, and
# pip's access to PyPI for cuBLAS 13.0's headers and libraries (nvidia-cublas, 420 MB, only to
# compile and link against: the GPU machine's own Python packages hold libcublas.so.13) and for the
# sdist (or LLAMA_SDIST=/path/to/llama_cpp_python-VERSION.tar.gz).
#
# Choices, each for the GPU window: CMAKE_CUDA_ARCHITECTURES=90-real (H200 code only, no PTX: the
# fastest build and the smallest library); GGML_CUDA_NO_VMM=ON because no libcuda stub exists here
# (ggml's VMM memory pool links the driver API; without it ggml uses its plain cudaMalloc pool);
# GGML_NATIVE=OFF with AVX2/FMA/F16C so the CPU code built here runs on the GPU machine's CPU;
# LLAVA off. The wheel is cached by its inputs (pip's cache does not key on CMAKE_ARGS).
set -euo pipefail
cd "$(dirname "$0")/../.."
pin=$(python3 -c 'import re; print(re.search(r"llama-cpp-python==([\w.]+)", open("pyproject.toml").read())[1])')
work=${GPU_KIT_BUILD:-/tmp/specchat-cuda-build}
dest=packaging/gpu_kit/carry/wheels
mkdir -p "$work" "$dest"

nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
[ -x "$nvcc" ] || { echo "build_cuda_wheel: nvcc not found (CUDA 13.0's compiler is needed)" >&2; exit 2; }
nvcc_version=$("$nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')
case "$nvcc_version" in
  13.0) ;;
  *) echo "build_cuda_wheel: nvcc $nvcc_version; the GPU machine's driver stack is 13.0" >&2; exit 2 ;;
esac

cmake_args=(
  -DGGML_CUDA=on -DCMAKE_CUDA_ARCHITECTURES=90-real -DGGML_CUDA_NO_VMM=ON -DLLAVA_BUILD=OFF
  -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
  -DCMAKE_CUDA_COMPILER="$nvcc"
)
key=$(printf '%s\n' "$pin" "$nvcc_version" "${cmake_args[@]}" | sha256sum | cut -c1-12)
stamp="$dest/.built-$key"
wheel=$(ls "$dest"/llama_cpp_python-"$pin"-*.whl 2>/dev/null | head -1 || true)
if [ -n "$wheel" ] && [ -f "$stamp" ]; then
  echo "==> CUDA wheel already built for these settings: $wheel"
  exit 0
fi

echo "==> cuBLAS 13.0 headers and libraries (to compile and link against)"
if [ ! -f "$work/cublas/nvidia/cu13/lib/libcublas.so.13" ]; then
  python3 -m pip download -q --no-deps --only-binary=:all: -d "$work" "nvidia-cublas==13.0.*"
  rm -rf "$work/cublas" && mkdir -p "$work/cublas"
  python3 -m zipfile -e "$work"/nvidia_cublas-13.0.*.whl "$work/cublas"
fi
cublas=$work/cublas/nvidia/cu13
ln -sf libcublas.so.13 "$cublas/lib/libcublas.so"
ln -sf libcublasLt.so.13 "$cublas/lib/libcublasLt.so"

sdist=${LLAMA_SDIST:-}
if [ -z "$sdist" ]; then
  sdist=$(ls "$work"/llama_cpp_python-"$pin".tar.gz 2>/dev/null || true)
  if [ -z "$sdist" ]; then
    python3 -m pip download -q --no-deps --no-binary :all: -d "$work" "llama-cpp-python==$pin"
    sdist=$work/llama_cpp_python-$pin.tar.gz
  fi
fi

# FindCUDAToolkit looks for cuBLAS inside the toolkit; point it at the PyPI copy instead.
cmake_args+=(
  -DCUDA_cublas_LIBRARY="$cublas/lib/libcublas.so" -DCUDA_cublasLt_LIBRARY="$cublas/lib/libcublasLt.so"
  "-DCMAKE_CUDA_FLAGS=-I$cublas/include" "-DCMAKE_CXX_FLAGS=-I$cublas/include"
)
echo "==> building llama-cpp-python $pin for CUDA (sm_90) from $sdist"
start=$(date +%s)
rm -f "$dest"/llama_cpp_python-*.whl "$dest"/.built-*
PATH="$(dirname "$nvcc"):$PATH" CMAKE_ARGS="${cmake_args[*]}" CMAKE_BUILD_PARALLEL_LEVEL=${JOBS:-$(nproc)} \
  python3 -m pip wheel --no-deps --no-cache-dir -w "$dest" "$sdist"
# The wheel holds every library 6 times (no symlinks in wheels, two install trees): 138 MiB.
python3 "$(dirname "$0")/../slim_wheel.py" "$dest"/llama_cpp_python-*.whl
touch "$stamp"
echo "==> built in $(( ($(date +%s) - start) / 60 )) min: $(ls "$dest"/llama_cpp_python-*.whl)"
du -b "$dest"/llama_cpp_python-*.whl
