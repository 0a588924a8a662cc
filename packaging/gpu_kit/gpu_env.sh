# Sourced by packaging/gpu_check.sh and packaging/gpu_kit/window.sh on the GPU machine, with $kit, $carry,
# $root and $out set: installs the carried wheels into a scratch folder (no network) and points Python
# and the loader at them and at the machine's own CUDA libraries.
# Measured before anything is written into the tree: this is what travelled.
export GPU_KIT_CARRY_BYTES=$(python3 "$kit/carry_size.py" --bytes)
echo "==> carried: $GPU_KIT_CARRY_BYTES bytes"
(nvidia-smi || echo "nvidia-smi failed") > "$out/nvidia-smi.txt" 2>&1
head -15 "$out/nvidia-smi.txt"
shopt -s nullglob
wheels=("$carry"/wheels/*.whl)
cuda_wheel=("$carry"/wheels/llama_cpp_python-*.whl)
[ ${#cuda_wheel[@]} = 1 ] || { echo "gpu kit: no CUDA wheel in $carry/wheels: run prepare.sh and carry $kit/carry" >&2; exit 2; }
[ -f "$carry/headers/demo-target.gguf.gz" ] || { echo "gpu kit: no GGUF headers in $carry/headers" >&2; exit 2; }
site=/tmp/specchat-site
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" "${wheels[@]}"
export PYTHONPATH="$site:$root${PYTHONPATH:+:$PYTHONPATH}"
# libcudart.so.13 and libcublas.so.13: from the image's NVIDIA Python packages or a toolkit.
libs=$(python3 "$kit/cuda_libs.py")
export LD_LIBRARY_PATH="$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
echo "==> CUDA libraries from: $libs"
python3 -c "import llama_cpp, sys; print('llama_cpp', llama_cpp.__version__, 'GPU offload:', bool(llama_cpp.llama_supports_gpu_offload()))"
