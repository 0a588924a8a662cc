#!/usr/bin/env bash
# CI step: build the desktop bundle and run its self-test offscreen (called from .ci/run after the
# test suite, which has created .venv and fetched SmolLM2 into the models folder).
#
#     bash packaging/ci_package.sh
#
# Fails when PyInstaller cannot build, or when the bundle cannot load llama.cpp, generate through
# the speculative engine, show its window or find its resources, or when its llama.cpp does not run
# on an emulated Haswell (no AVX-512) or Nehalem (no AVX); then builds, installs, starts and purges
# the .deb.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
PY=.venv/bin/python
[ -x "$PY" ] || { echo "ci_package.sh: .venv is missing; run python3 bootstrap.py test first" >&2; exit 2; }

# X11 client libraries the xcb platform plugin links: present on build machines, they are bundled,
# so the app starts on desktops that lack them (libxcb-cursor0 is often missing; Qt >= 6.5 needs it).
if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  missing=""
  # The Wayland ones are not bundled, but the .deb's Depends is derived from what resolves here.
  # qemu-user: the bundle's self-test on emulated older CPUs (packaging/qemu_selftest.sh).
  for pkg in libxcb-icccm4 libxcb-keysyms1 libxcb-cursor0 libxkbcommon-x11-0 libwayland-cursor0 libwayland-egl1 \
             qemu-user; do
    dpkg -s "$pkg" >/dev/null 2>&1 || missing="$missing $pkg"
  done
  if [ -n "$missing" ]; then
    echo "==> installing system packages:$missing"
    # shellcheck disable=SC2086 # one word per package
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing) \
      || echo "warning: could not install$missing; the bundle will rely on the user's copies"
  fi
fi

echo "==> installing the packaging extra (PyInstaller)"
if grep -q '^package *=' pyproject.toml; then
  "$PY" -m pip install --quiet -e ".[package]"
else  # until pyproject.toml has the extra
  "$PY" -m pip install --quiet "pyinstaller>=6"
fi

packaging/build.sh "$@"

# The portable llama.cpp on CPUs this machine is not: Haswell (AVX2, no AVX-512) and Nehalem (no AVX), window
# included; and a Core 2 (Conroe, below the x86-64-v2 that NumPy and Qt need) refused with a message, not SIGILL.
if [ "$(uname -s)-$(uname -m)" = Linux-x86_64 ]; then
  bash packaging/qemu_selftest.sh
fi

# The Debian package, installed on this machine and in a fresh minimal Debian (which lacks every
# X, GL and font library, so apt must bring in what Depends names), started, and purged.
if command -v dpkg-deb >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  bash packaging/build-deb.sh
  bash packaging/test-deb.sh
  bash packaging/test-deb.sh --clean-root
  # specchat-vulkan: the same bundle with llama.cpp's Vulkan module, which must find and use Mesa's
  # software Vulkan device here (no GPU). The module is cached by its inputs; a fresh machine compiles
  # it once. SPECCHAT_VULKAN_PACKAGE=0 skips it.
  # A first build of the module takes 15-18 min: where this run already spent 25 min (a fresh machine compiled
  # llama.cpp), it waits for the next run rather than risk CI's 90-minute limit, and says so.
  spent=$(( $(date +%s) - ${SPECCHAT_CI_START:-$(date +%s)} ))
  if [ "${SPECCHAT_VULKAN_PACKAGE:-1}" = 1 ] && [ "$spent" -gt 1500 ] && ! bash packaging/build_vulkan_module.sh --cached >/dev/null 2>&1; then
    echo "==> NOT building specchat-vulkan in this run: its module is not cached and this run has already taken $(( spent / 60 )) min (the next run builds it)"
  elif [ "${SPECCHAT_VULKAN_PACKAGE:-1}" = 1 ] && [ "$(uname -m)" = x86_64 ]; then
    t=$(date +%s)
    module=$(bash packaging/build_vulkan_module.sh | tail -1)
    echo "==> Vulkan module ready in $(( $(date +%s) - t )) s: $module"
    bash packaging/build-deb.sh --vulkan "$module"
    bash packaging/test-deb.sh --vulkan
  fi
else
  echo "==> skipping the .deb (needs a Debian machine and root)"
fi
echo "==> packaging step took $(( $(date +%s) - start )) s"
