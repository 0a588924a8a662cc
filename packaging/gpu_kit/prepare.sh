#!/usr/bin/env bash
# Everything the GPU run needs that the GPU machine cannot fetch, into packaging/gpu_kit/carry/
# (git-ignored; the device tool's `carry` takes it along):
#
#     [LLAMA_TOOLS=DIR] bash packaging/gpu_kit/prepare.sh   # here, with a network and the demo pair;
#                                                            # ~20-45 min the first time
#
# - wheels/: the CUDA build of llama-cpp-python (build_cuda_wheel.sh, cached) and the pure-Python
#   packages SpecChat imports that the GPU image lacks (gguf, diskcache, platformdirs, and httpx2 with
#   httpcore2 and truststore for the CLI's hub module; it has numpy, jinja2, psutil, pyyaml, tqdm,
#   requests and nvidia-ml-py), at the versions of .venv;
# - headers/: the demo pair's GGUF metadata, tokenizer and tensor table (gguf_headers.py);
# - native/: with LLAMA_TOOLS=DIR, llama.cpp's llama-completion and llama-speculative-simple (6 MB).
# Then prints what will travel, which must stay under 64 MiB.
set -euo pipefail
cd "$(dirname "$0")/../.."
kit=packaging/gpu_kit
py=.venv/bin/python
[ -x "$py" ] || { echo "prepare: run 'python3 bootstrap.py test' first (it makes .venv and fetches the demo pair)" >&2; exit 2; }
bash "$kit/build_cuda_wheel.sh"
mkdir -p "$kit/carry/wheels"
for name in gguf diskcache platformdirs httpx2 httpcore2 truststore; do
  version=$("$py" -c "from importlib.metadata import version; print(version('$name'))")
  ls "$kit"/carry/wheels/"$name"-"$version"-*.whl >/dev/null 2>&1 ||
    "$py" -m pip download -q --no-deps --only-binary=:all: -d "$kit/carry/wheels" "$name==$version"
done
PYTHONPATH=. "$py" "$kit/gguf_headers.py" "$kit/carry/headers"
# llama.cpp's own tools for the check's last phase, where LLAMA_TOOLS names the folder they were built in
# (from the pinned sdist, as docs/BENCHMARKS.md says). They travel without their libraries: there
# they load the CUDA wheel's libllama and libggml, the same source.
if [ -n "${LLAMA_TOOLS:-}" ]; then
  mkdir -p "$kit/carry/native"
  for f in llama-completion llama-speculative-simple libllama-completion-impl.so; do
    cp "$LLAMA_TOOLS/$f" "$kit/carry/native/$f"
  done
  cp -L "$LLAMA_TOOLS/libllama-common.so.0" "$kit/carry/native/libllama-common.so.0"  # a file, not a link
fi
"$py" "$kit/carry_size.py"
