#!/usr/bin/env bash
# Build llama.cpp's Vulkan backend as one module, libggml-vulkan.so, from the llama.cpp that the pinned
# llama-cpp-python vendors, for the portable build's module folder (packaging/build-deb.sh --vulkan puts
# it beside the CPU modules in the bundle: the app loads it at start and uses any GPU with a Vulkan
# driver, NVIDIA, AMD or Intel, and the CPU modules where there is none).
#
#     bash packaging/build_vulkan_module.sh        # prints the module's path on its last line
#     bash packaging/build_vulkan_module.sh --cached   # exit 0 (and the path) only if already built
#
# Only the module is compiled (GGML_BACKEND_DL=ON, GGML_CPU=OFF, target ggml-vulkan): it links the
# wheel's libggml-base.so.0, built from the same source, through RUNPATH $ORIGIN. The result is cached by
# its inputs in ~/.cache/specchat/vulkan-module/KEY/ (a rebuild is ~15-25 min on 2 cores, most of it
# the shaders).
#
# Needs cmake, a C++ compiler, glslc and the Vulkan loader (`apt-get install glslc libvulkan1`, done
# here when root), and Vulkan and SPIR-V headers newer than Debian 12's 1.3.239, which this llama.cpp
# does not build with: Debian 13's libvulkan-dev and spirv-headers are fetched from the Debian mirror
# and unpacked (dpkg -x) into the cache, never installed. VULKAN_INCLUDE_DIR and SPIRV_HEADERS_PREFIX
# override them. Debian 12's glslc (shaderc 2023.2) lacks the cooperative-matrix, integer-dot and bf16
# GLSL extensions, so this build has no shaders for them: it runs everywhere, with less speed on GPUs
# that have those units than a build with a newer glslc (llama.cpp prints what was left out).
set -euo pipefail
cd "$(dirname "$0")/.."
CACHED_ONLY=0
[ "${1:-}" = --cached ] && CACHED_ONLY=1
pin=$(python3 -c 'import re; print(re.search(r"llama-cpp-python==([\w.]+)", open("pyproject.toml").read())[1])')
cache_root=${XDG_CACHE_HOME:-$HOME/.cache}/specchat/vulkan-module
log() { echo "==> $*" >&2; }

if [ "$CACHED_ONLY" = 0 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  want=""
  for pkg in glslc libvulkan1 cmake g++; do dpkg -s "$pkg" >/dev/null 2>&1 || want="$want $pkg"; done
  # shellcheck disable=SC2086 # one word per package
  [ -z "$want" ] || { log "installing$want"; apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $want >/dev/null; }
fi
command -v glslc >/dev/null || [ "$CACHED_ONLY" = 0 ] || exit 1
for tool in glslc cmake c++; do
  command -v "$tool" >/dev/null || { echo "build_vulkan_module.sh: $tool is missing (Debian: apt-get install glslc cmake g++)" >&2; exit 2; }
done
loader=$(ls /usr/lib/*/libvulkan.so.1 /usr/lib/libvulkan.so.1 2>/dev/null | head -1 || true)
[ -n "$loader" ] || { echo "build_vulkan_module.sh: the Vulkan loader is missing (apt-get install libvulkan1)" >&2; exit 2; }

cmake_args=(-DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON -DGGML_BACKEND_DL=ON -DGGML_NATIVE=OFF -DGGML_CPU=OFF
            -DGGML_VULKAN=ON -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TESTS=OFF
            -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_COMMON=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF
            -DCMAKE_BUILD_WITH_INSTALL_RPATH=ON '-DCMAKE_INSTALL_RPATH=$ORIGIN')  # not the build folder's path
key=$(printf '%s\n' "$pin" "$(glslc --version | head -1)" "${cmake_args[@]}" | sha256sum | cut -c1-16)
out=$cache_root/$key
if [ -f "$out/libggml-vulkan.so" ]; then
  log "Vulkan module already built for llama-cpp-python $pin (cache $out)"
  echo "$out/libggml-vulkan.so"
  exit 0
fi
[ "$CACHED_ONLY" = 0 ] || exit 1
work=$cache_root/work && mkdir -p "$work" "$out"

headers=${VULKAN_INCLUDE_DIR:-}
spirv=${SPIRV_HEADERS_PREFIX:-}
if [ -z "$headers" ] || [ -z "$spirv" ]; then
  root=$cache_root/headers
  if [ ! -f "$root/usr/include/vulkan/vulkan_core.h" ] || [ ! -d "$root/usr/share/cmake/SPIRV-Headers" ]; then
    log "Vulkan and SPIR-V headers from Debian 13 (unpacked, not installed)"
    lists=$work/apt && mkdir -p "$lists/lists/partial" "$lists/cache/archives/partial" "$lists/debs"
    echo "deb http://deb.debian.org/debian trixie main" > "$lists/sources.list"
    apt_opts=(-o "Dir::Etc::SourceList=$lists/sources.list" -o Dir::Etc::SourceParts=/dev/null
              -o "Dir::State::Lists=$lists/lists" -o "Dir::Cache=$lists/cache" -o APT::Sandbox::User=root)
    apt-get "${apt_opts[@]}" update -qq
    (cd "$lists/debs" && apt-get "${apt_opts[@]}" download libvulkan-dev spirv-headers >/dev/null)
    rm -rf "$root" && mkdir -p "$root"
    for deb in "$lists"/debs/*.deb; do dpkg -x "$deb" "$root"; done
  fi
  headers=${headers:-$root/usr/include}
  spirv=${spirv:-$root/usr}
fi

src=$(ls -d "$work"/llama_cpp_python-"$pin"/vendor/llama.cpp 2>/dev/null || true)
if [ -z "$src" ]; then
  log "llama-cpp-python $pin's source (the sdist, for its vendored llama.cpp)"
  python3 -m pip download -q --no-deps --no-binary :all: -d "$work" "llama-cpp-python==$pin"
  tar -C "$work" -xzf "$work/llama_cpp_python-$pin.tar.gz"
  src=$work/llama_cpp_python-$pin/vendor/llama.cpp
fi

log "configuring ggml-vulkan (glslc: $(glslc --version | head -1))"
start=$(date +%s)
cmake -S "$src" -B "$work/build" "${cmake_args[@]}" -DVulkan_INCLUDE_DIR="$headers" -DVulkan_LIBRARY="$loader" \
  -DCMAKE_PREFIX_PATH="$spirv" > "$work/configure.log" 2>&1 \
  || { tail -30 "$work/configure.log" >&2; echo "build_vulkan_module.sh: configure failed ($work/configure.log)" >&2; exit 1; }
grep -E 'not supported by glslc' "$work/configure.log" | sed 's/^-- /    left out: /' >&2 || true
log "compiling the Vulkan module and its shaders (long: ~15-25 min on 2 cores)"
cmake --build "$work/build" -j"$(nproc)" --target ggml-vulkan > "$work/build.log" 2>&1 \
  || { tail -40 "$work/build.log" >&2; echo "build_vulkan_module.sh: build failed ($work/build.log)" >&2; exit 1; }
module=$(find "$work/build" -name libggml-vulkan.so -type f | head -1)
[ -n "$module" ] || { echo "build_vulkan_module.sh: no libggml-vulkan.so was produced" >&2; exit 1; }
cp "$module" "$out/libggml-vulkan.so"
strip --strip-unneeded "$out/libggml-vulkan.so" 2>/dev/null || true
log "built in $(( ($(date +%s) - start) / 60 )) min: $out/libggml-vulkan.so ($(du -h "$out/libggml-vulkan.so" | cut -f1))"
echo "$out/libggml-vulkan.so"
